"""``whatif stream``: Parquet shards in the parquet export's columns and HDF5 shards that read back as
the stream's tasks, the same for any number of jobs."""

from __future__ import annotations

import json
from dataclasses import fields

import h5py
import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import run_cli, run_whatif
from whatif_bench.corpus.columns import schema
from whatif_bench.stream import TaskStream
from whatif_bench.stream.h5shard import FORMAT, ShardError, read_shard

ARGS = ("--seed", "3", "--count", "50", "--shard-size", "20", "--simulators", "epanet")


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("worlds"))


@pytest.fixture(scope="module")
def shards(tmp_path_factory, cache):
    out = tmp_path_factory.mktemp("s") / "one"
    done = run_cli("stream", *ARGS, "--out", str(out), "--cache", cache, "--jobs", "1")
    assert done.returncode == 0, done.stderr
    return out


@pytest.mark.slow  # about 2 s
def test_shards_hold_the_streams_tasks_in_the_parquet_exports_columns(shards, cache):
    files = sorted((shards / "data").glob("*.parquet"))
    assert [f.name for f in files] == [f"shard-0000{i}.parquet" for i in range(3)]
    tables = [pq.read_table(f) for f in files]
    assert [t.num_rows for t in tables] == [20, 20, 10]
    assert all(t.schema.remove_metadata() == schema() for t in tables)
    stream = TaskStream(3, count=50, simulators=["epanet"], cache=cache)
    expected = list(stream)
    rows = [row for t in tables for row in t.to_pylist()]
    assert [r["task_id"] for r in rows] == [t.task_id for t in expected]
    assert rows[7]["history_target"] == expected[7].history_target.tolist()
    assert json.loads(rows[7]["recipe"])["slot"] == 7
    manifest = json.loads((shards / "manifest.json").read_text())
    assert manifest["seed"] == 3 and manifest["count"] == 50 and manifest["holdout"] is True
    assert manifest["stats"]["kept"] == 50
    assert manifest["stats"]["drawn"] == 50 + sum(manifest["stats"]["rejected"].values())
    assert set(manifest["worlds"]) == {s.name for s in stream.world_sources()}
    assert set(manifest["files"]) == {f"data/{f.name}" for f in files}


@pytest.mark.slow  # about 1 s
def test_two_jobs_write_the_same_bytes(shards, cache, tmp_path):
    out = tmp_path / "two"
    done = run_cli("stream", *ARGS, "--out", str(out), "--cache", cache, "--jobs", "2")
    assert done.returncode == 0, done.stderr
    for name in ("manifest.json", *(f"data/shard-0000{i}.parquet" for i in range(3))):
        assert (out / name).read_bytes() == (shards / name).read_bytes(), name


@pytest.mark.slow  # about 4 s: the real command, its two workers started and stopped
def test_two_jobs_end_without_a_warning_of_leaked_semaphores(cache, tmp_path):
    # each loky worker's first progress bar made tqdm's multiprocessing lock, which the
    # resource tracker reported as leaked once stop_workers had ended the workers
    done = run_whatif(
        "stream", *ARGS, "--out", str(tmp_path / "s"), "--cache", cache, "--jobs", "2"
    )
    assert done.returncode == 0, done.stderr
    assert "leaked" not in done.stderr and "Warning" not in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--seed", "-1", "--count", "3"), "--seed: must be between 0"),
        (("--seed", "x", "--count", "3"), "--seed"),
        (("--seed", "1", "--count", "0"), "--count"),
        (("--seed", "1", "--count", "3", "--shard-size", "0"), "--shard-size"),
        (
            ("--seed", "1", "--count", "3", "--simulators", "opendc", "--worlds", "sumo-seed-7"),
            "unknown training worlds ['sumo-seed-7']",
        ),
        (("--seed", "1", "--count", "3", "--worlds", "nowhere"), "unknown training worlds"),
        (("--seed", "1", "--count", "3", "--format", "csv"), "--format: invalid choice: 'csv'"),
        (("--seed", "1.5", "--count", "3"), "--seed"),
        (("--seed", "1", "--count", "-4"), "--count"),
        (("--seed", "1", "--count", "3", "--simulators", "sumo", "--worlds", "nowhere"), "unknown"),
    ],
)
def test_bad_stream_commands_fail_with_one_line_and_write_nothing(tmp_path, cache, extra, message):
    out = tmp_path / "o"
    done = run_cli("stream", *extra, "--out", str(out), "--cache", cache)
    assert done.returncode in (1, 2)
    assert message in done.stderr and "Traceback" not in done.stderr
    assert not out.exists()


@pytest.mark.slow  # the shards fixture: a stream of 50 tasks, about 2 s
def test_an_existing_output_is_refused_unless_overwrite(shards, cache):
    before = (shards / "manifest.json").read_bytes()
    done = run_cli("stream", *ARGS, "--out", str(shards), "--cache", cache)
    assert done.returncode == 1 and "already exists; pass --overwrite" in done.stderr
    assert (shards / "manifest.json").read_bytes() == before


def fingerprint(task) -> tuple:
    """Every field of a task: arrays by dtype, shape and bytes, the recipe as sorted JSON."""
    parts = []
    for field in fields(task):
        value = getattr(task, field.name)
        if isinstance(value, np.ndarray):
            parts.append((field.name, value.dtype.str, value.shape, value.tobytes()))
        elif isinstance(value, dict):
            parts.append((field.name, json.dumps(value, sort_keys=True)))
        else:
            parts.append((field.name, type(value).__name__, value))
    return tuple(parts)


@pytest.fixture(scope="module")
def h5_shards(tmp_path_factory, cache):
    out = tmp_path_factory.mktemp("h") / "one"
    done = run_cli(
        "stream", *ARGS, "--format", "hdf5", "--out", str(out), "--cache", cache, "--jobs", "1"
    )
    assert done.returncode == 0, done.stderr
    return out


@pytest.mark.slow  # about 1 s
def test_hdf5_shards_read_back_as_the_streams_tasks(h5_shards, cache):
    files = sorted((h5_shards / "data").glob("*"))
    assert [f.name for f in files] == [f"shard-0000{i}.h5" for i in range(3)]
    with h5py.File(files[1], "r") as h5:
        assert h5.attrs["format"] == FORMAT and h5.attrs["first_slot"] == 20
        assert h5["data/history_target"].compression == "gzip"
        assert h5["tasks/task_id"].shape == (20,)
    made = [task for f in files for task in read_shard(f)]
    expected = list(TaskStream(3, count=50, simulators=["epanet"], cache=cache))
    assert [fingerprint(t) for t in made] == [fingerprint(t) for t in expected]
    manifest = json.loads((h5_shards / "manifest.json").read_text())
    assert manifest["format"] == "hdf5" and manifest["stats"]["kept"] == 50
    assert set(manifest["files"]) == {f"data/{f.name}" for f in files}


@pytest.mark.slow  # about 2 s
def test_hdf5_shards_of_two_jobs_are_the_same_bytes(h5_shards, cache, tmp_path):
    out = tmp_path / "two"
    done = run_cli(
        "stream", *ARGS, "--format", "hdf5", "--out", str(out), "--cache", cache, "--jobs", "2"
    )
    assert done.returncode == 0, done.stderr
    names = ["manifest.json", *(f"data/shard-0000{i}.h5" for i in range(3))]
    for name in names:
        assert (out / name).read_bytes() == (h5_shards / name).read_bytes(), name


@pytest.mark.slow  # the shards fixture
def test_a_file_that_is_not_a_shard_is_refused(shards, tmp_path):
    with pytest.raises(ShardError, match="not a readable HDF5 file"):
        next(read_shard(shards / "data" / "shard-00000.parquet"))
    with h5py.File(tmp_path / "other.h5", "w") as h5:
        h5.attrs["format"] = "whatif-corpus"
    with pytest.raises(ShardError, match="not a whatif-stream-shard version 2 file"):
        next(read_shard(tmp_path / "other.h5"))


@pytest.mark.slow  # about 2 s
def test_a_failed_overwrite_keeps_the_old_shards_and_leaves_no_temporary(
    h5_shards, cache, tmp_path, monkeypatch
):
    import errno
    import shutil

    from whatif_bench.outputs import OutputError
    from whatif_bench.stream import h5shard, write_shards

    out = tmp_path / "kept"
    shutil.copytree(h5_shards, out)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    written = []

    def full_disk(path, columns, attrs):
        if written:
            raise OSError(errno.ENOSPC, "No space left on device")
        written.append(path)
        real(path, columns, attrs)

    real = h5shard.write_shard
    monkeypatch.setattr(h5shard, "write_shard", full_disk)
    stream = TaskStream(4, count=50, simulators=["epanet"], cache=cache)
    with pytest.raises(OutputError, match="no space left on the device"):
        write_shards(stream, out, 20, overwrite=True, progress=False, format="hdf5")
    assert len(written) == 1
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [".kept.lock", "kept"]


# ---- pieces: the unit of work and of the progress bar ------------------------------------------


@given(count=st.integers(1, 300), shard_size=st.integers(1, 60), piece=st.integers(1, 70))
def test_pieces_cover_every_slot_once_in_order_and_never_span_two_shards(count, shard_size, piece):
    from whatif_bench.stream.shards import piece_bounds, shard_bounds

    pieces = list(piece_bounds(count, shard_size, piece))
    assert [s for first, last in pieces for s in range(first, last)] == list(range(count))
    assert all(0 < last - first <= piece for first, last in pieces)
    shard_of = {
        s: i for i, (a, b) in enumerate(shard_bounds(count, shard_size)) for s in range(a, b)
    }
    assert all(shard_of[first] == shard_of[last - 1] for first, last in pieces)


@pytest.mark.slow  # two streams of 50 tasks, about 3 s
@pytest.mark.parametrize("format", ["parquet", "hdf5"])
def test_shards_made_of_small_pieces_are_the_same_bytes(
    format, shards, h5_shards, cache, tmp_path, monkeypatch
):
    from whatif_bench.stream import shards as shards_module

    monkeypatch.setattr(shards_module, "PIECE", 7)  # shards of 20: pieces of 7, 7 and 6
    out = tmp_path / "pieces"
    done = run_cli(
        "stream", *ARGS, "--format", format, "--out", str(out), "--cache", cache, "--jobs", "2"
    )
    assert done.returncode == 0, done.stderr
    whole = shards if format == "parquet" else h5_shards
    suffix = "parquet" if format == "parquet" else "h5"
    for name in ("manifest.json", *(f"data/shard-0000{i}.{suffix}" for i in range(3))):
        assert (out / name).read_bytes() == (whole / name).read_bytes(), name


def test_the_bar_moves_per_piece_not_per_shard(cache, tmp_path, monkeypatch):
    import tqdm

    from whatif_bench.stream import shards as shards_module
    from whatif_bench.stream import write_shards

    steps: list[int] = []

    class Recorder(tqdm.tqdm):
        def update(self, n=1):
            # the stream's own bar: a worker whose training worlds are not built yet also
            # draws their bar first (one step per world)
            if self.desc.startswith("stream"):
                steps.append(n)
            return super().update(n)

    monkeypatch.setattr(tqdm, "tqdm", Recorder)
    monkeypatch.setattr(shards_module, "PIECE", 8)
    stream = TaskStream(3, count=30, simulators=["epanet"], cache=cache)
    write_shards(stream, tmp_path / "o", shard_size=20, progress=True)
    assert steps == [8, 8, 4, 8, 2]  # shard 0: 8 + 8 + 4; shard 1: 8 + 2
