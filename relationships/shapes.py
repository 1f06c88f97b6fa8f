"""Event shapes (docs/METHOD.md, section 3): how a covariate's factor evolves over an event window.

A *step* holds the factor ``f`` for the whole window. A *bell* rises from 1 to ``f`` and back:
``1 + (f - 1) * exp(-0.5 * ((t - t_m) / sigma) ** 2)`` with ``t_m = (l - 1) / 2`` and
``sigma = l / 6``. Outside events every factor is exactly 1.
"""

from __future__ import annotations

import numpy as np

STEP = 0
BELL = 1
SHAPE_CODES: dict[str, int] = {"step": STEP, "bell": BELL}


def shape_code(name: str) -> int:
    """Return the integer code of a shape name; raise ``ValueError`` naming the valid ones."""
    try:
        return SHAPE_CODES[name]
    except KeyError:
        raise ValueError(f"unknown shape {name!r}; expected one of {sorted(SHAPE_CODES)}") from None


def bell_profile(length: int) -> np.ndarray:
    """The bell's weight ``exp(-0.5 ((t - t_m) / sigma)^2)`` for ``t = 0 .. length-1``, shape (length,)."""
    if length < 1:
        raise ValueError(f"event length must be >= 1, got {length}")
    t = np.arange(length, dtype=np.float64)
    centre = (length - 1) / 2.0
    sigma = length / 6.0
    return np.exp(-0.5 * ((t - centre) / sigma) ** 2)


def step_factors(factor: float, length: int) -> np.ndarray:
    """Factor trajectory of a step event: ``factor`` repeated ``length`` times."""
    if length < 1:
        raise ValueError(f"event length must be >= 1, got {length}")
    return np.full(length, float(factor))


def bell_factors(factor: float, length: int) -> np.ndarray:
    """Factor trajectory of a bell event: ``1 + (factor - 1) * bell_profile(length)``."""
    return 1.0 + (float(factor) - 1.0) * bell_profile(length)


def factor_trajectory(
    n_steps: int, starts: np.ndarray, lengths: np.ndarray, factors: np.ndarray, shape: str
) -> np.ndarray:
    """One covariate's factor over ``n_steps``: 1 outside events, the shaped factor inside.

    Plain-numpy reference used by tests and benchmarks; the engine uses a numba kernel.
    """
    code = shape_code(shape)
    out = np.ones(n_steps, dtype=np.float64)
    for start, length, factor in zip(starts, lengths, factors, strict=True):
        window = step_factors if code == STEP else bell_factors
        out[int(start) : int(start) + int(length)] = window(factor, int(length))
    return out
