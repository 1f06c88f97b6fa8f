"""Loading user form modules: the one place where user code is executed, on explicit request."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from pathlib import Path

from whatif_bench.errors import SpecError

_loaded: set[Path] = set()


def load_form_modules(paths: Iterable[str | Path]) -> None:
    """Execute Python files that call ``register_form``/``register_effect`` (each at most once)."""
    for raw in paths:
        path = Path(raw).resolve()
        if path in _loaded:
            continue
        if not path.is_file():
            raise SpecError(f"{raw}: form module not found")
        spec = importlib.util.spec_from_file_location(f"whatif_user_forms_{len(_loaded)}", path)
        if spec is None or spec.loader is None:
            raise SpecError(f"{raw}: cannot be loaded as a Python module")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _loaded.add(path)
