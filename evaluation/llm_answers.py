"""``LLMAnswers``: the answers of a responses folder (``whatif llm run`` / ``batch-read``) as a
forecaster, so ``whatif evaluate --models llm:DIR`` and ``whatif llm score`` score them.

It asks nothing: ``predict`` looks each task up in ``DIR/answers`` by task id. An imputed task
(every attempt failed) is the naive forecast with ``Forecast.imputed``; ``Forecast.seconds`` is
the latency of the request that answered (``None`` for imputed tasks and Batch results). A task
with no final record fails, with the reason naming the folder.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from whatif_bench.evaluation.forecasters import Forecast, NoForecast, TaskInput
from whatif_bench.evaluation.llm_client import LLMError
from whatif_bench.evaluation.llm_runner import ANSWERS, KIND, model_file_name
from whatif_bench.outputs import MANIFEST, read_identity


def _read(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise LLMError(f"{path}: cannot be read ({exc})") from None


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

    def params(self) -> dict[str, Any]:
        return {"model": self.model, "answers_sha256": self.answers_sha256}

    def forecast(self, task_id: str) -> Forecast | NoForecast:
        """The forecast of one task, or ``NoForecast`` that fails it with the reason."""
        answer = self.records.get(task_id)
        if answer is None:
            return NoForecast(f"no answer for {task_id} in {self.directory}/{ANSWERS}")
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
        # a task without an answer gets NoForecast, which fails it alone
        return [self.forecast(task.task_id) for task in batch]


def from_spec(directory: str) -> LLMAnswers:
    """The forecaster of ``--models llm:DIR``."""
    return LLMAnswers(directory)


def check_key_against_corpus(responses: str | os.PathLike, corpus) -> list[str]:
    """The task ids of the responses folder's export key, after checking that the export was
    made from ``corpus`` (an open ``Corpus``): every task id is in it and its ``future_target``
    equals the corpus's truth (as float32); else an ``LLMError``."""
    from whatif_bench.evaluation.llm_runner import KEY

    path = Path(responses) / KEY
    try:
        lines = [json.loads(t) for t in path.read_text(encoding="utf-8").splitlines() if t]
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise LLMError(f"{path}: cannot read the export's key ({exc})") from None
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
