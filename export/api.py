"""``export_corpus``: select tasks of a corpus and write them in one format, atomically.

The folder is written by ``outputs.write_folder``: under a hidden temporary name beside ``out``
(``.<name>.whatif.partial-<pid>``) while ``outputs.output_lock(out)`` is held; ``manifest.json``
is written last, then the folder is renamed into place. A folder without ``manifest.json`` is
never a finished export. An existing ``out`` is replaced (``overwrite=True``) only once the new
export is complete, and only if it is an export in the same format (its identity record,
``outputs.check_folder_output``) that does not hold the corpus.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from whatif_bench._version import __version__
from whatif_bench.errors import WhatIfError
from whatif_bench.export import formats
from whatif_bench.outputs import (
    OutputError,
    check_folder_output,
    check_output_path,
    write_folder,
)

MANIFEST_VERSION = 1
BATCH_TASKS = 1024  # tasks read into memory at once (at most)
BATCH_VALUES = 16 * 1024 * 1024  # ... and at most this many float32 values (64 MiB)


class ExportError(WhatIfError):
    """The export cannot be made: bad options, an empty selection, an unusable output."""


# ---- selection ------------------------------------------------------------------------
def select(
    corpus,
    subset: float | None = None,
    seed: int = 0,
    simulators: Sequence[str] = (),
    futures: Sequence[str] = (),
):
    """The filtered corpus view and the frame of its selected tasks, in a fixed order."""
    from whatif_bench.corpus import check_subset, select_tasks

    simulators, futures = list(simulators or ()), list(futures or ())
    known = sorted(set(corpus.pairs["simulator"]))
    unknown = sorted(set(simulators) - set(known))
    if unknown:
        raise ExportError(f"simulator(s) {unknown} are not in this corpus; it has {known}")
    known_futures = list(corpus.futures)  # the table's, and any optional ones it holds
    wrong = sorted(set(futures) - set(known_futures))
    if wrong:
        raise ExportError(f"unknown future type(s) {wrong}; this corpus holds {known_futures}")
    check_subset(subset)  # the same rule as evaluate's (corpus.selection)
    view = corpus.filter(simulator=simulators or None, future=futures or None)
    tasks = select_tasks(view.tasks_frame(), subset, seed)
    if tasks.empty:
        raise ExportError(
            f"no tasks selected from {corpus.path} (simulators {simulators or 'all'}, futures "
            f"{futures or 'all'}, subset {subset}); nothing to export"
        )
    return view, tasks


def task_batches(
    corpus, tasks: pd.DataFrame, max_tasks: int | None = None, max_values: int | None = None
) -> Iterator[list]:
    """The ``Task`` objects of ``tasks`` in order, in lists of at most ``max_tasks`` tasks and
    (roughly) ``max_values`` float32 values, so memory stays bounded whatever the corpus size.

    The batch boundaries depend only on the tasks, so a writer that makes one row group per
    batch writes the same bytes every time."""
    max_tasks = max_tasks or BATCH_TASKS
    max_values = max_values or BATCH_VALUES
    batch: list[str] = []
    values = 0
    for row in tasks[["task_id", "k", "context", "prediction"]].itertuples(index=False):
        size = (2 * int(row.k) + 2) * int(row.prediction) + (int(row.k) + 1) * int(row.context)
        if batch and (len(batch) >= max_tasks or values + size > max_values):
            yield list(corpus.tasks(batch))  # read a chunk of neighbouring tasks at a time
            batch, values = [], 0
        batch.append(row.task_id)
        values += size
    if batch:
        yield list(corpus.tasks(batch))


def task_ids_sha256(ids: Sequence[str]) -> str:
    """SHA-256 of the task ids, one per line (UTF-8, each followed by a newline)."""
    digest = hashlib.sha256()
    for task_id in ids:
        digest.update(task_id.encode("utf-8") + b"\n")
    return digest.hexdigest()


# ---- the folder -------------------------------------------------------------------------
WHAT = "whatif export"


def kind_of(format: str) -> str:
    """The kind an export in ``format`` records in its identity record (``outputs``)."""
    return f"export-{format}"


def _check_out(out: Path, overwrite: bool, format: str, inputs) -> None:
    check_folder_output(out, overwrite, WHAT, kind_of(format), inputs)


def export_corpus(
    corpus,
    format: str,
    out: str | os.PathLike,
    subset: float | None = None,
    seed: int = 0,
    simulators: Sequence[str] = (),
    futures: Sequence[str] = (),
    overwrite: bool = False,
    progress: bool = True,
    per_task: bool = False,
) -> Path:
    """Export the selected tasks of ``corpus`` (a path or an open ``Corpus``) in ``format``
    (``parquet``, ``fev``, ``llm`` or ``gluonts``) to the folder ``out``; returns ``out``.

    ``subset`` is a stratified fraction of the tasks drawn with ``seed`` (as ``whatif
    evaluate --subset``); ``simulators`` and ``futures`` restrict the tasks (empty: all).
    The same corpus and options always give byte-identical files. ``per_task`` (fev only) also
    writes one fev Task per task, whose fev scores equal ``whatif evaluate``'s.
    """
    from whatif_bench.corpus import Corpus

    write = formats.writer(format)
    if per_task:
        if format != "fev":
            raise ExportError(f"per-task fev tasks apply to --format fev only, not {format!r}")
        write = functools.partial(write, per_task=True)
    with contextlib.ExitStack() as stack:
        if not isinstance(corpus, Corpus):
            check_output_path(out, inputs=[corpus], folder=True)
            corpus = stack.enter_context(Corpus(corpus))
        return _export(
            corpus, write, format, out, subset, seed, simulators, futures, overwrite, progress
        )


def _export(corpus, write, format, out, subset, seed, simulators, futures, overwrite, progress):
    out = check_output_path(out, inputs=[corpus.path], folder=True)
    out = Path(os.path.abspath(out))  # "." or "dir/.." have no name to put a temporary beside
    if out.parent == out:
        raise OutputError(f"{out}: cannot export to the root folder; give a folder inside it")
    inputs = [corpus.path]
    _check_out(out, overwrite, format, inputs)  # before any work; again under the lock
    view, tasks = select(corpus, subset, seed, simulators, futures)
    attrs = corpus.attrs

    def fill(tmp: Path) -> dict[str, Any]:
        written = write(view, tasks, tmp, progress)
        ids = tasks["task_id"].tolist()
        return {
            "manifest_version": MANIFEST_VERSION,
            "toolkit_version": __version__,
            "format": format,
            "corpus": {
                "path": str(Path(corpus.path).resolve()),
                "toolkit_version": str(attrs.get("toolkit_version", "")),
                "master_seed": int(attrs["master_seed"]),
                "baselines_hash": str(attrs.get("baselines_hash", "")),
                "registry_hash": str(attrs.get("registry_hash", "")),
            },
            "options": dict(getattr(write, "keywords", {})),
            "selection": {
                "subset": subset,
                "seed": seed,
                "simulators": list(simulators or ()),
                "futures": list(futures or ()),
            },
            "n_tasks": len(ids),
            "task_ids_sha256": task_ids_sha256(ids),
            "written": written,
        }

    return write_folder(out, overwrite, fill, WHAT, kind_of(format), inputs)
