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

``<task>`` is ``task-000001`` and so on, in task order (``task_folder_name``). Numbers are the
float32 task values in their shortest round-trip text (``export.texts``), timestamps ISO 8601,
lines end in ``\\n``: the same corpus and tasks give byte-identical files. See docs/EXPORT_LLM.md.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from whatif_bench.evaluation.llm_prompt import (
    FILES,
    TEMPLATE,
    dummy_ids,
    forecast_with_retries,
    parse_response,
    render_prompt,
)
from whatif_bench.export.texts import FloatTexts, StampTexts

__all__ = [
    "KEY",
    "TASKS",
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


def _table(stamps: list[str], header: list[str], columns: list[list[str]] | None) -> str:
    """CSV text: ``timestamp`` then one column per header name (blank when ``columns`` is None)."""
    lines = [",".join(["timestamp", *header])]
    if columns is None:
        blank = "," * len(header)
        lines.extend(stamp + blank for stamp in stamps)
    else:
        lines.extend(map(",".join, zip(stamps, *columns, strict=True)))
    return "\n".join(lines) + "\n"


class _Tables:
    """The four CSV tables of each task of one export; each distinct number and timestamp is
    formatted once for the whole export (``export.texts``)."""

    def __init__(self) -> None:
        self.floats = FloatTexts()
        self.stamps = StampTexts()

    def of(
        self, task, targets: list[str], covariates: list[str]
    ) -> tuple[dict[str, str], list[str]]:
        """File name -> CSV text of ``task``'s tables, under the dummy names ``targets`` (one)
        and ``covariates`` (K); and the future's timestamps, shape (H,)."""
        stamps = self.stamps(task.timestamps())
        context, horizon = task.context_length, len(stamps) - task.context_length
        past, future = stamps[:context], stamps[context:]
        k = task.k
        texts = self.floats(
            np.concatenate(
                [
                    np.ravel(task.history_covariates),
                    np.ravel(task.history_target),
                    np.ravel(task.future_covariates),
                ]
            )
        )
        after = (k + 1) * context
        history = [texts[i * context : (i + 1) * context].tolist() for i in range(k)]
        upcoming = [
            texts[after + i * horizon : after + (i + 1) * horizon].tolist() for i in range(k)
        ]
        files = {
            "past_covariates.csv": _table(past, covariates, history),
            "past_target.csv": _table(past, targets, [texts[k * context : after].tolist()]),
            "future_timestamps.csv": _table(future, targets, None),
            "future_covariates.csv": _table(future, covariates, upcoming),
        }
        return files, future


def _write_task(
    task, folder: Path, units: dict[str, str], describer, tables: _Tables
) -> dict[str, Any]:
    """The task's folder, and its line of the key (``units``: ``corpus.task_units``, the same
    the other exports write, "" where unknown; ``describer``: a ``corpus.describe.Describer``
    of the corpus, or ``None`` for a corpus built with user forms modules: no
    ``scenario.txt``, and null ``description`` and ``scenario_text``; ``tables``: the export's
    ``_Tables``)."""
    targets = list(dummy_ids("target", 1))
    covariates = list(dummy_ids("covariate", task.k))
    files, future = tables.of(task, targets, covariates)
    folder.mkdir()
    files[PROMPT] = render_prompt(targets, covariates, task.context_length, future, task.interval_s)
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
    tables = _Tables()
    by_target = covariate_units(corpus.attrs)
    (folder / TASKS).mkdir()
    iterator: Iterable[tuple[str, str]] = zip(ids, names, strict=True)
    if progress:
        from tqdm import tqdm

        iterator = tqdm(iterator, total=len(ids), desc="llm export", unit="task")
    with open(folder / KEY, "w", encoding="utf-8", newline="\n") as key:
        for task_id, name in iterator:
            task = corpus[task_id]
            units = task_units(task, by_target)
            line = _write_task(task, folder / TASKS / name, units, describer, tables)
            key.write(json.dumps(line, sort_keys=True, allow_nan=False) + "\n")
    return {
        "format": "llm",
        "tasks": len(ids),
        "key": KEY,
        "task_folders": TASKS,
        "files_per_task": [*FILES, PROMPT, *([SCENARIO] if describer is not None else [])],
        "template_sha256": hashlib.sha256(TEMPLATE.encode("utf-8")).hexdigest(),
    }
