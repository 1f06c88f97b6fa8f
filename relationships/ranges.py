"""Factor ranges events can draw (docs/METHOD.md, sections 3 and 5): history pools and the Novel extrapolation.

The generator draws from these; the rule checks sweep them, so both agree on what "every factor
an event can draw" means.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from whatif_bench.relationships.engine import Relationship

# the history's factors include the base value 1 (corpus/recipe.py, _novel_factors)
NOVEL_OFFSET = (5.0, 12.0)  # direct covariate: largest history factor + U[5, 12]
NOVEL_SCALE = (0.1, 0.5)  # inverse covariate: smallest history factor * U[0.1, 0.5]
# The range a history pool's factors must lie in. Within it a Novel future provably lies beyond
# its history's range for every allowed window, a shortened Novel bell included (the bound and
# its proof: generator/novel_range.py); relationships are checked down to about 0.01.
MIN_POOL_FACTOR = 0.01
MAX_POOL_FACTOR = 1000.0


def factor_bounds(pool: tuple[float, ...]) -> tuple[float, float]:
    """Smallest and largest factor any event (history or Novel) can give a covariate."""
    low = min(pool) * NOVEL_SCALE[0] if min(pool) < 1.0 else 1.0
    return low, max(pool) + NOVEL_OFFSET[1]


def factor_grid(pool: tuple[float, ...], points: int = 96) -> np.ndarray:
    """Sorted factors covering ``factor_bounds`` densely (log-spaced) plus every pool value and 1."""
    low, high = factor_bounds(pool)
    dense = np.geomspace(low, high, points)
    return np.unique(np.concatenate([dense, np.asarray(pool, dtype=np.float64), [1.0, low, high]]))


def sample_baselines(relationship: Relationship, count: int = 7) -> np.ndarray:
    """Baseline values spread over the target's typical range (both ends included), shape
    (count,): where the rule checks, the imprints and the user-form probe evaluate it."""
    low, high = relationship.typical_range
    return np.linspace(low, high, count)
