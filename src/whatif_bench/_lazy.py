"""Lazy public names for the subpackages (PEP 562).

A subpackage's ``__init__`` names what it exports and the module defining each name; the
module is imported on first use. ``import whatif_bench.generator.cli`` therefore loads no numpy,
numba, h5py or pandas, which keeps ``whatif --help`` and ``whatif --version`` fast, while
``from whatif_bench.generator import Corpus`` works as before.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping


def lazy_exports(
    namespace: dict, exports: Mapping[str, str]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for the package whose ``globals()`` is ``namespace``;
    ``exports`` maps each public name to the module defining it."""
    package = namespace["__name__"]

    def __getattr__(name: str) -> object:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        imported = importlib.import_module(module)
        # an entry naming its own module (``"axes": "pkg.axes"``) exports that submodule
        value = imported if module == f"{package}.{name}" else getattr(imported, name)
        namespace[name] = value  # later look-ups skip this function
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *exports})

    return __getattr__, __dir__
