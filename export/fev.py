"""Export format ``fev``: wide Parquet files and fev Task definitions (fev 0.10).

Layout of the export folder::

    data/<simulator>/<C>-K<k>.parquet    one file per (simulator, context setting, K): one
                                          frequency, one horizon, K covariate columns
    tasks.yaml                            one fev Task per file (WQL/WAPE pooled over its series)
    per_task/<simulator>/<C>-K<k>/<n>.parquet, tasks_per_task.yaml
                                          only with ``per_task=True``: one file and one fev Task
                                          per WhatIf task, so fev scores each task on its own

Each row is one task (one series) in fev's wide format: ``id`` (the task id), ``timestamp``
(history then future, ``list<timestamp[ms]>``), ``target`` and ``covariate_1..K`` (float32
lists, history then future). The real names and units, the axes and the task's description
(``corpus.describe``) sit in scalar columns (``METADATA``: fev's names for the task columns of
``corpus.columns``; lists as JSON text): fev treats every list column as a dynamic one. Paths
in the YAML files are relative to the export folder; ``load_benchmark`` resolves them. See
docs/EXPORT_FEV.md.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from whatif_bench.corpus import QUANTILE_LEVELS, columns
from whatif_bench.errors import WhatIfError
from whatif_bench.export.background import OrderedWriter

ROW_GROUP = 64  # tasks per Parquet row group: bounds memory on long contexts
# fev's metadata column -> the task column (``corpus.columns``) it holds, in file order; lists
# are JSON text (``columns.as_text``): fev treats every list column as a dynamic one
METADATA = {
    "target_name": "target",
    "target_unit": "target_unit",
    "covariate_names": "covariates",
    "covariate_units": "covariate_units",
    "simulator": "simulator",
    "future": "future",
    "c_label": "c_label",
    "k": "k",
    "event_length": "event_length",
    "e_setting": "e_setting",
    "interval_s": "interval_s",
    "description": "description",
}
METADATA_COLUMNS = tuple(METADATA)
# ParquetWriter options of every file: zstd-3 and no statistics (nothing reads them); only the
# text and integer metadata dictionary encoded (each float list and description nearly unique:
# a dictionary costs time and bytes), the times delta encoded (a step apart, a few bits each)
WRITE_OPTIONS: dict[str, Any] = {
    "compression": "zstd",
    "compression_level": 3,
    "write_statistics": False,
    "use_dictionary": [name for name in METADATA if name != "description"],
    "column_encoding": {"timestamp.list.element": "DELTA_BINARY_PACKED"},
}
TASK_FILE = "tasks.yaml"
PER_TASK_FILE = "tasks_per_task.yaml"


class FevExportError(WhatIfError):
    """The selected tasks cannot be written in fev's format (mixed horizons in a group...)."""


def covariate_columns(k: int) -> list[str]:
    """The generic names of the K covariate columns."""
    return [f"covariate_{i}" for i in range(1, k + 1)]


def _schema(k: int, tz: str | None) -> pa.Schema:
    values = pa.list_(pa.float32())
    fields = [
        pa.field("id", pa.string()),
        pa.field("timestamp", pa.list_(pa.timestamp("ms", tz=tz))),
        pa.field("target", values),
        *(pa.field(name, values) for name in covariate_columns(k)),
        *(
            pa.field(name, columns.arrow_type(columns.column(source), lists_as_text=True))
            for name, source in METADATA.items()
        ),
    ]
    return pa.schema(fields)


def _metadata(
    tasks: list, units_of: Callable[[Any], dict[str, str]], describer=None
) -> dict[str, list[Any]]:
    """The ``METADATA`` columns of ``tasks``, by fev's names: a value per task (lists as JSON
    text); ``units_of(task)`` maps its covariates to their units."""
    given: dict[str, list[Any]] = {
        "covariate_units": [_units(t.covariates, units_of(t)) for t in tasks],
        "description": [describer.json(t) if describer is not None else None for t in tasks],
    }
    values: dict[str, list[Any]] = {}
    for name, source in METADATA.items():
        col = columns.column(source)
        raw = given[source] if col.read is None else [col.read(t) for t in tasks]
        text = col.kind in columns.TEXT_KINDS
        values[name] = [columns.as_text(col, value) for value in raw] if text else raw
    return values


def _units(covariates: tuple[str, ...], units: dict[str, str]) -> list[str]:
    """The unit of each covariate, ``""`` where unknown."""
    return [units.get(name, "") for name in covariates]


def _offsets(lengths: list[int]) -> pa.Array:
    """The (n + 1,) int32 offsets of a list column whose n rows hold ``lengths`` values."""
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] >= 2**31:  # pyarrow's list<...> counts its values in int32
        raise FevExportError(f"a row group of {offsets[-1]:,} values; at most 2^31 - 1 fit")
    return pa.array(offsets.astype(np.int32))


def _series(histories: list[np.ndarray], futures: list[np.ndarray]) -> pa.ListArray:
    """A list<float32> column, a row per task: its history (C,) then its future (H,)."""
    lengths = [h.size + f.size for h, f in zip(histories, futures, strict=True)]
    values = np.concatenate(
        [part for pair in zip(histories, futures, strict=True) for part in pair]
    )
    return pa.ListArray.from_arrays(
        _offsets(lengths), pa.array(values.astype(np.float32, copy=False), type=pa.float32())
    )


def _timestamps(tasks: list, value_type: pa.DataType) -> pa.ListArray:
    """The ``timestamp`` column: a row per task, the UTC instant of each of its C + H steps
    (``task.timestamps()`` made naive in UTC) in milliseconds since 1970, as numpy casts them
    (floored). The steps are whole seconds apart, so a step is the first one's milliseconds
    plus whole steps. ``value_type`` is the column's ``timestamp[ms]``, with the baseline's
    zone. A start from ISO text has a year of at most 9999, so the milliseconds fit in int64.
    """
    lengths = [t.context_length + t.prediction_length for t in tasks]
    steps = [t.interval_s * 1000 for t in tasks]  # ms
    try:  # UTC (a naive start: as if it were UTC), in the start's own unit, floored to ms
        starts = [
            int(t.start.to_datetime64().astype("datetime64[ms]").view(np.int64)) for t in tasks
        ]
    except (OverflowError, ValueError) as error:  # a start pandas cannot make
        raise FevExportError(f"a task's start is not a time fev can hold: {error}") from None
    offsets = _offsets(lengths)
    firsts = np.asarray(offsets)[:-1].astype(np.int64)
    within = np.arange(sum(lengths), dtype=np.int64) - np.repeat(firsts, lengths)
    ms = np.repeat(np.asarray(starts, np.int64), lengths) + within * np.repeat(steps, lengths)
    return pa.ListArray.from_arrays(offsets, pa.array(ms, type=value_type))


def _table(
    tasks: list, schema: pa.Schema, units_of: Callable[[Any], dict[str, str]], describer=None
) -> pa.Table:
    """One row per task in fev's wide format (``schema``: ``_schema``): ``id``, ``timestamp``,
    ``target`` and the K covariates (history then future), then ``METADATA``; the float and
    time lists are built from whole arrays (one concatenation per column), not row by row.
    ``units_of(task)`` maps a task's covariates to their units."""
    k = sum(1 for name in schema.names if name.startswith("covariate_") and name[10:].isdigit())
    built: dict[str, pa.Array] = {
        "id": pa.array([t.task_id for t in tasks], type=pa.string()),
        "timestamp": _timestamps(tasks, schema.field("timestamp").type.value_type),
        "target": _series([t.history_target for t in tasks], [t.future_target for t in tasks]),
    }
    for i, name in enumerate(covariate_columns(k)):
        built[name] = _series(
            [t.history_covariates[i] for t in tasks], [t.future_covariates[i] for t in tasks]
        )
    for name, values in _metadata(tasks, units_of, describer).items():
        built[name] = pa.array(values, type=schema.field(name).type)
    return pa.table(built, schema=schema)


@dataclass(frozen=True)
class _Group:
    """One (simulator, C, K) file of the export: its tasks (id order), fev's one horizon and
    interval of them, and its schema (the times' zone is the baseline's)."""

    simulator: str
    c_label: str
    k: int
    ids: tuple[str, ...]
    horizon: int
    interval_s: int
    schema: pa.Schema

    @property
    def file(self) -> str:
        return f"data/{self.simulator}/{self.c_label}-K{self.k}.parquet"

    @property
    def label(self) -> str:
        return f"{self.simulator} {self.c_label} K={self.k}"

    @property
    def task_name(self) -> str:
        return f"whatif/{self.simulator}/{self.c_label}/K{self.k}"

    @property
    def per_task_folder(self) -> str:
        return f"per_task/{self.simulator}/{self.c_label}-K{self.k}"

    def record(self, per_task: bool) -> dict[str, Any]:
        """The group as the manifest lists it."""
        record = {
            "file": self.file,
            "task_name": self.task_name,
            "simulator": self.simulator,
            "c_label": self.c_label,
            "k": self.k,
            "horizon": self.horizon,
            "freq": _freq(self.interval_s),
            "tasks": len(self.ids),
        }
        if per_task:
            record["per_task_folder"] = self.per_task_folder
        return record


def _groups(corpus, tasks: pd.DataFrame) -> list[_Group]:
    """The files of the export in order, each with its first task's horizon, interval and
    zone (a task read here per file; the rows are built by ``_rows``, which checks the rest)."""
    order: dict[tuple[str, str, int], list[str]] = {}
    for row in tasks[["task_id", "simulator", "c_label", "k"]].itertuples(index=False):
        order.setdefault((row.simulator, row.c_label, int(row.k)), []).append(row.task_id)
    groups = []
    for (simulator, c_label, k), ids in order.items():
        ids = sorted(ids)  # fev sorts series by id; the file follows the same order
        first = next(iter(corpus.tasks(ids[:1])))
        zone = first.start.tz
        schema = _schema(k, None if zone is None else str(zone))
        horizon, interval = first.prediction_length, first.interval_s
        groups.append(_Group(simulator, c_label, k, tuple(ids), horizon, interval, schema))
    return groups


def _rows(
    corpus,
    group: _Group,
    ids: Sequence[str],
    units_of: Callable[[Any], dict[str, str]],
    describer=None,
) -> pa.Table:
    """The rows (``_table``) of the tasks ``ids`` of ``group``, read from ``corpus``; a task of
    another horizon or interval than the group's first is a ``FevExportError``."""
    loaded = list(corpus.tasks(ids))
    horizons = {group.horizon} | {t.prediction_length for t in loaded}
    intervals = {group.interval_s} | {t.interval_s for t in loaded}
    if len(horizons) != 1 or len(intervals) != 1:
        raise FevExportError(
            f"{group.label}: tasks with horizons {sorted(horizons)} and intervals "
            f"{sorted(intervals)} s; fev needs one of each per file"
        )
    return _table(loaded, group.schema, units_of, describer)


def _yaml_value(value: Any) -> str:
    """A YAML scalar or flow list; JSON text is valid YAML (and deterministic)."""
    return json.dumps(value)


def _write_yaml(path: Path, tasks: list[dict[str, Any]], comment: str) -> None:
    lines = [f"# {line}" for line in comment.splitlines()] + ["tasks:"]
    if not tasks:
        lines[-1] = "tasks: []"
    for task in tasks:
        for index, (key, value) in enumerate(task.items()):
            lines.append(f"{'- ' if index == 0 else '  '}{key}: {_yaml_value(value)}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _fev_task(dataset_path: str, horizon: int, k: int, name: str) -> dict[str, Any]:
    """The keyword arguments of one ``fev.Task`` (fev 0.10 field names)."""
    return {
        "dataset_path": dataset_path,
        "horizon": horizon,
        "num_windows": 1,
        "initial_cutoff": -horizon,
        "seasonality": 1,
        "eval_metric": "WQL",
        "extra_metrics": ["WAPE"],
        "quantile_levels": list(QUANTILE_LEVELS),
        "target": "target",
        "known_dynamic_columns": covariate_columns(k),
        "task_name": name,
    }


def _freq(interval_s: int) -> str:
    return pd.tseries.frequencies.to_offset(pd.Timedelta(seconds=interval_s)).freqstr


POOLED_NOTE = """WhatIf-Bench corpus export for fev 0.10: one fev Task per (simulator, C, K) file.
fev pools WQL and WAPE over a Task's series (sum of losses / sum of |y|), which is the
|y|-weighted mean of the per-task scores, not the plain mean `whatif evaluate` reports.
Paths are relative to this folder: load with whatif_bench.export.fev.load_benchmark(folder)."""
PER_TASK_NOTE = """WhatIf-Bench corpus export for fev 0.10: one fev Task per WhatIf task (task_name = task id).
fev's WQL and WAPE of each Task equal `whatif evaluate`'s per-task wql and wape.
Paths are relative to this folder: load with load_benchmark(folder, per_task=True)."""


def write(corpus, tasks: pd.DataFrame, folder, progress: bool = True, per_task: bool = False):
    """Write the selected tasks in fev's wide format plus fev Task YAML files into ``folder``.

    With ``per_task=True``, also one file and one fev Task per WhatIf task
    (``tasks_per_task.yaml``), whose fev scores equal ``whatif evaluate``'s per-task scores:
    each holds its task's row of the group's row group (a slice, not built again). Each row
    group is built here and written by a second thread (``OrderedWriter``)."""
    from tqdm.auto import tqdm

    from whatif_bench.corpus import covariate_units, export_describer, task_units

    folder = Path(folder)
    units = covariate_units(corpus.attrs)
    describer = export_describer(corpus)

    def units_of(task) -> dict[str, str]:
        return task_units(task, units)

    groups = _groups(corpus, tasks)
    total = len(tasks) * (2 if per_task else 1)
    bar = tqdm(total=total, desc="fev export", unit="task", disable=not progress)
    pooled, single = [], []
    opened: list[pq.ParquetWriter] = []  # the writers not closed yet, for closing after an error
    background = OrderedWriter()

    def open_writer(relative: str, schema: pa.Schema) -> pq.ParquetWriter:
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        opened[:] = [writer for writer in opened if writer.is_open]
        opened.append(pq.ParquetWriter(folder / relative, schema, **WRITE_OPTIONS))
        return opened[-1]

    try:
        for group in groups:
            writer = open_writer(group.file, group.schema)
            pooled.append(_fev_task(group.file, group.horizon, group.k, group.task_name))
            width = len(str(len(group.ids) - 1))
            for start in range(0, len(group.ids), ROW_GROUP):
                ids = group.ids[start : start + ROW_GROUP]
                table = _rows(corpus, group, ids, units_of, describer)
                background.submit(writer.write_table, table, row_group_size=ROW_GROUP)
                bar.update(len(ids))
                if not per_task:
                    continue
                for position, task_id in enumerate(ids):  # its row alone: a slice of the table
                    one = f"{group.per_task_folder}/{start + position:0{width}d}.parquet"
                    alone = open_writer(one, group.schema)
                    row = table.slice(position, 1)
                    background.submit(alone.write_table, row, row_group_size=ROW_GROUP)
                    background.submit(alone.close)
                    single.append(_fev_task(one, group.horizon, group.k, task_id))
                bar.update(len(ids))
            background.submit(writer.close)
        background.finish()
    finally:
        try:
            background.abandon()  # after an error: nothing more is written
            for writer in opened:  # closing a closed writer does nothing
                with contextlib.suppress(Exception):  # the first error is the one raised
                    writer.close()
        finally:
            bar.close()

    _write_yaml(folder / TASK_FILE, pooled, POOLED_NOTE)
    files = [TASK_FILE]
    if per_task:
        _write_yaml(folder / PER_TASK_FILE, single, PER_TASK_NOTE)
        files.append(PER_TASK_FILE)
    return {
        "format": "fev",
        "fev_version": "0.10",
        "tasks": int(len(tasks)),
        "files": files + [g.file for g in groups],
        "task_files": files,
        "groups": [g.record(per_task) for g in groups],
        "per_task": bool(per_task),
        "quantile_levels": list(QUANTILE_LEVELS),
        "metrics": {"eval_metric": "WQL", "extra_metrics": ["WAPE"]},
    }


def task_configs(folder, per_task: bool = False) -> list[dict[str, Any]]:
    """The fev Task definitions of an export, with data paths made absolute."""
    import yaml

    folder = Path(folder).resolve()
    path = folder / (PER_TASK_FILE if per_task else TASK_FILE)
    if not path.is_file():
        raise FevExportError(f"{path}: no such file (per_task={per_task})")
    configs = yaml.safe_load(path.read_text(encoding="utf-8"))["tasks"] or []
    return [{**c, "dataset_path": str(folder / c["dataset_path"])} for c in configs]


def load_benchmark(folder, per_task: bool = False):
    """``fev.Benchmark`` of an export folder (pooled Tasks, or one Task per WhatIf task)."""
    import fev

    return fev.Benchmark.from_list(task_configs(folder, per_task))
