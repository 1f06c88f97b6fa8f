"""How opening, reading, training batches, evaluating and exporting grow with the corpus: 1, 10
and every target.

    python benchmarks/bench_scale.py [--corpus FILE] [--sizes 1 10 0] [--repeats 3]
                                     [--exports parquet fev gluonts llm]

Starts from the default corpus (the file given, or generated first) and generates, with its
seed, corpora of its first targets (``--sizes``: how many; 0 is the corpus itself). On each, in
this process, CPU seconds, median of ``--repeats`` runs, the toolkit's and the reference's runs
taking turns:

- open: ``Corpus(path)`` (the index and the checks of the file's layout) against h5py reading
  the index columns the reference needs;
- read: iterating the ``Corpus`` over every task against the same tasks' arrays read raw in the
  same chunks (``bench_reading.RawTasks``);
- batches: a PyTorch ``DataLoader`` over ``CorpusDataset`` with ``collate_tasks``, batches of
  32, no workers (its figure against reading is the one ``bench_dataloader.py`` measures on a
  small corpus);
- evaluate: ``evaluate()`` with ``naive``, one job, every task, its reports (tables and plots,
  whose cost does not depend on the tasks) not drawn;
- export: ``export_corpus`` of every task in each format of ``--exports``, and its ratio to
  reading every task.

Every figure but opening is printed per task (µs), so a figure that grows down the table grows
faster than the number of tasks. Opening reads the whole index, so it grows with the pairs.
``wall s`` is how long measuring the row took; peak RSS is this process's, at the end. One
untimed pass over the first corpus comes first, so that no row pays the imports.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench_reading import RawTasks
from default_corpus import corpus_or_default
from machine import cpu_seconds, load_average

from whatif_bench.corpus import Corpus
from whatif_bench.corpus.reader import ITER_CHUNK

FORMATS = ("parquet", "fev", "gluonts", "llm")


def _median_cpu(runs: dict[str, Callable[[], None]], repeats: int) -> dict[str, float]:
    """name -> median CPU seconds of ``repeats`` runs of each, the runs taking turns."""
    spent: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            started = cpu_seconds()
            run()
            spent[name].append(cpu_seconds() - started)
    return {name: statistics.median(values) for name, values in spent.items()}


def _subset(corpus: Path, n_targets: int, folder: Path) -> Path:
    """A corpus of the first ``n_targets`` targets of ``corpus``, generated with its seed."""
    from whatif_bench.generator import GenerationConfig, generate
    from whatif_bench.simulators import shipped_baselines_path

    with Corpus(corpus) as opened:
        seed = int(opened.attrs["master_seed"])
        pairs = opened.pairs[["simulator", "target"]].drop_duplicates()
        targets = tuple(f"{s}/{t}" for s, t in pairs.itertuples(index=False))[:n_targets]
    out = folder / f"targets-{n_targets}.h5"
    config = GenerationConfig(
        baselines=str(shipped_baselines_path()), out=str(out), targets=targets, seed=seed
    )
    return generate(config, progress=False)


def measure(path: Path, repeats: int, scratch: Path, exports: tuple[str, ...]) -> dict[str, float]:
    """The figures of one corpus (see the module doc): CPU seconds and µs per task."""
    from torch.utils.data import DataLoader

    from whatif_bench.evaluation import evaluate, report
    from whatif_bench.export import export_corpus
    from whatif_bench.stream import CorpusDataset, collate_tasks

    with Corpus(path) as opened:
        ids = opened.task_ids()
        n_targets = len(opened.pairs[["simulator", "target"]].drop_duplicates())

    def fresh() -> Path:
        return Path(tempfile.mkdtemp(dir=scratch)) / "out"

    def read_toolkit() -> None:
        with Corpus(path) as corpus:
            for _ in corpus:
                pass

    def read_reference() -> None:
        raw = RawTasks(path)
        for first in range(0, len(ids), ITER_CHUNK):
            raw.batch(ids[first : first + ITER_CHUNK])
        raw.close()

    def batches() -> None:
        loader = DataLoader(CorpusDataset(path), batch_size=32, collate_fn=collate_tasks)
        for _ in loader:
            pass

    def evaluate_naive() -> None:
        evaluate(path, ["naive"], fresh(), reference="naive", progress=False)

    def exporting(format: str) -> Callable[[], None]:
        return lambda: export_corpus(path, format, fresh(), progress=False)

    opening = _median_cpu(
        {"toolkit": lambda: Corpus(path).close(), "reference": lambda: RawTasks(path).close()},
        max(repeats, 5),
    )
    reading = _median_cpu(
        {"toolkit": read_toolkit, "reference": read_reference, "batches": batches}, repeats
    )
    write_reports = report.write_reports
    report.write_reports = lambda *args, **kwargs: None  # the reports' cost is not the tasks'
    try:
        rest = _median_cpu(
            {"evaluate": evaluate_naive} | {f: exporting(f) for f in exports}, repeats
        )
    finally:
        report.write_reports = write_reports
    per_task = 1e6 / len(ids)
    return {
        "targets": n_targets,
        "tasks": len(ids),
        "open_ms": opening["toolkit"] * 1e3,
        "open_reference_ms": opening["reference"] * 1e3,
        "read_us": reading["toolkit"] * per_task,
        "read_reference_us": reading["reference"] * per_task,
        "batches_us": reading["batches"] * per_task,
        "evaluate_us": rest["evaluate"] * per_task,
    } | {f"{f}_us": rest[f] * per_task for f in exports}


def _against(row: dict[str, float], key: str) -> str:
    """A figure of ``row`` in µs per task and its ratio to reading every task."""
    return f"{row[key]:>8.0f} ({row[key] / row['read_us']:>4.2f}x)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", help="the default corpus (default: generate it first)")
    parser.add_argument(
        "--sizes",
        type=int,
        nargs="+",
        default=[1, 10, 0],
        help="numbers of targets, 0 for all (default: 1 10 0)",
    )
    parser.add_argument(
        "--repeats", type=int, default=3, help="runs of each figure, median (default 3)"
    )
    parser.add_argument(
        "--exports",
        nargs="*",
        choices=FORMATS,
        default=list(FORMATS),
        help=f"export formats to measure (default: {' '.join(FORMATS)})",
    )
    args = parser.parse_args()
    exports = tuple(args.exports)
    with tempfile.TemporaryDirectory() as folder:
        scratch = Path(folder)
        corpus = corpus_or_default(args.corpus, folder)
        print(
            f"corpus {corpus}; load average {load_average()} before; CPU time, medians of "
            f"{args.repeats} runs (opening: of {max(args.repeats, 5)}); µs per task, and "
            "(x) against reading every task"
        )
        print(
            f"{'targets':>7} {'tasks':>7} {'open ms':>8} {'raw ms':>7} {'read µs':>8} "
            f"{'raw µs':>7} {'ratio':>6} {'batches µs':>15} {'evaluate µs':>12} "
            + "".join(f"{format + ' µs':>17}" for format in exports)
            + f" {'wall s':>7}"
        )
        paths = [corpus if size == 0 else _subset(corpus, size, scratch) for size in args.sizes]
        measure(paths[0], 1, scratch, exports)  # untimed: the imports, numba's and caches warm
        for path in paths:
            started = time.perf_counter()
            row = measure(path, args.repeats, scratch, exports)
            read = row["read_us"]
            print(
                f"{row['targets']:>7,} {row['tasks']:>7,} {row['open_ms']:>8.1f} "
                f"{row['open_reference_ms']:>7.1f} {read:>8.0f} "
                f"{row['read_reference_us']:>7.0f} "
                f"{read / row['read_reference_us']:>5.2f}x "
                f"{_against(row, 'batches_us'):>15} {row['evaluate_us']:>12.0f} "
                + "".join(f"{_against(row, f'{format}_us'):>17}" for format in exports)
                + f" {time.perf_counter() - started:>7.1f}",
                flush=True,
            )
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB -> MiB
        print(f"load average {load_average()} after; peak RSS {peak:,.0f} MiB")


if __name__ == "__main__":
    main()
