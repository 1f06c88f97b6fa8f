"""Interrupted runs never leave a file that looks complete; bad input fails clearly, writing nothing."""

from __future__ import annotations

import math
import signal
import subprocess
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from tests.conftest import run_cli, sigint_as_ctrl_c, whatif_executable
from whatif_bench.generator import Corpus
from whatif_bench.generator.selection import longest_window
from whatif_bench.relationships import load_registry
from whatif_bench.simulators import read_baselines, shipped_baselines_path, write_baselines
from whatif_bench.simulators.base import Baselines

REPO = Path(__file__).resolve().parents[1]


def start_and_wait_for_partial(out, jobs="1", stderr=subprocess.DEVNULL):
    """Start generating every SUMO target; return once its (per-process) partial file exists."""
    command = [
        *whatif_executable(),
        "generate",
        "--simulators",
        "sumo",
        "--out",
        str(out),
        "--jobs",
        jobs,
    ]
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=stderr, preexec_fn=sigint_as_ctrl_c
    )
    from whatif_bench.outputs import temporary_path

    partial = temporary_path(out, pid=process.pid)
    deadline = time.monotonic() + 60
    while not partial.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert process.poll() is None, "the run ended before it could be interrupted"
    return process, partial


@pytest.mark.slow  # about 2 s
def test_a_killed_run_leaves_no_corpus_and_the_next_run_finishes(tmp_path):
    out = tmp_path / "corpus.h5"
    process, partial = start_and_wait_for_partial(out)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not out.exists()
    # the next run starts over from the stale partial file and completes
    result = run_cli(
        "generate", "--targets", "sumo/flow_loop_e_0_near", "--out", str(out), "--jobs", "1"
    )
    assert result.returncode == 0, result.stderr
    assert not partial.exists()
    with Corpus(out) as corpus:
        assert len(corpus.pairs) == 200


def test_ctrl_c_leaves_no_corpus(tmp_path):
    out = tmp_path / "corpus.h5"
    process, partial = start_and_wait_for_partial(out)
    process.send_signal(signal.SIGINT)
    process.wait(timeout=60)
    assert process.returncode != 0
    assert not out.exists() and not partial.exists()


def _fails(tmp_path, *args, message):
    out = tmp_path / "never.h5"
    result = run_cli("generate", "--out", str(out), *args)
    assert result.returncode != 0
    assert message in result.stderr, result.stderr
    assert not out.exists() and not list(tmp_path.glob(".never.h5.partial*"))


def test_unknown_target(tmp_path):
    _fails(tmp_path, "--targets", "sumo/CO3", message="unknown target 'sumo/CO3'")


def test_empty_selection(tmp_path):
    sumo_only = tmp_path / "sumo-only.h5"
    write_baselines(sumo_only, [read_baselines(shipped_baselines_path())["sumo"]])
    _fails(
        tmp_path,
        "--baselines",
        str(sumo_only),
        "--simulators",
        "opendc",
        message="has no baselines for 'opendc'",
    )


def test_a_series_the_shipped_baselines_lack_is_named_with_where_to_get_it(tmp_path):
    """A user's new target on the shipped baselines: the error names "the shipped baselines"
    (never the install tree) and how to record the series."""
    target = "sumo/speed_loop_e_0_far"
    args = [
        "--spec",
        str(REPO / "examples" / "extra_sumo_target.toml"),
        "--forms",
        str(REPO / "examples" / "custom_forms.py"),
    ]
    result = run_cli("generate", "--out", str(tmp_path / "never.h5"), *args, "--targets", target)
    assert result.returncode == 1
    assert result.stderr.startswith(
        f"error: the shipped baselines: no baseline series for {target}"
    )
    assert "whatif simulate --simulator sumo --extra-series" in result.stderr
    assert "__editable__" not in result.stderr and "site-packages" not in result.stderr
    assert str(shipped_baselines_path()) not in result.stderr
    assert not (tmp_path / "never.h5").exists()


def test_the_hint_names_extra_series_only_where_a_simulator_has_them():
    from whatif_bench.generator.selection import _where_to_get
    from whatif_bench.simulators.store import SHIPPED_NAME, baselines_name

    assert "give --baselines a file that records it" in _where_to_get(SHIPPED_NAME, "gridlabd")
    assert "--extra-series" in _where_to_get(SHIPPED_NAME, "epanet")
    assert _where_to_get("mine.h5", "sumo") == ""  # the user's own file: nothing to add
    assert baselines_name(shipped_baselines_path()) == SHIPPED_NAME
    assert baselines_name("mine.h5") == "mine.h5"


def test_unknown_simulator(tmp_path):
    _fails(tmp_path, "--simulators", "matlab", message="unknown simulator 'matlab'")


def test_unreadable_baselines(tmp_path):
    bad = tmp_path / "bad.h5"
    bad.write_text("garbage")
    _fails(tmp_path, "--baselines", str(bad), message="not a readable HDF5 file")
    _fails(tmp_path, "--baselines", str(tmp_path / "absent.h5"), message="no such baselines file")


def test_nan_in_a_baseline(tmp_path):
    path = tmp_path / "nan.h5"
    epanet = read_baselines(shipped_baselines_path())["epanet"]
    write_baselines(path, [epanet])
    with h5py.File(path, "r+") as h5:
        data = h5["epanet/series/pressure_10"][()]
        data[100] = np.nan
        del h5["epanet/series/pressure_10"]
        h5["epanet/series"].create_dataset("pressure_10", data=data).attrs["unit"] = "psi"
    _fails(
        tmp_path,
        "--baselines",
        str(path),
        message="epanet/pressure_10: non-finite value nan at step 100",
    )


def test_bad_numbers(tmp_path):
    _fails(tmp_path, "--seed", "-1", message="argument --seed: must be between 0 and 2**63 - 1")
    _fails(tmp_path, "--jobs", "-2", message="argument --jobs: must be a positive integer")


def test_a_baseline_too_short_for_the_axes(tmp_path):
    short = read_baselines(shipped_baselines_path())["epanet"]
    cut = Baselines(**{**short.__dict__, "series": {k: v[:3000] for k, v in short.series.items()}})
    path = tmp_path / "short.h5"
    write_baselines(path, [cut])
    needed = longest_window(load_registry().simulators["epanet"].c4)
    days = math.ceil(needed * cut.interval_s / 86400)
    _fails(
        tmp_path,
        "--baselines",
        str(path),
        message=(
            f"the epanet baseline has 3,000 steps ({3000 * cut.interval_s / 86400:.2f} days at "
            f"{cut.interval_s:g} s a step); the axes need windows of up to {needed:,} steps, so "
            f"simulate at least {days} days (whatif simulate --days {days})"
        ),
    )
