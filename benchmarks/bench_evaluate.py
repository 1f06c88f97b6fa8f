"""Seconds per task of every baseline forecaster, on a stratified sample of the default corpus.

    python benchmarks/bench_evaluate.py [--corpus FILE] [--tasks 300]

Builds the default corpus first when no file is given. Times reading the tasks (whole, and as
``evaluate`` reads them: model inputs and truths), ``predict`` alone (tasks are read beforehand)
on one core, and the scoring of the forecasts, for each baseline.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from whatif_bench.corpus import select_tasks
from whatif_bench.evaluation.forecasters import BASELINES, TaskInput, make_forecaster
from whatif_bench.evaluation.metrics import score
from whatif_bench.generator import Corpus, GenerationConfig, generate
from whatif_bench.simulators import shipped_baselines_path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus")
    parser.add_argument("--tasks", type=int, default=300, help="about this many tasks, stratified")
    args = parser.parse_args()
    folder = tempfile.TemporaryDirectory()
    path = Path(args.corpus) if args.corpus else Path(folder.name) / "corpus.h5"
    if not args.corpus:
        generate(
            GenerationConfig(baselines=str(shipped_baselines_path()), out=str(path)), progress=False
        )
    with Corpus(path) as corpus:
        frame = corpus.tasks_frame()
        sample = select_tasks(frame, min(1.0, args.tasks / len(frame)), seed=0)
        ids = sample["task_id"].tolist()
        started = time.perf_counter()
        tasks = [corpus[task_id] for task_id in ids]
        read = (time.perf_counter() - started) / len(tasks)
        started = time.perf_counter()
        corpus.task_inputs(ids), corpus.ground_truths(ids)  # what evaluate reads
        read_parts = (time.perf_counter() - started) / len(tasks)
    inputs = [TaskInput.from_task(t) for t in tasks]
    mean_context = np.mean([t.context_length for t in tasks])
    print(
        f"{len(tasks)} tasks (mean context {mean_context:,.0f} steps); reading {read * 1e3:.2f} "
        f"ms/task as full tasks, {read_parts * 1e3:.2f} ms/task as model inputs and truths"
    )
    print(f"{'model':<15} {'s/task':>10} {'tasks/s':>9} {'scoring ms/task':>16}")
    for name in BASELINES:
        model = make_forecaster(name)
        started = time.perf_counter()
        forecasts = model.predict(inputs)
        seconds = (time.perf_counter() - started) / len(inputs)
        started = time.perf_counter()
        for task, forecast in zip(tasks, forecasts, strict=True):
            score(task.future_target.astype(np.float64), forecast.point, forecast.quantiles)
        scoring = (time.perf_counter() - started) / len(inputs)
        print(f"{name:<15} {seconds:>10.5f} {1 / seconds:>9.1f} {scoring * 1e3:>16.3f}")
    folder.cleanup()


if __name__ == "__main__":
    main()
