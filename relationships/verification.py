"""The 10 % check (docs/METHOD.md, section 6).

Statistic: for one event window W, ``mean_W |y' - y| / mean_W |y|`` -- the target's average
absolute departure from its event-free baseline relative to the baseline's average magnitude.
An event passes when the statistic is at least 0.10. A window whose baseline is exactly 0
throughout has no relative effect: its statistic is 0 and it fails, however far the target
moved (the paper's criterion is relative to the baseline, and its pipeline evidently dropped
such events; docs/METHOD.md, section 6).
"""

from __future__ import annotations

import numpy as np

THRESHOLD = 0.10  # the one definition: generation, whatif verify, the stream and the axes record
RULE = f"{THRESHOLD * 100:g} % rule"  # how messages name it: "10 % rule"


def effect_ratio(actual: np.ndarray, baseline: np.ndarray) -> float:
    """``mean |actual - baseline| / mean |baseline|`` over one event window; 0 where the
    baseline is 0 throughout (no relative effect)."""
    change = float(np.mean(np.abs(actual - baseline)))
    level = float(np.mean(np.abs(baseline)))
    if level == 0.0:
        return 0.0
    return change / level


def history_ratios(history_target: np.ndarray, past: np.ndarray, starts, length: int) -> np.ndarray:
    """The statistic of every history event, shape (E,)."""
    return np.array(
        [effect_ratio(history_target[s : s + length], past[s : s + length]) for s in starts]
    )


def future_ratio(future_target: np.ndarray, baseline_future: np.ndarray, length: int) -> float:
    """The statistic of the future event (the part inside the prediction window)."""
    span = min(length, future_target.size)
    return effect_ratio(future_target[:span], baseline_future[:span])
