"""The report's task x model tables and per-slice leaderboards, built with numpy, equal their
pandas reference twins (``pivot_table`` per slice, and a DataFrame divide-and-clip) bit for bit,
for any per-task frame: failed (NaN) cells, missing rows, repeated rows, models absent from a
slice."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from whatif_bench.evaluation.aggregate import (
    MAX_RELATIVE_ERROR,
    MIN_RELATIVE_ERROR,
    leaderboard,
    relative_errors,
    skill_scores,
)
from whatif_bench.evaluation.report import errors_table, sliced


def reference_errors_table(per_task: pd.DataFrame, metric: str = "wql") -> pd.DataFrame:
    """The table as pandas builds it: one pivot, first non-NaN value of each cell."""
    models = list(dict.fromkeys(per_task["model"]))
    table = per_task.pivot_table(
        index="task_id", columns="model", values=metric, aggfunc="first", dropna=False
    )
    return table.reindex(columns=models)


def reference_sliced(per_task: pd.DataFrame, column: str, reference: str) -> pd.DataFrame:
    """A leaderboard per slice value, each from its own pivot of that slice's rows."""
    frames = []
    for value, group in per_task.groupby(column, sort=True):
        board = leaderboard(reference_errors_table(group), reference)
        board.insert(0, column, value)
        frames.append(board.reset_index(names="model"))
    return pd.concat(frames, ignore_index=True)


def reference_relative_errors(errors: pd.DataFrame, reference: str) -> pd.DataFrame:
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = errors.divide(errors[reference], axis=0)
    return ratio.clip(lower=MIN_RELATIVE_ERROR, upper=MAX_RELATIVE_ERROR)


ERRORS = st.one_of(
    st.just(np.nan),
    st.just(0.0),
    st.just(np.inf),
    st.floats(1e-6, 1e6, allow_nan=False),
)


@st.composite
def per_task_frames(draw: st.DrawFn) -> pd.DataFrame:
    """Rows (task, model, wql, k) in any order: some cells missing, some given twice."""
    n_tasks = draw(st.integers(1, 12))
    models = draw(st.lists(st.sampled_from(["naive", "b", "c", "d"]), min_size=1, unique=True))
    if "naive" not in models:
        models = ["naive", *models]
    k_of_task = draw(st.lists(st.integers(1, 3), min_size=n_tasks, max_size=n_tasks))
    cells = [(t, m) for t in range(n_tasks) for m in models]
    kept = draw(st.lists(st.booleans(), min_size=len(cells), max_size=len(cells)))
    rows = [cell for cell, keep in zip(cells, kept, strict=True) if keep]
    rows += draw(st.lists(st.sampled_from(cells), max_size=6))  # repeated cells
    rows = draw(st.permutations(rows)) if rows else [cells[0]]
    values = draw(st.lists(ERRORS, min_size=len(rows), max_size=len(rows)))
    return pd.DataFrame(
        {
            "task_id": [f"t{t:02d}" for t, _ in rows],
            "model": [m for _, m in rows],
            "wql": np.array(values, dtype=np.float64),
            "k": [k_of_task[t] for t, _ in rows],
        }
    )


def assert_same(a: pd.DataFrame, b: pd.DataFrame) -> None:
    assert list(a.columns) == list(b.columns)
    assert list(a.index) == list(b.index)
    for column in a.columns:
        left, right = a[column].to_numpy(), b[column].to_numpy()
        if left.dtype.kind == "f":
            # bit for bit: the same float64 patterns, NaN where NaN
            assert np.array_equal(left.view(np.int64), right.view(np.int64)), column
        else:
            assert left.tolist() == right.tolist(), column


@settings(max_examples=60, deadline=None)
@given(per_task=per_task_frames())
def test_the_errors_table_is_the_pivot_table(per_task: pd.DataFrame) -> None:
    assert_same(errors_table(per_task), reference_errors_table(per_task))
    assert errors_table(per_task).index.name == "task_id"
    assert errors_table(per_task).columns.name == "model"


@settings(max_examples=40, deadline=None)
@given(per_task=per_task_frames())
def test_slice_leaderboards_equal_one_pivot_per_slice(per_task: pd.DataFrame) -> None:
    assume("naive" in set(per_task["model"]))  # else both refuse (tested below)
    for column in ("k", "model"):
        try:
            expected = reference_sliced(per_task, column, "naive")
        except ValueError:  # a slice without the reference
            continue
        assert_same(sliced(per_task, column, "naive"), expected)


@settings(max_examples=60, deadline=None)
@given(per_task=per_task_frames())
def test_relative_errors_equal_the_frames_divide_and_clip(per_task: pd.DataFrame) -> None:
    assume("naive" in set(per_task["model"]))
    table = reference_errors_table(per_task)
    assert_same(relative_errors(table, "naive"), reference_relative_errors(table, "naive"))


def test_a_slice_without_the_reference_is_refused_naming_it() -> None:
    per_task = pd.DataFrame(
        {"task_id": ["a", "b"], "model": ["naive", "m"], "wql": [1.0, 2.0], "k": [1, 2]}
    )
    with pytest.raises(ValueError, match="'naive' has no results"):
        sliced(per_task, "k", "naive")


def test_skill_scores_sum_the_logs_task_after_task() -> None:
    """The geometric mean adds each model's log relative errors in task order, one task after
    another (the digits every earlier report has): a pairwise sum moves the last digit of about
    one score in four here."""
    models = pd.Index(["naive", "b", "c", "d", "e", "f"], name="model")
    for seed in range(10):
        rng = np.random.default_rng(seed)
        errors = pd.DataFrame(rng.lognormal(size=(500, len(models))), columns=models)
        errors.iloc[rng.integers(0, 500, 40), 1] = np.nan
        logs = np.log(reference_relative_errors(errors, "naive").to_numpy())
        total, count = np.zeros(len(models)), np.zeros(len(models))
        for row in logs:
            total += np.where(np.isnan(row), 0.0, row)
            count += ~np.isnan(row)
        expected = 1.0 - np.exp(total / count)
        scores = skill_scores(errors, "naive").to_numpy()
        assert np.array_equal(scores.view(np.int64), expected.view(np.int64)), seed
