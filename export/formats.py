"""The export formats by name: each is a module with ``write(corpus, tasks, folder, progress)``.

``corpus`` is an open ``Corpus``; ``tasks`` the pandas frame of the selected tasks (rows of
``Corpus.tasks_frame()``, in a fixed order); ``folder`` an existing, empty folder to write into
(the caller renames it into place when ``write`` returns); ``progress`` whether to show a bar.
``write`` returns a JSON-safe dict describing what it wrote (file names, counts), which the
caller records in the export's manifest.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

MODULES = {
    "parquet": "whatif_bench.export.parquet",
    "fev": "whatif_bench.export.fev",
    "llm": "whatif_bench.export.llm",
    "gluonts": "whatif_bench.export.gluonts",
}


def writer(name: str) -> Callable[..., dict[str, Any]]:
    """The ``write`` function of format ``name``; the error lists the valid names."""
    from whatif_bench.errors import WhatIfError

    if name not in MODULES:
        raise WhatIfError(f"unknown export format {name!r}; expected one of {list(MODULES)}")
    return importlib.import_module(MODULES[name]).write
