"""Issue 23, points 3 and 4 (docs/RELIABILITY.md, section 8): every count-like option has a
documented range and an absurd value is a usage error before any work; the stream's shard
bounds are generated lazily; control characters in baseline metadata are one error naming file
and field (``baselines info`` and ``combine`` alike); a damaged stream shard is one
``ShardError`` naming the file and what is damaged. In-process and small: a few seconds."""

from __future__ import annotations

import json
import shutil
import tracemalloc
import types
from pathlib import Path

import h5py
import numpy as np
import pytest

from tests.conftest import run_main as run
from tests.test_table_baselines import GOOD_CSV, _series, write_parquet
from whatif_bench.cli import build_parser, main
from whatif_bench.cli_types import (
    MAX_COUNT,
    MAX_DAYS,
    MAX_SHARD_SIZE,
    MAX_WAIT_S,
    max_jobs,
)
from whatif_bench.corpus.reader import Task
from whatif_bench.simulators import read_baselines
from whatif_bench.simulators.base import BaselinesFileError
from whatif_bench.stream import shards
from whatif_bench.stream.h5shard import ShardError, read_shard, shard_columns, write_shard

HUGE = str(10**400)
GIANT = "9" * 5000  # beyond int()'s 4,300-digit limit
TOO_MANY_JOBS = str(max_jobs() + 1)


# ---- 1. bounded options ------------------------------------------------------------------------


def _commands(tmp: Path) -> dict[str, list[str]]:
    """A valid command line per command; a bad option appended to it wins (argparse keeps the
    last value)."""
    out = str(tmp / "out")
    return {
        "stream": ["stream", "--seed", "1", "--count", "3", "--out", out],
        "generate": ["generate", "--targets", "x", "--out", str(tmp / "c.h5")],
        "evaluate": ["evaluate", str(tmp / "c.h5"), "--out", out],
        "diagnose": ["diagnose", str(tmp / "c.h5")],
        "rel-diagnose": ["relationships", "diagnose", "--out", out],
        "export": ["export", str(tmp / "c.h5"), "--format", "parquet", "--out", out],
        "simulate": ["simulate", "--simulator", "epanet", "--out", str(tmp / "b.h5")],
        "worlds": ["worlds", "build", "--cache", out],
        "images": ["images", "check"],
        "check": ["relationships", "check"],
    }


COUNT_RANGE = "must be between 1 and 9,223,372,036,854,775,807 (2**63 - 1)"
BAD_OPTIONS = [
    # (command, option, value, message)
    ("stream", "--count", "0", "must be a positive integer (>= 1), got 0; allowed: 1 to 9,223"),
    ("stream", "--count", "-7", "got -7; allowed: 1 to 9,223,372,036,854,775,807 (2**63 - 1)"),
    ("stream", "--count", str(MAX_COUNT + 1), f"{COUNT_RANGE}, got {MAX_COUNT + 1}"),
    ("stream", "--count", HUGE, f"{COUNT_RANGE}, got 10000000000000000000... (401 characters)"),
    ("stream", "--count", GIANT, f"{COUNT_RANGE}, got 99999999999999999999... (5,000 characters)"),
    ("stream", "--count", "1e12", "expected an integer, got '1e12'"),
    ("stream", "--shard-size", "0", "must be a positive integer (>= 1), got 0; allowed: 1 to"),
    ("stream", "--shard-size", str(MAX_SHARD_SIZE + 1), f"between 1 and {MAX_SHARD_SIZE:,} (a"),
    ("stream", "--shard-size", HUGE, "(401 characters)"),
    ("stream", "--seed", str(2**63), f"must be between 0 and 2**63 - 1, got {2**63}"),
    ("stream", "--seed", GIANT, "must be between 0 and 2**63 - 1, got 9999"),
    *[
        (command, "--jobs", value, message)
        for command in ("stream", "generate", "evaluate", "diagnose")
        for value, message in (
            (HUGE, "(401 characters)"),
            (TOO_MANY_JOBS, f"must be between 1 and {max_jobs():,} (8 per core"),
            ("0", "must be a positive integer (>= 1), got 0; allowed: 1 to"),
        )
    ],
    *[
        (command, "--dask-local", value, message)
        for command in ("stream", "generate", "evaluate")
        for value, message in (
            (HUGE, "(401 characters)"),
            (TOO_MANY_JOBS, f"got {TOO_MANY_JOBS}"),
        )
    ],
    ("generate", "--dask-timeout", "1e300", "must be a number in (0, 86400] s (one day)"),
    ("evaluate", "--dask-timeout", "86401", "got '86401'"),
    ("generate", "--seed", GIANT, "must be between 0 and 2**63 - 1, got 9999"),
    ("evaluate", "--seed", HUGE, "must be between 0 and 2**63 - 1, got 1000"),
    ("export", "--seed", GIANT, "must be between 0 and 2**63 - 1, got 9999"),
    ("rel-diagnose", "--seed", GIANT, "must be between 0 and 2**63 - 1, got 9999"),
    ("simulate", "--days", "3661", "must be a number in (0, 3660] days (ten years), got '3661'"),
    ("simulate", "--days", "1e300", "got '1e300'"),
    ("worlds", "--days", "1e6", "must be a number in (0, 3660] days"),
    ("images", "--days", "5000", "must be a number in (0, 3660] days"),
    ("check", "--timeout", "1e300", "must be a number in (0, 86400] s (one day), got '1e300'"),
]


@pytest.mark.parametrize(
    ("command", "option", "value", "message"),
    BAD_OPTIONS,
    ids=[f"{c}{o}={v[:12]}" for c, o, v, _ in BAD_OPTIONS],
)
def test_an_absurd_number_is_a_usage_error_before_any_work(
    tmp_path, capsys, command, option, value, message
):
    code, out, err = run(capsys, *_commands(tmp_path)[command], option, value)
    assert code == 2 and out == ""
    last = err.strip().splitlines()[-1]
    assert f"error: argument {option}: " in last and message in last, last
    assert len(last) < 300  # a 5,000-digit value is shortened
    assert list(tmp_path.iterdir()) == []  # nothing written


@pytest.mark.parametrize(
    ("argv", "dest", "value"),
    [
        (["stream", "--seed", "1", "--out", "o", "--count", str(MAX_COUNT)], "count", MAX_COUNT),
        (["stream", "--seed", "1", "--count", "1", "--out", "o"], "count", 1),
        (
            ["stream", "--seed", "1", "--count", "3", "--out", "o", "--shard-size", "16384"],
            "shard_size",
            MAX_SHARD_SIZE,
        ),
        (["generate", "--jobs", str(max_jobs())], "jobs", max_jobs()),
        (["evaluate", "c.h5", "--out", "o", "--dask-local", str(max_jobs())], "dask_local", None),
        (["simulate", "--simulator", "epanet", "--out", "b.h5", "--days", "3660"], "days", 3660),
        (["relationships", "check", "--timeout", "86400"], "timeout", MAX_WAIT_S),
        (["generate", "--seed", str(2**63 - 1)], "seed", 2**63 - 1),
    ],
)
def test_the_largest_allowed_values_are_accepted(argv, dest, value):
    args = build_parser().parse_args(argv)
    assert getattr(args, dest) == (max_jobs() if value is None else value)
    assert MAX_DAYS == 3660


def test_the_help_states_the_bounds_and_why(capsys):
    for argv, words in [
        (["stream", "--help"], ["1 to 2**63 - 1", f"1 to {MAX_SHARD_SIZE:,}", "8 per core"]),
        (["generate", "--help"], ["8 per core", "CPU-bound"]),
        (["diagnose", "--help"], ["8 per core"]),
        (["simulate", "--help"], ["at most 3660"]),
    ]:
        with pytest.raises(SystemExit):
            main(argv)
        text = " ".join(capsys.readouterr().out.split())
        for word in words:
            assert word in text, (argv, word)


EVAL = ["relationships", "eval", "--simulator", "sumo", "--target", "flow_loop_e_0_near"]
K_RANGE = "error: sumo/flow_loop_e_0_near: K must be in 1..5, got"
# `relationships eval` checks --k against the target's K and reads --y and --factor itself: a
# value of hundreds or thousands of digits is shown shortened there too (exit 1; not a number
# at all: the usage error, exit 2)
EVAL_HUGE_VALUES = [
    # (id, arguments, exit code, the error line)
    ("k_huge", ["--y", "1", "--k", HUGE], 1, f"{K_RANGE} 10000000000000000000... (401 characters)"),
    ("k_huge_negative", ["--y", "1", "--k", f"-{HUGE}"], 1, f"{K_RANGE} -1000000000000000000... (402 characters)"),
    ("k_giant", ["--y", "1", "--k", GIANT], 1, f"{K_RANGE} 99999999999999999999... (5,000 characters)"),
    (
        "k_giant_not_a_number", ["--y", "1", "--k", f"{GIANT}x"], 2,
        "error: argument --k: invalid int value: '99999999999999999999... (5,001 characters)'",
    ),
    ("y_huge", ["--y", HUGE], 1, "error: --y: '10000000000000000000... (401 characters)' is not a finite number"),
    ("y_second_huge", ["--y", f"1,{HUGE}"], 1, "error: --y: '10000000000000000000... (401 characters)' is not a finite number"),
    (
        "y_huge_text", ["--y", f"1,x{HUGE}"], 1,
        "error: --y: expected comma-separated numbers, got '1,x10000000000000000... (404 characters)'",
    ),
    (
        "factor_huge", ["--y", "1", "--factor", f"tau={HUGE}"], 1,
        "error: --factor tau: '10000000000000000000... (401 characters)' is not a finite number",
    ),
    (
        "factor_huge_text", ["--y", "1", "--factor", f"tau=1,x{GIANT}"], 1,
        "error: --factor tau: expected comma-separated numbers, got '1,x99999999999999999... (5,003 characters)'",
    ),
    (
        "factor_without_name", ["--y", "1", "--factor", HUGE], 1,
        "error: --factor expects COV=F1,F2,..., got '10000000000000000000... (401 characters)'",
    ),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "args", "code", "line"), EVAL_HUGE_VALUES, ids=[c[0] for c in EVAL_HUGE_VALUES]
)
def test_eval_shows_a_huge_value_shortened(tmp_path, capsys, monkeypatch, case, args, code, line):
    monkeypatch.chdir(tmp_path)
    got, out, err = run(capsys, *EVAL, *args)
    assert got == code and out == ""
    errors = [text for text in err.splitlines() if "error:" in text]
    assert len(errors) == 1 and errors[0].endswith(line), err
    assert code == 2 or err == f"{line}\n"
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_eval_still_takes_every_k_of_the_target(capsys):
    for k in ("1", "5", " 3", "+2", "0003"):
        code, out, _ = run(capsys, *EVAL, "--y", "1", "--k", k)
        assert code == 0 and out.strip() == "1"


# ---- 2. lazy shard bounds ----------------------------------------------------------------------


def test_shard_bounds_are_lazy_and_cost_no_memory_for_the_largest_count():
    tracemalloc.start()
    try:
        bounds = shards.shard_bounds(MAX_COUNT, 4096)
        assert isinstance(bounds, types.GeneratorType)
        assert next(bounds) == (0, 4096) and next(bounds) == (4096, 8192)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 100_000
    assert list(shards.shard_bounds(10, 4)) == [(0, 4), (4, 8), (8, 10)]
    assert list(shards.shard_bounds(8, 4)) == [(0, 4), (4, 8)]


class _Stop(Exception):
    pass


def test_writing_a_huge_stream_starts_at_once_without_planning_every_shard(tmp_path, monkeypatch):
    """``write_shards`` with count 10**12 (the hunt's 19.7 GB) makes its first pieces at once;
    the run is stopped at the third and leaves nothing behind."""
    made = []

    def fake_shard(stream, format, key, first, last):
        if len(made) == 2:
            raise _Stop
        made.append((first, last))
        return None, {"drawn": 0, "kept": 0, "rejected": {}}

    monkeypatch.setattr(shards, "_shard", fake_shard)
    monkeypatch.setattr(shards, "_write_file", lambda *args: None)
    stream = types.SimpleNamespace(
        count=10**12,
        seed=1,
        _sources=[],
        world_sources=lambda: [],
        entries=lambda: [],
    )
    tracemalloc.start()
    try:
        with pytest.raises(_Stop):
            shards.write_shards(stream, tmp_path / "out", shard_size=1000, progress=False)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    piece = shards.PIECE  # the unit of work: a shard of 1000 is made in pieces
    assert made == [(0, piece), (piece, 2 * piece)]
    assert peak < 20_000_000  # the old list of bounds: 10**9 tuples
    assert not (tmp_path / "out").exists()


# ---- 3. control characters in baseline metadata ------------------------------------------------

GOOD_LINES = {
    "notes": "# notes: a test table",
    "version": "# simulator_version: rig 1",
    "simulator": "# simulator: lab",
    "bases": '# covariate_base_values: {"heater": 100.0, "fan": 2}',
    "header": "time,plate [degC],power [W]",
}
BAD_CSV = [
    # (line, replacement, field named, character)
    ("notes", "# notes: a\x00test", "line 4, metadata key 'notes'", "U+0000 at character 11;"),
    ("notes", "# notes: red \x1b[31m text", "line 4, metadata key 'notes'", "U+001B"),
    ("notes", "# notes:\ta tab", "line 4, metadata key 'notes'", "U+0009"),
    ("notes", "# notes: bell\x07", "line 4, metadata key 'notes'", "U+0007"),
    ("notes", "# notes: del\x7f", "line 4, metadata key 'notes'", "U+007F"),
    ("notes", "# notes: c1\x85", "line 4, metadata key 'notes'", "U+0085"),
    ("notes", "# no\x00tes: x", "line 4, metadata key 'no\\x00tes'", "U+0000"),
    (
        "version",
        "# simulator_version: rig\x001",
        "line 2, metadata key 'simulator_version'",
        "U+0000",
    ),
    ("simulator", "# simulator: la\x00b", "line 1, metadata key 'simulator'", "U+0000"),
    (
        "bases",
        '# covariate_base_values: {"heat\\u0000er": 100.0, "fan": 2}',
        "metadata key 'covariate_base_values', entry 'heat\\x00er'",
        "U+0000",
    ),
    ("header", "time,plate [deg\x00C],power [W]", "line 5, column 'plate [deg\\x00C]'", "U+0000"),
    ("header", "time,plate [degC],power [W\x1f]", "line 5, column 'power [W\\x1f]'", "U+001F"),
]


def _assert_info_and_combine_refuse(capsys, path: Path, tmp_path: Path, message: str) -> None:
    code, out, err = run(capsys, "baselines", "info", str(path))
    assert code == 1 and out == "" and err == f"error: {message}\n", err
    store = tmp_path / "all.h5"
    code, out, err = run(capsys, "baselines", "combine", str(path), "--out", str(store))
    assert code == 1 and err == f"error: {message}\n", err
    assert not store.exists() and sorted(p.name for p in tmp_path.iterdir()) == [path.name]


@pytest.mark.parametrize(("line", "new", "field", "char"), BAD_CSV)
def test_a_control_character_in_csv_metadata_is_refused(tmp_path, capsys, line, new, field, char):
    path = tmp_path / "lab.csv"
    text = GOOD_CSV.replace(GOOD_LINES[line], new, 1)
    assert text != GOOD_CSV
    path.write_text(text, encoding="utf-8")
    with pytest.raises(BaselinesFileError) as error:
        read_baselines(path)
    message = str(error.value)
    assert message.startswith(f"{path}: {field}: contains the control character {char}"), message
    assert "\n" not in message and "\x00" not in message
    _assert_info_and_combine_refuse(capsys, path, tmp_path, message)


BAD_PARQUET = [
    # (metadata, units, field named, character)
    ({"notes": "a\x00b"}, None, "metadata key 'notes'", "U+0000"),
    ({"notes": "two\nlines"}, None, "metadata key 'notes'", "U+000A"),
    ({"simulator_version": "v\x1b[2J"}, None, "metadata key 'simulator_version'", "U+001B"),
    ({"simulator": "la\x00b"}, None, "metadata key 'simulator'", "U+0000"),
    (
        {"covariate_base_values": json.dumps({"heat\x00er": 1.0})},
        None,
        "metadata key 'covariate_base_values', entry 'heat\\x00er'",
        "U+0000",
    ),
    ({}, {"plate": "deg\x00C"}, "schema, column 'plate [deg\\x00C]'", "U+0000"),
    ({}, {"plate": "deg\tC"}, "schema, column 'plate [deg\\tC]'", "U+0009"),
]


@pytest.mark.parametrize(("metadata", "units", "field", "char"), BAD_PARQUET)
def test_a_control_character_in_parquet_metadata_is_refused(
    tmp_path, capsys, metadata, units, field, char
):
    from datetime import datetime

    series, good_units = _series()
    path = write_parquet(
        tmp_path / "lab.parquet", datetime(2024, 1, 1), 60, series, units or good_units, metadata
    )
    with pytest.raises(BaselinesFileError) as error:
        read_baselines(path)
    message = str(error.value)
    assert message.startswith(f"{path}: {field}: contains the control character {char}"), message
    _assert_info_and_combine_refuse(capsys, path, tmp_path, message)


def test_printable_unicode_metadata_still_reads(tmp_path):
    path = tmp_path / "lab.csv"
    path.write_text(
        GOOD_CSV.replace("a test table", "Ø 5 µm, 20 °C – naïve “quotes”"), encoding="utf-8"
    )
    assert read_baselines(path)["lab"].notes == "Ø 5 µm, 20 °C – naïve “quotes”"


def test_the_store_writer_refuses_nul_before_writing(tmp_path):
    from whatif_bench.simulators import write_baselines
    from whatif_bench.simulators.base import Baselines

    item = Baselines(
        "lab", "1", 60, "2024-01-01T00:00:00", {"y": np.ones(3)}, {"y": "1"}, {}, notes="a\x00b"
    )
    out = tmp_path / "b.h5"
    with pytest.raises(BaselinesFileError, match=r"simulator 'lab': attribute 'notes': contains"):
        write_baselines(out, [item])
    assert list(tmp_path.iterdir()) == []


# ---- 4. damaged stream shards ------------------------------------------------------------------


def _task(i: int, k: int = 2, context: int = 12, horizon: int = 4) -> Task:
    rng = np.random.default_rng(i)

    def values(*shape):
        return rng.normal(size=shape).astype(np.float32)

    return Task(
        task_id=f"epanet/t{i}/K{k}-C1-L8-E1/novel",
        future="novel",
        simulator="epanet",
        target="pressure_10",
        k=k,
        c_label="C1",
        event_length=8,
        e_setting="E1",
        covariates=tuple(f"cov{j}" for j in range(k)),
        units={"pressure_10": "psi"},
        interval_s=300,
        baseline_start="2024-01-01T00:00:00",
        start_step=i,
        history_target=values(context),
        history_covariates=values(k, context),
        future_covariates=values(k, horizon),
        future_target=values(horizon),
        counterfactual_history=values(context),
        counterfactual_future=values(horizon),
        recipe={"slot": i, "seed": 1},
        world="epanet-test",
    )


@pytest.fixture(scope="module")
def good_shard(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("shard") / "shard-00000.h5"
    tasks = [_task(i, k=1 + i % 3, context=200 + i) for i in range(5)]
    write_shard(path, shard_columns(tasks), {"seed": 1, "first_slot": 0, "n_tasks": 5})
    return path


def test_a_good_synthetic_shard_reads_back(good_shard):
    tasks = list(read_shard(good_shard))
    assert [t.start_step for t in tasks] == list(range(5))
    expected = _task(3, k=1, context=203)
    assert np.array_equal(tasks[3].history_covariates, expected.history_covariates)
    assert tasks[3].covariates == expected.covariates and tasks[3].recipe == expected.recipe


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _empty(path: Path) -> None:
    path.write_bytes(b"")


def _flip_chunk(path: Path) -> None:
    """Overwrite the middle of the first compressed chunk of data/history_covariates."""
    with h5py.File(path, "r") as h5:
        info = h5["data/history_covariates"].id.get_chunk_info(0)
    raw = bytearray(path.read_bytes())
    middle = info.byte_offset + info.size // 2
    raw[middle : middle + 16] = bytes(b ^ 0xFF for b in raw[middle : middle + 16])
    path.write_bytes(bytes(raw))


def _edit(change):
    def apply(path: Path) -> None:
        with h5py.File(path, "r+") as h5:
            change(h5)

    return apply


def _replace(name: str, data) -> object:
    def change(h5) -> None:
        del h5[name]
        h5[name] = data

    return _edit(change)


DAMAGE = [
    (_truncate, "not a readable HDF5 file"),
    (_empty, "not a readable HDF5 file"),
    (_flip_chunk, "dataset 'data/history_covariates': cannot be read, the file is damaged"),
    (_edit(lambda h5: h5.__delitem__("tasks/k")), "dataset 'tasks/k': is missing"),
    (_edit(lambda h5: h5.__delitem__("tasks/recipe")), "dataset 'tasks/recipe': is missing"),
    (_edit(lambda h5: h5.__delitem__("data")), "group 'data': is missing"),
    (
        _edit(lambda h5: h5.__delitem__("data/future_target")),
        "dataset 'data/future_target': is missing",
    ),
    (_replace("tasks/k", np.ones(5, dtype=np.float64)), "'tasks/k': expected integers, got dtype"),
    (_replace("tasks/task_id", np.arange(5)), "'tasks/task_id': expected text, got dtype int64"),
    (
        _replace("data/history_target", np.zeros(2000, dtype=np.float64)),
        "dataset 'data/history_target': expected float32, got dtype float64",
    ),
    (_replace("tasks/k", np.ones(6, dtype=np.int64)), "'tasks/k': has 6 rows, attribute 'n_tasks'"),
    (
        _replace("tasks/k", np.ones((5, 1), dtype=np.int64)),
        "'tasks/k': expected a one-dimensional dataset",
    ),
    (
        _replace("data/future_target", np.zeros(6, dtype=np.float32)),
        "row 1, dataset 'tasks/future_target_offset': values 4..8 lie outside",
    ),
    (
        _replace("tasks/recipe", np.array(["{"] * 5, dtype=h5py.string_dtype())),
        "row 0, dataset 'tasks/recipe': is not JSON",
    ),
    (
        _replace("tasks/covariates", np.array(["[]"] * 5, dtype=h5py.string_dtype())),
        "row 0, dataset 'tasks/covariates': expected a JSON list of 1 names",
    ),
    (_edit(lambda h5: h5.attrs.__delitem__("n_tasks")), "attribute 'n_tasks': is missing"),
    (_edit(lambda h5: h5.attrs.__delitem__("first_slot")), "attribute 'first_slot': is missing"),
    (_edit(lambda h5: h5.attrs.__setitem__("seed", "one")), "attribute 'seed': expected an int"),
    (_edit(lambda h5: h5.attrs.__delitem__("format")), "not a whatif-stream-shard version 2 file"),
    (_edit(lambda h5: h5.__delitem__("tasks")), "group 'tasks': is missing"),
]


@pytest.mark.parametrize(("damage", "message"), DAMAGE, ids=[str(i) for i in range(len(DAMAGE))])
def test_a_damaged_shard_is_one_shard_error_naming_the_file(tmp_path, good_shard, damage, message):
    path = tmp_path / "shard-00000.h5"
    shutil.copyfile(good_shard, path)
    damage(path)
    with pytest.raises(ShardError) as error:
        list(read_shard(path))
    text = str(error.value)
    assert text.startswith(f"{path}: ") and message in text, text
    assert "\n" not in text
