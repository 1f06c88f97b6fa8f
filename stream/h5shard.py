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
from typing import Any

import numpy as np

from whatif_bench.errors import WhatIfError
from whatif_bench.generator.corpus import Task
from whatif_bench.generator.writer import CHUNK

FORMAT = "whatif-stream-shard"
FORMAT_VERSION = 2  # 2: tasks of the paper's method (corpus format 2), future_event_length
# (column, kind): one row per task in /tasks
TEXT_COLUMNS = (
    "task_id",
    "future",
    "simulator",
    "target",
    "c_label",
    "e_setting",
    "target_unit",
    "baseline_start",
    "world",
    "covariates",  # JSON list of the K names
    "recipe",  # JSON, as the Parquet shards' column
)
INT_COLUMNS = (
    "k",
    "event_length",
    "interval_s",
    "start_step",
    "context_length",
    "prediction_length",
)
# float32 arrays, flattened row-major: (C,), (K, C), (K, H), (H,), (C,), (H,)
ARRAYS = (
    "history_target",
    "history_covariates",
    "future_covariates",
    "future_target",
    "counterfactual_history",
    "counterfactual_future",
)


class ShardError(WhatIfError):
    """A file is not a readable stream shard."""


def shard_columns(tasks: list[Task]) -> dict[str, np.ndarray]:
    """The columns of a shard: ``TEXT_COLUMNS`` (object arrays of str), ``INT_COLUMNS`` and the
    ``<array>_offset`` columns (int64, (n,)), and the concatenated ``ARRAYS`` (float32)."""
    columns: dict[str, Any] = {
        "task_id": [t.task_id for t in tasks],
        "future": [t.future for t in tasks],
        "simulator": [t.simulator for t in tasks],
        "target": [t.target for t in tasks],
        "c_label": [t.c_label for t in tasks],
        "e_setting": [t.e_setting for t in tasks],
        "target_unit": [t.units[t.target] for t in tasks],
        "baseline_start": [t.baseline_start for t in tasks],
        "world": [t.world for t in tasks],
        "covariates": [json.dumps(list(t.covariates)) for t in tasks],
        "recipe": [json.dumps(t.recipe, sort_keys=True, allow_nan=False) for t in tasks],
    }
    out = {name: np.array(values, dtype=object) for name, values in columns.items()}
    for name in INT_COLUMNS:
        out[name] = np.array([getattr(t, name) for t in tasks], dtype=np.int64)
    for name in ARRAYS:
        parts = [
            np.ascontiguousarray(getattr(t, name), dtype=np.float32).reshape(-1) for t in tasks
        ]
        sizes = np.fromiter((p.size for p in parts), dtype=np.int64, count=len(parts))
        out[f"{name}_offset"] = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        out[name] = np.concatenate(parts) if parts else np.empty(0, dtype=np.float32)
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
    """The tasks of one shard file, in slot order, as the stream made them."""
    import h5py

    try:
        h5 = h5py.File(path, "r")
    except OSError as exc:
        raise ShardError(f"{path}: not a readable HDF5 file ({exc})") from None
    with h5:
        if h5.attrs.get("format") != FORMAT or h5.attrs.get("format_version") != FORMAT_VERSION:
            raise ShardError(f"{path}: not a {FORMAT} version {FORMAT_VERSION} file")
        rows = h5["tasks"]
        text = {name: rows[name].asstr()[()] for name in TEXT_COLUMNS}
        ints = {name: rows[name][()] for name in INT_COLUMNS}
        offsets = {name: rows[f"{name}_offset"][()] for name in ARRAYS}
        data = {name: h5["data"][name][()] for name in ARRAYS}
    for i in range(len(text["task_id"])):
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
            first = int(offsets[name][i])
            arrays[name] = data[name][first : first + int(np.prod(shape))].reshape(shape)
        target = str(text["target"][i])
        yield Task(
            task_id=str(text["task_id"][i]),
            future=str(text["future"][i]),
            simulator=str(text["simulator"][i]),
            target=target,
            k=k,
            c_label=str(text["c_label"][i]),
            event_length=int(ints["event_length"][i]),
            e_setting=str(text["e_setting"][i]),
            covariates=tuple(json.loads(text["covariates"][i])),
            units={target: str(text["target_unit"][i])},
            interval_s=int(ints["interval_s"][i]),
            baseline_start=str(text["baseline_start"][i]),
            start_step=int(ints["start_step"][i]),
            recipe=json.loads(text["recipe"][i]),
            world=str(text["world"][i]),
            **arrays,
        )
