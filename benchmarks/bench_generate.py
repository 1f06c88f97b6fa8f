"""Generating and verifying the corpus against a plain numpy + h5py reference, in one run.

    python benchmarks/bench_generate.py [--repeats 3] [--jobs 1 2] [--targets N ...]

Each run is a new process (``whatif generate`` / ``whatif verify``, or this script's reference
in ``--reference`` mode), timed with ``os.wait4``: wall seconds, CPU seconds (user + system, of
the process and of the worker processes it waited for) and peak RSS (the largest of them).
Every figure is the median of ``--repeats`` runs; the load average is printed beside them.

- ``generate --jobs J``: the default corpus from the shipped baselines (seed 0), for each J of
  ``--jobs``; then ``verify`` of the file it wrote.
- the reference: the same pairs (their window starts, event starts and factors read from the
  toolkit's file beforehand, untimed), built the plainest way numpy allows -- per pair, the
  baseline window copied and scaled inside its events by fancy indexing (a proportional
  primary, the covariates as base value x factor), the 10 % statistic of every event with
  ``np.mean`` -- and the kept pairs' float32 arrays written with h5py's own shuffle + gzip-1
  filters in the corpus's chunks, one block per target and dataset. It builds the same number
  of values and writes the same bytes; it does not evaluate the exact relationship forms, bell
  shapes or the recipe draws, so it is a floor, not a twin.
- start-up: a new process importing what ``whatif generate`` imports (the reference's own
  imports and reading are not timed).
- ``--targets N``: also generate the first N targets alone (one job), to show how the time
  grows with the number of targets (default: 1 and 10, with the whole corpus from above).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from machine import load_average

DATASETS = ("history_target", "history_covariates", "future_target", "future_covariates")
CHUNK = 16384  # the corpus's chunk length (corpus/fileformat.py)


# ---- the reference ---------------------------------------------------------------------------
def _pairs(corpus: Path) -> tuple[dict, dict]:
    """The toolkit file's index and recipe arrays, and its baselines, as plain numpy."""
    import h5py

    with h5py.File(corpus, "r") as h5:
        pairs = {name: h5["pairs"][name][()] for name in h5["pairs"]}
        recipe = {
            "starts": h5["events/start"][()],
            "factors": h5["events/factors"][()],
            "replay": h5["futures/replay_factors"][()],
            "novel": h5["futures/novel_factors"][()],
        }
        baselines = {}
        for simulator in h5["baselines"]:
            for target in h5["baselines"][simulator]:
                baselines[simulator, target] = h5["baselines"][simulator][target][()]
        for name in ("simulator", "target"):
            pairs[name] = pairs[name].astype(str)
    return pairs, {"recipe": recipe, "baselines": baselines}


def _event_windows(starts: np.ndarray, length: int, steps: int) -> np.ndarray:
    """(E, length) step indices of events at ``starts``, cut at ``steps`` (repeats the last)."""
    return np.minimum(starts[:, None] + np.arange(length)[None, :], steps - 1)


def _build(window, context, starts, length, factors, novel, replay):
    """One pair, plainly: history and both futures (target, covariates) and its ratios."""
    k = factors.shape[1]
    bases = np.linspace(1.0, 2.0, k)
    past = window[:context]
    history = past.copy()
    index = _event_windows(starts, length, context)
    history[index] = past[index] * factors[:, :1]
    covariates = np.repeat(bases[:, None], context, axis=1)
    covariates[:, index] = (factors.T * bases[:, None])[:, :, None]
    ratios = np.mean(np.abs(history[index] - past[index]), axis=1) / np.mean(
        np.abs(past[index]), axis=1
    )
    future = window[context:]
    horizon = future.size
    span = min(length, horizon)
    targets, future_covariates, future_ratios = [], [], []
    for chosen in (replay, novel):
        target = future.copy()
        target[:span] = future[:span] * chosen[0]
        covs = np.repeat(bases[:, None], horizon, axis=1)
        covs[:, :span] = (chosen * bases)[:, None]
        targets.append(target)
        future_covariates.append(covs)
        future_ratios.append(
            np.mean(np.abs(target[:span] - future[:span])) / np.mean(np.abs(future[:span]))
        )
    return history, covariates, targets, future_covariates, ratios, future_ratios


def reference(corpus: Path, out: Path) -> None:
    """Build every pair of ``corpus`` plainly and write the kept ones with h5py (timed by the
    caller from the moment this prints ``ready``)."""
    import h5py

    pairs, parts = _pairs(corpus)
    recipe, baselines = parts["recipe"], parts["baselines"]
    print("ready", flush=True)
    sys.stdin.readline()  # the caller starts its clock, then says go
    with h5py.File(out, "w") as h5:
        datasets = {
            name: h5.create_dataset(
                f"data/{name}",
                shape=(0,),
                maxshape=(None,),
                dtype=np.float32,
                chunks=(CHUNK,),
                compression="gzip",
                compression_opts=1,
                shuffle=True,
            )
            for name in DATASETS
        }
        blocks: dict[str, list[np.ndarray]] = {name: [] for name in DATASETS}
        previous = None
        for row in range(pairs["pair_id"].size):
            key = (pairs["simulator"][row], pairs["target"][row])
            if previous is not None and key != previous:
                _write(datasets, blocks)
            previous = key
            k, context = int(pairs["k"][row]), int(pairs["context"][row])
            prediction, n_events = int(pairs["prediction"][row]), int(pairs["n_events"][row])
            e0, f0 = int(pairs["event_offset"][row]), int(pairs["factor_offset"][row])
            c0, start = int(pairs["kfactor_offset"][row]), int(pairs["window_start"][row])
            window = baselines[key][start : start + context + prediction]
            built = _build(
                window,
                context,
                recipe["starts"][e0 : e0 + n_events].astype(np.int64),
                int(pairs["event_length"][row]),
                recipe["factors"][f0 : f0 + n_events * k].reshape(n_events, k),
                recipe["novel"][c0 : c0 + k],
                recipe["replay"][c0 : c0 + k],
            )
            if pairs["kept"][row]:
                history, covariates, targets, future_covariates = built[:4]
                blocks["history_target"].append(history.astype(np.float32))
                blocks["history_covariates"].append(covariates.astype(np.float32).ravel())
                blocks["future_target"].append(np.concatenate(targets).astype(np.float32))
                blocks["future_covariates"].append(
                    np.stack(future_covariates).astype(np.float32).ravel()
                )
        _write(datasets, blocks)


def _write(datasets: dict, blocks: dict[str, list[np.ndarray]]) -> None:
    for name, parts in blocks.items():
        if parts:
            block = np.concatenate(parts)
            dataset = datasets[name]
            dataset.resize((dataset.shape[0] + block.size,))
            dataset[-block.size :] = block
            parts.clear()


# ---- timing child processes ------------------------------------------------------------------
def timed(command: list[str], handshake: bool = False) -> dict[str, float]:
    """Wall s, CPU s (user + system, with the children it waited for) and peak RSS (MiB) of
    ``command``. With ``handshake`` the command prints ``ready`` after its untimed set-up and
    waits for a line: the clock starts then, and the CPU it had used (read from /proc) is
    subtracted."""
    process = subprocess.Popen(
        command,
        stdin=subprocess.PIPE if handshake else subprocess.DEVNULL,
        stdout=subprocess.PIPE if handshake else subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    before = 0.0
    if handshake:
        assert process.stdout is not None and process.stdin is not None
        line = process.stdout.readline()
        if line.strip() != "ready":
            error = process.stderr.read() if process.stderr else ""
            raise SystemExit(f"error: the reference did not start: {error[-2000:]}")
        before = _process_cpu(process.pid)
        process.stdin.write("go\n")
        process.stdin.flush()
    started = time.perf_counter()
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        error = process.stderr.read() if process.stderr else ""
        raise SystemExit(f"error: {' '.join(command[:3])} failed: {error[-2000:]}")
    return {
        "wall": wall,
        "cpu": usage.ru_utime + usage.ru_stime - before,
        "rss": usage.ru_maxrss / 1024,
    }


def _process_cpu(pid: int) -> float:
    """CPU seconds (user + system) ``pid`` has used so far, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def median_of(runs: list[dict[str, float]]) -> dict[str, float]:
    return {name: statistics.median(run[name] for run in runs) for name in runs[0]}


def whatif(*args: str) -> list[str]:
    return [sys.executable, "-m", "whatif_bench.cli", *args]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="runs per figure (default 3)")
    parser.add_argument(
        "--jobs", type=int, nargs="+", default=[1, 2], help="worker counts (default 1 2)"
    )
    parser.add_argument(
        "--targets",
        type=int,
        nargs="*",
        default=[1, 10],
        help="also generate the first N targets alone, one job (default 1 10)",
    )
    parser.add_argument("--only", help="generate only these targets (names, comma-separated)")
    parser.add_argument("--reference", nargs=2, help=argparse.SUPPRESS)  # CORPUS OUT: the child
    args = parser.parse_args()
    if args.reference:
        reference(Path(args.reference[0]), Path(args.reference[1]))
        return
    folder = Path(tempfile.mkdtemp(prefix="bench-generate-"))
    only = ["--targets", *args.only.split(",")] if args.only else []
    rows: list[tuple[str, dict[str, float]]] = []
    print(f"load average before: {load_average()} (cores: {os.cpu_count()})")
    corpus = folder / "jobs1.h5"
    for jobs in args.jobs:
        out = folder / f"jobs{jobs}.h5"
        runs = [
            timed(whatif("generate", "--jobs", str(jobs), "--out", str(out), *only))
            for _ in range(args.repeats)
        ]
        rows.append((f"generate --jobs {jobs}", median_of(runs)))
        corpus = out if jobs == 1 else corpus
    runs = [timed(whatif("verify", str(corpus))) for _ in range(args.repeats)]
    rows.append(("verify", median_of(runs)))
    start_up = (
        "import h5py, whatif_bench.cli, whatif_bench.generator.sweep, whatif_bench.generator.writer"
    )
    runs = [timed([sys.executable, "-c", start_up]) for _ in range(args.repeats)]
    rows.append(("start-up (a process importing the above)", median_of(runs)))
    me = [sys.executable, str(Path(__file__).resolve())]
    runs = [
        timed([*me, "--reference", str(corpus), str(folder / "ref.h5")], handshake=True)
        for _ in range(args.repeats)
    ]
    rows.append(("numpy + h5py reference", median_of(runs)))
    if not args.only:
        names = _target_names(corpus)
        for count in args.targets:
            runs = [
                timed(
                    whatif(
                        "generate",
                        "--jobs",
                        "1",
                        "--out",
                        str(folder / f"t{count}.h5"),
                        "--targets",
                        *names[:count],
                    )
                )
                for _ in range(args.repeats)
            ]
            rows.append((f"generate --jobs 1, {count} target(s)", median_of(runs)))
            small = str(folder / f"t{count}.h5")
            runs = [timed(whatif("verify", small)) for _ in range(args.repeats)]
            rows.append((f"verify, {count} target(s)", median_of(runs)))
    print(f"load average after: {load_average()}; medians of {args.repeats} runs")
    print(f"{'run':40s} {'wall s':>8s} {'CPU s':>8s} {'peak RSS MiB':>13s}")
    for name, row in rows:
        print(f"{name:40s} {row['wall']:8.2f} {row['cpu']:8.2f} {row['rss']:13.0f}")
    figures = dict(rows)
    plain = figures["numpy + h5py reference"]["cpu"]
    one = figures.get("generate --jobs 1")
    if one:
        start = figures["start-up (a process importing the above)"]["cpu"]
        print(
            f"generate --jobs 1 / reference, CPU: {one['cpu'] / plain:.2f}x "
            f"({(one['cpu'] - start) / plain:.2f}x without the start-up)"
        )
        print(f"verify / generate --jobs 1, CPU: {figures['verify']['cpu'] / one['cpu']:.2f}x")
        two = figures.get("generate --jobs 2")
        if two:
            print(
                f"--jobs 2 / --jobs 1: CPU {two['cpu'] / one['cpu']:.2f}x, "
                f"wall {two['wall'] / one['wall']:.2f}x"
            )
            print(
                f"verify / generate --jobs 2, wall: {figures['verify']['wall'] / two['wall']:.2f}x"
            )
    for path in folder.iterdir():
        path.unlink()
    folder.rmdir()


def _target_names(corpus: Path) -> list[str]:
    import h5py

    with h5py.File(corpus, "r") as h5:
        simulators = h5["pairs/simulator"].asstr()[()]
        targets = h5["pairs/target"].asstr()[()]
    return list(dict.fromkeys(f"{s}/{t}" for s, t in zip(simulators, targets, strict=True)))


if __name__ == "__main__":
    main()
