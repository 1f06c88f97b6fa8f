"""Fresh tasks per second of the training stream: the numba fast path against the reference.

    python benchmarks/bench_stream.py [--count N] [--loader-count N] [--reference-share F]
                                      [--simulators S ...] [--benchmark-worlds]

Phases, each in its own process (so its peak RSS is its own), all on one seed:

- ``C1``/``C4`` tasks with and without the 10 % rule. The reference is the stream's old path,
  ``TaskStream._reference_task``: ``draw_recipe_from`` then ``build_pair`` (the generator's own
  functions, one NumPy draw at a time; without the rule, ``materialise`` and the first draw).
  The fast path is ``TaskStream.tasks`` (numba kernels, batches of 64 slots), and
  ``stream.plan.make_batch(verify=False)`` without the rule. Both build the same ``Task``
  objects (tests/test_stream_kernels.py compares them bit for bit).
- The DataLoader rate: ``StreamDataset`` through ``torch.utils.data.DataLoader`` with
  ``collate_tasks`` (batch size 32, default distribution), the reference stream with 0 workers,
  the fast one with 0 and 2 workers (start-up included).

Per phase: tasks, wall seconds, tasks/s of wall time, CPU seconds (the process's and its
workers'), tasks per CPU second (= per core: the machine is shared, so wall time depends on the
load while CPU time mostly does not) and peak RSS. The reference phases make
``--reference-share`` of the fast phases' tasks (it is an order of magnitude slower). Every phase first makes
one task outside the timed range, so world loading and numba's compilation are not timed.
The stream draws from the training worlds of ``--simulators`` (built and cached on first use)
unless ``--benchmark-worlds``. Nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

SEED = 2026
BATCH = 64  # slots per kernel call, as TaskStream.tasks
LOADER_BATCH = 32
PHASES = [
    f"{path}-{context}-{rule}"
    for context in ("C1", "C4")
    for rule in ("verified", "unverified")
    for path in ("reference", "fast")
] + ["loader-reference-0", "loader-fast-0", "loader-fast-2"]


def _stream(args, context: str | None, fast: bool, count: int | None = None):
    from whatif_bench.stream import AxisDistribution, TaskStream

    distribution = AxisDistribution(contexts={context: 1}) if context else AxisDistribution()
    options = {"count": count, "distribution": distribution, "fast": fast}
    if args.benchmark_worlds:
        from whatif_bench.stream.sources import benchmark_sources

        return TaskStream(SEED, sources=benchmark_sources(args.simulators), **options)
    return TaskStream(SEED, simulators=args.simulators, **options)


def _make_tasks(stream, n: int, fast: bool, verify: bool) -> int:
    """Make slots 0 .. n - 1 as Task objects; returns how many were made."""
    from whatif_bench.stream.plan import make_batch

    made = 0
    if not fast:
        for slot in range(n):
            stream._reference_task(slot, verify=verify)
            made += 1
    elif verify:
        for _ in stream.tasks(range(n)):
            made += 1
    else:
        plan = stream.plan()
        for first in range(0, n, BATCH):
            batch = make_batch(plan, stream.seed, range(first, min(first + BATCH, n)), 1000, False)
            for i in range(len(batch.slots)):
                batch.task(i)
                made += 1
    return made


def _load(stream, workers: int) -> int:
    from torch.utils.data import DataLoader

    from whatif_bench.stream import StreamDataset, collate_tasks

    loader = DataLoader(
        StreamDataset(stream),
        batch_size=LOADER_BATCH,
        num_workers=workers,
        collate_fn=collate_tasks,
    )
    return sum(len(batch["task_id"]) for batch in loader)


def _phase(args) -> dict:
    parts = args.phase.split("-")
    reference = "reference" in parts
    share = args.reference_share if reference else 1.0
    if parts[0] == "loader":
        n = max(1, round(args.loader_count * share))
        stream = _stream(args, None, fast=not reference, count=n)
    else:
        n = max(1, round(args.count * share * (0.25 if parts[1] == "C4" else 1.0)))
        stream = _stream(args, parts[1], fast=not reference)
    stream._reference_task(n + 1) if reference else stream.task(n + 1)  # worlds, compilation
    if parts[0] == "loader":
        import torch.utils.data  # noqa: F401 (imported before the timed range)
    before = resource.getrusage(resource.RUSAGE_SELF)
    cpu_before = before.ru_utime + before.ru_stime
    started = time.perf_counter()
    if parts[0] == "loader":
        made = _load(stream, int(parts[2]))
    else:
        made = _make_tasks(stream, n, fast=not reference, verify=parts[2] == "verified")
    seconds = time.perf_counter() - started
    own, workers = (resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return {
        "tasks": made,
        "seconds": seconds,
        "cpu_seconds": own.ru_utime
        + own.ru_stime
        - cpu_before
        + workers.ru_utime
        + workers.ru_stime,
        "peak_mib": own.ru_maxrss / 1024,  # KiB -> MiB
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=20_000, help="fast C1 tasks (C4: 1/4)")
    parser.add_argument("--loader-count", type=int, default=8_000, help="fast DataLoader tasks")
    parser.add_argument("--reference-share", type=float, default=0.05)
    parser.add_argument("--simulators", nargs="+", default=["epanet", "gridlabd"])
    parser.add_argument("--benchmark-worlds", action="store_true")
    parser.add_argument("--phase", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phase:
        print(json.dumps(_phase(args)))
        return
    if not args.benchmark_worlds:
        _stream(args, None, fast=True).entries()  # builds missing training worlds, untimed
    results = {}
    for phase in PHASES:
        command = [sys.executable, __file__, "--phase", phase, "--count", str(args.count)]
        command += ["--loader-count", str(args.loader_count)]
        command += ["--reference-share", str(args.reference_share)]
        command += ["--simulators", *args.simulators]
        command += ["--benchmark-worlds"] if args.benchmark_worlds else []
        done = subprocess.run(command, capture_output=True, text=True, check=True)
        results[phase] = json.loads(done.stdout.strip().splitlines()[-1])
    worlds = "benchmark baselines" if args.benchmark_worlds else "training worlds"
    print(f"stream of {' '.join(args.simulators)} ({worlds}), seed {SEED}")
    print(
        f"{'phase':<52} {'tasks':>7} {'wall s':>8} {'tasks/s':>9} {'CPU s':>7} "
        f"{'tasks/CPU s':>12} {'peak RSS MiB':>13}"
    )
    for phase, r in results.items():
        print(
            f"{_label(phase):<52} {r['tasks']:>7,} {r['seconds']:>8.2f} "
            f"{r['tasks'] / r['seconds']:>9,.0f} {r['cpu_seconds']:>7.2f} "
            f"{r['tasks'] / r['cpu_seconds']:>12,.0f} {r['peak_mib']:>13,.0f}"
        )
    print("fast path against the reference (tasks per CPU second, wall in brackets):")
    pairs = [
        (f"reference-{c}-{v}", f"fast-{c}-{v}")
        for c in ("C1", "C4")
        for v in ("verified", "unverified")
    ]
    pairs += [("loader-reference-0", "loader-fast-0"), ("loader-reference-0", "loader-fast-2")]
    for slow, fast in pairs:
        a, b = results[slow], results[fast]
        cpu = (b["tasks"] / b["cpu_seconds"]) / (a["tasks"] / a["cpu_seconds"])
        wall = (b["tasks"] / b["seconds"]) / (a["tasks"] / a["seconds"])
        print(f"  {_label(fast):<50} {cpu:>6.1f}x ({wall:.1f}x)")


def _label(phase: str) -> str:
    parts = phase.split("-")
    if parts[0] == "loader":
        path = "reference" if parts[1] == "reference" else "fast"
        return f"DataLoader(StreamDataset), {path}, {parts[2]} workers"
    if parts[0] == "fast":
        return f"{parts[1]} {parts[2]}, fast path"
    old = "build_pair" if parts[2] == "verified" else "materialise"
    return f"{parts[1]} {parts[2]}, reference: draw_recipe_from + {old}"


if __name__ == "__main__":
    main()
