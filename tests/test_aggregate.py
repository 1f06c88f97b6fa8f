"""Skill score and win rate equal fev's leaderboard, with any model as the reference; win-rate
ties within ``TIE_TOLERANCE`` (where this departs from fev)."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.lazy_modules import importorskip_lazily
from whatif_bench.evaluation.aggregate import (
    TIE_TOLERANCE,
    leaderboard,
    skill_scores,
    ties,
    win_rates,
)
from whatif_bench.evaluation.metrics import score

fev = importorskip_lazily("fev")


def fev_board(errors: pd.DataFrame, reference: str) -> pd.DataFrame:
    rows = [
        {
            "model_name": model,
            "dataset_path": task,
            "test_error": value,
            "quantile_levels": [],
            "fev_version": "0.10.0",
        }
        for model in errors.columns
        for task, value in errors[model].items()
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fev.leaderboard(pd.DataFrame(rows), baseline_model=reference)


def test_the_reference_example():
    errors = pd.DataFrame(
        {"seasonal_naive": [1, 1, 2, 4], "A": [0.5, 1, 0.001, 4], "B": [0.5, 2, 1, 800]},
        index=[f"t{i}" for i in range(4)],
        dtype=float,
    )
    board = leaderboard(errors, "seasonal_naive")
    assert board.index.tolist() == ["A", "seasonal_naive", "B"]
    assert board.loc["A", "win_rate"] == pytest.approx(0.8125)
    assert board.loc["A", "skill_score"] == pytest.approx(0.7340852, rel=1e-6)
    assert board.loc["B", "skill_score"] == pytest.approx(-1.6591479, rel=1e-6)
    assert board.loc["seasonal_naive", "skill_score"] == 0.0


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    n_tasks=st.integers(1, 40),
    n_models=st.integers(2, 5),
    ref=st.integers(0, 4),
)
@pytest.mark.slow  # about 4 s
def test_equal_to_fev_leaderboard(seed, n_tasks, n_models, ref):
    rng = np.random.default_rng(seed)
    models = [f"m{i}" for i in range(n_models)]
    errors = pd.DataFrame(
        np.exp(rng.normal(0, 2, (n_tasks, n_models))),
        columns=models,
        index=[f"task{i}" for i in range(n_tasks)],
    )
    errors.iloc[0, -1] = errors.iloc[0, 0]  # a tie
    reference = models[ref % n_models]
    ours, theirs = leaderboard(errors, reference), fev_board(errors, reference)
    for model in models:
        assert ours.loc[model, "skill_score"] == pytest.approx(
            theirs.loc[model, "skill_score"], rel=1e-9, abs=1e-12
        )
        assert ours.loc[model, "win_rate"] == pytest.approx(
            theirs.loc[model, "win_rate"], rel=1e-9, abs=1e-12
        )


def test_unknown_reference_is_an_error():
    errors = pd.DataFrame({"a": [1.0], "b": [2.0]})
    with pytest.raises(ValueError, match="reference model 'c' has no results"):
        skill_scores(errors, "c")
    assert win_rates(errors, "a").to_dict() == {"a": 1.0, "b": 0.0}


def exact_win_rates(errors: pd.DataFrame, reference: str) -> pd.Series:
    """fev's win rate (ties only when exactly equal), as a plain loop over pairs and tasks."""
    relative = errors.divide(errors[reference], axis=0).clip(0.01, 100.0)
    rates = {}
    for model in errors.columns:
        shares = []
        for other in errors.columns.drop(model):
            a, b = relative[model], relative[other]
            shares.append(((a < b).sum() + 0.5 * (a == b).sum()) / len(a))
        rates[model] = float(np.mean(shares))
    return pd.Series(rates)


def test_the_same_forecast_in_two_float_orders_ties_on_every_task():
    """Two model objects making the same forecast (the mean of the last 7 values), one summing
    forwards, one backwards: the errors differ by rounding only, and each wins half."""
    rng = np.random.default_rng(3)
    rows = []
    for task in range(200):
        history = rng.lognormal(3.0, 1.0, 64)
        truth = rng.lognormal(3.0, 1.0, 48)
        last = history[-7:]
        forwards = np.full(48, sum(last.tolist()) / 7.0)
        backwards = np.full(48, sum(last[::-1].tolist()) / 7.0)
        naive = np.full(48, history[-1])
        rows.append(
            {
                "task": task,
                **{
                    name: score(truth, forecast, None)["wql"]
                    for name, forecast in (
                        ("naive", naive),
                        ("forwards", forwards),
                        ("backwards", backwards),
                    )
                },
            }
        )
    errors = pd.DataFrame(rows).set_index("task")
    differ = errors["forwards"] != errors["backwards"]
    assert differ.sum() >= 10  # rounding shows on some tasks (else this test proves nothing)
    close = np.abs(errors["forwards"] / errors["backwards"] - 1.0)
    assert close.max() < 1e-14
    pair = errors[["forwards", "backwards"]]
    assert win_rates(pair, "forwards").to_dict() == {"forwards": 0.5, "backwards": 0.5}
    exact = exact_win_rates(pair, "forwards")
    assert exact["forwards"] != 0.5  # what exact equality made of it
    rates = win_rates(errors, "naive")
    assert rates["forwards"] == rates["backwards"]  # the same against naive too
    assert leaderboard(errors, "naive").loc["forwards", "skill_score"] == pytest.approx(
        leaderboard(errors, "naive").loc["backwards", "skill_score"], rel=1e-12, abs=1e-14
    )  # the skill score needs no tolerance: it moves by rounding only


@pytest.mark.parametrize(
    ("a", "b", "tied"),
    [
        (1.0, 1.0, True),
        (1.0, 1.0 + 0.5 * TIE_TOLERANCE, True),
        (1.0, 1.0 + 0.9 * TIE_TOLERANCE, True),
        (1.0, 1.0 + 2 * TIE_TOLERANCE, False),
        (0.01, 0.01 * (1 + 0.5 * TIE_TOLERANCE), True),  # relative, at any size
        (0.01, 0.01 + 2 * TIE_TOLERANCE * 0.01, False),
        (100.0, 100.0, True),  # both clipped at the top
        (np.nan, np.nan, False),
        (1.0, np.nan, False),
    ],
)
def test_ties_are_relative_and_within_the_tolerance(a, b, tied):
    with np.errstate(invalid="ignore"):
        assert bool(ties(np.array(a), np.array(b))) is tied
        assert bool(ties(np.array(b), np.array(a))) is tied  # symmetric


@st.composite
def error_tables(draw):
    """Errors of 3 to 5 models on up to 30 tasks, with exact and near ties and failures."""
    seed = draw(st.integers(0, 2**32 - 1))
    n_tasks, n_models = draw(st.integers(1, 30)), draw(st.integers(3, 5))
    rng = np.random.default_rng(seed)
    values = np.exp(rng.normal(0, 1.5, (n_tasks, n_models)))
    for row in range(n_tasks):
        kind = rng.integers(0, 4)
        i, j = rng.choice(n_models, 2, replace=False)
        if kind == 1:
            values[row, j] = values[row, i]
        elif kind == 2:
            values[row, j] = values[row, i] * (1 + rng.uniform(-1e-13, 1e-13))
        elif kind == 3 and draw(st.booleans()):
            values[row, j] = np.nan
    return pd.DataFrame(values, columns=[f"m{k}" for k in range(n_models)])


@settings(max_examples=80, deadline=None)
@given(errors=error_tables(), pick=st.integers(0, 10**6))
def test_swapping_two_models_swaps_their_win_rates(errors, pick):
    reference = errors.columns[0]
    others = list(errors.columns[1:])
    i, j = others[pick % len(others)], others[(pick // len(others)) % len(others)]
    swapped = errors.rename(columns={i: j, j: i})[errors.columns]
    before, after = win_rates(errors, reference), win_rates(swapped, reference)
    for model in errors.columns:
        mapped = {i: j, j: i}.get(model, model)
        if np.isnan(before[model]):
            assert np.isnan(after[mapped])
        else:
            assert after[mapped] == pytest.approx(before[model], rel=1e-12, abs=1e-15)


def test_a_clear_winner_keeps_its_rate():
    rng = np.random.default_rng(5)
    reference = np.exp(rng.normal(0, 1, 50))
    errors = pd.DataFrame(
        {"naive": reference, "good": reference * 0.5, "bad": reference * 3.0, "same": reference}
    )
    rates = win_rates(errors, "naive")
    assert rates["good"] == 1.0 and rates["bad"] == 0.0
    assert rates["naive"] == rates["same"] == 0.5  # 0 against good, 1 against bad, 0.5 tied
    pd.testing.assert_series_equal(
        rates, exact_win_rates(errors, "naive").rename("win_rate"), check_exact=True
    )
