"""Aggregates (docs/METHOD.md, section 8) as fev computes them (fev 0.10, ``analysis.py``).

- relative error of a model on a task: its error divided by the reference model's, clipped to
  [0.01, 100];
- skill score: ``1 − geometric mean`` of the clipped relative errors over tasks;
- win rate: per pair of models, the share of tasks where one has the smaller clipped relative
  error (ties count half), averaged over the other models.

Missing errors (NaN: a model failed on a task) are left out pair by pair: a model's skill score
uses the tasks both it and the reference were scored on; a win rate between two models uses the
tasks both were scored on (and the reference too), and a model's win rate averages over the
other models it shares tasks with. Without missing errors this is exactly fev's computation.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

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
    relative = relative_errors(errors, reference).to_numpy(dtype=np.float64)
    with warnings.catch_warnings(), np.errstate(divide="ignore", invalid="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)  # a model with no task is NaN
        geometric = np.exp(np.nanmean(np.log(relative), axis=0))
    return pd.Series(1.0 - geometric, index=errors.columns, name="skill_score")


def win_rates(errors: pd.DataFrame, reference: str) -> pd.Series:
    """Average share of tasks each model beats each other model on (ties half, self excluded)."""
    relative = relative_errors(errors, reference).to_numpy(dtype=np.float64)
    a, b = relative[:, :, None], relative[:, None, :]
    both = ~np.isnan(a) & ~np.isnan(b)  # tasks both models were scored on
    shared = both.sum(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        wins = ((a < b) & both).sum(axis=0) / shared + 0.5 * ((a == b) & both).sum(axis=0) / shared
    np.fill_diagonal(wins, np.nan)  # a model is not compared with itself
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # no other model shares a task
        rates = np.nanmean(wins, axis=1) if relative.shape[1] > 1 else np.full(1, np.nan)
    return pd.Series(rates, index=errors.columns, name="win_rate")


def leaderboard(errors: pd.DataFrame, reference: str) -> pd.DataFrame:
    """Skill score and win rate of every model, and the number of tasks it was scored on
    (``num_tasks``), sorted by win rate as fev sorts them (models without a score last)."""
    table = pd.concat([win_rates(errors, reference), skill_scores(errors, reference)], axis=1)
    table["num_tasks"] = errors.notna().sum(axis=0).astype(int)
    return table.sort_values("win_rate", ascending=False, kind="stable", na_position="last")
