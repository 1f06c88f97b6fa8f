"""Export format ``parquet``: one row per task, ready for Hugging Face ``datasets``.

Written with pyarrow directly (one ``ParquetWriter`` per file, one row group per batch of
tasks, zstd), not with ``datasets.Dataset.to_parquet``, which leaves nested list columns
uncompressed. Files go under ``data/`` (``tasks-00000.parquet``, ...; a new file every
``ROWS_PER_FILE`` rows); ``README.md`` is the dataset card: a YAML header Hugging Face reads
(``configs`` with ``data_files`` as the one split ``SPLIT``, ``dataset_info.features``) and a
body with the axes, counts, provenance hashes and the source of each baseline.

Every column is a string, an integer or a float32 list, so ``datasets``' torch format
(``with_format("torch")``) takes whole rows: ``start`` is ISO 8601 text, as the items of
``whatif_bench.stream`` carry it (a timestamp column would not convert to a tensor), and
``whatif_bench.stream.collate_tasks`` batches the rows. ``CARD_EXAMPLE`` is the card's snippet.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

ROWS_PER_FILE = 8192  # a new file every this many rows (a few hundred MB at most)
COMPRESSION = "zstd"
COMPRESSION_LEVEL = 3
SPLIT = "test"  # the one split: the card's configs and splits, and CARD_EXAMPLE

# (column, Hugging Face feature in the card's YAML), in column order
SCALARS = (
    ("task_id", "string"),
    ("pair_id", "string"),
    ("future", "string"),
    ("simulator", "string"),
    ("target", "string"),
    ("k", "int32"),
    ("c_label", "string"),
    ("event_length", "int32"),
    ("e_setting", "string"),
    ("context_length", "int32"),
    ("prediction_length", "int32"),
    ("interval_s", "int64"),
    ("start", "string"),  # ISO 8601, as stream items' ``start`` (stream.items.start_text)
    ("target_unit", "string"),
)
SERIES = ("history_target", "future_target", "counterfactual_future")
MATRICES = ("history_covariates", "future_covariates")
FLOAT_PATHS = [f"{n}.list.element" for n in SERIES] + [
    f"{n}.list.element.list.element" for n in MATRICES
]

# Where each simulator's baseline comes from (see the repository README, "Simulators and
# baselines"); the licences are those of the simulators and inputs, as published upstream.
SOURCES = {
    "epanet": (
        "EPANET 2.2 through `wntr` 1.5 on the stock Net1 network shipped with wntr; 32 days at "
        "300 s",
        "EPANET: public domain (US EPA); wntr: Revised BSD; Net1: EPANET example network",
    ),
    "sumo": (
        "Eclipse SUMO 1.28 (`netconvert`, `sumo`, seed 42) on the toolkit's own signalised "
        "intersection; 30 days at 300 s",
        "SUMO: EPL-2.0 (or GPL-2.0-or-later)",
    ),
    "gridlabd": (
        "GridLAB-D 6.0 (`gridlabd` package) house with heat pump and ZIP load, weather from "
        "the TMY3 file of Greensboro NC (USAF 723170) shipped by pvlib; 14 days at 60 s",
        "GridLAB-D: Battelle Open Source License (BSD-style); pvlib: BSD-3-Clause; TMY3: NREL",
    ),
    "opendc": (
        "OpenDC 2.0 libraries (`org.opendc:*:2.0`) on a rack of four hosts running Bitbrains "
        "VMs 1019, 1023, 1026 (and 1129) of the trace OpenDC ships; 8,616 windows of 300 s",
        "OpenDC: MIT; the Bitbrains trace (GWA-T-12, Grid Workloads Archive) as shipped in "
        "OpenDC's repository",
    ),
}


def schema():
    import pyarrow as pa

    types = {
        "string": pa.string(),
        "int32": pa.int32(),
        "int64": pa.int64(),
    }
    fields = [pa.field(name, types[kind]) for name, kind in SCALARS]
    fields.append(pa.field("covariates", pa.list_(pa.string())))
    series = pa.list_(pa.float32())
    matrix = pa.list_(pa.list_(pa.float32()))
    fields += [
        pa.field("history_target", series),
        pa.field("history_covariates", matrix),
        pa.field("future_covariates", matrix),
        pa.field("future_target", series),
        pa.field("counterfactual_future", series),
        pa.field("recipe", pa.string()),
        pa.field("description", pa.string()),
    ]
    return pa.schema(fields)


def features_yaml() -> str:
    """``dataset_info.features`` of the card, in the YAML ``datasets`` 4 reads."""
    lines = ["  features:"]
    for name, kind in SCALARS:
        lines += [f"  - name: {name}", f"    dtype: {kind}"]
    lines += ["  - name: covariates", "    list: string"]
    for name in ("history_target",):
        lines += [f"  - name: {name}", "    list: float32"]
    for name in MATRICES:
        lines += [f"  - name: {name}", "    list:", "      list: float32"]
    for name in ("future_target", "counterfactual_future"):
        lines += [f"  - name: {name}", "    list: float32"]
    lines += ["  - name: recipe", "    dtype: string"]
    lines += ["  - name: description", "    dtype: string"]
    return "\n".join(lines)


def _list(arrays: list[np.ndarray]):
    """A list<float32> column from 1-D arrays."""
    import pyarrow as pa

    lengths = np.fromiter((a.size for a in arrays), dtype=np.int64, count=len(arrays))
    offsets = np.zeros(len(arrays) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    values = np.concatenate(arrays).astype(np.float32, copy=False) if arrays else np.empty(0)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values, type=pa.float32()))


def _matrix(arrays: list[np.ndarray]):
    """A list<list<float32>> column from 2-D arrays (rows of each matrix as inner lists)."""
    import pyarrow as pa

    rows = [row for matrix in arrays for row in matrix]
    inner = _list(rows)
    counts = np.fromiter((m.shape[0] for m in arrays), dtype=np.int64, count=len(arrays))
    offsets = np.zeros(len(arrays) + 1, dtype=np.int32)
    np.cumsum(counts, out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), inner)


def table(tasks: list, descriptions: Sequence[str | None] | None = None):
    """The pyarrow table of a batch of ``Task`` objects; ``descriptions`` (one JSON text per
    task, ``corpus.describe``) fill the ``description`` column (null without them)."""
    import pyarrow as pa

    from whatif_bench.corpus import start_text  # Task.start.isoformat(), but faster

    columns: dict[str, Any] = {
        "task_id": [t.task_id for t in tasks],
        "pair_id": [t.task_id.rpartition("/")[0] for t in tasks],
        "future": [t.future for t in tasks],
        "simulator": [t.simulator for t in tasks],
        "target": [t.target for t in tasks],
        "k": [t.k for t in tasks],
        "c_label": [t.c_label for t in tasks],
        "event_length": [t.event_length for t in tasks],
        "e_setting": [t.e_setting for t in tasks],
        "context_length": [t.context_length for t in tasks],
        "prediction_length": [t.prediction_length for t in tasks],
        "interval_s": [t.interval_s for t in tasks],
        "start": [start_text(t.baseline_start, t.start_step * t.interval_s) for t in tasks],
        "target_unit": [t.units[t.target] for t in tasks],
        "covariates": [list(t.covariates) for t in tasks],
    }
    arrays = []
    target = schema()
    for field in target:
        name = field.name
        if name in SERIES:
            arrays.append(_list([getattr(t, name) for t in tasks]))
        elif name in MATRICES:
            arrays.append(_matrix([getattr(t, name) for t in tasks]))
        elif name == "recipe":
            arrays.append(
                pa.array(
                    [json.dumps(t.recipe, sort_keys=True, allow_nan=False) for t in tasks],
                    type=pa.string(),
                )
            )
        elif name == "description":
            texts = descriptions if descriptions is not None else [None] * len(tasks)
            arrays.append(pa.array(texts, type=pa.string()))
        else:
            arrays.append(pa.array(columns[name], type=field.type))
    return pa.Table.from_arrays(arrays, schema=target)


def write(corpus, tasks: pd.DataFrame, folder, progress: bool = True) -> dict[str, Any]:
    import pyarrow.parquet as pq
    from tqdm import tqdm

    from whatif_bench.export.api import task_batches

    folder = Path(folder)
    (folder / "data").mkdir()
    files: list[dict[str, Any]] = []
    writer = None
    rows_in_file = 0
    from whatif_bench.corpus import export_describer

    describer = export_describer(corpus)
    bar = tqdm(total=len(tasks), unit="task", disable=not progress, desc="export parquet")
    try:
        for batch in task_batches(corpus, tasks):
            while batch:
                if writer is None or rows_in_file >= ROWS_PER_FILE:
                    if writer is not None:
                        writer.close()
                    name = f"data/tasks-{len(files):05d}.parquet"
                    writer = pq.ParquetWriter(
                        folder / name,
                        schema(),
                        compression=COMPRESSION,
                        compression_level=COMPRESSION_LEVEL,
                        write_statistics=False,
                        # float lists: byte-stream split, no dictionary (smaller and faster
                        # than the default dictionary encoding, which rarely pays on floats)
                        use_dictionary=[n for n, _ in SCALARS] + ["covariates", "recipe"],
                        use_byte_stream_split=FLOAT_PATHS,
                    )
                    files.append({"path": name, "rows": 0})
                    rows_in_file = 0
                part, batch = (
                    batch[: ROWS_PER_FILE - rows_in_file],
                    batch[ROWS_PER_FILE - rows_in_file :],
                )
                texts = [describer.json(t) for t in part] if describer else None
                writer.write_table(table(part, texts), row_group_size=len(part))
                rows_in_file += len(part)
                files[-1]["rows"] += len(part)
                bar.update(len(part))
    finally:
        if writer is not None:
            writer.close()
        bar.close()
    card = dataset_card(corpus, tasks, files)
    (folder / "README.md").write_text(card, encoding="utf-8")
    return {
        "rows": int(len(tasks)),
        "data_files": files,
        "card": "README.md",
        "compression": f"{COMPRESSION}-{COMPRESSION_LEVEL}",
        "split": SPLIT,
    }


CARD_EXAMPLE = f"""from datasets import load_dataset

tasks = load_dataset("parquet", data_files={{"{SPLIT}": "data/tasks-*.parquet"}}, split="{SPLIT}")
row = tasks.with_format("torch")[0]
row["history_covariates"]  # (K, C) float32 tensor; row["k"] is an int64 tensor

from torch.utils.data import DataLoader
from whatif_bench.stream import collate_tasks

loader = DataLoader(tasks.with_format("torch"), batch_size=8, collate_fn=collate_tasks)
batch = next(iter(loader))
batch["history_target"], batch["history_mask"]  # (B, C_max) float32 / bool
"""


def _table(frame: pd.DataFrame) -> str:
    head = "| " + " | ".join(str(c) for c in frame.columns) + " |"
    rule = "| " + " | ".join("---" for _ in frame.columns) + " |"
    body = ["| " + " | ".join(str(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([head, rule, *body])


def dataset_card(corpus, tasks: pd.DataFrame, files: list[dict]) -> str:
    """The ``README.md`` of the export: YAML header for Hugging Face, then a description."""
    from whatif_bench._version import __version__
    from whatif_bench.corpus.axes import table as axis_table

    attrs = corpus.attrs
    counts = (
        tasks.groupby(["simulator", "future"], sort=True).size().unstack(fill_value=0)
    ).reset_index()
    counts.columns.name = None
    counts["targets"] = [
        tasks.loc[tasks["simulator"] == s, "target"].nunique() for s in counts["simulator"]
    ]
    axes = []
    # every axis but the simulator (the table below), the future type last
    carded = [a for a in axis_table() if a.name != "simulator"]
    for column, label in [(a.column, a.card) for a in sorted(carded, key=lambda a: not a.per_pair)]:
        values = tasks[column].value_counts().sort_index()
        axes.append(f"| {label} | " + ", ".join(f"{v} ({n})" for v, n in values.items()) + " |")
    sources = [
        f"| {sim} | {SOURCES.get(sim, ('unknown', 'unknown'))[0]} | "
        f"{SOURCES.get(sim, ('unknown', 'unknown'))[1]} |"
        for sim in sorted(set(tasks["simulator"]))
    ]
    header = "\n".join(
        [
            "---",
            "license: other",
            "license_name: whatif-bench-baselines",
            "pretty_name: WhatIf-Bench forecasting tasks",
            "task_categories:",
            "- time-series-forecasting",
            "tags:",
            "- time-series",
            "- counterfactual",
            "- simulation",
            "configs:",
            "- config_name: default",
            "  data_files:",
            f"  - split: {SPLIT}",
            "    path: data/tasks-*.parquet",
            "dataset_info:",
            features_yaml(),
            "  splits:",
            f"  - name: {SPLIT}",
            f"    num_examples: {len(tasks)}",
            "---",
        ]
    )
    body = f"""
# WhatIf-Bench forecasting tasks

{len(tasks)} what-if forecasting tasks exported by `whatif export` (whatif-bench {__version__})
from a WhatIf-Bench corpus. Each row is one task: a history of the target and of K covariates,
the covariates' future under a what-if scenario (`future_covariates`), and the target's true
future under that scenario (`future_target`), computed by a simulator-derived relationship.
`counterfactual_future` is the target's future with no event at all.

Run in this folder (`load_dataset("path/to/this/folder", split="{SPLIT}")` reads the same
rows through the header above); the last lines need `pip install "whatif-bench[train]"`:

```python
{CARD_EXAMPLE}```

## Columns

| column | meaning |
| --- | --- |
| task_id, pair_id | `<simulator>/<target>/K<k>-<C>-L<l>-<E>[/<future>]` |
| future | `replay` (a history event repeated), `novel` (new factors), `restraint` (nothing moves) |
| k, c_label, event_length, e_setting | the axes (below) |
| context_length, prediction_length | the lengths of the history and the future |
| interval_s, start | step in seconds; first history step, ISO 8601 (simulator start + offset) |
| target_unit, covariates | the target's unit; the K covariate names (rows of the matrices) |
| history_target (C) | the target's history |
| history_covariates (K, C), future_covariates (K, H) | covariate histories and scenario |
| future_target (H) | the ground truth under the scenario |
| counterfactual_future (H) | the target with no event |
| recipe | JSON: window start, event starts, directions, factors, shapes, base values |
| description | JSON: events in time and units, relationship, exact per-covariate attribution |

All arrays are float32, exactly as stored in the corpus. With `with_format("torch")` a row's
arrays are float32 tensors, its integers int64 tensors and its text stays `str`; `start` is
text (with the baseline's UTC offset when it has one) so that whole rows convert.
`collate_tasks` pads a list of rows into tensors with masks (its docstring lists the batch's
keys). `description` follows the schema
`whatif-task-description/1` (WhatIf-Bench docs/CORPUS_FORMAT.md, "Task descriptions"); it is
null for a corpus built with user forms modules.

## Axes (tasks per value)

| axis | values |
| --- | --- |
{chr(10).join(axes)}

## Counts by simulator and future

{_table(counts)}

## Provenance

| | |
| --- | --- |
| corpus toolkit version | {attrs.get("toolkit_version", "")} |
| master seed | {attrs.get("master_seed", "")} |
| baselines hash | `{attrs.get("baselines_hash", "")}` |
| registry hash | `{attrs.get("registry_hash", "")}` |
| data files | {len(files)} (`data/tasks-*.parquet`, zstd) |

`manifest.json` records the selection options and a SHA-256 of every file.

## Sources and licences of the baselines

| simulator | baseline | licence of the simulator and inputs |
| --- | --- | --- |
{chr(10).join(sources)}

The series are simulator outputs generated by WhatIf-Bench (Apache-2.0); check the upstream
licences above before redistributing.
"""
    return header + "\n" + body
