"""Tasks/s, wall time and peak memory of PyTorch DataLoaders over the stream and the corpus.

    python benchmarks/bench_dataloader.py [--count N] [--batch-size B] [--simulators S ...]
                                          [--benchmark-worlds] [--corpus FILE] [--repeats 3]

Each phase runs in its own process so its peak RSS is its own (the largest worker's is shown
apart). The references are plain loops in one process: ``TaskStream`` alone, ``TaskStream`` turning
each task into an item, and ``Corpus`` reading each task of the file in order and turning it
into an item. A floor phase runs the
stream's loop and makes each batch's six float arrays, zero-padded as ``collate_tasks`` pads
them, in plain numpy and nothing else: what padding alone costs. The DataLoader phases put
``StreamDataset`` and ``CorpusDataset`` behind a ``DataLoader`` with 0 and 2 workers and
``collate_tasks`` batches, and the same datasets in ``PaddedBatches`` (the same batches made
straight from the tasks; for the stream also ``by_context``, batches of one context label);
worker start-up is included. With 0 workers ``StreamDataset`` draws the stream's next kernel
batch in a second thread (its default ``draw_ahead``) while the main thread makes items or
batches; the references run in one thread. CPU seconds are the main process's (every thread)
and its workers' (summed), so wall times on a loaded machine, or with two threads, can be read
against them. Every phase
first draws one task outside the timed range, so numba's compilation is not timed. The stream
draws from the training worlds of ``--simulators`` (built and cached on first use) unless
``--benchmark-worlds``; without ``--corpus``, a corpus of a few EPANET and GridLAB-D targets is
generated first. Each phase runs ``--repeats`` times; the run of median wall time is shown, and
the ratios are of those medians. The load average is printed before and after.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import load_average

CORPUS_TARGETS = (
    "epanet/pressure_10",
    "epanet/flowrate_110",
    "gridlabd/total_load",
    "gridlabd/hvac_load",
)
SEED = 2026


def _stream(args):
    from whatif_bench.stream import TaskStream

    if args.benchmark_worlds:
        from whatif_bench.stream.sources import benchmark_sources

        sources = benchmark_sources(args.simulators)
        return TaskStream(SEED, count=args.count, sources=sources)
    return TaskStream(SEED, count=args.count, simulators=args.simulators)


def padded_floor(items: list[dict]) -> dict:
    """The least a padded batch of ``items`` costs: one zeroed float32 buffer shaped as
    ``collate_tasks``'s six arrays (B, [K_max,] C_max or H_max) and each item's arrays copied
    into their rows, with none of its checks, masks, integers or texts. Returns the arrays by
    name (numpy views of the buffer; the tests compare them with ``collate_tasks``'s)."""
    import numpy as np

    from whatif_bench.stream.slot_blocks import COVARIATE_ARRAYS, FUTURE_ARRAYS, HISTORY_ARRAYS

    k_max = max(item["k"] for item in items)
    c_max = max(item["context_length"] for item in items)
    h_max = max(item["prediction_length"] for item in items)
    shapes = {
        name: (len(items), *((k_max,) if name in COVARIATE_ARRAYS else ()), length)
        for names, length in ((HISTORY_ARRAYS, c_max), (FUTURE_ARRAYS, h_max))
        for name in names
    }
    flat = np.zeros(sum(int(np.prod(shape)) for shape in shapes.values()), dtype=np.float32)
    start, arrays = 0, {}
    for name, shape in shapes.items():
        out = arrays[name] = flat[start : start + int(np.prod(shape))].reshape(shape)
        start += out.size
        history = name in HISTORY_ARRAYS
        for row, item in enumerate(items):
            values = item[name]
            steps = values.shape[-1]
            columns = slice(shape[-1] - steps, None) if history else slice(0, steps)
            if values.ndim == 1:
                out[row, columns] = values
            else:
                out[row, : values.shape[0], columns] = values
    return arrays


def _load_placement_kernel() -> None:
    """``PaddedBatches``' kernel (``slot_blocks.place_blocks``) loaded, as the stream's are."""
    import numpy as np

    from whatif_bench.stream.slot_blocks import BATCH_ARRAYS, COVARIATE_ARRAYS, place_blocks

    out = {
        name: np.zeros((1, 1, 1) if name in COVARIATE_ARRAYS else (1, 1), np.float32)
        for name in BATCH_ARRAYS
    }
    one = np.ones(1, dtype=np.int64)
    place_blocks(np.zeros(6, dtype=np.float32), one * 0, one, one, one, one * 0, out)


def _phase(args) -> dict:
    from torch.utils.data import DataLoader

    from whatif_bench.generator import Corpus
    from whatif_bench.stream import (
        CorpusDataset,
        PaddedBatches,
        StreamDataset,
        collate_tasks,
        task_item,
    )

    source, _, workers = args.phase.partition("-")
    stream = _stream(args) if source == "stream" else None
    if stream is not None:
        stream.task(args.count)  # worlds loaded and kernels compiled, outside the timed range
        _load_placement_kernel()
    before = resource.getrusage(resource.RUSAGE_SELF)
    cpu_before = before.ru_utime + before.ru_stime
    started = time.perf_counter()
    n = 0
    if workers == "raw" and stream is not None:
        for _task in stream:
            n += 1
    elif workers == "loop" and stream is not None:
        for slot, task in enumerate(stream):
            task_item(task, slot)
            n += 1
    elif workers == "padded" and stream is not None:
        items = []
        for slot, task in enumerate(stream):
            items.append(task_item(task, slot))
            if len(items) == args.batch_size or slot == args.count - 1:
                padded_floor(items)
                n += len(items)
                items = []
    elif workers == "loop":
        with Corpus(args.corpus) as corpus:
            for index, task in enumerate(corpus):
                task_item(task, index)
                n += 1
    else:
        dataset = StreamDataset(stream) if stream is not None else CorpusDataset(args.corpus)
        kind, _, count = workers.rpartition("-")
        if kind:  # "batched-W" or "context-W": PaddedBatches
            batches = PaddedBatches(dataset, args.batch_size, by_context=kind == "context")
            loader = batches.loader(num_workers=int(count))
        else:
            loader = DataLoader(
                dataset,
                batch_size=args.batch_size,
                num_workers=int(workers),
                collate_fn=collate_tasks,
            )
        for batch in loader:
            n += len(batch["task_id"])
    seconds = time.perf_counter() - started
    own, workers_used = (
        resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )
    return {
        "tasks": n,
        "seconds": seconds,
        "cpu_seconds": own.ru_utime + own.ru_stime - cpu_before,
        "worker_cpu_seconds": workers_used.ru_utime + workers_used.ru_stime,
        "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,  # KiB -> MiB
        "worker_peak_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--count", type=int, default=20000, help="stream tasks per phase (default 20000)"
    )
    parser.add_argument("--batch-size", type=int, default=32, help="batch size (default 32)")
    parser.add_argument(
        "--simulators",
        nargs="+",
        default=["epanet", "gridlabd"],
        help="simulators the stream draws from (default: epanet gridlabd)",
    )
    parser.add_argument(
        "--benchmark-worlds",
        action="store_true",
        help="stream from the benchmark baselines, not the training worlds",
    )
    parser.add_argument("--corpus", help="corpus file (default: generate a small one)")
    parser.add_argument(
        "--repeats", type=int, default=3, help="runs per phase, median shown (default 3)"
    )
    parser.add_argument("--phase", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phase:
        print(json.dumps(_phase(args)))
        return
    folder = tempfile.TemporaryDirectory()
    if not args.corpus:
        from whatif_bench.generator import GenerationConfig, generate
        from whatif_bench.simulators import shipped_baselines_path

        args.corpus = str(Path(folder.name) / "corpus.h5")
        started = time.perf_counter()
        config = GenerationConfig(
            baselines=str(shipped_baselines_path()), out=args.corpus, targets=CORPUS_TARGETS
        )
        generate(config, progress=False)
        print(f"generated a corpus of {CORPUS_TARGETS} in {time.perf_counter() - started:.1f} s")
    if not args.benchmark_worlds:
        _stream(args).entries()  # builds missing training worlds once, before any timing
    phases = (
        "stream-raw",
        "stream-loop",
        "stream-padded",
        "stream-0",
        "stream-batched-0",
        "stream-context-0",
        "stream-2",
        "stream-batched-2",
        "stream-context-2",
        "corpus-loop",
        "corpus-0",
        "corpus-batched-0",
        "corpus-2",
        "corpus-batched-2",
    )
    load_before = load_average()
    results = {}
    for phase in phases:
        command = [sys.executable, __file__, "--phase", phase, "--corpus", args.corpus]
        command += ["--count", str(args.count), "--batch-size", str(args.batch_size)]
        command += ["--simulators", *args.simulators]
        command += ["--benchmark-worlds"] if args.benchmark_worlds else []
        runs = []
        for _ in range(args.repeats):
            done = subprocess.run(command, capture_output=True, text=True, check=True)
            runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
        results[phase] = sorted(runs, key=lambda r: r["seconds"])[len(runs) // 2]
    worlds = "benchmark baselines" if args.benchmark_worlds else "training worlds"
    print(
        f"stream: {args.count:,} tasks of {' '.join(args.simulators)} ({worlds}), seed {SEED}; "
        f"corpus {args.corpus} ({Path(args.corpus).stat().st_size / 2**20:,.0f} MiB); "
        f"batch size {args.batch_size}; median of {args.repeats} runs per phase; "
        f"load average {load_before} before, {load_average()} after"
    )
    labels = {
        "stream-raw": "reference: TaskStream alone",
        "stream-loop": "reference: TaskStream -> task_item",
        "stream-padded": "floor: the loop + padded float arrays",
        "stream-0": "DataLoader(StreamDataset), 0 workers",
        "stream-batched-0": "PaddedBatches(StreamDataset), 0 workers",
        "stream-context-0": "the same, by_context, 0 workers",
        "stream-2": "DataLoader(StreamDataset), 2 workers",
        "stream-batched-2": "PaddedBatches(StreamDataset), 2 workers",
        "stream-context-2": "the same, by_context, 2 workers",
        "corpus-loop": "reference: Corpus -> task_item",
        "corpus-0": "DataLoader(CorpusDataset), 0 workers",
        "corpus-batched-0": "PaddedBatches(CorpusDataset), 0 workers",
        "corpus-2": "DataLoader(CorpusDataset), 2 workers",
        "corpus-batched-2": "PaddedBatches(CorpusDataset), 2 workers",
    }
    print(
        f"{'phase':<42} {'tasks':>7} {'wall s':>8} {'tasks/s':>9} {'x loop':>7} {'x raw':>6} "
        f"{'CPU s':>7} {'worker CPU s':>13} {'peak RSS MiB':>13} {'worker MiB':>11}"
    )
    for phase, r in results.items():
        pooled = phase.endswith("-2")
        source = phase.partition("-")[0]
        # speed against the plain loop of the same source, and against the bare stream
        loop = results[f"{source}-loop"]["seconds"] / r["seconds"]
        raw = results["stream-raw"]["seconds"] / r["seconds"] if source == "stream" else None
        print(
            f"{labels[phase]:<42} {r['tasks']:>7,} {r['seconds']:>8.2f} "
            f"{r['tasks'] / r['seconds']:>9,.0f} {loop:>6.2f}x "
            + (f"{raw:>5.2f}x" if raw is not None else f"{'-':>6}")
            + f" {r['cpu_seconds']:>7.2f} "
            + (f"{r['worker_cpu_seconds']:>13.2f}" if pooled else f"{'-':>13}")
            + f" {r['peak_mib']:>13,.0f} "
            + (f"{r['worker_peak_mib']:>11,.0f}" if pooled else f"{'-':>11}")
        )
    print(
        "x loop: speed against the plain loop of the same source (TaskStream or Corpus -> "
        "task_item); x raw: against TaskStream alone. The floor makes the plain loop's batches' "
        "padded float arrays in plain numpy (no checks, masks, integers or texts)."
    )
    folder.cleanup()


if __name__ == "__main__":
    main()
