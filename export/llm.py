"""Export format ``llm``: every task as four CSV tables and a prompt, names anonymised.

Layout of the export folder::

    key.jsonl                       one line per task, in task order: the dummy id -> real
                                    name/unit mapping and the ground truth (never shown to a model)
    tasks/<task>/prompt.txt         the prompt (``llm_prompt.TEMPLATE`` filled in)
    tasks/<task>/past_covariates.csv      timestamp, <covariate_1>, …   (C rows)
    tasks/<task>/past_target.csv          timestamp, <target_1>         (C rows)
    tasks/<task>/future_timestamps.csv    timestamp, <target_1> blank   (H rows)
    tasks/<task>/future_covariates.csv    timestamp, <covariate_1>, …   (H rows)
    tasks/<task>/scenario.txt       the future event in words, names anonymised, no units
                                    (``corpus.describe.scenario_text``; for text-conditioned
                                    models, not part of the prompt)

``<task>`` is the task id with ``/`` replaced by ``+``. Numbers are the float32 task values in
their shortest round-trip text, timestamps ISO 8601, lines end in ``\\n``: the same corpus and
tasks give byte-identical files. See docs/EXPORT_LLM.md.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

from whatif_bench.evaluation.llm_prompt import (
    FILES,
    TEMPLATE,
    dummy_ids,
    forecast_with_retries,
    parse_response,
    render_prompt,
)

__all__ = [
    "KEY",
    "TASKS",
    "float_texts",
    "forecast_with_retries",
    "parse_response",
    "task_folder_name",
    "write",
]

KEY = "key.jsonl"
TASKS = "tasks"
PROMPT = "prompt.txt"
SCENARIO = "scenario.txt"


def task_folder_name(position: int) -> str:
    """The folder of the task at ``position`` in the export: ``task-000001`` and so on.

    Numbers, not task ids: a task id names the simulator and target, which the model must not
    see; ``key.jsonl`` maps each folder to its task id.
    """
    return f"task-{position + 1:06d}"


def float_texts(values: np.ndarray) -> list[str]:
    """Each float32 value as the shortest text that reads back (via float64) to it exactly.

    numpy's shortest float32 repr is used; in the rare case where reading that text as float64
    and rounding to float32 would give another value (double rounding), the float64 repr of the
    value is written instead, which always reads back exactly. Each distinct bit pattern is
    formatted once (a covariate holds few distinct values; -0.0 and 0.0 stay apart).
    """
    values = np.asarray(values, dtype=np.float32).ravel()
    if not values.size:
        return []
    patterns, where = np.unique(values.view(np.uint32), return_inverse=True)
    distinct = patterns.view(np.float32)
    texts = [str(value) for value in distinct]
    back = np.array(texts, dtype=np.float64).astype(np.float32)
    wrong = ~((back == distinct) & (np.signbit(back) == np.signbit(distinct)))
    wrong &= ~(np.isnan(back) & np.isnan(distinct))
    for i in np.flatnonzero(wrong):
        texts[i] = repr(float(distinct[i]))
    return np.array(texts, dtype=object)[where.ravel()].tolist()


def iso_stamps(index: pd.DatetimeIndex) -> list[str]:
    """``stamp.isoformat()`` of every stamp of ``index``, shape (n,); whole seconds without a
    time zone (every corpus's) are formatted by numpy in one call."""
    if index.tz is None:
        seconds = index.values.astype("datetime64[s]")
        if (seconds == index.values).all():
            return np.datetime_as_string(seconds, unit="s").tolist()
    return [stamp.isoformat() for stamp in index]


def _table(stamps: list[str], header: list[str], columns: list[list[str]] | None) -> str:
    """CSV text: ``timestamp`` then one column per header name (blank when ``columns`` is None)."""
    lines = [",".join(["timestamp", *header])]
    if columns is None:
        blank = "," * len(header)
        lines.extend(stamp + blank for stamp in stamps)
    else:
        lines.extend(map(",".join, zip(stamps, *columns, strict=True)))
    return "\n".join(lines) + "\n"


def _write_task(task, folder: Path, units: dict[str, str], describer=None) -> dict[str, Any]:
    """The task's folder, and its line of the key (``units``: ``corpus.task_units``, the same
    the other exports write, "" where unknown; ``describer``: a ``corpus.describe.Describer``
    of the corpus, or ``None`` for a corpus built with user forms modules: no
    ``scenario.txt``, and null ``description`` and ``scenario_text``)."""
    stamps = iso_stamps(task.timestamps())
    past, future = stamps[: task.context_length], stamps[task.context_length :]
    targets = list(dummy_ids("target", 1))
    covariates = list(dummy_ids("covariate", task.k))
    folder.mkdir()
    files = {
        "past_covariates.csv": _table(
            past, covariates, [float_texts(row) for row in task.history_covariates]
        ),
        "past_target.csv": _table(past, targets, [float_texts(task.history_target)]),
        "future_timestamps.csv": _table(future, targets, None),
        "future_covariates.csv": _table(
            future, covariates, [float_texts(row) for row in task.future_covariates]
        ),
        PROMPT: render_prompt(targets, covariates, task.context_length, future, task.interval_s),
    }
    assert set(files) == {*FILES, PROMPT}
    if describer is not None:
        dummies = {task.target: targets[0], **dict(zip(task.covariates, covariates, strict=True))}
        files[SCENARIO] = describer.text(task, names=dummies, units=False, relations=False) + "\n"
    for name, text in files.items():
        with open(folder / name, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
    variables = {targets[0]: {"name": task.target, "unit": units[task.target]}}
    for dummy, name in zip(covariates, task.covariates, strict=True):
        variables[dummy] = {"name": name, "unit": units[name]}
    return {
        "task_id": task.task_id,
        "folder": f"{TASKS}/{folder.name}",
        "simulator": task.simulator,
        "future": task.future,
        "variables": variables,
        "future_timestamps": future,
        # float32 values as float64 JSON numbers: exact after a cast back to float32
        "future_target": [float(v) for v in task.future_target],
        "counterfactual_future": [float(v) for v in task.counterfactual_future],
        "history_last_value": float(task.history_target[-1]),
        "description": describer.describe(task) if describer is not None else None,
        "scenario_text": describer.text(task) if describer is not None else None,
    }


def write(corpus, tasks, folder, progress: bool = True) -> dict[str, Any]:
    """Write the selected ``tasks`` of ``corpus`` into the empty ``folder`` (see module doc)."""
    folder = Path(folder)
    ids = list(tasks["task_id"])
    names = [task_folder_name(position) for position in range(len(ids))]
    from whatif_bench.corpus import covariate_units, export_describer, task_units

    describer = export_describer(corpus)
    by_target = covariate_units(corpus.attrs)
    (folder / TASKS).mkdir()
    iterator: Iterable[tuple[str, str]] = zip(ids, names, strict=True)
    if progress:
        from tqdm import tqdm

        iterator = tqdm(iterator, total=len(ids), desc="llm export", unit="task")
    with open(folder / KEY, "w", encoding="utf-8", newline="\n") as key:
        for task_id, name in iterator:
            task = corpus[task_id]
            line = _write_task(task, folder / TASKS / name, task_units(task, by_target), describer)
            key.write(json.dumps(line, sort_keys=True, allow_nan=False) + "\n")
    return {
        "format": "llm",
        "tasks": len(ids),
        "key": KEY,
        "task_folders": TASKS,
        "files_per_task": [*FILES, PROMPT, *([SCENARIO] if describer is not None else [])],
        "template_sha256": hashlib.sha256(TEMPLATE.encode("utf-8")).hexdigest(),
    }
