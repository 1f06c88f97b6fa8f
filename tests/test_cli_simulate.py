"""``whatif simulate`` and ``whatif baselines`` through the command line: in-process (``run_cli``),
and as the real script where another process holds the output."""

from __future__ import annotations

import pytest

from tests.conftest import run_cli, run_whatif
from whatif_bench.simulators import read_baselines


def test_simulate_one_simulator_writes_a_verified_file(tmp_path):
    out = tmp_path / "epanet.h5"
    result = run_cli("simulate", "--simulator", "epanet", "--days", "1", "--out", str(out))
    assert result.returncode == 0, result.stderr
    baselines = read_baselines(out)["epanet"]
    assert baselines.n_steps == 288
    assert "epanet: 37 series x 288 steps" in result.stderr


@pytest.mark.slow  # about 2 s
def test_simulate_all_skips_what_cannot_run_here_with_a_warning(tmp_path, monkeypatch):
    """OpenDC needs a trace; without one (no --trace, no $WHATIF_OPENDC_TRACE) it is skipped."""
    monkeypatch.delenv("WHATIF_OPENDC_TRACE", raising=False)
    out = tmp_path / "all.h5"
    result = run_cli("simulate", "--simulator", "all", "--days", "0.5", "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert "warning: skipping opendc: " in result.stderr
    assert set(read_baselines(out)) == {"epanet", "gridlabd", "sumo"}


@pytest.mark.slow  # about 1 s
def test_info_and_plot(tmp_path):
    out = tmp_path / "b.h5"
    run_cli(
        "simulate",
        "--simulator",
        "gridlabd",
        "--days",
        "0.5",
        "--out",
        str(out),
        check=True,
    )
    info = run_cli("baselines", "info", str(out), check=True).stdout
    assert "gridlabd" in info and "11 series x    720 steps" in info
    run_cli("baselines", "plot", str(out), "--out", str(tmp_path / "png"), check=True)
    png = (tmp_path / "png" / "gridlabd.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000


def test_unknown_or_corrupt_baselines_file_is_a_clear_error(tmp_path):
    bad = tmp_path / "bad.h5"
    bad.write_text("nope")
    result = run_cli("baselines", "info", str(bad))
    assert result.returncode == 1 and "not a readable HDF5 file" in result.stderr


def _sha256(path):
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None


@pytest.mark.parametrize("existing", [False, True], ids=["new_out", "existing_store"])
@pytest.mark.one_quick  # about 2 s over all its cases
def test_a_second_simulate_on_a_locked_output_fails_at_once(tmp_path, existing):
    """Another process holds the output's lock (as a running `simulate` does from before its
    first simulation to the write): this run fails at once with one line, runs no simulation
    (no summary line, no progress bar), and leaves the output as it was."""
    from whatif_bench.outputs import output_lock

    out = tmp_path / "s.h5"
    if existing:
        run_whatif(
            "simulate", "--simulator", "epanet", "--days", "0.1", "--out", str(out), check=True
        )
    before = _sha256(out)
    with output_lock(out):
        result = run_whatif("simulate", "--simulator", "epanet", "--days", "0.1", "--out", str(out))
    assert result.returncode == 1
    assert result.stderr == (
        f"error: {out}: another whatif run is writing this output; wait for it or choose "
        "another path\n"
    )
    assert result.stdout == "" and _sha256(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".s.h5.lock",
        *(["s.h5"] if existing else []),
    ]
