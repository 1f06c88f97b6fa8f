"""Export format ``gluonts``: GluonTS JSON Lines, one gzip file per (frequency, horizon, K).

Layout of the export folder::

    metadata.json                        the files, the code tables of feat_static_cat, the
                                         quantile levels and the corpus's provenance
    data/freq=<f>_h=<H>_k=<K>.jsonl.gz   one line per task: one frequency, one prediction
                                         length and K covariate rows in each file
    data/freq=<f>_h=<H>_k=<K>.json       that file's metadata: freq, prediction_length,
                                         num_feat_dynamic_real, names and units of the series

Each line holds the GluonTS fields ``item_id`` (the task id), ``start`` (a pandas Period
string of the first history step in the file's frequency), ``target`` (history then future,
C + H values), ``feat_dynamic_real`` (K rows of C + H: the covariates' history then the
what-if scenario), ``feat_static_cat`` ([simulator code, target code]) and ``description``
(the task's description as JSON text, ``corpus.describe``). GluonTS's
``split(offset=-H)`` gives back exactly what ``whatif evaluate`` shows a model and scores.

Why one file per (frequency, H, K): a GluonTS predictor has one ``prediction_length`` and one
frequency, and ``feat_dynamic_real`` must have the same number of rows in every series of a
dataset; padding K with NaN rows would reach the models as NaN covariates.

Written without GluonTS (plain JSON text and gzip with no file name and mtime 0), so the same
corpus and options give byte-identical files under any pandas. Numbers are each float32
value's shortest text that reads back to it exactly, so GluonTS (which reads float32) gets the
corpus's values bit for bit. See docs/EXPORT_GLUONTS.md.
"""

from __future__ import annotations

import contextlib
import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from whatif_bench.corpus import QUANTILE_LEVELS, frequency_alias, utc_naive
from whatif_bench.errors import WhatIfError
from whatif_bench.export.background import OrderedWriter
from whatif_bench.export.texts import FloatTexts
from whatif_bench.outputs import safe_name

METADATA = "metadata.json"
DATA = "data"
LAYOUT_VERSION = 1
COMPRESS_LEVEL = 6
# the lines handed to the compressing thread at a time: this many bytes, or a batch's last lines
WRITE_BYTES = 4 << 20
STATIC_CATEGORIES = ("simulator", "target")  # the order of feat_static_cat


class GluonTSExportError(WhatIfError):
    """The selected tasks cannot be written as GluonTS JSON Lines."""


def group_name(freq: str, horizon: int, k: int) -> str:
    """The base name of the files of one group, e.g. ``freq=5min_h=48_k=3``."""
    return safe_name(f"freq={freq}_h={int(horizon)}_k={int(k)}", "GluonTS file name")


def period_start(task, freq: str) -> str:
    """The first history step of ``task`` as a pandas Period string of frequency ``freq``.

    A Period has no time zone: an aware start is converted to UTC first."""
    return str(pd.Period(utc_naive(task.start), freq=freq))


def _numbers(texts: np.ndarray, values: np.ndarray) -> str:
    """A JSON array of float32 ``values`` (shape (n,)) given their texts (``export.texts``,
    shape (n,)): numbers that read back exactly, non-finite ones as strings, which GluonTS reads
    as NaN or infinity."""
    finite = np.isfinite(values)
    if not finite.all():
        texts = texts.copy()
        for i in np.flatnonzero(~finite):
            texts[i] = json.dumps(str(float(values[i])))  # "nan", "inf", "-inf"
    return "[" + ",".join(texts.tolist()) + "]"


def line(task, freq: str, static: list[int], description: str | None, floats: FloatTexts) -> bytes:
    """One JSON line (UTF-8, ending in a newline) of a task; ``description`` (compact JSON text,
    ``corpus.describe``) is carried as a string field, which GluonTS passes through; ``floats``:
    the export's ``FloatTexts`` (each distinct number formatted once)."""
    target = np.concatenate([task.history_target, task.future_target]).astype(np.float32)
    rows = np.concatenate([task.history_covariates, task.future_covariates], axis=1).astype(
        np.float32
    )
    texts = floats(np.concatenate([target, rows.ravel()]))
    parts = [
        f'"item_id":{json.dumps(task.task_id)}',
        f'"start":{json.dumps(period_start(task, freq))}',
        f'"target":{_numbers(texts[: target.size], target)}',
    ]
    if task.k:
        width = rows.shape[1]
        parts.append(
            '"feat_dynamic_real":['
            + ",".join(
                _numbers(texts[target.size + i * width : target.size + (i + 1) * width], row)
                for i, row in enumerate(rows)
            )
            + "]"
        )
    parts.append(f'"feat_static_cat":[{",".join(str(int(c)) for c in static)}]')
    parts.append(f'"description":{json.dumps(description)}')
    return ("{" + ",".join(parts) + "}\n").encode("utf-8")


def code_tables(corpus) -> dict[str, list[str]]:
    """The categories of feat_static_cat, each sorted; a category's code is its position.

    Taken from every pair of the corpus file (not only the selected tasks), so the codes stay
    the same whatever ``--subset``, ``--simulators`` or ``--futures`` an export uses."""
    from whatif_bench.corpus import Corpus

    with Corpus(corpus.path) as whole:
        pairs = whole.pairs[["simulator", "target"]].drop_duplicates()
    return {
        "simulator": sorted(set(pairs["simulator"])),
        "target": sorted(f"{s}/{t}" for s, t in pairs.itertuples(index=False)),
    }


def provenance(corpus) -> dict[str, Any]:
    """Where the tasks come from (as the parquet card and manifest record it)."""
    from whatif_bench._version import __version__

    attrs = corpus.attrs
    return {
        "exported_by": f"whatif-bench {__version__}",
        "corpus_toolkit_version": str(attrs.get("toolkit_version", "")),
        "master_seed": int(attrs["master_seed"]),
        "baselines_hash": str(attrs.get("baselines_hash", "")),
        "registry_hash": str(attrs.get("registry_hash", "")),
    }


def _write_json(path: Path, value: dict) -> None:
    text = json.dumps(value, indent=2, sort_keys=True, allow_nan=False) + "\n"
    path.write_text(text, encoding="utf-8")


def _intervals(corpus, tasks: pd.DataFrame) -> dict[str, int]:
    """The step in seconds of each simulator of the selection (one task read per simulator)."""
    first = tasks.drop_duplicates("simulator")
    return {row.simulator: corpus[row.task_id].interval_s for row in first.itertuples()}


def _close(out: gzip.GzipFile | None, raw) -> None:
    """Close a group's gzip stream (its trailer), if there is one, then its file."""
    try:
        if out is not None:
            out.close()
    finally:
        raw.close()


def write(corpus, tasks: pd.DataFrame, folder, progress: bool = True) -> dict[str, Any]:
    """Write the selected tasks as GluonTS JSON Lines into ``folder`` (see the module doc)."""
    from tqdm.auto import tqdm

    from whatif_bench.corpus import covariate_units, export_describer
    from whatif_bench.export.api import task_batches

    folder = Path(folder)
    (folder / DATA).mkdir()
    tables = code_tables(corpus)
    codes = {name: {v: i for i, v in enumerate(values)} for name, values in tables.items()}
    units = covariate_units(corpus.attrs)
    describer = export_describer(corpus)
    intervals = _intervals(corpus, tasks)
    frame = tasks.assign(interval_s=tasks["simulator"].map(intervals))
    keys = ["interval_s", "prediction", "k"]
    origin = provenance(corpus)
    floats = FloatTexts()
    groups = []
    bar = tqdm(total=len(tasks), desc="export gluonts", unit="task", disable=not progress)
    opened: list[tuple[gzip.GzipFile | None, Any]] = []  # (gzip, file), to close after an error
    try:
        # a batch's lines are compressed and written in a thread (zlib lets go of Python's
        # lock) while the next batch's are made; the same bytes as writing them here
        with OrderedWriter() as background:
            for (interval, horizon, k), rows in frame.groupby(keys, sort=True):
                freq = frequency_alias(int(interval))
                base = group_name(freq, int(horizon), int(k))
                relative = f"{DATA}/{base}.jsonl.gz"
                series: dict[str, dict[str, Any]] = {}
                contexts: set[int] = set()
                raw = open(folder / relative, "wb")
                opened.append((None, raw))
                # no file name and mtime 0 in the gzip header: the bytes depend on the data only
                out = gzip.GzipFile(
                    filename="", mode="wb", fileobj=raw, compresslevel=COMPRESS_LEVEL, mtime=0
                )
                opened[-1] = (out, raw)
                for batch in task_batches(corpus, rows):
                    lines: list[bytes] = []
                    size = 0
                    for task in batch:
                        name = f"{task.simulator}/{task.target}"
                        static = [codes["simulator"][task.simulator], codes["target"][name]]
                        described = describer.json(task) if describer else None
                        lines.append(line(task, freq, static, described, floats))
                        size += len(lines[-1])
                        if size >= WRITE_BYTES:  # bounds the text held for the thread
                            background.submit(out.write, b"".join(lines))
                            lines, size = [], 0
                        contexts.add(task.context_length)
                        if name not in series:
                            known = units.get((task.simulator, task.target), {})
                            series[name] = {
                                "target_unit": task.units.get(task.target, ""),
                                "covariate_names": list(task.covariates),
                                "covariate_units": [known.get(c, "") for c in task.covariates],
                            }
                    if lines:
                        background.submit(out.write, b"".join(lines))
                    bar.update(len(batch))
                background.submit(_close, out, raw)
                group = {
                    "file": relative,
                    "metadata": f"{DATA}/{base}.json",
                    "freq": freq,
                    "interval_s": int(interval),
                    "prediction_length": int(horizon),
                    "num_feat_dynamic_real": int(k),
                    "items": int(len(rows)),
                }
                _write_json(
                    folder / group["metadata"],
                    {
                        **group,
                        "context_lengths": sorted(contexts),
                        "feat_static_cat": [
                            {"name": n, "cardinality": len(tables[n])} for n in STATIC_CATEGORIES
                        ],
                        "series": dict(sorted(series.items())),
                        "quantile_levels": list(QUANTILE_LEVELS),
                        "provenance": origin,
                    },
                )
                groups.append(group)
    finally:
        try:
            for pair in opened:  # after an error; closing twice does nothing
                with contextlib.suppress(Exception):  # the first error is the one raised
                    _close(*pair)
        finally:
            bar.close()

    _write_json(
        folder / METADATA,
        {
            "format": "gluonts",
            "layout_version": LAYOUT_VERSION,
            "gluonts": ">=0.17 (pandas < 3)",
            "fields": [
                "item_id",
                "start",
                "target",
                "feat_dynamic_real",
                "feat_static_cat",
                "description",
            ],
            "feat_static_cat": {
                "order": list(STATIC_CATEGORIES),
                "codes": tables,
                "cardinality": [len(tables[n]) for n in STATIC_CATEGORIES],
            },
            "quantile_levels": list(QUANTILE_LEVELS),
            "groups": groups,
            "tasks": int(len(tasks)),
            "provenance": origin,
        },
    )
    return {
        "format": "gluonts",
        "tasks": int(len(tasks)),
        "metadata": METADATA,
        "groups": groups,
        "quantile_levels": list(QUANTILE_LEVELS),
    }


def load(folder, group: dict[str, Any] | str):
    """A GluonTS ``FileDataset`` of one file of an export (needs GluonTS, pandas < 3).

    ``group`` is an entry of ``metadata.json``'s ``groups`` or its ``file`` path."""
    try:
        from gluonts.dataset.common import FileDataset
    except ImportError as exc:
        raise ImportError(
            "install GluonTS (pip install 'whatif-bench[export]'; it needs pandas < 3) to "
            "load a gluonts export"
        ) from exc
    folder = Path(folder)
    if isinstance(group, str):
        meta = json.loads((folder / METADATA).read_text(encoding="utf-8"))
        matches: list[dict[str, Any]] = [g for g in meta["groups"] if g["file"] == group]
        if not matches:
            raise GluonTSExportError(f"{folder}: no file {group!r} in {METADATA}")
        group = matches[0]
    return FileDataset(folder / group["file"], freq=group["freq"])
