"""Which tasks of a corpus view to use: all of them, or a stratified fraction.

``whatif evaluate --subset`` and ``whatif export --subset`` draw the same tasks for the same
fraction and seed, because both call ``select_tasks`` on the view's ``tasks_frame()``.
"""

from __future__ import annotations

import math

import pandas as pd

from whatif_bench.corpus.axes import strata
from whatif_bench.corpus.reader import CorpusError
from whatif_bench.seeding import rng as seeded_rng


def check_subset(subset: object) -> None:
    """A ``CorpusError`` unless ``subset`` is None or a number in (0, 1] (``True`` is not)."""
    if subset is None:
        return
    if isinstance(subset, bool) or not isinstance(subset, int | float) or not 0.0 < subset <= 1.0:
        raise CorpusError(f"subset must be a fraction in (0, 1], got {subset!r}")


def select_tasks(frame: pd.DataFrame, subset: float | None, seed: int = 0) -> pd.DataFrame:
    """All rows of ``frame`` (a ``tasks_frame()``), or a stratified sample of them:
    ``ceil(subset x n)`` of the tasks of every combination of the axis table's values
    (simulator, future, K, C, l, E; a stratum holds one task per target), drawn with ``seed``.
    The rows keep the frame's order; the index is reset."""
    check_subset(subset)
    if subset is None or subset == 1.0:
        return frame.reset_index(drop=True)
    rng = seeded_rng("subset", seed)
    keep = []
    for _, group in frame.groupby(strata(), sort=True):
        n = math.ceil(subset * len(group))
        keep.extend(sorted(rng.choice(group.index.to_numpy(), size=n, replace=False).tolist()))
    return frame.loc[sorted(keep)].reset_index(drop=True)
