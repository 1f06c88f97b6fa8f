"""Wall time, tasks/s and peak memory of exporting the full default corpus to Parquet.

    python benchmarks/bench_export.py [--corpus FILE] [--format parquet]

Builds the default corpus first when no file is given. Each phase runs in its own process so
its peak RSS is its own: the reference reads every task through ``Corpus`` (in the order the
export does) and writes nothing; the export is ``export_corpus`` to a temporary folder.
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

from default_corpus import corpus_or_default


def _phase(name: str, corpus: str, out: str, fmt: str) -> dict:
    from whatif_bench.export import export_corpus
    from whatif_bench.export.api import task_batches
    from whatif_bench.generator import Corpus

    started = time.perf_counter()
    if name == "read":
        with Corpus(corpus) as opened:
            tasks = opened.tasks_frame()
            n = 0
            for batch in task_batches(opened, tasks):
                n += len(batch)
    else:
        export_corpus(corpus, fmt, out, progress=False)
        n = json.loads((Path(out) / "manifest.json").read_text())["n_tasks"]
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB -> MiB
    size = sum(p.stat().st_size for p in Path(out).rglob("*") if p.is_file()) if out else 0
    return {"tasks": n, "seconds": seconds, "peak_mib": peak, "bytes": size}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus")
    parser.add_argument("--format", default="parquet")
    parser.add_argument("--phase", choices=["read", "export"], help=argparse.SUPPRESS)
    parser.add_argument("--out", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phase:
        print(json.dumps(_phase(args.phase, args.corpus, args.out, args.format)))
        return
    folder = tempfile.TemporaryDirectory()
    path = corpus_or_default(args.corpus, folder.name)
    results = {}
    for phase in ("read", "export"):
        out = str(Path(folder.name) / "export") if phase == "export" else ""
        command = [sys.executable, __file__, "--phase", phase, "--corpus", str(path)]
        command += ["--format", args.format, "--out", out]
        done = subprocess.run(command, capture_output=True, text=True, check=True)
        results[phase] = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"corpus {path} ({path.stat().st_size / 2**20:,.0f} MiB), format {args.format}")
    print(f"{'phase':<36} {'tasks':>7} {'wall s':>8} {'tasks/s':>9} {'peak RSS MiB':>13}")
    labels = {
        "read": "reference: read every task (Corpus)",
        "export": f"export_corpus(..., {args.format!r})",
    }
    for phase, r in results.items():
        print(
            f"{labels[phase]:<36} {r['tasks']:>7,} {r['seconds']:>8.1f} "
            f"{r['tasks'] / r['seconds']:>9,.0f} {r['peak_mib']:>13,.0f}"
        )
    export = results["export"]
    print(
        f"export folder {export['bytes'] / 2**20:,.0f} MiB; export / read time "
        f"{export['seconds'] / results['read']['seconds']:.2f}x"
    )
    folder.cleanup()


if __name__ == "__main__":
    main()
