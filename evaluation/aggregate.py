"""Aggregates (docs/METHOD.md, section 8) as fev computes them (fev 0.10, ``analysis.py``),
with two differences: missing errors, and ties within ``TIE_TOLERANCE``.

- relative error of a model on a task: its error divided by the reference model's, clipped to
  [0.01, 100];
- skill score: ``1 − geometric mean`` of the clipped relative errors over tasks;
- win rate: per pair of models, the share of tasks where one has the smaller clipped relative
  error (ties count half), averaged over the other models.

Missing errors (NaN: a model failed on a task) are left out pair by pair: a model's skill score
uses the tasks both it and the reference were scored on; a win rate between two models uses the
tasks both were scored on (and the reference too), and a model's win rate averages over the
other models it shares tasks with (fev drops, imputes or refuses such tasks instead).

Ties: fev counts a tie only when two relative errors are exactly equal. Two models that make the
same forecast by different float operations (a sum in another order, float32 against float64
steps) get errors a few units in the last place apart, and exact equality turns that rounding
into a win on every task for one of them (0.51 against 0.49 where both should score 0.5). Here
two relative errors ``a`` and ``b`` tie when ``|a − b| <= TIE_TOLERANCE · max(|a|, |b|)``
(``ties``). Without missing errors and without relative errors that close (but unequal), this
is exactly fev's computation. The skill score needs no tolerance: it is a continuous function of
the errors (a geometric mean of ratios), so rounding of 1e-15 moves it by about as much, far
below the four decimals reported; only the win rate's comparison jumps at equality.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

MIN_RELATIVE_ERROR = 1e-2
MAX_RELATIVE_ERROR = 100.0

# Relative tolerance of a tie between two clipped relative errors (``ties``). Rounding of the
# same forecast computed in two float orders makes errors differ by about H · 2⁻⁵³ relative at
# most (H <= 864 steps: under 1e-13, and the division by the reference adds an ulp); 1e-9 is
# four orders of magnitude above that. It is far below any difference that means something: the
# corpus stores float32 values (a relative precision of 6e-8), so errors closer than 1e-9
# relative cannot tell two forecasts apart.
TIE_TOLERANCE = 1e-9


def relative_error_matrix(errors: pd.DataFrame, reference: str) -> np.ndarray:
    """(tasks, models) float64: each error divided by the reference model's error on the same
    task, clipped to [MIN_RELATIVE_ERROR, MAX_RELATIVE_ERROR] as fev does; NaN stays NaN."""
    if reference not in errors.columns:
        raise ValueError(
            f"reference model {reference!r} has no results; models: {list(errors.columns)}"
        )
    # row-major whatever the frame's own layout: the geometric mean then sums over tasks one
    # row after another, in the order it always has (a column-major copy sums each column
    # pairwise, which moves the last digit of a skill score)
    values = np.ascontiguousarray(errors.to_numpy(dtype=np.float64))
    column = list(errors.columns).index(reference)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = values / values[:, [column]]
    return np.clip(ratio, MIN_RELATIVE_ERROR, MAX_RELATIVE_ERROR)


def relative_errors(errors: pd.DataFrame, reference: str) -> pd.DataFrame:
    """Task x model errors divided by the reference column, clipped as fev does."""
    return pd.DataFrame(
        relative_error_matrix(errors, reference), index=errors.index, columns=errors.columns
    )


def skill_scores(errors: pd.DataFrame, reference: str) -> pd.Series:
    """``1 − gmean(clip(error / reference error))`` per model (the reference scores 0)."""
    relative = relative_error_matrix(errors, reference)
    with warnings.catch_warnings(), np.errstate(divide="ignore", invalid="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)  # a model with no task is NaN
        geometric = np.exp(np.nanmean(np.log(relative), axis=0))
    return pd.Series(1.0 - geometric, index=errors.columns, name="skill_score")


def ties(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Where relative errors ``a`` and ``b`` (broadcast together) tie: equal within
    ``TIE_TOLERANCE`` relative, ``|a − b| <= TIE_TOLERANCE · max(|a|, |b|)``; NaN ties
    nothing."""
    return np.abs(a - b) <= TIE_TOLERANCE * np.maximum(np.abs(a), np.abs(b))


def win_rates(errors: pd.DataFrame, reference: str) -> pd.Series:
    """Average share of tasks each model beats each other model on (ties half, self excluded):
    a win is a smaller clipped relative error that does not tie (``ties``)."""
    relative = relative_error_matrix(errors, reference)
    a, b = relative[:, :, None], relative[:, None, :]
    both = ~np.isnan(a) & ~np.isnan(b)  # tasks both models were scored on
    shared = both.sum(axis=0)
    with np.errstate(invalid="ignore"):
        tied = ties(a, b) & both
    won = (a < b) & both & ~tied
    with np.errstate(divide="ignore", invalid="ignore"):
        wins = won.sum(axis=0) / shared + 0.5 * tied.sum(axis=0) / shared
    np.fill_diagonal(wins, np.nan)  # a model is not compared with itself
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # no other model shares a task
        rates = np.nanmean(wins, axis=1) if relative.shape[1] > 1 else np.full(1, np.nan)
    return pd.Series(rates, index=errors.columns, name="win_rate")


def leaderboard(errors: pd.DataFrame, reference: str) -> pd.DataFrame:
    """Skill score and win rate of every model, and the number of tasks it was scored on
    (``num_tasks``), sorted by win rate as fev sorts them (models without a score last)."""
    table = pd.DataFrame(
        {
            "win_rate": win_rates(errors, reference),
            "skill_score": skill_scores(errors, reference),
            "num_tasks": np.count_nonzero(~np.isnan(errors.to_numpy(dtype=np.float64)), axis=0),
        },
        index=errors.columns,
    )
    return table.sort_values("win_rate", ascending=False, kind="stable", na_position="last")
