"""Turn a recipe into arrays: the history and both futures, target and covariates.

The same function builds a pair during generation and rebuilds it in ``whatif verify`` and in
``Corpus``; stored values are float32, computed in float64 and rounded once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from whatif_bench.corpus import Recipe
from whatif_bench.relationships.engine import EventSchedule, Relationship

STORE_DTYPE = np.float32


@dataclass(frozen=True)
class PairArrays:
    """One pair's arrays in float64, before rounding for storage."""

    baseline: np.ndarray  # (C + H,) the event-free counterfactual over the window
    history_target: np.ndarray  # (C,)
    history_covariates: np.ndarray  # (K, C) physical units
    future_targets: dict[str, np.ndarray]  # future -> (H,)
    future_covariates: dict[str, np.ndarray]  # future -> (K, H)


def _future(
    relationship: Relationship, baseline_future: np.ndarray, length: int, factors: np.ndarray
):
    """Target (H,) and covariates (K, H) over the prediction window with one event of
    ``length`` steps at its first step (cut by the window end)."""
    horizon = baseline_future.size
    padded = np.zeros(max(length, horizon))
    padded[:horizon] = baseline_future
    schedule = EventSchedule(np.array([0]), np.array([length]), factors[None, :])
    target = relationship.apply_events(padded, schedule)[:horizon]
    covariates = relationship.covariate_values(padded.size, schedule)[:, :horizon]
    return target, covariates


def materialise(recipe: Recipe, relationship: Relationship, baseline: np.ndarray) -> PairArrays:
    """Build a pair's arrays from its recipe and the simulator's full baseline series."""
    history = recipe.layout
    window = np.ascontiguousarray(
        baseline[recipe.window_start : recipe.window_start + history.window]
    )
    past = window[: history.context]
    schedule = EventSchedule(
        np.asarray(history.starts),
        np.full(len(history.starts), history.event_length),
        recipe.factors,
    )
    history_target = relationship.apply_events(past, schedule)
    history_covariates = relationship.covariate_values(past.size, schedule)
    future_targets, future_covariates = {}, {}
    for name, factors in (("replay", recipe.replay_factors), ("novel", recipe.novel_factors)):
        target, covariates = _future(
            relationship, window[history.context :], history.future_event_length(name), factors
        )
        future_targets[name], future_covariates[name] = target, covariates
    return PairArrays(window, history_target, history_covariates, future_targets, future_covariates)
