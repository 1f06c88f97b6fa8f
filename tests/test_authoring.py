"""Users add relationships, targets, simulators and jitted forms without touching the package."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import run_whatif
from whatif_bench.relationships import load_registry
from whatif_bench.relationships.checks import check_registry
from whatif_bench.relationships.plugins import load_form_modules

REPO = Path(__file__).resolve().parents[1]
FORMS_FILE = REPO / "examples" / "custom_forms.py"
EXTRA_TARGET = REPO / "examples" / "extra_sumo_target.toml"


@pytest.fixture(scope="module")
def extended():
    load_form_modules([FORMS_FILE])
    return load_registry([EXTRA_TARGET])


@pytest.mark.slow  # about 1 s
def test_extending_a_simulator_adds_a_target_with_a_user_form(extended):
    assert len(extended) == 100
    relationship = extended.get("sumo", "speed_loop_e_0_far")
    assert relationship.form.name == "logistic_saturation"
    assert relationship.covariate_names[0] == "maxSpeed"
    assert check_registry(extended, only=[("sumo", "speed_loop_e_0_far")]).ok


@pytest.mark.slow  # about 1 s
def test_user_form_kernel_equals_its_python_definition(extended, rng):
    relationship = extended.get("sumo", "speed_loop_e_0_far")
    y = rng.uniform(0, 20, 300)
    factors = np.exp(rng.uniform(np.log(0.01), np.log(20), (5, 300)))
    np.testing.assert_allclose(
        relationship.evaluate(y, factors), relationship.evaluate_reference(y, factors), rtol=1e-12
    )
    single = relationship.evaluate(np.array([10.0]), {"maxSpeed": 3.0})[0]
    assert single == pytest.approx(10.0 * (1 + 0.4 * (2 / (1 + math.exp(-3.0)) - 1)), rel=1e-12)
    # the coalitions kernel (task descriptions) is rebuilt with the user form too
    np.testing.assert_array_equal(
        relationship.evaluate_coalitions(y[:40], factors[:, :40]),
        relationship.evaluate_coalitions_reference(y[:40], factors[:, :40]),
    )
    # and so is the one that sums an event's coalitions
    np.testing.assert_array_equal(
        relationship.coalition_worths(y[:40], 25, factors[:, 7]),
        relationship.coalition_worths_reference(y[:40], 25, factors[:, 7]),
    )


def test_user_effect_is_usable_in_a_new_simulator(tmp_path, extended):
    spec = tmp_path / "lab.toml"
    spec.write_text(
        """
[simulator]
name = "lab"
title = "a bench-top experiment"
history_pool = [0.5, 2, 4]
c4 = [2048, 256]

[[covariates]]
name = "heater"
shape = "step"
base_value = 100
unit = "W"
effect = "ratio"
description = "heater power"

[[covariates]]
name = "fan"
shape = "bell"
base_value = 3
unit = "m/s"
effect = "cube_root"
weight = 0.2
description = "fan speed"

[classes.temp]
combination = "additive"
typical_range = [10.0, 80.0]
directions = { heater = "direct", fan = "inverse" }
rationale = "heat in, air out"

[[targets]]
name = "plate_temperature"
class = "temp"
unit = "degC"
primary = "heater"
form = "shift"
params = { amplitude = 15.0, rate = 0.7, slope = 0.5 }
rationale = "more heater power, warmer plate"
"""
    )
    registry = load_registry([spec])
    assert "lab" in registry.simulators and len(registry) == 100
    relationship = registry.get("lab", "plate_temperature")
    assert relationship.covariates[1].effect.name == "cube_root"
    cooler = relationship.evaluate(np.array([40.0]), {"heater": 1.0, "fan": 9.0})[0]
    assert cooler == pytest.approx(40.0 - 40.0 * 2**-0.5 * 0.2 * 2.0, rel=1e-12)
    assert check_registry(registry, only=[("lab", "plate_temperature")]).ok


def test_checker_flags_a_user_form_that_is_not_finite(tmp_path):
    forms = tmp_path / "bad_forms.py"
    forms.write_text(
        "import math\n"
        "from whatif_bench.relationships import register_form\n"
        "@register_form('blow_up')\n"
        "def blow_up(y, f, p):\n"
        "    return y * f if f < 10.0 else math.inf\n"
    )
    spec = tmp_path / "bad.toml"
    spec.write_text(
        EXTRA_TARGET.read_text()
        .replace("logistic_saturation", "blow_up")
        .replace("params = { gain = 0.4, rate = 1.5 }", "")
        .replace("speed_loop_e_0_far", "blows_up")
        .replace("saturating_speed", "saturating_speed_2")
    )
    result = run_whatif("relationships", "check", str(spec), "--forms", str(forms), "--json")
    report = json.loads(result.stdout)
    assert result.returncode == 1
    assert "finite" in {v["rule"] for v in report["violations"]}


def test_cli_eval_uses_a_user_form():
    result = run_whatif(
        "relationships",
        "eval",
        "--simulator",
        "sumo",
        "--target",
        "speed_loop_e_0_far",
        "--forms",
        str(FORMS_FILE),
        "--spec",
        str(EXTRA_TARGET),
        "--y",
        "10",
        "--factor",
        "maxSpeed=3",
        "--json",
        check=True,
    )
    value = json.loads(result.stdout)["values"][0][0]
    assert value == pytest.approx(10.0 * (1 + 0.4 * (2 / (1 + math.exp(-3.0)) - 1)), rel=1e-12)
