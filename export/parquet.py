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
The columns, their order and types are the task table of ``whatif_bench.corpus.columns``
(``schema``, ``table``), which the stream's Parquet shards write too.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pandas as pd

from whatif_bench.corpus import columns
from whatif_bench.corpus.columns import COMPRESSION, COMPRESSION_LEVEL, schema, table
from whatif_bench.export.background import OrderedWriter

ROWS_PER_FILE = 8192  # a new file every this many rows (a few hundred MB at most)
SPLIT = "test"  # the one split: the card's configs and splits, and CARD_EXAMPLE

# Where each simulator's baseline comes from (see docs/SIMULATORS.md); the licences are those of
# the simulators and inputs, as published upstream.
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


def features_yaml() -> str:
    """``dataset_info.features`` of the card, in the YAML ``datasets`` 4 reads: one feature a
    column of the task table (``corpus.columns``), in order."""
    lines = ["  features:"]
    for c in columns.parquet_columns():
        lines.append(f"  - name: {c.name}")
        if c.kind == columns.INT:
            lines.append(f"    dtype: int{c.bits}")
        elif c.kind == columns.TEXT_LIST:
            lines.append("    list: string")
        elif c.kind == columns.SERIES:
            lines.append("    list: float32")
        elif c.kind == columns.MATRIX:
            lines += ["    list:", "      list: float32"]
        else:  # TEXT, JSON
            lines.append("    dtype: string")
    return "\n".join(lines)


def _write_options() -> dict[str, Any]:
    """``ParquetWriter`` options of the export's files: zstd, no statistics; the float lists
    byte-stream split with no dictionary (smaller and faster than the default dictionary
    encoding, which rarely pays on floats), the other columns but the description dictionary
    encoded."""
    cols = columns.parquet_columns()
    return {
        "compression": COMPRESSION,
        "compression_level": COMPRESSION_LEVEL,
        "write_statistics": False,
        "use_dictionary": [
            c.name for c in cols if c.kind not in columns.ARRAY_KINDS and c.name != "description"
        ],
        "use_byte_stream_split": [
            f"{c.name}.list.element" for c in cols if c.kind == columns.SERIES
        ]
        + [f"{c.name}.list.element.list.element" for c in cols if c.kind == columns.MATRIX],
    }


def write(corpus, tasks: pd.DataFrame, folder, progress: bool = True) -> dict[str, Any]:
    import pyarrow.parquet as pq
    from tqdm import tqdm

    from whatif_bench.export.api import task_batches

    folder = Path(folder)
    (folder / "data").mkdir()
    files: list[dict[str, Any]] = []
    writers: list[pq.ParquetWriter] = []
    rows_in_file = 0
    from whatif_bench.corpus import export_describer

    describer = export_describer(corpus)
    bar = tqdm(total=len(tasks), unit="task", disable=not progress, desc="export parquet")
    # the row groups are compressed and written in a thread while the next ones are built
    try:
        with OrderedWriter() as background:
            for batch in task_batches(corpus, tasks):
                while batch:
                    if not writers or rows_in_file >= ROWS_PER_FILE:
                        if writers:
                            background.submit(writers[-1].close)
                        name = f"data/tasks-{len(files):05d}.parquet"
                        writers.append(
                            pq.ParquetWriter(folder / name, schema(), **_write_options())
                        )
                        files.append({"path": name, "rows": 0})
                        rows_in_file = 0
                    part, batch = (
                        batch[: ROWS_PER_FILE - rows_in_file],
                        batch[ROWS_PER_FILE - rows_in_file :],
                    )
                    texts = [describer.json(t) for t in part] if describer else None
                    background.submit(
                        writers[-1].write_table, table(part, texts), row_group_size=len(part)
                    )
                    rows_in_file += len(part)
                    files[-1]["rows"] += len(part)
                    bar.update(len(part))
            if writers:
                background.submit(writers[-1].close)
    finally:
        try:
            for writer in writers:  # after an error (closing a closed writer does nothing)
                with contextlib.suppress(Exception):  # the first error is the one raised
                    writer.close()
        finally:
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
