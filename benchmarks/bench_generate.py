"""Wall time, throughput, file size and peak memory of generating the full default corpus.

    python benchmarks/bench_generate.py [--jobs N] [--out FILE]

Generates every target of the shipped baselines (seed 0) exactly as ``whatif generate`` does,
then reads 2,000 random tasks back to time O(1) access. Peak memory is the largest resident
set of this process and of its worker processes.
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
from pathlib import Path

import numpy as np

from whatif_bench.cli_types import positive_int
from whatif_bench.generator import Corpus, GenerationConfig, generate
from whatif_bench.simulators import shipped_baselines_path
from whatif_bench.workers import default_jobs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=positive_int, default=default_jobs())
    parser.add_argument("--out", help="corpus file (default: a temporary file, removed afterwards)")
    args = parser.parse_args()
    folder = tempfile.TemporaryDirectory()
    out = Path(args.out) if args.out else Path(folder.name) / "corpus.h5"
    config = GenerationConfig(baselines=str(shipped_baselines_path()), out=str(out), jobs=args.jobs)

    started = time.perf_counter()
    generate(config, progress=False)
    seconds = time.perf_counter() - started
    size_mb = out.stat().st_size / 1e6
    with Corpus(out) as corpus:
        tasks_generated = int(corpus.attrs["n_tasks_generated"])
        tasks_kept = len(corpus)
        ids = corpus.task_ids()
        rng = np.random.default_rng(0)
        picks = rng.choice(len(ids), size=min(2000, len(ids)), replace=False)
        read_start = time.perf_counter()
        for i in picks:
            corpus[ids[i]]
        per_task_ms = (time.perf_counter() - read_start) / picks.size * 1e3
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024

    print(f"workers               {args.jobs} (cores: {os.cpu_count()})")
    share = tasks_kept / tasks_generated
    print(f"tasks                 {tasks_generated:,} generated, {tasks_kept:,} kept ({share:.1%})")
    print(f"wall time             {seconds:.1f} s")
    print(f"throughput            {tasks_generated / seconds:,.0f} tasks/s generated and verified")
    print(f"file size             {size_mb:,.0f} MB")
    print(f"peak memory           {own:,.0f} MiB main process, {children:,.0f} MiB largest worker")
    print(f"random task read      {per_task_ms:.2f} ms per task (2,000 random ids)")
    folder.cleanup()


if __name__ == "__main__":
    main()
