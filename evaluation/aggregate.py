"""Aggregates of SPEC §7 as fev computes them (fev 0.10, ``analysis.py``).

- relative error of a model on a task: its error divided by the reference model's, clipped to
  [0.01, 100];
- skill score: ``1 − geometric mean`` of the clipped relative errors over tasks;
- win rate: per pair of models, the share of tasks where one has the smaller clipped relative
  error (ties count half), averaged over the other models.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.stats import gmean

MIN_RELATIVE_ERROR = 1e-2
MAX_RELATIVE_ERROR = 100.0


def relative_errors(errors: pd.DataFrame, reference: str) -> pd.DataFrame:
    """Task x model errors divided by the reference column, clipped as fev does."""
    if reference not in errors.columns:
        raise ValueError(
            f"reference model {reference!r} has no results; models: {list(errors.columns)}"
        )
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = errors.divide(errors[reference], axis=0)
    return ratio.clip(lower=MIN_RELATIVE_ERROR, upper=MAX_RELATIVE_ERROR)


def skill_scores(errors: pd.DataFrame, reference: str) -> pd.Series:
    """``1 − gmean(clip(error / reference error))`` per model (the reference scores 0)."""
    relative = relative_errors(errors, reference)
    return pd.Series(
        1.0 - gmean(relative.to_numpy(), axis=0), index=errors.columns, name="skill_score"
    )


def win_rates(errors: pd.DataFrame, reference: str) -> pd.Series:
    """Average share of tasks each model beats each other model on (ties half, self excluded)."""
    relative = relative_errors(errors, reference).to_numpy()
    a, b = relative[:, :, None], relative[:, None, :]
    wins = (a < b).mean(axis=0) + 0.5 * (a == b).mean(axis=0)
    np.fill_diagonal(wins, 0.0)
    others = relative.shape[1] - 1  # a model is not compared with itself
    rates = wins.sum(axis=1) / others if others else np.full(relative.shape[1], np.nan)
    return pd.Series(rates, index=errors.columns, name="win_rate")


def leaderboard(errors: pd.DataFrame, reference: str) -> pd.DataFrame:
    """Skill score and win rate of every model, sorted by win rate as fev sorts them."""
    table = pd.concat([win_rates(errors, reference), skill_scores(errors, reference)], axis=1)
    table["num_tasks"] = len(errors)
    return table.sort_values("win_rate", ascending=False)
