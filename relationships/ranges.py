"""Factor ranges events can draw (docs/METHOD.md, sections 3 and 5): history pools and the Novel extrapolation.

The generator draws from these; the rule checks sweep them, so both agree on what "every factor
an event can draw" means.
"""

from __future__ import annotations

import numpy as np

NOVEL_OFFSET = (5.0, 12.0)  # direct covariate: largest history factor + U[5, 12]
NOVEL_SCALE = (0.1, 0.5)  # inverse covariate: smallest history factor * U[0.1, 0.5]
# The smallest factor a history pool may hold. Relationships are checked down to about 0.01
# (with the Novel scale, 0.001); and above it a Novel future provably lies beyond its history's
# range even where the window shortens a long Novel bell (docs/METHOD.md, section 5).
MIN_POOL_FACTOR = 0.01


def factor_bounds(pool: tuple[float, ...]) -> tuple[float, float]:
    """Smallest and largest factor any event (history or Novel) can give a covariate."""
    low = min(pool) * NOVEL_SCALE[0] if min(pool) < 1.0 else 1.0
    return low, max(pool) + NOVEL_OFFSET[1]


def factor_grid(pool: tuple[float, ...], points: int = 96) -> np.ndarray:
    """Sorted factors covering ``factor_bounds`` densely (log-spaced) plus every pool value and 1."""
    low, high = factor_bounds(pool)
    dense = np.geomspace(low, high, points)
    return np.unique(np.concatenate([dense, np.asarray(pool, dtype=np.float64), [1.0, low, high]]))
