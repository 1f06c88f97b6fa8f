"""The task columns: one task as one row, defined once for every writer of task rows.

``COLUMNS`` names each per-task column, says how it is read from a ``Task`` and what kind of
value it holds. The writers pick from it: the Parquet task table (``schema``, ``table``: the
columns marked ``parquet``, in ``COLUMNS`` order; the ``parquet`` export and the stream's
Parquet shards), the stream's HDF5 shards (``stream.h5shard``) and the metadata columns of the
fev export (``export.fev``, under fev's own names). A column added here reaches the Parquet
table without another edit; the other writers name the columns they write.

The kinds of column (``Column.kind``), and how a row holds each:

- ``TEXT``: a ``str``; Arrow ``string``.
- ``INT``: an ``int``; Arrow ``int32`` or ``int64`` (``Column.bits``); HDF5 shards: int64.
- ``TEXT_LIST``: a list of ``str`` (the K covariate names...); Arrow ``list<string>``; as one
  text (``as_text``: a JSON list) where a writer holds only scalars (shards, fev).
- ``SERIES``: a float32 array of shape (n,) (C history or H future steps); Arrow
  ``list<float32>``.
- ``MATRIX``: a float32 array of shape (K, n), a row per covariate; Arrow
  ``list<list<float32>>``.
- ``JSON``: a JSON text (the recipe, the description); Arrow ``string``.

A column whose ``read`` is ``None`` is not in the ``Task``: the writer gives its values (the
description of ``corpus.describe``, the covariates' units of the registry) or leaves it null.
pyarrow is imported inside the functions that need it: importing this module loads only numpy.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pyarrow as pa

    from whatif_bench.corpus.task import Task

# the kinds of column (module doc)
TEXT = "text"
INT = "int"
TEXT_LIST = "text list"
SERIES = "float32 series"
MATRIX = "float32 matrix"
JSON = "json"
KINDS = (TEXT, INT, TEXT_LIST, SERIES, MATRIX, JSON)
TEXT_KINDS = (TEXT, TEXT_LIST, JSON)  # held as one text by writers of scalars (``as_text``)
ARRAY_KINDS = (SERIES, MATRIX)

# the Parquet files of task tables: the ``parquet`` export and the stream's Parquet shards
COMPRESSION = "zstd"
COMPRESSION_LEVEL = 3


@dataclass(frozen=True)
class Column:
    """One per-task column: its ``name``, its ``kind`` (one of ``KINDS``) and how its value is
    read from a ``Task`` (``read``; ``None``: given by the writer, see the module doc).

    ``bits`` is the width of an ``INT`` column in Arrow (32 or 64); ``parquet`` says whether
    the Parquet task table holds the column; ``doc`` is what the value is."""

    name: str
    kind: str
    read: Callable[[Task], Any] | None
    doc: str = ""
    bits: int = 64
    parquet: bool = True

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"column {self.name!r}: unknown kind {self.kind!r}")
        if self.bits not in (32, 64):
            raise ValueError(f"column {self.name!r}: bits must be 32 or 64, got {self.bits}")


def _pair_id(task: Task) -> str:
    return task.task_id.rpartition("/")[0]


def _start(task: Task) -> str:
    from whatif_bench.corpus.task import start_text  # Task.start.isoformat(), but faster

    return start_text(task.baseline_start, task.start_step * task.interval_s)


def _target_unit(task: Task) -> str:
    return task.units[task.target]


def _covariates(task: Task) -> list[str]:
    return list(task.covariates)


def _recipe(task: Task) -> str:
    return json.dumps(task.recipe, sort_keys=True, allow_nan=False)


# every per-task column, in the Parquet table's order (the columns it does not hold among them)
COLUMNS: tuple[Column, ...] = (
    Column("task_id", TEXT, attrgetter("task_id"), "<simulator>/<target>/K<k>-<C>-L<l>-<E>/<f>"),
    Column("pair_id", TEXT, _pair_id, "the task id without its future"),
    Column("future", TEXT, attrgetter("future"), "replay, novel or restraint"),
    Column("simulator", TEXT, attrgetter("simulator"), "the simulator of the baseline"),
    Column("target", TEXT, attrgetter("target"), "the target's name"),
    Column("k", INT, attrgetter("k"), "K, the number of covariates", bits=32),
    Column("c_label", TEXT, attrgetter("c_label"), "the context setting"),
    Column("event_length", INT, attrgetter("event_length"), "ell, the event's length", bits=32),
    Column("e_setting", TEXT, attrgetter("e_setting"), "the event-strength setting"),
    Column("world", TEXT, attrgetter("world"), "the baselines of the window", parquet=False),
    Column("context_length", INT, attrgetter("context_length"), "C, history steps", bits=32),
    Column("prediction_length", INT, attrgetter("prediction_length"), "H, future steps", bits=32),
    Column("interval_s", INT, attrgetter("interval_s"), "the step in seconds", bits=64),
    Column("start", TEXT, _start, "the first history step, ISO 8601 (start_text)"),
    Column(
        "baseline_start",
        TEXT,
        attrgetter("baseline_start"),
        "the baseline's first step, ISO 8601",
        parquet=False,
    ),
    Column(
        "start_step",
        INT,
        attrgetter("start_step"),
        "the window's start in the baseline",
        parquet=False,
    ),
    Column("target_unit", TEXT, _target_unit, "the target's unit"),
    Column("covariates", TEXT_LIST, _covariates, "the K covariate names, (K,)"),
    Column(
        "covariate_units",
        TEXT_LIST,
        None,
        "the K covariates' units, (K,), from the registry ('' where unknown)",
        parquet=False,
    ),
    Column("history_target", SERIES, attrgetter("history_target"), "the target's history, (C,)"),
    Column(
        "history_covariates",
        MATRIX,
        attrgetter("history_covariates"),
        "the covariates' histories, (K, C)",
    ),
    Column(
        "future_covariates",
        MATRIX,
        attrgetter("future_covariates"),
        "the what-if scenario, (K, H)",
    ),
    Column("future_target", SERIES, attrgetter("future_target"), "the truth, (H,)"),
    Column(
        "counterfactual_history",
        SERIES,
        attrgetter("counterfactual_history"),
        "the target's history without any event, (C,)",
        parquet=False,
    ),
    Column(
        "counterfactual_future",
        SERIES,
        attrgetter("counterfactual_future"),
        "the target's future without any event, (H,)",
    ),
    Column("recipe", JSON, _recipe, "the recipe (sorted keys)"),
    Column("description", JSON, None, "the task description of corpus.describe, or null"),
)


def column(name: str) -> Column:
    """The column ``name`` of ``COLUMNS`` (``KeyError`` naming it if there is none)."""
    for found in COLUMNS:
        if found.name == name:
            return found
    raise KeyError(f"no task column {name!r}")


def parquet_columns() -> tuple[Column, ...]:
    """The columns of the Parquet task table, in order."""
    return tuple(c for c in COLUMNS if c.parquet)


def column_values(
    col: Column, tasks: Sequence[Task], given: Sequence[Any] | None = None
) -> list[Any]:
    """The values of ``col`` for each task, (n,): read from the tasks, or ``given`` (one value
    a task) for a column the ``Task`` does not hold (all ``None`` without them)."""
    if col.read is None:
        if given is None:
            return [None] * len(tasks)
        if len(given) != len(tasks):
            raise ValueError(f"column {col.name!r}: {len(given)} values for {len(tasks)} tasks")
        return list(given)
    read = col.read
    return [read(t) for t in tasks]


def as_text(col: Column, value: Any) -> str | None:
    """A ``TEXT_KINDS`` value as one text: a ``TEXT_LIST`` as a JSON list, the others as they
    are (``None`` stays ``None``)."""
    if col.kind not in TEXT_KINDS:
        raise TypeError(f"column {col.name!r} ({col.kind}) is not text")
    if value is None or col.kind != TEXT_LIST:
        return value
    return json.dumps(list(value))


def arrow_type(col: Column, lists_as_text: bool = False) -> pa.DataType:
    """The Arrow type of ``col``; ``lists_as_text``: a ``TEXT_LIST`` as a string (``as_text``)."""
    import pyarrow as pa

    if col.kind == INT:
        return pa.int32() if col.bits == 32 else pa.int64()
    if col.kind == TEXT_LIST and not lists_as_text:
        return pa.list_(pa.string())
    if col.kind == SERIES:
        return pa.list_(pa.float32())
    if col.kind == MATRIX:
        return pa.list_(pa.list_(pa.float32()))
    return pa.string()


def _list(arrays: list[np.ndarray]) -> pa.ListArray:
    """A list<float32> column from 1-D arrays."""
    import pyarrow as pa

    lengths = np.fromiter((a.size for a in arrays), dtype=np.int64, count=len(arrays))
    offsets = np.zeros(len(arrays) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    values = np.concatenate(arrays).astype(np.float32, copy=False) if arrays else np.empty(0)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values, type=pa.float32()))


def _matrix(arrays: list[np.ndarray]) -> pa.ListArray:
    """A list<list<float32>> column from 2-D arrays (rows of each matrix as inner lists)."""
    import pyarrow as pa

    rows = [row for matrix in arrays for row in matrix]
    inner = _list(rows)
    counts = np.fromiter((m.shape[0] for m in arrays), dtype=np.int64, count=len(arrays))
    offsets = np.zeros(len(arrays) + 1, dtype=np.int32)
    np.cumsum(counts, out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), inner)


def arrow_array(col: Column, data: list[Any]) -> pa.Array:
    """The Arrow array of ``col`` from its values (``column_values``): float32 lists built from the
    arrays' buffers, the rest through ``pyarrow.array`` with ``arrow_type(col)``."""
    import pyarrow as pa

    if col.kind == SERIES:
        return _list(data)
    if col.kind == MATRIX:
        return _matrix(data)
    return pa.array(data, type=arrow_type(col))


def schema() -> pa.Schema:
    """The Arrow schema of the Parquet task table: ``parquet_columns()``, in order."""
    import pyarrow as pa

    return pa.schema([pa.field(c.name, arrow_type(c)) for c in parquet_columns()])


def table(tasks: Sequence[Task], descriptions: Sequence[str | None] | None = None) -> pa.Table:
    """The Parquet task table of a batch of ``Task`` objects, one row a task (``schema()``);
    ``descriptions`` (one JSON text per task, ``corpus.describe``) fill the ``description``
    column (null without them)."""
    import pyarrow as pa

    given: Mapping[str, Sequence[Any] | None] = {"description": descriptions}
    cols = parquet_columns()
    arrays = [arrow_array(c, column_values(c, tasks, given.get(c.name))) for c in cols]
    return pa.Table.from_arrays(arrays, schema=schema())
