"""The benchmark scripts run and print every row they promise (their figures are not checked:
speed is measured, never asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def run_benchmark(script: str, *args: str, timeout: int = 300) -> list[str]:
    """The lines ``benchmarks/SCRIPT`` printed with ``args``; it must succeed."""
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


@pytest.mark.slow  # about 6 s: each filter in its own process
def test_compression_benchmark_writes_and_reads_every_filter(one_target_corpus):
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import bench_compression
    finally:
        sys.path.remove(str(BENCHMARKS))
    lines = run_benchmark(
        "bench_compression.py",
        "--corpus",
        str(one_target_corpus),
        "--repeats",
        "1",
        "--reads",
        "20",
    )
    rows = {line[:30].strip(): line[30:].split() for line in lines[2:]}
    assert set(rows) == set(bench_compression.FILTERS)
    plugin = bench_compression.have_hdf5plugin()
    for name, (_, needs_plugin) in bench_compression.FILTERS.items():
        if needs_plugin and not plugin:
            assert rows[name][:3] == ["(needs", "the", "hdf5plugin"]
        else:  # size, its share of the raw bytes, four timings, the random read and the peak
            assert len(rows[name]) == 8, rows[name]
            assert 0 < float(rows[name][1]) <= 1.01
    sizes = {name: float(rows[name][0].replace(",", "")) for name in ("none", "lzf", "gzip-1")}
    assert sizes["gzip-1"] < sizes["lzf"] < sizes["none"]


@pytest.mark.slow  # about 4 s
def test_reading_benchmark_times_each_mode_against_its_reference(one_target_corpus):
    lines = run_benchmark(
        "bench_reading.py",
        *["--corpus", str(one_target_corpus), "--random", "20", "--sequential", "30"],
        *["--batched", "100", "--batch", "16", "--repeats", "1"],
    )
    printed = "\n".join(lines)
    for mode in ("random corpus[id], 20 tasks", "sequential, 30 tasks", "batched (16), 100 tasks"):
        rows = [
            line.split()[-4:] if "random" in mode else line.split()[-2:]
            for line in lines
            if line.startswith(mode)
        ]
        assert len(rows) == 2, (mode, printed)  # toolkit, then reference
        # CPU and wall seconds, printed to 0.01 s, may read 0.00 for so few tasks on a fast
        # machine; the per-task median and p90 (whole µs) may not
        assert all(float(value) >= 0 for row in rows for value in row), printed
        if "random" in mode:
            assert all(float(value) > 0 for row in rows for value in row[2:]), printed
    ratios = [line for line in lines if "ratio toolkit / reference: CPU" in line]
    assert len(ratios) == 3 and "median" in ratios[0] and "p90" in ratios[0], printed


@pytest.mark.slow  # about 20 s: eight timed processes of one target
def test_generation_benchmark_times_the_toolkit_and_the_reference_in_one_run():
    lines = run_benchmark(
        "bench_generate.py",
        *["--only", "epanet/pressure_10", "--repeats", "1", "--jobs", "1", "2"],
        timeout=600,
    )
    printed = "\n".join(lines)
    rows = {}
    for line in lines:
        name, _, figures = line.rpartition("  ")
        if name.strip() and figures.strip().replace(".", "").isdigit():
            rows[name.split("  ")[0].strip()] = line.split()[-3:]
    expected = {"generate --jobs 1", "generate --jobs 2", "verify", "numpy + h5py reference"}
    assert expected <= set(rows), printed
    for wall, cpu, rss in rows.values():
        assert float(wall) > 0 and float(cpu) > 0 and float(rss) > 0, printed
    assert "generate --jobs 1 / reference, CPU:" in printed
    assert "--jobs 2 / --jobs 1: CPU" in printed


@pytest.mark.slow  # about 10 s: a corpus of the first target generated again, then two rows
def test_scale_benchmark_prints_a_row_per_corpus_size(one_target_corpus):
    lines = run_benchmark(
        "bench_scale.py",
        *["--corpus", str(one_target_corpus), "--sizes", "1", "0", "--repeats", "1"],
        *["--exports", "fev"],
    )
    printed = "\n".join(lines)
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["targets", "tasks"])
    rows = [line.split() for line in lines[header + 1 : header + 3]]
    # targets, tasks, open and raw open ms, read and raw read µs, their ratio, batches µs and
    # (x) reading, evaluate µs, fev export µs and (x) reading, wall s
    assert all(len(row) == 13 for row in rows), printed
    # the corpus of the first 1 target of a one-target corpus holds the same tasks
    assert rows[0][:2] == rows[1][:2] == ["1", rows[1][1]] and int(rows[1][1]) > 0
    for row in rows:
        figures = [float(value.strip("()x")) for value in row[2:]]
        # opening takes a few ms, which CPU accounting in clock ticks may read as 0; the rest
        # is hundreds of tasks
        assert all(value >= 0 for value in figures[:2]), printed
        assert all(value > 0 for value in figures[2:]), printed
    assert "peak RSS" in lines[-1], printed


@pytest.mark.slow  # about 15 s: four timed processes of a fifth of one target's tasks
def test_export_benchmark_times_each_format_against_reading_the_same_tasks(one_target_corpus):
    lines = run_benchmark(
        "bench_export.py",
        *["--corpus", str(one_target_corpus), "--formats", "parquet", "gluonts"],
        *["--subset", "0.2", "--repeats", "1"],
    )
    printed = "\n".join(lines)
    assert lines[1].startswith("load average before:") and "median of 1 runs" in lines[1]
    assert lines[-1].startswith("load average after:"), printed
    for fmt in ("parquet", "gluonts"):
        at = lines.index(f"format {fmt}")
        read, export = (line.rsplit(maxsplit=5) for line in lines[at + 2 : at + 4])
        assert read[0].startswith("reference: read") and export[0] == f"export_corpus(..., {fmt!r})"
        # the same tasks, a fifth of the corpus's; wall and CPU s (0.0 may print for so few
        # tasks), tasks/s and peak RSS
        assert read[1] == export[1] and 0 < int(read[1].replace(",", "")) < 1000, printed
        assert all(float(v.replace(",", "")) >= 0 for v in read[2:] + export[2:]), printed
        assert float(export[4].replace(",", "")) > 0 and float(export[5].replace(",", "")) > 0
        ratios = lines[at + 4]
        assert ratios.startswith("export folder") and "wall" in ratios and "CPU" in ratios


def test_the_dataloader_benchmarks_padding_floor_makes_collate_tasks_float_arrays():
    """bench_dataloader.py's floor phase times the batches' padded float arrays alone: the
    same arrays ``collate_tasks`` makes, or the floor would time other work."""
    from whatif_bench.stream import TaskStream, collate_tasks, task_item
    from whatif_bench.stream.items import FUTURE_ARRAYS, HISTORY_ARRAYS
    from whatif_bench.stream.sources import benchmark_sources

    sys.path.insert(0, str(BENCHMARKS))
    try:
        import bench_dataloader
    finally:
        sys.path.remove(str(BENCHMARKS))
    stream = TaskStream(5, count=24, sources=benchmark_sources(["epanet", "gridlabd"]))
    items = [task_item(task, slot) for slot, task in enumerate(stream)]
    assert len({item["context_length"] for item in items}) > 1  # there is padding to do
    assert len({item["k"] for item in items}) > 1
    floor, batch = bench_dataloader.padded_floor(items), collate_tasks(items)
    assert set(floor) == {*HISTORY_ARRAYS, *FUTURE_ARRAYS}
    for name, array in floor.items():
        assert np.array_equal(array, batch[name].numpy()), name


@pytest.mark.slow  # about 10 s: a process per phase
@pytest.mark.parametrize("phase", ["stream-raw", "stream-batched-0", "stream-context-0"])
def test_the_dataloader_benchmarks_stream_phases_run(phase):
    lines = run_benchmark(
        "bench_dataloader.py",
        *["--phase", phase, "--corpus", "unused.h5", "--count", "40", "--benchmark-worlds"],
    )
    figures = json.loads(lines[-1])
    assert figures["tasks"] == 40 and figures["seconds"] > 0
