"""The fev export's rows (``export.fev._table``), built a column at a time from whole arrays,
equal those built a task at a time from ``Task.timestamps()`` and each task's own arrays: the
same Arrow values, so the same Parquet bytes. fev itself reads them in test_export_fev.py."""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.test_corpus_task_parts import BASELINE_STARTS
from whatif_bench.corpus import Corpus, covariate_units, task_units
from whatif_bench.corpus.describe import Describer
from whatif_bench.export import fev as fev_export

# starts before 1970, one with a part of a millisecond (numpy floors it, towards the past)
BEFORE_1970 = ["1969-12-31T23:59:59.9995", "1950-06-01T12:00:00.000250+05:30"]


@pytest.fixture(scope="module")
def opened(one_target_corpus):
    with Corpus(one_target_corpus) as corpus:
        yield corpus


@pytest.fixture(scope="module")
def tasks(opened):
    """The tasks of one (C, K) file, a row group's worth at most, as the export writes them."""
    frame = opened.tasks_frame()
    first = frame.iloc[0]
    group = frame[(frame["c_label"] == first["c_label"]) & (frame["k"] == first["k"])]
    ids = sorted(group["task_id"])[: fev_export.ROW_GROUP]
    assert len(ids) > 3
    return list(opened.tasks(ids))


def _stamps(task) -> np.ndarray:
    """The task's times as the export wrote them a task at a time: UTC, naive, ms."""
    stamps = task.timestamps()
    naive = stamps.tz_convert(None) if stamps.tz is not None else stamps
    return np.asarray(naive, "datetime64[ms]")


def _row_by_row(tasks, schema: pa.Schema, units_of, describer) -> pa.Table:
    """The table built a task at a time, as ``fev._row`` and ``fev._table`` built it before
    2026-12-06 (written again here): a dict a row, each task's arrays concatenated, its times
    from ``Task.timestamps()``, each column made by ``pa.array`` from the rows' values."""
    rows = []
    for task in tasks:
        row = {
            "id": task.task_id,
            "timestamp": _stamps(task),
            "target": np.concatenate([task.history_target, task.future_target]).astype(np.float32),
        }
        for i, name in enumerate(fev_export.covariate_columns(task.k)):
            history, future = task.history_covariates[i], task.future_covariates[i]
            row[name] = np.concatenate([history, future]).astype(np.float32)
        units = units_of(task)
        row["target_name"] = task.target
        row["target_unit"] = task.units[task.target]
        row["covariate_names"] = fev_export.json.dumps(list(task.covariates))
        row["covariate_units"] = fev_export.json.dumps([units.get(c, "") for c in task.covariates])
        for name in ("simulator", "future", "c_label", "k", "event_length", "e_setting"):
            row[name] = getattr(task, name)
        row["interval_s"] = task.interval_s
        row["description"] = describer.json(task)
        rows.append(row)
    return pa.table(
        {field.name: pa.array([r[field.name] for r in rows], field.type) for field in schema},
        schema=schema,
    )


def test_the_table_equals_the_one_built_a_task_at_a_time(opened, tasks):
    units = covariate_units(opened.attrs)

    def units_of(task):
        return task_units(task, units)

    describer = Describer(opened)
    zone = tasks[0].timestamps().tz
    schema = fev_export._schema(tasks[0].k, None if zone is None else str(zone))
    built = fev_export._table(tasks, schema, units_of, describer)
    expected = _row_by_row(tasks, schema, units_of, describer)
    assert built.schema == expected.schema
    for name in schema.names:  # column by column, so a failure names the column
        assert built.column(name).equals(expected.column(name)), name
    assert built.num_rows == len(tasks) and built.column("description").null_count == 0


@settings(max_examples=150, deadline=None, derandomize=True)
@given(
    windows=st.lists(
        st.tuples(
            st.sampled_from([*BASELINE_STARTS, *BEFORE_1970]),
            st.integers(0, 10**6),  # the window's start step
            st.sampled_from([1, 60, 300, 3600]),
            st.integers(1, 40),  # C
            st.integers(1, 12),  # H
        ),
        min_size=1,
        max_size=4,
    )
)
def test_the_times_are_the_tasks_own_whatever_the_start_zone_and_step(tasks, windows):
    # starts with and without offsets, with nanoseconds, before 1970; several tasks a table
    made = [
        dataclasses.replace(
            tasks[0],
            baseline_start=start,
            start_step=step,
            interval_s=interval_s,
            history_target=np.zeros(c, np.float32),
            future_target=np.zeros(h, np.float32),
        )
        for start, step, interval_s, c, h in windows
    ]
    column = fev_export._timestamps(made, pa.timestamp("ms"))
    assert column.value_lengths().to_pylist() == [len(_stamps(t)) for t in made]
    got = np.asarray(column.flatten().cast(pa.int64()))
    assert np.array_equal(got, np.concatenate([_stamps(t).view(np.int64) for t in made]))


def test_a_start_pandas_cannot_make_is_a_fev_export_error(tasks):
    beyond = dataclasses.replace(
        tasks[0], baseline_start="2024-02-29T00:00:00.000000001", start_step=10**9
    )
    with pytest.raises(fev_export.FevExportError, match="not a time fev can hold"):
        fev_export._timestamps([tasks[0], beyond], pa.timestamp("ms"))


@pytest.mark.parametrize("field", ["horizon", "interval_s"])
def test_a_task_of_another_horizon_or_interval_than_its_files_first_is_refused(
    opened, tasks, field
):
    first = tasks[0]
    group = fev_export._Group(
        first.simulator,
        first.c_label,
        first.k,
        tuple(t.task_id for t in tasks),
        first.prediction_length,
        first.interval_s,
        fev_export._schema(first.k, None),
    )
    ids = group.ids[:3]
    assert fev_export._rows(opened, group, ids, lambda task: {}).num_rows == 3
    other = dataclasses.replace(group, **{field: getattr(group, field) + 1})
    with pytest.raises(fev_export.FevExportError, match="fev needs one of each per file"):
        fev_export._rows(opened, other, ids, lambda task: {})
