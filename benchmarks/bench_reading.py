"""Reading tasks through ``Corpus`` against raw h5py slices of the same arrays, in one run.

    python benchmarks/bench_reading.py [--corpus FILE] [--random 2000] [--sequential 5000]
                                       [--batched 20000] [--batch 256] [--repeats 3]

Three ways of reading, each timed for the toolkit and for a plain reference that reads the same
bytes with h5py from the offsets in ``/pairs`` (docs/CORPUS_FORMAT.md) and builds nothing:

- random: ``corpus[task_id]`` (a whole ``Task``) for ``--random`` tasks in a seeded order,
  against the four slices of each task (history target and covariates, the future's
  covariates and target); median and 90th percentile per task;
- sequential: ``Corpus`` iterated in its order for the first ``--sequential`` tasks, against
  the same tasks read in the same chunks as ``Corpus`` reads them (``ITER_CHUNK`` tasks: one
  slice per dataset, cut in memory, or a slice per task where they lie far apart);
- batched: ``corpus.task_inputs(ids)`` and ``corpus.ground_truths(ids)`` (what ``whatif
  evaluate`` reads) for the first ``--batched`` tasks in the file's order (pair by pair, as the
  arrays are stored) in batches of ``--batch``, against one slice per dataset per batch, cut in
  memory.

Each figure is the median of ``--repeats`` runs, in CPU seconds of this process and in wall
seconds, with the ratio toolkit / reference; the toolkit's and the reference's runs alternate.
Every run opens the file again, so h5py's chunk cache starts empty; the file itself is in the
page cache after the first run. Peak RSS is this one process's. Builds the default corpus first
when no file is given.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import tempfile
import time
from collections.abc import Callable
from itertools import islice
from pathlib import Path

import numpy as np
from default_corpus import corpus_or_default
from machine import cpu_seconds

DATASETS = ("history_target", "history_covariates", "future_target", "future_covariates")


class RawTasks:
    """The plain reference: a task's four arrays straight from h5py (no checks, no objects)."""

    def __init__(self, path: Path) -> None:
        import h5py

        self.h5 = h5py.File(path, "r")
        pairs = self.h5["pairs"]
        ids = pairs["pair_id"].asstr()[:]
        self.row = {pair_id: row for row, pair_id in enumerate(ids)}
        self.columns = {
            name: pairs[name][:].astype(np.int64)
            for name in ("k", "context", "prediction", *(f"{d}_offset" for d in DATASETS))
        }
        self.data = {name: self.h5["data"][name] for name in DATASETS}

    def place(self, task_id: str) -> tuple[int, int]:
        pair_id, _, future = task_id.rpartition("/")
        return self.row[pair_id], ("replay", "novel").index(future)

    def spans(self, row: int, future: int) -> dict[str, tuple[int, int]]:
        """(start, stop) of the task's slice of each dataset."""
        c = self.columns
        k, context, prediction = c["k"][row], c["context"][row], c["prediction"][row]
        return {
            "history_target": (c["history_target_offset"][row], context),
            "history_covariates": (c["history_covariates_offset"][row], k * context),
            "future_target": (c["future_target_offset"][row] + future * prediction, prediction),
            "future_covariates": (
                c["future_covariates_offset"][row] + future * k * prediction,
                k * prediction,
            ),
        }

    def task(self, task_id: str) -> list[np.ndarray]:
        spans = self.spans(*self.place(task_id))
        return [self.data[d][start : start + n] for d, (start, n) in spans.items()]

    def batch(self, task_ids: list[str]) -> list[list[np.ndarray]]:
        """One slice per dataset over the batch's span, cut per task in memory; a slice per
        task where the tasks' slices cover less than half of that span (tasks far apart in
        the file, as where Replay's tasks end and Novel's begin in a corpus's order)."""
        spans = [self.spans(*self.place(t)) for t in task_ids]
        out: list[list[np.ndarray]] = [[] for _ in task_ids]
        for name in DATASETS:
            low = min(s[name][0] for s in spans)
            high = max(s[name][0] + s[name][1] for s in spans)
            if 2 * sum(s[name][1] for s in spans) < high - low:
                for index, s in enumerate(spans):
                    start, n = s[name]
                    out[index].append(self.data[name][start : start + n])
                continue
            block = self.data[name][low:high]
            for index, s in enumerate(spans):
                start, n = s[name]
                out[index].append(block[start - low : start - low + n])
        return out

    def close(self) -> None:
        self.h5.close()


def _timed(run: Callable[[], list[float]]) -> tuple[float, float, list[float]]:
    """(CPU s, wall s, the per-item times ``run`` returns) of one run."""
    cpu, wall = cpu_seconds(), time.perf_counter()
    per_item = run()
    return cpu_seconds() - cpu, time.perf_counter() - wall, per_item


def _ratio(toolkit: float, reference: float) -> str:
    """``toolkit / reference`` as ``1.23x``; ``n/a`` when the reference took no measurable
    time (CPU time is counted in clock ticks: a tiny run can read as 0)."""
    return f"{toolkit / reference:.2f}x" if reference > 0 else "n/a"


def measure(path: Path, args: argparse.Namespace) -> dict[str, dict[str, dict[str, float]]]:
    """mode -> {"toolkit", "reference"} -> figures (medians over the repeats)."""
    from whatif_bench.corpus import Corpus
    from whatif_bench.corpus.reader import ITER_CHUNK

    with Corpus(path) as corpus:
        ids = corpus.task_ids()
    order = [ids[i] for i in np.random.default_rng(0).permutation(len(ids))[: args.random]]
    sequential = ids[: args.sequential]
    raw = RawTasks(path)
    stored = sorted(ids, key=raw.place)  # the order of the arrays in the file: pair, then future
    raw.close()
    batched = stored[: args.batched]
    batches = [batched[i : i + args.batch] for i in range(0, len(batched), args.batch)]

    def random_toolkit() -> list[float]:
        with Corpus(path) as corpus:
            times = []
            for task_id in order:
                started = time.perf_counter()
                corpus[task_id]
                times.append(time.perf_counter() - started)
        return times

    def random_reference() -> list[float]:
        raw = RawTasks(path)
        times = []
        for task_id in order:
            started = time.perf_counter()
            raw.task(task_id)
            times.append(time.perf_counter() - started)
        raw.close()
        return times

    def sequential_toolkit() -> list[float]:
        with Corpus(path) as corpus:
            for _ in islice(corpus, len(sequential)):
                pass
        return []

    def sequential_reference() -> list[float]:
        raw = RawTasks(path)
        for first in range(0, len(sequential), ITER_CHUNK):
            raw.batch(sequential[first : first + ITER_CHUNK])
        raw.close()
        return []

    def batched_toolkit() -> list[float]:
        with Corpus(path) as corpus:
            for batch in batches:
                corpus.task_inputs(batch)
                corpus.ground_truths(batch)
        return []

    def batched_reference() -> list[float]:
        raw = RawTasks(path)
        for batch in batches:
            raw.batch(batch)
        raw.close()
        return []

    runs = {
        f"random corpus[id], {len(order):,} tasks": (random_toolkit, random_reference),
        f"sequential, {len(sequential):,} tasks": (sequential_toolkit, sequential_reference),
        f"batched ({args.batch}), {len(batched):,} tasks": (batched_toolkit, batched_reference),
    }
    results: dict[str, dict[str, dict[str, float]]] = {}
    whos = ("toolkit", "reference")
    for mode, pair in runs.items():
        figures: dict[str, dict[str, list[float]]] = {
            who: {"cpu": [], "wall": [], "median": [], "p90": []} for who in whos
        }
        # the toolkit and the reference take turns, so that a drift of the machine's speed
        # during the repeats reaches both alike
        for _ in range(args.repeats):
            for who, run in zip(whos, pair, strict=True):
                cpu, wall, per_item = _timed(run)
                figures[who]["cpu"].append(cpu)
                figures[who]["wall"].append(wall)
                if per_item:
                    figures[who]["median"].append(float(np.median(per_item)))
                    figures[who]["p90"].append(float(np.percentile(per_item, 90)))
        results[mode] = {
            who: {k: statistics.median(v) for k, v in figures[who].items() if v} for who in whos
        }
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", help="a corpus file (default: generate the default corpus)")
    parser.add_argument("--random", type=int, default=2000, help="random reads (default 2000)")
    parser.add_argument(
        "--sequential", type=int, default=5000, help="tasks read in order (default 5000)"
    )
    parser.add_argument(
        "--batched", type=int, default=20000, help="tasks read in batches (default 20000)"
    )
    parser.add_argument("--batch", type=int, default=256, help="tasks per batch (default 256)")
    parser.add_argument("--repeats", type=int, default=3, help="runs, median kept (default 3)")
    args = parser.parse_args()
    folder = tempfile.TemporaryDirectory()
    path = corpus_or_default(args.corpus, folder.name)
    results = measure(path, args)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"corpus {path}; medians of {args.repeats} runs; peak RSS {peak:,.0f} MiB")
    print(f"{'mode':<36} {'who':<10} {'cpu s':>7} {'wall s':>7} {'median µs':>10} {'p90 µs':>8}")
    for mode, by in results.items():
        for who, r in by.items():
            each = f"{r['median'] * 1e6:>10.0f} {r['p90'] * 1e6:>8.0f}" if "median" in r else ""
            print(f"{mode:<36} {who:<10} {r['cpu']:>7.2f} {r['wall']:>7.2f} {each}")
        tool, ref = by["toolkit"], by["reference"]
        ratio = f"ratio toolkit / reference: CPU {_ratio(tool['cpu'], ref['cpu'])}"
        if "median" in tool:
            ratio += f", median {_ratio(tool['median'], ref['median'])}"
            ratio += f", p90 {_ratio(tool['p90'], ref['p90'])}"
        print(f"{'':<36} {ratio}")


if __name__ == "__main__":
    main()
