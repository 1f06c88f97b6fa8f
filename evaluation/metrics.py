"""Per-task metrics (docs/METHOD.md, section 7), with fev's definitions (fev 0.10, ``metrics.py``).

- ``wql``: weighted quantile loss, ``mean_q [ mean_t 2·ρ_q(y_t, ŷ_{q,t}) / mean_t |y_t| ]`` with
  the pinball loss ``ρ_q(y, ŷ) = (y − ŷ)·(q − 1{y < ŷ})``; fev's ``epsilon`` floors the mean |y|.
- ``wape``: ``mean_t |y_t − ŷ_t| / mean_t |y_t|`` of the point forecast (the median).

A point forecast is scored by ``wql`` at the single level 0.5, which equals its WAPE.
"""

from __future__ import annotations

import numpy as np

from whatif_bench.corpus import QUANTILE_LEVELS

__all__ = ["QUANTILE_LEVELS", "quantile_loss", "score", "wape", "wql"]


def quantile_loss(y_true: np.ndarray, q_pred: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """Twice the pinball loss, shape of ``q_pred`` (..., Q); ``y_true`` broadcasts over Q."""
    y = np.asarray(y_true, dtype=np.float64)[..., None]
    q = np.asarray(q_pred, dtype=np.float64)
    return 2.0 * np.abs((y - q) * ((y <= q) - np.asarray(levels, dtype=np.float64)))


def wql(
    y_true: np.ndarray, q_pred: np.ndarray, levels=QUANTILE_LEVELS, epsilon: float = 0.0
) -> float:
    """Weighted quantile loss of one task: ``y_true`` (H,), ``q_pred`` (H, Q); computed in
    float64 whatever the input dtype."""
    y_true = np.asarray(y_true, dtype=np.float64)
    levels = np.asarray(levels, dtype=np.float64)
    q_pred = np.asarray(q_pred, dtype=np.float64).reshape(len(y_true), levels.size)
    loss = quantile_loss(y_true, q_pred, levels).mean(axis=0)  # (Q,)
    scale = max(float(np.mean(np.abs(y_true))), epsilon)
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(np.mean(loss / scale))


def wape(y_true: np.ndarray, y_pred: np.ndarray, epsilon: float = 0.0) -> float:
    """Weighted absolute percentage error of one task's point forecast."""
    y_true = np.asarray(y_true, dtype=np.float64)
    error = float(np.mean(np.abs(y_true - np.asarray(y_pred, dtype=np.float64))))
    scale = max(float(np.mean(np.abs(y_true))), epsilon)
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(np.float64(error) / np.float64(scale))


def score(
    y_true: np.ndarray, point: np.ndarray | None, quantiles: np.ndarray | None
) -> dict[str, float]:
    """WQL and WAPE of one forecast; point forecasts get WQL at the 0.5 level alone."""
    if quantiles is not None:
        median = quantiles[:, QUANTILE_LEVELS.index(0.5)]
        return {
            "wql": wql(y_true, quantiles),
            "wape": wape(y_true, median if point is None else point),
        }
    if point is None:
        raise ValueError("a forecast without quantiles needs a point forecast")
    return {
        "wql": wql(y_true, np.asarray(point)[:, None], levels=(0.5,)),
        "wape": wape(y_true, point),
    }
