"""``LLMAnswers``: the answers of a responses folder (``whatif llm run`` / ``batch-read``) as a
forecaster, so ``whatif evaluate --models llm:DIR`` and ``whatif llm score`` score them.

It asks nothing: ``predict`` looks each task up in ``DIR/answers`` by task id. An imputed task
(every attempt failed) is the naive forecast with ``Forecast.imputed``; ``Forecast.seconds`` is
the latency of the request that answered (``None`` for imputed tasks and Batch results). A task
with no final record fails, with the reason naming the folder; so does a task whose line in
the folder's ``key.jsonl`` does not match the task being scored (its last history value, its
number of future steps, its first future timestamp): the answers were made from another
corpus.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from whatif_bench.evaluation.forecasters import Forecast, NoForecast, TaskInput, utc_naive
from whatif_bench.evaluation.llm_client import LLMError, loads_strict
from whatif_bench.evaluation.llm_runner import ANSWERS, KEY, KIND, model_file_name
from whatif_bench.outputs import MANIFEST, read_identity


def _read(path: Path) -> Any:
    try:
        return loads_strict(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise LLMError(f"{path}: cannot be read ({exc})") from None


def _read_key(path: Path) -> list[dict[str, Any]]:
    try:
        text = path.read_text(encoding="utf-8")
        lines = [loads_strict(t) for t in text.splitlines() if t.strip()]
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise LLMError(f"{path}: cannot read the export's key ({exc})") from None
    if not all(isinstance(line, dict) for line in lines):
        raise LLMError(f"{path}: not the key of an llm export")
    return lines


def key_mismatch(line: dict[str, Any], task: TaskInput) -> str | None:
    """How the export's key line of a task differs from the ``TaskInput`` being scored (its
    last history value as float32, its number of future steps, and when the task has a start
    and an interval, its first future timestamp), or ``None``."""
    try:
        given = np.float32(float(line["history_last_value"]))
        have = np.float32(float(task.history_target[-1]))
        if not (given == have or (np.isnan(given) and np.isnan(have))):
            return f"its last history value is {float(given)!r}, the corpus's {float(have)!r}"
        stamps = list(line["future_timestamps"])
        if len(stamps) != task.prediction_length:
            return f"it has {len(stamps)} future steps, the corpus's task {task.prediction_length}"
        if task.start is not None and task.interval_s:
            first = utc_naive(pd.Timestamp(stamps[0]))
            expected = utc_naive(pd.Timestamp(task.start)) + pd.Timedelta(
                seconds=task.interval_s * task.context_length
            )
            if first != expected:
                return (
                    f"its first future timestamp is {first.isoformat()}, the corpus's "
                    f"{expected.isoformat()}"
                )
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        return f"its key line cannot be read ({type(exc).__name__}: {exc})"
    return None


class LLMAnswers:
    """The final records of one responses folder, by task id.

    ``name`` is ``llm-<model>`` (the model of the manifest, made safe as a file name);
    ``params()`` holds the SHA-256 of every final record, so changed answers are scored
    again.
    """

    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = Path(directory)
        if os.fspath(directory) == "" or not self.directory.is_dir():
            raise LLMError(f"{directory}: no such responses folder (whatif llm run --out)")
        record = read_identity(self.directory)
        if (
            record is None
            or record.get("kind") != KIND
            or not (self.directory / MANIFEST).is_file()
        ):
            raise LLMError(
                f"{self.directory}: is not a responses folder of whatif llm run or batch-read"
            )
        manifest = _read(self.directory / MANIFEST)
        self.model = str(manifest.get("model") or "unknown")
        self.name = f"llm-{model_file_name(self.model)}"
        digest = hashlib.sha256()
        self.records: dict[str, dict[str, Any]] = {}
        for path in sorted((self.directory / ANSWERS).glob("task-*.json")):
            raw = path.read_bytes()
            digest.update(path.name.encode() + b"\0" + hashlib.sha256(raw).digest())
            answer = _read(path)
            if not isinstance(answer, dict) or not isinstance(answer.get("task_id"), str):
                raise LLMError(f"{path}: not a final record of whatif llm (no task_id)")
            self.records[answer["task_id"]] = answer
        self.answers_sha256 = digest.hexdigest()
        # the export's key, read once: its lines in task order, and by task id
        self.key_lines = _read_key(self.directory / KEY)
        self.key = {str(line.get("task_id")): line for line in self.key_lines}

    def task_ids_in(self, corpus) -> list[str]:
        """The task ids of the export's key, after checking that the export was made from
        ``corpus`` (``check_key_against_corpus``, on the key this object read)."""
        return _check_key_lines(self.key_lines, corpus)

    def params(self) -> dict[str, Any]:
        return {"model": self.model, "answers_sha256": self.answers_sha256}

    def forecast(self, task_id: str, task: TaskInput | None = None) -> Forecast | NoForecast:
        """The forecast of one task, or ``NoForecast`` that fails it with the reason; with
        ``task`` (the input being scored), only if the export's key line matches it."""
        answer = self.records.get(task_id)
        if answer is None:
            return NoForecast(f"no answer for {task_id} in {self.directory}/{ANSWERS}")
        if task is not None:
            line = self.key.get(task_id)
            differs = "it is not in the export's key" if line is None else key_mismatch(line, task)
            if differs is not None:
                return NoForecast(
                    f"the answer of {task_id} was made from another corpus ({differs}; "
                    f"{self.directory / KEY}); score it on the corpus its export was made from"
                )
        try:
            point = np.asarray(answer["values"], dtype=np.float64)
            latency = answer.get("latency_s")
            return Forecast(
                point=point,
                imputed=bool(answer.get("imputed", False)),
                seconds=float(latency) if isinstance(latency, int | float) else None,
            )
        except (KeyError, TypeError, ValueError) as exc:
            return NoForecast(f"the answer of {task_id} in {self.directory} is unusable ({exc})")

    def predict(self, batch: list[TaskInput]) -> list[Forecast | NoForecast]:
        # a task without an answer, or whose key line differs, gets NoForecast: it fails alone
        return [self.forecast(task.task_id, task) for task in batch]


def from_spec(directory: str) -> LLMAnswers:
    """The forecaster of ``--models llm:DIR``."""
    return LLMAnswers(directory)


def check_key_against_corpus(responses: str | os.PathLike, corpus) -> list[str]:
    """The task ids of the responses folder's export key, after checking that the export was
    made from ``corpus`` (an open ``Corpus``): every task id is in it and its ``future_target``
    equals the corpus's truth (as float32); else an ``LLMError``."""
    return _check_key_lines(_read_key(Path(responses) / KEY), corpus)


def _check_key_lines(lines: list[dict[str, Any]], corpus) -> list[str]:
    """``check_key_against_corpus`` on the key's ``lines``, already read."""
    ids = [str(line.get("task_id")) for line in lines]
    known = set(corpus.task_ids())
    missing = [task_id for task_id in ids if task_id not in known]
    if missing:
        raise LLMError(
            f"the export was not made from this corpus ({corpus.path}): {len(missing):,} of its "
            f"{len(ids):,} tasks are not in it (first: {missing[0]})"
        )
    truths = corpus.ground_truths(ids)
    for line, truth in zip(lines, truths, strict=True):
        given = np.asarray(line.get("future_target", []), dtype=np.float64).astype(np.float32)
        if given.shape != truth.shape or not np.array_equal(given, truth.astype(np.float32)):
            raise LLMError(
                f"the export was not made from this corpus ({corpus.path}): the truth of "
                f"{line['task_id']} differs"
            )
    return ids
