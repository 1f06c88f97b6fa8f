"""``whatif stream``: shards in the parquet export's columns, the same for any number of jobs."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from tests.conftest import run_whatif
from whatif_bench.export.parquet import schema
from whatif_bench.stream import TaskStream

ARGS = ("--seed", "3", "--count", "50", "--shard-size", "20", "--simulators", "epanet")


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("worlds"))


@pytest.fixture(scope="module")
def shards(tmp_path_factory, cache):
    out = tmp_path_factory.mktemp("s") / "one"
    done = run_whatif("stream", *ARGS, "--out", str(out), "--cache", cache, "--jobs", "1")
    assert done.returncode == 0, done.stderr
    return out


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


def test_two_jobs_write_the_same_bytes(shards, cache, tmp_path):
    out = tmp_path / "two"
    done = run_whatif("stream", *ARGS, "--out", str(out), "--cache", cache, "--jobs", "2")
    assert done.returncode == 0, done.stderr
    for name in ("manifest.json", *(f"data/shard-0000{i}.parquet" for i in range(3))):
        assert (out / name).read_bytes() == (shards / name).read_bytes(), name


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--seed", "-1", "--count", "3"), "--seed: must be between 0"),
        (("--seed", "x", "--count", "3"), "--seed"),
        (("--seed", "1", "--count", "0"), "--count"),
        (("--seed", "1", "--count", "3", "--shard-size", "0"), "--shard-size"),
        (("--seed", "1", "--count", "3", "--simulators", "opendc"), "no world to draw from"),
        (("--seed", "1", "--count", "3", "--worlds", "nowhere"), "unknown training worlds"),
    ],
)
def test_bad_stream_commands_fail_with_one_line_and_write_nothing(tmp_path, cache, extra, message):
    out = tmp_path / "o"
    done = run_whatif("stream", *extra, "--out", str(out), "--cache", cache)
    assert done.returncode in (1, 2)
    assert message in done.stderr and "Traceback" not in done.stderr
    assert not out.exists()


def test_an_existing_output_is_refused_unless_overwrite(shards, cache):
    before = (shards / "manifest.json").read_bytes()
    done = run_whatif("stream", *ARGS, "--out", str(shards), "--cache", cache)
    assert done.returncode == 1 and "already exists; pass --overwrite" in done.stderr
    assert (shards / "manifest.json").read_bytes() == before
