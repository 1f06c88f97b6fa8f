"""The ``whatif relationships`` command line, run in-process (``run_cli``: the same ``main``
the console script calls; the script as a process is tested where exit codes and signals are
the point, e.g. tests/test_generator_hardening.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import run_cli
from whatif_bench.relationships.docs import render_reference

REPO = Path(__file__).resolve().parents[1]


def test_list_json_has_one_object_per_target_with_the_stable_keys(registry):
    result = run_cli("relationships", "list", "--json", check=True)
    rows = json.loads(result.stdout)
    assert len(rows) == 99
    keys = {
        "simulator",
        "target",
        "primary",
        "covariates",
        "combination",
        "direction",
        "shape",
        "base_value",
    }
    for row in rows:
        assert set(row) == keys
        assert row["covariates"][0] == row["primary"] and len(row["covariates"]) == 5
        assert row["combination"] in ("multiplicative", "additive")
        assert (
            set(row["direction"])
            == set(row["shape"])
            == set(row["base_value"])
            == set(row["covariates"])
        )
        assert set(row["direction"].values()) <= {"direct", "inverse"}
        assert set(row["shape"].values()) <= {"step", "bell"}
    assert rows == [r.summary() for r in registry]


def test_list_filters_by_simulator():
    rows = json.loads(
        run_cli("relationships", "list", "--simulator", "gridlabd", "--json", check=True).stdout
    )
    assert {r["simulator"] for r in rows} == {"gridlabd"} and len(rows) == 11


def test_eval_reads_factor_lists_in_step_and_matches_the_api(registry):
    result = run_cli(
        "relationships",
        "eval",
        "--simulator",
        "opendc",
        "--target",
        "power_draw_host-0",
        "--y",
        "150,200,105.5",
        "--factor",
        "coreSpeed_host-0=1,2,0.5",
        "--factor",
        "coreCount_host-0=1,1,4",
        "--json",
        check=True,
    )
    values = np.array(json.loads(result.stdout)["values"])
    assert values.shape == (3, 3)
    np.testing.assert_array_equal(values[0], [150.0, 200.0, 105.5])
    assert values[1, 0] == pytest.approx(150 + (150 - 105.5 + 2.0))
    relationship = registry.get("opendc", "power_draw_host-0")
    expected = relationship.evaluate(
        np.array([150.0, 200.0, 105.5]), {"coreSpeed_host-0": 0.5, "coreCount_host-0": 4.0}
    )
    np.testing.assert_allclose(values[2], expected, rtol=0, atol=0)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--factor", "lcStrategic=2"], "does not act on sumo/CO2_abs_edge_e2c"),
        (["--factor", "accel=2,3", "--factor", "minGap=1"], "same length"),
        (["--factor", "accel=two"], "expected comma-separated numbers"),
        (["--factor", "accel=0"], "factors must be finite and > 0"),
    ],
)
def test_eval_errors_are_clear_and_exit_non_zero(args, message):
    result = run_cli(
        "relationships",
        "eval",
        "--simulator",
        "sumo",
        "--target",
        "CO2_abs_edge_e2c",
        "--y",
        "1,2",
        *args,
        "--json",
    )
    assert result.returncode == 1
    assert message in result.stderr
    assert result.stdout == ""


def test_eval_unknown_target_lists_the_valid_ones():
    result = run_cli("relationships", "eval", "--simulator", "sumo", "--target", "CO3", "--y", "1")
    assert (
        result.returncode == 1
        and "has no target 'CO3'" in result.stderr
        and "CO2_abs_edge_e2c" in result.stderr
    )


@pytest.mark.slow  # about 1 s
def test_check_passes_on_the_shipped_registry():
    result = run_cli("relationships", "check")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "checked 99 relationship(s): all rules hold" in result.stdout


def test_check_reports_each_violation_of_a_user_file(tmp_path):
    spec = tmp_path / "bad.toml"
    spec.write_text(
        (REPO / "relationships" / "data" / "sumo.toml")
        .read_text()
        .split("# ---- classes")[0]
        .replace('name = "sumo"', 'name = "sumo2"')
        + """
[classes.k]
combination = "multiplicative"
typical_range = [1.0, 100.0]
directions = { accel = "inverse", minGap = "direct", decel = "direct", maxSpeed = "direct", sigma = "direct" }
weights = { minGap = 0.2, decel = 0.2, maxSpeed = 0.2, sigma = 0.2 }
rationale = "accel is declared inverse but the form rises"

[[targets]]
name = "wrong_way"
class = "k"
unit = "u"
primary = "accel"
form = "power"
params = { exponent = 0.5 }
rationale = "deliberately wrong"
"""
    )
    result = run_cli("relationships", "check", str(spec), "--json")
    assert result.returncode == 1
    report = json.loads(result.stdout)
    assert report["checked"] == 1 and not report["ok"]
    assert {v["rule"] for v in report["violations"]} == {"monotone"}
    assert report["violations"][0]["target"] == "wrong_way"


def test_doc_writes_markdown(tmp_path):
    out = tmp_path / "REL.md"
    run_cli("relationships", "doc", "--out", str(out), check=True)
    text = out.read_text()
    assert text.startswith("# Relationship reference")
    assert text.count("#### `") == 99


def test_committed_reference_is_up_to_date(registry):
    committed = (REPO / "docs" / "RELATIONSHIPS.md").read_text(encoding="utf-8")
    assert committed == render_reference(registry), "run: whatif relationships doc"


def test_plot_draws_response_curves(tmp_path):
    run_cli(
        "relationships",
        "plot",
        "--simulator",
        "gridlabd",
        "--target",
        "is_COOL_on",
        "--out",
        str(tmp_path),
        check=True,
    )
    png = (tmp_path / "is_COOL_on.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000


def test_an_unexpected_failure_is_one_error_line_and_debug_shows_the_traceback(monkeypatch, capsys):
    from whatif_bench import cli
    from whatif_bench.generator import cli as gen_cli

    def broken(args):
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(gen_cli, "_info", broken)
    assert cli.main(["info", "x.h5"]) == 1
    err = capsys.readouterr().err
    assert err == (
        "error: unexpected RuntimeError: boom second line (rerun with --debug for the traceback)\n"
    )
    with pytest.raises(RuntimeError, match="boom"):
        cli.main(["--debug", "info", "x.h5"])


def test_usage_errors_exit_two(capsys):
    from whatif_bench import cli

    with pytest.raises(SystemExit) as stop:
        cli.main(["generate", "--no-such-option"])
    assert stop.value.code == 2
    assert "unrecognized arguments" in capsys.readouterr().err
