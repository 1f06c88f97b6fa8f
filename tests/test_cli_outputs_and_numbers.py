"""``whatif relationships plot/doc/eval`` and ``whatif simulate``: bad outputs and bad numbers
are one clear error line (or a usage error), never a traceback, and nothing is written outside
the chosen output."""

from __future__ import annotations

import re

import pytest

from tests.conftest import run_main as run
from tests.toy_spec import one_covariate_spec
from whatif_bench.cli_types import positive_float

# ---- relationships plot / doc --------------------------------------------------------------


def test_plot_into_an_existing_file_is_refused(tmp_path, capsys):
    out = tmp_path / "taken"
    out.write_text("keep me")
    code, _, err = run(
        capsys, "relationships", "plot", "--simulator", "gridlabd", "--out", str(out)
    )
    assert code == 1 and err == f"error: {out}: exists and is not a folder\n"
    assert out.read_text() == "keep me"


@pytest.mark.slow  # about 1 s
def test_plot_writes_complete_pngs_and_no_temporary_files(tmp_path, capsys):
    code, out, _ = run(
        capsys,
        "relationships",
        "plot",
        "--simulator",
        "gridlabd",
        "--target",
        "is_COOL_on",
        "--out",
        str(tmp_path / "png"),
    )
    assert code == 0 and out == f"wrote {tmp_path / 'png' / 'is_COOL_on.png'}\n"
    names = sorted(p.name for p in (tmp_path / "png").iterdir())
    assert [n for n in names if not n.endswith(".lock")] == ["is_COOL_on.png"]


def test_plot_builds_file_names_only_from_safe_names(tmp_path, capsys, monkeypatch):
    """Second guard: even a target name that slipped past the spec checks cannot leave --out."""
    from whatif_bench.relationships import spec

    monkeypatch.setattr(spec, "_NAME", re.compile(r".*"))
    monkeypatch.setattr(spec, "is_safe_name", lambda name: True)
    toml = tmp_path / "evil.toml"
    toml.write_text(one_covariate_spec(simulator="evil", target="../escaped"))
    out = tmp_path / "plots"
    code, _, err = run(
        capsys,
        "relationships",
        "plot",
        "--simulator",
        "evil",
        "--spec",
        str(toml),
        "--out",
        str(out),
    )
    assert code == 1
    assert "evil target name '../escaped' cannot be used as a file name" in err
    assert not (tmp_path / "escaped.png").exists() and not out.exists()


def test_baselines_plot_into_an_existing_file_is_refused(tmp_path, capsys):
    out = tmp_path / "taken"
    out.write_text("keep me")
    code, _, err = run(capsys, "baselines", "plot", "--out", str(out))
    assert code == 1 and err == f"error: {out}: exists and is not a folder\n"
    assert out.read_text() == "keep me"


def test_a_unit_with_dollar_signs_does_not_break_the_plot(tmp_path, capsys):
    toml = tmp_path / "units.toml"
    toml.write_text(
        one_covariate_spec(
            simulator="units", covariate_unit="$\\\\nope{", target_unit="$\\\\frac{$"
        )
    )
    argv = ["--simulator", "units", "--spec", str(toml), "--out", str(tmp_path / "png")]
    code, _, err = run(capsys, "relationships", "plot", *argv)
    assert code == 0, err
    assert (tmp_path / "png" / "t.png").read_bytes().startswith(b"\x89PNG")


def test_doc_into_a_folder_or_under_a_file_is_refused(tmp_path, capsys):
    code, _, err = run(capsys, "relationships", "doc", "--out", str(tmp_path))
    assert code == 1 and err == f"error: {tmp_path}: is a folder; give a file name\n"
    (tmp_path / "file").write_text("x")
    under = tmp_path / "file" / "REL.md"
    code, _, err = run(capsys, "relationships", "doc", "--out", str(under))
    assert code == 1 and err == f"error: {under}: {tmp_path / 'file'} is a file, not a folder\n"


def test_doc_is_written_whole_with_no_temporary_file(tmp_path, capsys):
    out = tmp_path / "REL.md"
    code, stdout, _ = run(capsys, "relationships", "doc", "--out", str(out))
    assert code == 0 and stdout == f"wrote {out}\n"
    assert out.read_text(encoding="utf-8").startswith("# Relationship reference")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".REL.md.lock", "REL.md"]


# ---- relationships eval: numbers -------------------------------------------------------------

EVAL = ["relationships", "eval", "--simulator", "sumo", "--target", "CO2_abs_edge_e2c"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--y", "nan"], "--y: 'nan' is not a finite number"),
        (["--y", "1,inf"], "--y: 'inf' is not a finite number"),
        (["--y", "1e400"], "--y: '1e400' is not a finite number"),
        (["--y", ""], "--y: no numbers given"),
        (["--y", " , "], "--y: no numbers given"),
        (["--y", "1", "--factor", "accel=nan"], "--factor accel: 'nan' is not a finite number"),
        (["--y", "1", "--factor", "accel=-inf"], "--factor accel: '-inf' is not a finite"),
        (["--y", "1", "--factor", "accel=1e400"], "--factor accel: '1e400' is not a finite"),
        (["--y", "1", "--factor", "accel="], "--factor accel: no numbers given"),
        (["--y", "1", "--factor", "accel=-2"], "factors must be finite and > 0"),
        (
            ["--y", "1", "--factor", "nope=2"],
            "covariate 'nope' does not act on sumo/CO2_abs_edge_e2c; its covariates are",
        ),
        (["--y", "1", "--factor", "=2"], "covariate '' does not act on sumo/CO2_abs_edge_e2c"),
        (["--y", "1", "--factor", "accel"], "--factor expects COV=F1,F2,..., got 'accel'"),
        (["--y", "1", "--k", "0"], "K must be in 1..5, got 0"),
        (["--y", "1", "--k", "6"], "K must be in 1..5, got 6"),
        (["--y", "1", "--k", "-1"], "K must be in 1..5, got -1"),
    ],
)
def test_eval_bad_numbers_are_one_clear_error(capsys, args, message):
    code, out, err = run(capsys, *EVAL, *args)
    assert code == 1 and out == ""
    assert err.startswith("error: ") and message in err, err


def test_eval_k_that_is_not_a_number_is_a_usage_error(capsys):
    code, _, err = run(capsys, *EVAL, "--y", "1", "--k", "two")
    assert code == 2 and "--k: invalid int value: 'two'" in err


# ---- simulate ----------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["0", "-1", "nan", "inf", "-inf", "1e400", "two", ""])
def test_positive_float_refuses(text):
    import argparse

    with pytest.raises(argparse.ArgumentTypeError):
        positive_float(text)


@pytest.mark.parametrize("text", ["0.5", "1", "1e-3", "365"])
def test_positive_float_accepts(text):
    assert positive_float(text) == float(text)


@pytest.mark.parametrize("days", ["0", "-1", "nan", "inf", "1e400", "none"])
def test_simulate_days_must_be_a_positive_finite_number(tmp_path, capsys, days):
    out = tmp_path / "b.h5"
    code, _, err = run(
        capsys, "simulate", "--simulator", "epanet", "--days", days, "--out", str(out)
    )
    assert code == 2 and "argument --days:" in err and repr(days) in err
    assert not out.exists()


def test_simulate_refuses_an_unusable_output_before_running(tmp_path, capsys, monkeypatch):
    from whatif_bench.simulators import catalog

    def never(*args, **kwargs):  # the simulation must not start
        raise AssertionError("the simulator ran")

    monkeypatch.setattr(catalog.SimulatorEntry, "runner", lambda self: never)
    (tmp_path / "file").write_text("x")
    trace = tmp_path / "trace"
    trace.mkdir()
    cases = [
        (tmp_path, f"{tmp_path}: is a folder; give a file name"),
        (tmp_path / "file" / "b.h5", f"{tmp_path / 'file'} is a file, not a folder"),
    ]
    for out, message in cases:
        code, _, err = run(
            capsys, "simulate", "--simulator", "epanet", "--days", "1", "--out", str(out)
        )
        assert code == 1 and err == f"error: {out}: {message.split(': ', 1)[-1]}\n", err
    code, _, err = run(
        capsys,
        "simulate",
        "--simulator",
        "opendc",
        "--trace",
        str(trace / "."),
        "--out",
        str(trace),
    )
    assert code == 1 and "is a folder" in err
