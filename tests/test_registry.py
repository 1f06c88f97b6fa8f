"""The shipped registry holds the 99 targets of the four simulators, with the pairings and facts
of the simulators' documented models (docs/METHOD.md, section 4)."""

from __future__ import annotations

import math

import pytest

EXPECTED_TARGETS = {
    "opendc": [
        f"{m}_host-{h}"
        for h in (0, 1)
        for m in ("cpu_demand", "cpu_usage", "cpu_utilization", "cpu_time_active", "power_draw")
    ]
    + [
        f"{m}_{vm}"
        for vm in (1019, 1023, 1026)
        for m in ("cpu_demand", "cpu_usage", "cpu_time_active", "cpu_time_idle")
    ],
    "gridlabd": [
        "actual_power",
        "total_load",
        "hvac_load",
        "hvac_power",
        "fan_power",
        "air_temperature",
        "mass_temperature",
        "heating_demand",
        "is_AUX_on",
        "is_HEAT_on",
        "is_COOL_on",
    ],
    "epanet": [f"pressure_{j}" for j in (10, 11, 12, 13, 21, 22, 23, 31, 32, 2)]
    + ["demand_9", "demand_2"]
    + [f"flowrate_{p}" for p in (10, 11, 12, 21, 22, 31, 110, 111, 112, 113, 121, 122, 9)]
    + [f"velocity_{p}" for p in (10, 11, 12, 21, 22, 31, 110, 111, 112, 113, 121, 122)],
    "sumo": [f"{g}_abs_edge_e2c" for g in ("CO2", "NOx", "PMx", "fuel")]
    + [
        "flow_loop_e_0_near",
        "flow_loop_e_1_near",
        "flow_loop_e_0_far",
        "flow_loop_exit_e_0",
        "flow_loop_exit_e_1",
    ]
    + [
        "occupancy_loop_e_0_near",
        "occupancy_loop_e_1_near",
        "occupancy_loop_exit_e_0",
        "occupancy_loop_exit_e_1",
        "meanOccupancy_e2_e_0",
        "meanOccupancy_e2_e_1",
    ]
    + [
        "speed_loop_e_0_near",
        "speed_loop_e_1_near",
        "speed_loop_exit_e_0",
        "speed_loop_exit_e_1",
        "meanSpeed_e2_e_0",
        "meanSpeed_e2_e_1",
    ]
    + [
        f"{m}_e2_e_{i}"
        for m in ("meanHaltingDuration", "meanTimeLoss", "meanVehicleNumber")
        for i in (0, 1)
    ]
    + ["meanMaxJamLengthInMeters_e2_e_0", "meanMaxJamLengthInMeters_e2_e_1"],
}

BELL = {
    "opendc": {"coreSpeed_host-0", "coreSpeed_host-1"},
    "gridlabd": {
        "temperature",
        "base_power",
        "multiplier",
        "voltage_factor",
        "duty_cycle",
        "recovery_duty_cycle",
    },
    "epanet": {"pump_9_setting", "reservoir_9_base_head", "tank_2_init_level"},
    "sumo": {"sigma", "impatience", "lcSpeedGain"},
}
COVARIATE_COUNTS = {"opendc": 6, "gridlabd": 21, "epanet": 36, "sumo": 16}


def test_registry_holds_exactly_the_99_spec_targets(registry):
    assert len(registry) == 99
    for simulator, targets in EXPECTED_TARGETS.items():
        assert sorted(r.target for r in registry.relationships(simulator)) == sorted(targets)


@pytest.mark.parametrize("simulator", sorted(COVARIATE_COUNTS))
def test_covariates_and_shapes_follow_the_spec(registry, simulator):
    covariates = registry.simulators[simulator].covariates
    assert len(covariates) == COVARIATE_COUNTS[simulator]
    assert {c.name for c in covariates if c.shape == "bell"} == BELL[simulator]


def test_every_target_has_five_covariates_primary_first_then_the_fixed_order(registry):
    for relationship in registry:
        order = [c.name for c in registry.simulators[relationship.simulator].covariates]
        expected = [relationship.primary] + [c for c in order if c != relationship.primary][:4]
        assert list(relationship.covariate_names) == expected


@pytest.mark.parametrize(
    ("simulator", "target", "primary"),
    [
        ("opendc", "cpu_demand_host-0", "coreSpeed_host-0"),
        ("opendc", "cpu_usage_host-0", "coreSpeed_host-0"),
        ("opendc", "power_draw_host-0", "coreSpeed_host-0"),
        ("opendc", "cpu_utilization_host-0", "coreCount_host-0"),
        ("opendc", "cpu_time_active_host-0", "coreCount_host-0"),
        ("opendc", "cpu_time_idle_1019", "memorySize_host-0"),
        ("opendc", "power_draw_host-1", "coreSpeed_host-1"),
        ("opendc", "cpu_utilization_host-1", "coreCount_host-1"),
        ("opendc", "cpu_time_idle_1026", "memorySize_host-1"),
        ("opendc", "cpu_demand_1026", "coreSpeed_host-1"),
        ("gridlabd", "actual_power", "base_power"),
        ("gridlabd", "total_load", "nominal_power"),
        ("gridlabd", "fan_power", "power_pf"),
        ("gridlabd", "hvac_load", "voltage_factor"),
        ("gridlabd", "hvac_power", "duty_cycle"),
        ("gridlabd", "heating_demand", "rate_of_heating"),
        ("gridlabd", "air_temperature", "heat_fraction"),
        ("gridlabd", "mass_temperature", "temperature"),
        ("gridlabd", "is_COOL_on", "thermostatic_control_range"),
        ("gridlabd", "is_HEAT_on", "recovery_duty_cycle"),
        ("gridlabd", "is_AUX_on", "period"),
    ],
)
def test_known_pairings(registry, simulator, target, primary):
    assert registry.get(simulator, target).primary == primary


def test_opendc_forms_follow_the_papers_facts(registry):
    power = registry.get("opendc", "power_draw_host-0")
    assert power.form.name == "idle_dynamic" and power.params["idle"] == pytest.approx(105.5)
    assert registry.get("opendc", "cpu_utilization_host-0").covariates[0].direction == "inverse"
    active = registry.get("opendc", "cpu_time_active_host-0")
    assert active.form.name == "power" and 0 < active.params["exponent"] < 1  # sublinear
    idle = registry.get("opendc", "cpu_time_idle_1019")
    assert idle.form.name == "asymmetric_power"
    assert abs(idle.params["down"]) > 3 * abs(idle.params["up"])  # slight vs sharp
    reduction_only = [
        c
        for r in registry.relationships("opendc")
        for c in r.covariates[1:]
        if c.effect.name == "reduction_only"
    ]
    assert reduction_only, "some OpenDC secondaries act only when a covariate is reduced"


def test_gridlabd_facts(registry):
    for relationship in registry.relationships("gridlabd"):
        for info in relationship.covariates[1:]:
            assert info.effect.name == "signed_power" and info.effect_params == {"exponent": 0.4}
    heating = registry.get("gridlabd", "heating_demand")
    assert heating.params["up"] > 1 > heating.params["down"] > 0  # super-linear up, sub-linear down
    for name in ("is_AUX_on", "is_HEAT_on", "is_COOL_on"):
        assert registry.get("gridlabd", name).window == (1.0, 2.0)
    groups = {c.name: c.group for c in registry.simulators["gridlabd"].covariates}
    thermal = {
        "heat_fraction",
        "temperature",
        "thermostatic_control_range",
        "rate_of_heating",
        "rate_of_cooling",
        "duty_cycle",
        "recovery_duty_cycle",
        "period",
    }
    assert {n for n, g in groups.items() if g == "thermal"} == thermal


def test_epanet_targets_only_increase_and_share_one_form(registry):
    for relationship in registry.relationships("epanet"):
        assert relationship.only_increase and relationship.combination == "multiplicative"
        assert relationship.form.name == "log_increase"
        assert all(c.direction == "direct" for c in relationship.covariates)
        assert all(c.effect.name == "ratio" for c in relationship.covariates[1:])
    assert min(registry.simulators["epanet"].history_pool) > 1


def test_epanet_weights_are_spread_by_the_character_code_sum(registry):
    golden = (math.sqrt(5) - 1) / 2
    for covariate in registry.simulators["epanet"].covariates:
        if covariate.weight is not None:
            h = sum(map(ord, covariate.name))
            assert covariate.weight == round(0.1 + 0.3 * ((h * golden) % 1), 4)


def test_sumo_combination_by_class(registry):
    for relationship in registry.relationships("sumo"):
        additive = relationship.target.startswith(
            ("meanHalting", "meanTimeLoss", "meanVehicleNumber", "meanMaxJam")
        )
        assert relationship.combination == ("additive" if additive else "multiplicative")


def test_broken_power_targets_keep_every_drawn_factor_on_one_branch(registry):
    from whatif_bench.relationships.ranges import factor_bounds

    for relationship in registry:
        if relationship.form.name == "broken_power":
            low, high = factor_bounds(relationship.history_pool)
            knee = relationship.params["knee"]
            assert not (low < knee < high) or knee == 1.0


def test_summary_has_the_stable_keys(registry):
    summary = registry.get("sumo", "CO2_abs_edge_e2c").summary()
    assert set(summary) == {
        "simulator",
        "target",
        "primary",
        "covariates",
        "combination",
        "direction",
        "shape",
        "base_value",
    }
    assert summary["base_value"]["accel"] == 2.6
