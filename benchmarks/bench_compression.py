"""File size, write and read speed of the corpus's task arrays under each HDF5 filter.

    python benchmarks/bench_compression.py [--corpus FILE] [--repeats 3] [--reads 2000]

The corpus's four flat float32 arrays (``/data/*``, docs/CORPUS_FORMAT.md) are read into memory
once, then written again, each filter to a fresh file with the corpus's chunk length
(``CHUNK`` elements), and read back: every array whole (sequential reading), and ``--reads``
random pairs' slices (a kept pair's span of each of the four arrays, from the corpus's own
offsets, as ``Corpus[id]`` reads them), in one seeded order. Each filter runs
in its own process, so its peak RSS is its own, and every figure is the median of
``--repeats`` runs (CPU seconds of the process and wall seconds). Reads come from the page
cache (the file was just written): the figures are the filter's CPU cost, not the disk's.

Filters: gzip-1 with byte shuffle (the corpus's), gzip at other levels, lzf (built into h5py,
no plugin for h5py readers), none; and, when the ``hdf5plugin`` package is importable, Blosc
(zstd and lz4) and Zstd, which every reader would need the plugin for. Without
``hdf5plugin`` those rows say so. Builds the default corpus first when no file is given.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from default_corpus import corpus_or_default
from machine import cpu_seconds

# name -> (h5py create_dataset keyword arguments, needs hdf5plugin)
FILTERS: dict[str, tuple[dict, bool]] = {
    "gzip-1 + shuffle (the corpus)": (
        {"compression": "gzip", "compression_opts": 1, "shuffle": True},
        False,
    ),
    "gzip-4 + shuffle": ({"compression": "gzip", "compression_opts": 4, "shuffle": True}, False),
    "gzip-1": ({"compression": "gzip", "compression_opts": 1}, False),
    "lzf + shuffle": ({"compression": "lzf", "shuffle": True}, False),
    "lzf": ({"compression": "lzf"}, False),
    "none": ({}, False),
    "blosc zstd-5 + shuffle": ({"plugin": ("Blosc", "zstd", 5, "SHUFFLE")}, True),
    "blosc lz4-5 + shuffle": ({"plugin": ("Blosc", "lz4", 5, "SHUFFLE")}, True),
    "zstd-3 (plugin)": ({"plugin": ("Zstd", 3)}, True),
}


def _filter_kwargs(spec: dict) -> dict:
    """h5py keyword arguments of a ``FILTERS`` entry (a plugin entry through hdf5plugin)."""
    if "plugin" not in spec:
        return dict(spec)
    import hdf5plugin  # type: ignore[import-not-found]  # optional: no type hints needed

    name, *options = spec["plugin"]
    if name == "Blosc":
        cname, clevel, shuffle = options
        return dict(
            hdf5plugin.Blosc(cname=cname, clevel=clevel, shuffle=getattr(hdf5plugin.Blosc, shuffle))
        )
    return dict(hdf5plugin.Zstd(clevel=options[0]))


def _one_filter(corpus: str, name: str, scratch: str, repeats: int, reads: int) -> dict:
    """Write and read the arrays under filter ``name``; medians over ``repeats``."""
    import h5py

    from whatif_bench.corpus.fileformat import CHUNK, DATA_DATASETS

    spec, _ = FILTERS[name]
    kwargs = _filter_kwargs(spec)
    with h5py.File(corpus, "r") as source:
        arrays = {d: source["data"][d][:] for d in DATA_DATASETS}
        kept = source["pairs"]["kept"][:].astype(bool)
        starts = {
            d: source["pairs"][f"{d}_offset"][:][kept].astype(np.int64) for d in DATA_DATASETS
        }
    # the pairs are stored in order, so a kept pair's span ends where the next one starts
    spans = {d: np.stack([s, np.append(s[1:], arrays[d].size)], axis=1) for d, s in starts.items()}
    order = np.random.default_rng(0).permutation(kept.sum())[:reads]
    path = Path(scratch) / "filtered.h5"
    figures: dict[str, list[float]] = {
        k: [] for k in ("write_cpu", "write_wall", "read_cpu", "read_wall", "random_us")
    }
    size = 0
    for _ in range(repeats):
        path.unlink(missing_ok=True)
        wall, cpu = time.perf_counter(), cpu_seconds()
        with h5py.File(path, "w") as out:
            for dataset, values in arrays.items():
                out.create_dataset(
                    dataset, data=values, chunks=(CHUNK,), track_times=False, **kwargs
                )
        figures["write_cpu"].append(cpu_seconds() - cpu)
        figures["write_wall"].append(time.perf_counter() - wall)
        size = path.stat().st_size
        with h5py.File(path, "r") as back:
            wall, cpu = time.perf_counter(), cpu_seconds()
            read = {dataset: back[dataset][:] for dataset in arrays}
            figures["read_cpu"].append(cpu_seconds() - cpu)
            figures["read_wall"].append(time.perf_counter() - wall)
        for dataset, values in arrays.items():  # checked outside the timed part
            if not np.array_equal(read[dataset], values):
                raise SystemExit(f"error: {name}: {dataset} did not read back equal")
        del read
        with h5py.File(path, "r") as back:  # a fresh chunk cache for the random reads
            datasets = [(back[d], spans[d]) for d in DATA_DATASETS]
            wall = time.perf_counter()
            for index in order:
                for dataset, span in datasets:
                    dataset[span[index, 0] : span[index, 1]]
            figures["random_us"].append((time.perf_counter() - wall) / order.size * 1e6)
    result = {k: statistics.median(v) for k, v in figures.items()}
    result["bytes"] = size
    result["raw_bytes"] = sum(v.nbytes for v in arrays.values())
    result["peak_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return result


def have_hdf5plugin() -> bool:
    """Whether the ``hdf5plugin`` package (the Blosc and Zstd filters) is importable."""
    return importlib.util.find_spec("hdf5plugin") is not None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", help="a corpus file (default: generate the default corpus)")
    parser.add_argument(
        "--repeats", type=int, default=3, help="runs per filter, median reported (default 3)"
    )
    parser.add_argument(
        "--reads", type=int, default=2000, help="random task reads per run (default 2000)"
    )
    parser.add_argument("--filter", help=argparse.SUPPRESS)
    parser.add_argument("--scratch", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.filter:
        print(
            json.dumps(
                _one_filter(args.corpus, args.filter, args.scratch, args.repeats, args.reads)
            )
        )
        return
    folder = tempfile.TemporaryDirectory()
    corpus = corpus_or_default(args.corpus, folder.name)
    plugin = have_hdf5plugin()
    rows: dict[str, dict | None] = {}
    for name, (_, needs_plugin) in FILTERS.items():
        if needs_plugin and not plugin:
            rows[name] = None
            continue
        command = [sys.executable, __file__, "--filter", name, "--corpus", str(corpus)]
        command += [
            "--scratch",
            folder.name,
            "--repeats",
            str(args.repeats),
            "--reads",
            str(args.reads),
        ]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"error: {name}: {done.stderr.strip().splitlines()[-1]}")
        rows[name] = json.loads(done.stdout.strip().splitlines()[-1])
    raw = next(r["raw_bytes"] for r in rows.values() if r is not None)
    print(
        f"corpus {corpus}: /data arrays {raw / 2**20:,.0f} MiB of float32; "
        f"medians of {args.repeats} runs; {args.reads} random pair reads per run"
    )
    header = f"{'filter':<30} {'MiB':>7} {'x raw':>6} {'write cpu s':>11} {'write wall s':>12} "
    header += f"{'read cpu s':>10} {'read wall s':>11} {'random pair µs':>14} {'peak MiB':>8}"
    print(header)
    for name, r in rows.items():
        if r is None:
            print(f"{name:<30} (needs the hdf5plugin package: pip install hdf5plugin)")
            continue
        print(
            f"{name:<30} {r['bytes'] / 2**20:>7,.1f} {r['bytes'] / r['raw_bytes']:>6.2f} "
            f"{r['write_cpu']:>11.2f} {r['write_wall']:>12.2f} {r['read_cpu']:>10.2f} "
            f"{r['read_wall']:>11.2f} {r['random_us']:>14.0f} {r['peak_mib']:>8,.0f}"
        )


if __name__ == "__main__":
    main()
