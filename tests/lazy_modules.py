"""Optional heavy libraries imported when a test first uses them, not when pytest collects the
test file.

Under pytest-xdist every worker collects every test file, while each file's tests run on one
worker. A module-level ``pytest.importorskip("chronos.chronos2")`` therefore made every worker
import torch and transformers (about 5 CPU s; fev about 3, timesfm 1) for tests that ran
elsewhere. ``importorskip_lazily`` skips the file at collection exactly when its library is not
installed (a look-up of the top-level package, without importing it) and returns a stand-in
that imports the module at the first attribute a test reads; an import that fails then skips
that test, with ``importorskip``'s reason.
"""

from __future__ import annotations

import importlib
import importlib.util
import types
from typing import Any

import pytest


class LazyModule(types.ModuleType):
    """Stands in for module ``name`` until an attribute is read, then forwards to it. Before
    that first import, dunder names (``__version__`` too) raise ``AttributeError``."""

    def __init__(self, name: str, reason: str | None) -> None:
        super().__init__(name)
        self._lazy_reason = reason
        self._lazy_module: types.ModuleType | None = None

    def _lazy_load(self) -> types.ModuleType:
        if self._lazy_module is None:
            try:
                self._lazy_module = importlib.import_module(self.__name__)
            except ImportError as exc:
                pytest.skip(self._lazy_reason or f"could not import {self.__name__!r}: {exc}")
        return self._lazy_module

    def __getattr__(self, attribute: str) -> Any:
        if self._lazy_module is None and _is_introspection(attribute):
            raise AttributeError(attribute)  # pytest's collection asks; not worth an import
        return getattr(self._lazy_load(), attribute)


def _is_introspection(attribute: str) -> bool:
    """Names that collection reads off every module-level object (``__test__``,
    ``__wrapped__``, ``__bases__``, mock's ``_mock_name``): answered without importing."""
    return (attribute.startswith("__") and attribute.endswith("__")) or attribute.startswith(
        "_mock_"
    )


def importorskip_lazily(name: str, reason: str | None = None) -> Any:
    """``pytest.importorskip(name, reason=reason)`` whose import waits for the first use.

    At collection (module level) it skips the whole file when ``name``'s top-level package is
    not installed; otherwise it returns a ``LazyModule`` for ``name``."""
    top = name.partition(".")[0]
    if importlib.util.find_spec(top) is None:
        pytest.skip(
            reason or f"could not import {name!r}: No module named {top!r}",
            allow_module_level=True,
        )
    return LazyModule(name, reason)
