"""Running forecasters over a corpus: per-task errors (resumable), then aggregates and reports.

Per-task results are written in chunks of ``CHUNK`` tasks per model under
``<out>/per_task/<model>/``; a chunk already on disk is not computed again, so an interrupted
evaluation resumes where it stopped. A ``manifest.json`` ties the folder to one corpus and one
task selection.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from whatif_bench.errors import WhatIfError
from whatif_bench.evaluation.forecasters import Forecaster, TaskInput, make_forecaster
from whatif_bench.evaluation.metrics import score

CHUNK = 256
STRATA = ["simulator", "future", "k", "c_label", "event_length", "e_setting"]


class EvaluationError(WhatIfError):
    """The evaluation cannot run (unknown model, mismatched output folder, bad subset)."""


@dataclass
class EvaluationResult:
    """Per-task errors of every model, and the overall leaderboard."""

    per_task: pd.DataFrame
    leaderboard: pd.DataFrame
    reference: str
    out: Path


def select_tasks(frame: pd.DataFrame, subset: float | None, seed: int = 0) -> pd.DataFrame:
    """All tasks, or a stratified sample: ``ceil(fraction x n)`` of the tasks of every combination
    of simulator, future, K, C, l and E (the strata hold one task per target)."""
    if subset is not None and not 0.0 < subset <= 1.0:
        raise EvaluationError(f"--subset must be a fraction in (0, 1], got {subset}")
    if subset is None or subset == 1.0:
        return frame.reset_index(drop=True)
    rng = np.random.default_rng(seed)
    keep = []
    for _, group in frame.groupby(STRATA, sort=True):
        n = math.ceil(subset * len(group))
        keep.extend(sorted(rng.choice(group.index.to_numpy(), size=n, replace=False).tolist()))
    return frame.loc[sorted(keep)].reset_index(drop=True)


def _model_label(model: Forecaster | str) -> str:
    return model if isinstance(model, str) else model.name


def _score_chunk(
    corpus_path: str, task_ids: list[str], models: list[Forecaster | str]
) -> list[pd.DataFrame]:
    """Forecast and score one chunk of tasks with several models; reads the tasks once."""
    from whatif_bench.generator.corpus import Corpus

    with Corpus(corpus_path) as corpus:
        tasks = [corpus[task_id] for task_id in task_ids]
    inputs = [TaskInput(t.history_target, t.history_covariates, t.future_covariates) for t in tasks]
    frames = []
    for model in models:
        forecaster = make_forecaster(model) if isinstance(model, str) else model
        forecasts = forecaster.predict(inputs)
        if len(forecasts) != len(tasks):
            raise EvaluationError(
                f"model {forecaster.name!r} returned {len(forecasts)} forecasts for {len(tasks)} tasks"
            )
        rows = []
        for task, forecast in zip(tasks, forecasts, strict=True):
            for name, value in (("point", forecast.point), ("quantiles", forecast.quantiles)):
                if value is not None and np.asarray(value).shape[0] != task.prediction_length:
                    raise EvaluationError(
                        f"model {forecaster.name!r}: {name} forecast of {task.task_id} has the wrong length"
                    )
            metrics = score(
                task.future_target.astype(np.float64), forecast.point, forecast.quantiles
            )
            rows.append({"task_id": task.task_id, "model": _model_label(model), **metrics})
        frames.append(pd.DataFrame(rows))
    return frames


def _write_atomic(frame: pd.DataFrame, path: Path) -> None:
    tmp = path.with_name(path.name + ".partial")
    frame.to_parquet(tmp, index=False)
    os.replace(tmp, path)


def _manifest(
    corpus_path: Path, attrs: dict, tasks: pd.DataFrame, subset: float | None, seed: int
) -> dict:
    digest = hashlib.sha256("\n".join(tasks["task_id"]).encode()).hexdigest()
    return {
        "corpus": str(corpus_path.resolve()),
        "corpus_baselines_hash": attrs.get("baselines_hash"),
        "corpus_registry_hash": attrs.get("registry_hash"),
        "corpus_seed": attrs.get("master_seed"),
        "subset": subset,
        "subset_seed": seed,
        "tasks": len(tasks),
        "tasks_hash": digest,
    }


def evaluate(
    corpus_path: str | os.PathLike,
    models: list[Forecaster | str],
    out: str | os.PathLike,
    subset: float | None = None,
    jobs: int = 1,
    reference: str = "naive",
    seed: int = 0,
    progress: bool = True,
) -> EvaluationResult:
    """Score every model on the corpus (or a stratified subset) and write the reports to ``out``."""
    from joblib import Parallel, delayed
    from tqdm import tqdm

    from whatif_bench.evaluation.report import write_reports
    from whatif_bench.generator.corpus import Corpus

    corpus_path, out = Path(corpus_path), Path(out)
    labels = [_model_label(m) for m in models]
    if len(set(labels)) != len(labels):
        raise EvaluationError(f"model names must be unique, got {labels}")
    for model in models:
        if isinstance(model, str):
            make_forecaster(model)  # unknown names fail before any work
    if reference not in labels:
        raise EvaluationError(
            f"the reference model {reference!r} must be one of the models {labels}"
        )
    with Corpus(corpus_path) as corpus:
        frame, attrs = corpus.tasks_frame(), corpus.attrs
    if frame.empty:
        raise EvaluationError(f"{corpus_path} holds no tasks")
    tasks = select_tasks(frame, subset, seed)
    manifest = _manifest(corpus_path, attrs, tasks, subset, seed)
    out.mkdir(parents=True, exist_ok=True)
    manifest_path = out / "manifest.json"
    if manifest_path.exists():
        previous = json.loads(manifest_path.read_text())
        if previous != manifest:
            raise EvaluationError(
                f"{out} holds results of another evaluation (corpus or selection differ); use a new --out"
            )
    else:
        manifest_path.write_text(json.dumps(manifest, indent=1))

    ids = tasks["task_id"].tolist()
    chunks = [ids[i : i + CHUNK] for i in range(0, len(ids), CHUNK)]
    for label in labels:
        (out / "per_task" / label).mkdir(parents=True, exist_ok=True)
    todo = []  # (chunk, [(model, path), ...]) for chunks some model has not scored yet
    for index, chunk in enumerate(chunks):
        pending = [
            (model, out / "per_task" / label / f"chunk-{index:05d}.parquet")
            for model, label in zip(models, labels, strict=True)
        ]
        pending = [(model, path) for model, path in pending if not path.exists()]
        if pending:
            todo.append((chunk, pending))
    bar = tqdm(total=len(todo), desc="evaluating", unit="chunk", disable=not progress)
    calls = [(str(corpus_path), chunk, [m for m, _ in pending]) for chunk, pending in todo]
    if jobs == 1:
        results = (_score_chunk(*call) for call in calls)
    else:
        results = Parallel(n_jobs=jobs, return_as="generator")(
            delayed(_score_chunk)(*call) for call in calls
        )
    for (_, pending), frames in zip(todo, results, strict=True):
        for (_, path), frame in zip(pending, frames, strict=True):
            _write_atomic(frame, path)
        bar.update()
    bar.close()

    parts = [
        pd.read_parquet(p)
        for label in labels
        for p in sorted((out / "per_task" / label).glob("chunk-*.parquet"))
    ]
    per_task = pd.concat(parts, ignore_index=True).merge(tasks, on="task_id", how="inner")
    per_task.to_parquet(out / "per_task.parquet", index=False)
    board = write_reports(per_task, reference, out)
    return EvaluationResult(per_task, board, reference, out)
