"""Skill score and win rate equal fev's leaderboard, with any model as the reference."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from whatif_bench.evaluation.aggregate import leaderboard, skill_scores, win_rates

fev = pytest.importorskip("fev")


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
