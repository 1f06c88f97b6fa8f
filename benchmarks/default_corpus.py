"""The corpus a benchmark reads: the file given, or the default corpus generated for the run.

The benchmark scripts import this from their own folder (``python benchmarks/NAME.py`` puts
that folder first on the path).
"""

from __future__ import annotations

import time
from pathlib import Path


def corpus_or_default(given: str | None, folder: str) -> Path:
    """``given`` as a path; without one, the default corpus (every shipped target, seed 0)
    generated into ``folder`` as ``corpus.h5``, saying how long that took."""
    if given:
        return Path(given)
    from whatif_bench.generator import GenerationConfig, generate
    from whatif_bench.simulators import shipped_baselines_path

    path = Path(folder) / "corpus.h5"
    started = time.perf_counter()
    generate(
        GenerationConfig(baselines=str(shipped_baselines_path()), out=str(path)), progress=False
    )
    print(f"generated the default corpus in {time.perf_counter() - started:.1f} s")
    return path
