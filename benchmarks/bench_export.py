"""Wall and CPU time, tasks/s and peak memory of exporting a corpus, against reading its tasks.

    python benchmarks/bench_export.py [--corpus FILE] [--formats parquet fev] [--subset F]
                                      [--repeats 3]

Builds the default corpus first when no file is given. For each format, two phases take turns,
``--repeats`` times each, every run in its own process (so its peak RSS is its own, and no run
finds another's imports or caches warm in its memory):

- the reference reads the selected tasks through ``Corpus`` in the order the export does
  (``export.api.task_batches``) and writes nothing;
- the export is ``export_corpus`` of the same selection to a fresh folder.

Each figure is the median of the runs: wall seconds, CPU seconds of the process (all its
threads; the parquet, fev and gluonts exports write in a second one), tasks per wall second
and peak RSS; imports are outside the timed part. The ratios are of the medians. The load
average is printed before and after.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from default_corpus import corpus_or_default
from machine import cpu_seconds, load_average

FIGURES = ("wall", "cpu", "peak_mib")


def _phase(name: str, corpus: str, out: str, fmt: str, subset: float | None) -> dict:
    """One run of ``name`` (``read`` or ``export``), timed after its imports."""
    from whatif_bench.corpus import Corpus
    from whatif_bench.export import export_corpus
    from whatif_bench.export.api import select, task_batches

    wall, cpu = time.perf_counter(), cpu_seconds()
    if name == "read":
        with Corpus(corpus) as opened:
            view, tasks = select(opened, subset)
            n = 0
            for batch in task_batches(view, tasks):
                n += len(batch)
    else:
        export_corpus(corpus, fmt, out, subset=subset, progress=False)
        n = json.loads((Path(out) / "manifest.json").read_text())["n_tasks"]
    wall, cpu = time.perf_counter() - wall, cpu_seconds() - cpu
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB -> MiB
    size = sum(p.stat().st_size for p in Path(out).rglob("*") if p.is_file()) if out else 0
    return {"tasks": n, "wall": wall, "cpu": cpu, "peak_mib": peak, "bytes": size}


def _run(phase: str, path: Path, fmt: str, subset: float | None, out: str) -> dict:
    command = [sys.executable, __file__, "--phase", phase, "--corpus", str(path)]
    command += ["--formats", fmt, "--out", out]
    if subset is not None:
        command += ["--subset", str(subset)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"error: the {phase} run of {fmt} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(path: Path, fmt: str, subset: float | None, repeats: int, scratch: Path) -> dict:
    """phase -> medians of ``repeats`` runs (and the export folder's size)."""
    runs: dict[str, list[dict]] = {"read": [], "export": []}
    for repeat in range(repeats):
        for phase in runs:  # taking turns, so a change in the machine's speed reaches both
            out = scratch / f"{fmt}-{repeat}" if phase == "export" else None
            runs[phase].append(_run(phase, path, fmt, subset, str(out) if out else ""))
            if out is not None:
                shutil.rmtree(out)
    medians = {}
    for phase, done in runs.items():
        medians[phase] = {k: statistics.median(r[k] for r in done) for k in FIGURES}
        medians[phase]["tasks"] = done[0]["tasks"]
        medians[phase]["bytes"] = done[0]["bytes"]
    return medians


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", help="corpus file (default: generate the default corpus)")
    parser.add_argument(
        "--formats", nargs="+", default=["parquet", "fev"], help="formats (default: parquet fev)"
    )
    parser.add_argument(
        "--subset", type=float, help="stratified fraction of the tasks (default: all)"
    )
    parser.add_argument("--repeats", type=int, default=3, help="runs per phase (default 3)")
    parser.add_argument("--phase", choices=["read", "export"], help=argparse.SUPPRESS)
    parser.add_argument("--out", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phase:
        print(json.dumps(_phase(args.phase, args.corpus, args.out, args.formats[0], args.subset)))
        return
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    folder = tempfile.TemporaryDirectory()
    path = corpus_or_default(args.corpus, folder.name)
    print(f"corpus {path} ({path.stat().st_size / 2**20:,.0f} MiB), subset {args.subset or 'all'}")
    print(f"load average before: {load_average()}; median of {args.repeats} runs per phase")
    header = f"{'phase':<38} {'tasks':>7} {'wall s':>7} {'CPU s':>7} {'tasks/s':>8} {'peak MiB':>9}"
    for fmt in args.formats:
        medians = measure(path, fmt, args.subset, args.repeats, Path(folder.name))
        print(f"\nformat {fmt}")
        print(header)
        labels = {
            "read": "reference: read the tasks (Corpus)",
            "export": f"export_corpus(..., {fmt!r})",
        }
        for phase, m in medians.items():
            print(
                f"{labels[phase]:<38} {m['tasks']:>7,} {m['wall']:>7.1f} {m['cpu']:>7.1f} "
                f"{m['tasks'] / m['wall']:>8,.0f} {m['peak_mib']:>9,.0f}"
            )
        read, export = medians["read"], medians["export"]
        print(
            f"export folder {export['bytes'] / 2**20:,.0f} MiB; export / read: wall "
            f"{export['wall'] / read['wall']:.2f}x, CPU {export['cpu'] / read['cpu']:.2f}x"
        )
    print(f"\nload average after: {load_average()}")
    folder.cleanup()


if __name__ == "__main__":
    main()
