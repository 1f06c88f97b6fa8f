"""Seconds per task of every baseline forecaster, on a stratified sample of the default corpus.

    python benchmarks/bench_evaluate.py [--corpus FILE] [--tasks 300] [--repeats 3]

Builds the default corpus first when no file is given. Times reading the tasks (whole, and as
``evaluate`` reads them: model inputs and truths), ``predict`` alone (tasks are read beforehand)
on one core, and the scoring of the forecasts, for each baseline. Then ``evaluate()`` itself on
the same tasks with ``naive`` and ``ridge`` (one job, a fresh folder each run; median of
``--repeats``), against its plain parts measured in the same run: reading inputs and truths
plus the model's ``predict``. Its reports (tables and the five skill plots) are timed apart:
they cost the same whatever the number of tasks.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
from machine import load_average

from whatif_bench.corpus import select_tasks
from whatif_bench.evaluation.forecasters import (
    BASELINES,
    NoForecast,
    TaskInput,
    make_forecaster,
)
from whatif_bench.evaluation.metrics import score
from whatif_bench.generator import Corpus, GenerationConfig, generate
from whatif_bench.simulators import shipped_baselines_path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", help="corpus file (default: generate the default corpus)")
    parser.add_argument(
        "--tasks", type=int, default=300, help="about this many tasks, stratified (default 300)"
    )
    parser.add_argument(
        "--repeats", type=int, default=3, help="evaluate() runs per model, median (default 3)"
    )
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
            if isinstance(forecast, NoForecast):  # a task the baseline cannot forecast
                continue
            score(task.future_target.astype(np.float64), forecast.point, forecast.quantiles)
        scoring = (time.perf_counter() - started) / len(inputs)
        print(f"{name:<15} {seconds:>10.5f} {1 / seconds:>9.1f} {scoring * 1e3:>16.3f}")
    _end_to_end(path, ids, inputs, read_parts * len(ids), args.repeats, folder.name)
    folder.cleanup()


def _end_to_end(
    path: Path, ids: list[str], inputs: list, reading: float, repeats: int, scratch: str
) -> None:
    """``evaluate()`` on ``ids`` against reading (``reading`` s) plus ``predict``; reports apart."""
    from whatif_bench.evaluation import evaluate, report

    write_reports = report.write_reports
    spent = {"reports": 0.0}

    def timed_reports(*args, **kwargs):
        started = time.perf_counter()
        try:
            return write_reports(*args, **kwargs)
        finally:
            spent["reports"] += time.perf_counter() - started

    print(
        f"evaluate() on these {len(ids)} tasks, one job, load average {load_average()} "
        f"(median of {repeats}; plain parts: reading inputs and truths + predict)"
    )
    print(
        f"{'model':<8} {'evaluate s':>11} {'reports s':>10} {'the rest s':>11} "
        f"{'plain s':>8} {'the rest / plain':>17}"
    )
    report.write_reports = timed_reports
    try:
        for name in ("naive", "ridge"):
            model = make_forecaster(name)
            started = time.perf_counter()
            model.predict(inputs)
            plain = reading + time.perf_counter() - started
            runs = []
            for run in range(repeats):
                spent["reports"] = 0.0
                started = time.perf_counter()
                out = Path(scratch) / f"{name}-{run}"
                evaluate(path, [name], out, task_ids=ids, reference=name, progress=False)
                runs.append((time.perf_counter() - started, spent["reports"]))
            total, reports = sorted(runs)[len(runs) // 2]
            rest = total - reports  # reading, predict, checks, scoring and the chunk files
            print(
                f"{name:<8} {total:>11.2f} {reports:>10.2f} {rest:>11.2f} {plain:>8.2f} "
                f"{rest / plain:>16.2f}x"
            )
    finally:
        report.write_reports = write_reports


if __name__ == "__main__":
    main()
