"""HDF5 shards of the training stream (``whatif stream --format hdf5``): write and read back.

One file per shard, ``whatif-stream-shard`` version 1 (docs/STREAM_FORMAT.md): one row per task
in ``/tasks/<column>`` and its six float32 arrays concatenated over the shard's tasks in
``/data/<array>``, with the row's first value in ``/tasks/<array>_offset``, as the corpus stores
its arrays (chunks of 16,384 values, gzip level 1 with byte shuffle: readable by any HDF5
library, no filter plug-in). ``read_shard`` rebuilds the ``Task`` objects the stream made, bit
for bit. Files are written without timestamps in a fixed order, so the same tasks give the same
bytes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import numpy as np

from whatif_bench.corpus import Task
from whatif_bench.corpus.columns import ARRAY_KINDS, INT, TEXT_KINDS, as_text, column, column_values
from whatif_bench.corpus.fileformat import CHUNK
from whatif_bench.errors import WhatIfError

FORMAT = "whatif-stream-shard"
FORMAT_VERSION = 2  # 2: tasks of the paper's method (corpus format 2), future_event_length
# the task columns (``corpus.columns``) a shard holds; their kinds place them: text (JSON for
# the covariate names and the recipe, as the Parquet shards' ``recipe``) and int64 columns, one
# row per task in /tasks, then the float32 arrays in /data, flattened row-major: (C,), (K, C),
# (K, H), (H,), (C,), (H,)
SHARD_COLUMNS = (
    "task_id",
    "future",
    "simulator",
    "target",
    "c_label",
    "e_setting",
    "target_unit",
    "baseline_start",
    "world",
    "covariates",
    "recipe",
    "k",
    "event_length",
    "interval_s",
    "start_step",
    "context_length",
    "prediction_length",
    "history_target",
    "history_covariates",
    "future_covariates",
    "future_target",
    "counterfactual_history",
    "counterfactual_future",
)
TEXT_COLUMNS = tuple(n for n in SHARD_COLUMNS if column(n).kind in TEXT_KINDS)
INT_COLUMNS = tuple(n for n in SHARD_COLUMNS if column(n).kind == INT)
ARRAYS = tuple(n for n in SHARD_COLUMNS if column(n).kind in ARRAY_KINDS)


class ShardError(WhatIfError):
    """A file is not a readable stream shard."""


def shard_columns(tasks: list[Task]) -> dict[str, np.ndarray]:
    """The columns of a shard: ``TEXT_COLUMNS`` (object arrays of str), ``INT_COLUMNS`` and the
    ``<array>_offset`` columns (int64, (n,)), and the concatenated ``ARRAYS`` (float32)."""
    out: dict[str, np.ndarray] = {}
    for name in TEXT_COLUMNS:
        col = column(name)
        texts = [as_text(col, v) for v in column_values(col, tasks)]
        out[name] = np.array(texts, dtype=object)
    for name in INT_COLUMNS:
        out[name] = np.array(column_values(column(name), tasks), dtype=np.int64)
    for name in ARRAYS:
        parts = [
            np.ascontiguousarray(v, dtype=np.float32).reshape(-1)
            for v in column_values(column(name), tasks)
        ]
        sizes = np.fromiter((p.size for p in parts), dtype=np.int64, count=len(parts))
        out[f"{name}_offset"] = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        out[name] = np.concatenate(parts) if parts else np.empty(0, dtype=np.float32)
    return out


def join_columns(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """The ``shard_columns`` of the tasks of ``parts`` (each a ``shard_columns``) in order: the
    rows concatenated, each array's offsets moved past the values of the parts before it."""
    out: dict[str, np.ndarray] = {}
    for name in (*TEXT_COLUMNS, *INT_COLUMNS, *ARRAYS):
        out[name] = np.concatenate([part[name] for part in parts])
    for name in ARRAYS:
        starts = np.cumsum([0] + [part[name].size for part in parts[:-1]])
        out[f"{name}_offset"] = np.concatenate(
            [part[f"{name}_offset"] + start for part, start in zip(parts, starts, strict=True)]
        ).astype(np.int64)
    return out


def write_shard(path: str | os.PathLike, columns: dict[str, np.ndarray], attrs: dict) -> None:
    """Write one shard file from ``shard_columns``; ``attrs`` (JSON-safe scalars) are added to
    the file's attributes after ``format`` and ``format_version``."""
    import h5py

    from whatif_bench.h5write import guarded_h5

    with guarded_h5(path, track_order=True) as h5:
        h5.attrs["format"] = FORMAT
        h5.attrs["format_version"] = FORMAT_VERSION
        for name, value in attrs.items():
            h5.attrs[name] = value
        rows = h5.create_group("tasks", track_order=True)
        for name in TEXT_COLUMNS:
            rows.create_dataset(
                name,
                data=columns[name].astype(h5py.string_dtype("utf-8")),
                track_times=False,
            )
        for name in (*INT_COLUMNS, *(f"{a}_offset" for a in ARRAYS)):
            rows.create_dataset(name, data=columns[name], track_times=False)
        data = h5.create_group("data", track_order=True)
        for name in ARRAYS:
            values = columns[name]
            data.create_dataset(
                name,
                data=values,
                dtype=np.float32,
                chunks=(min(CHUNK, max(values.size, 1)),),
                compression="gzip",
                compression_opts=1,
                shuffle=True,
                track_times=False,
            )


def read_shard(path: str | os.PathLike) -> Iterator[Task]:
    """The tasks of one shard file, in slot order, as the stream made them.

    The whole file is read and checked on the first ``next``: a file that is not HDF5, is
    truncated or damaged (bytes that do not decompress), lacks a group, dataset or attribute,
    has a dataset of the wrong type or length, offsets outside its data, or a row whose JSON
    does not parse is one ``ShardError`` naming the file and what is wrong, never a raw
    ``OSError`` or ``KeyError``."""
    import h5py

    try:
        h5 = h5py.File(path, "r")
    except OSError as exc:
        raise ShardError(f"{path}: not a readable HDF5 file ({exc})") from None
    try:
        with h5:
            text, ints, offsets, data = _read_columns(path, h5)
    except ShardError:
        raise
    except (OSError, KeyError, ValueError, TypeError, RuntimeError) as exc:
        # h5py reports damage from wherever it notices it: links, headers, chunks
        raise ShardError(f"{path}: damaged shard ({type(exc).__name__}: {exc})") from None
    rows = [_row(path, i, text, ints, offsets, data) for i in range(len(text["task_id"]))]
    yield from rows


def _read_columns(path, h5) -> tuple[dict, dict, dict, dict]:
    """Every column of an open shard, checked for presence, type and length."""
    import h5py

    def fail(where: str, message: str) -> ShardError:
        return ShardError(f"{path}: {where}: {message}")

    if h5.attrs.get("format") != FORMAT or h5.attrs.get("format_version") != FORMAT_VERSION:
        raise ShardError(f"{path}: not a {FORMAT} version {FORMAT_VERSION} file")
    attrs = {}
    for name in ("seed", "first_slot", "n_tasks"):
        if name not in h5.attrs:
            raise fail(f"attribute {name!r}", "is missing")
        value = h5.attrs[name]
        if isinstance(value, bool | np.bool_) or not isinstance(value, int | np.integer):
            raise fail(f"attribute {name!r}", f"expected an integer, got {value!r}")
        if value < 0:
            raise fail(f"attribute {name!r}", f"must be >= 0, got {value}")
        attrs[name] = int(value)

    def group(name: str):
        if name not in h5:
            raise fail(f"group {name!r}", "is missing")
        value = h5[name]
        if not isinstance(value, h5py.Group):
            raise fail(f"group {name!r}", "is not a group")
        return value

    rows, arrays = group("tasks"), group("data")
    n = attrs["n_tasks"]

    def dataset(parent, prefix: str, name: str, kinds: str, length: int | None):
        where = f"dataset '{prefix}/{name}'"
        if name not in parent:
            raise fail(where, "is missing")
        value = parent[name]
        if not isinstance(value, h5py.Dataset) or value.ndim != 1:
            raise fail(where, "expected a one-dimensional dataset")
        is_text = h5py.check_string_dtype(value.dtype) is not None
        if (
            (kinds == "text") != is_text
            or (kinds == "iu" and value.dtype.kind not in kinds)
            or (kinds == "f" and value.dtype != np.float32)
        ):
            expected = {"text": "text", "iu": "integers", "f": "float32"}[kinds]
            raise fail(where, f"expected {expected}, got dtype {value.dtype}")
        if length is not None and value.shape[0] != length:
            raise fail(where, f"has {value.shape[0]} rows, attribute 'n_tasks' says {length}")
        try:
            return value.asstr()[()] if is_text else value[()]
        except (OSError, ValueError, RuntimeError) as exc:
            raise fail(where, f"cannot be read, the file is damaged ({exc})") from None

    text = {name: dataset(rows, "tasks", name, "text", n) for name in TEXT_COLUMNS}
    ints = {name: dataset(rows, "tasks", name, "iu", n) for name in INT_COLUMNS}
    offsets = {name: dataset(rows, "tasks", f"{name}_offset", "iu", n) for name in ARRAYS}
    data = {name: dataset(arrays, "data", name, "f", None) for name in ARRAYS}
    for name, values in ints.items():
        if values.size and values.min() < 0:
            raise fail(f"dataset 'tasks/{name}'", f"holds a negative value {values.min()}")
    return text, ints, offsets, data


def _row(path, i: int, text: dict, ints: dict, offsets: dict, data: dict) -> Task:
    """Row ``i`` of the checked columns as a ``Task``."""

    def fail(where: str, message: str) -> ShardError:
        return ShardError(f"{path}: row {i}, {where}: {message}")

    k, context = int(ints["k"][i]), int(ints["context_length"][i])
    horizon = int(ints["prediction_length"][i])
    sizes = {
        "history_target": (context,),
        "history_covariates": (k, context),
        "future_covariates": (k, horizon),
        "future_target": (horizon,),
        "counterfactual_history": (context,),
        "counterfactual_future": (horizon,),
    }
    arrays = {}
    for name, shape in sizes.items():
        first, size = int(offsets[name][i]), int(np.prod(shape))
        if not 0 <= first <= data[name].size - size:
            raise fail(
                f"dataset 'tasks/{name}_offset'",
                f"values {first}..{first + size} lie outside 'data/{name}' "
                f"({data[name].size} values)",
            )
        arrays[name] = data[name][first : first + size].reshape(shape)
    parsed = {}
    for name in ("covariates", "recipe"):
        try:
            parsed[name] = json.loads(text[name][i])
        except ValueError:
            raise fail(f"dataset 'tasks/{name}'", "is not JSON") from None
    covariates = parsed["covariates"]
    if not isinstance(covariates, list) or len(covariates) != k:
        raise fail("dataset 'tasks/covariates'", f"expected a JSON list of {k} names")
    if not isinstance(parsed["recipe"], dict):
        raise fail("dataset 'tasks/recipe'", "expected a JSON object")
    target = str(text["target"][i])
    return Task(
        task_id=str(text["task_id"][i]),
        future=str(text["future"][i]),
        simulator=str(text["simulator"][i]),
        target=target,
        k=k,
        c_label=str(text["c_label"][i]),
        event_length=int(ints["event_length"][i]),
        e_setting=str(text["e_setting"][i]),
        covariates=tuple(str(c) for c in covariates),
        units={target: str(text["target_unit"][i])},
        interval_s=int(ints["interval_s"][i]),
        baseline_start=str(text["baseline_start"][i]),
        start_step=int(ints["start_step"][i]),
        recipe=parsed["recipe"],
        world=str(text["world"][i]),
        **arrays,
    )
