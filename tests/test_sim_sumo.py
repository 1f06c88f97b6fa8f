"""SUMO on the signalised intersection: real one-day runs, repeatable, physically sensible."""

from __future__ import annotations

import numpy as np
import pytest

from whatif_bench.simulators import sumo


@pytest.fixture(scope="module")
def one_day(sumo_one_day):
    return sumo_one_day  # sumo.run(days=1), once per session


@pytest.mark.slow  # about 5 s
def test_one_day_run_has_the_29_registry_targets(one_day, registry):
    assert one_day.n_steps == 288 and one_day.interval_s == 300
    assert set(one_day.series) == {r.target for r in registry.relationships("sumo")}


@pytest.mark.slow  # about 5 s
def test_runs_are_repeatable(one_day):
    assert sumo.run(days=1).content_hash() == one_day.content_hash()


def test_covariate_base_values_are_the_vehicle_type_and_match_the_registry(one_day, registry):
    spec = {c.name: c.base_value for c in registry.simulators["sumo"].covariates}
    assert one_day.covariate_base_values == pytest.approx(spec)
    assert 'accel="2.6"' in one_day.inputs["routes.rou.xml"]


def test_flows_follow_the_five_period_daily_profile(one_day):
    flow = one_day.series["flow_loop_e_0_far"]
    hour = np.arange(one_day.n_steps) * 300 / 3600
    mean = {(a, b): flow[(hour >= a) & (hour < b)].mean() for a, b, _ in sumo.DAILY_PROFILE}
    night, morning, midday, evening_peak, evening = (mean[(a, b)] for a, b, _ in sumo.DAILY_PROFILE)
    assert morning > midday > evening > night
    assert evening_peak > midday
    # the measured flow scales with the demand of each period (one approach, both lanes share it)
    demand = np.array([d for *_, d in sumo.DAILY_PROFILE], dtype=float)
    measured = np.array([mean[(a, b)] for a, b, _ in sumo.DAILY_PROFILE])
    assert np.corrcoef(demand, measured)[0, 1] > 0.95


def test_signal_plan_has_a_90_second_cycle():
    durations = [d for _, d in sumo.SIGNAL_PLAN]
    assert sum(durations) == 90 and durations == [42, 3, 42, 3]
    assert 'offset="10"' in sumo.network_files()["intersection.tll.xml"]


def test_series_are_finite_and_vary(one_day):
    for name, values in one_day.series.items():
        assert np.all(np.isfinite(values)) and np.ptp(values) > 0, name


def test_speeds_are_physical(one_day):
    for name, values in one_day.series.items():
        if "peed" in name:
            assert values.min() >= 0 and values.max() < 25, name


@pytest.mark.slow  # about 5 s: a day of SUMO of its own
def test_extra_series_are_the_far_loops_measures_from_the_same_run(one_day, registry):
    """``extra_series=True`` adds what SUMO measured at the far loop beyond its flow, and
    changes nothing else: the 29 targets are the bits of a run without it."""
    extra = sumo.run(days=1, extra_series=True)
    assert set(extra.series) == set(one_day.series) | set(sumo.EXTRA_SERIES)
    assert not set(sumo.EXTRA_SERIES) & {r.target for r in registry.relationships("sumo")}
    for name, values in one_day.series.items():
        np.testing.assert_array_equal(extra.series[name], values, err_msg=name)
    assert extra.units["speed_loop_e_0_far"] == "m/s"
    assert extra.units["occupancy_loop_e_0_far"] == "%"
    speed = extra.series["speed_loop_e_0_far"]
    assert np.isfinite(speed).all() and 0 < speed.min() and speed.max() < 25  # as the others
    assert speed.std() > 0
    occupancy = extra.series["occupancy_loop_e_0_far"]
    assert 0 <= occupancy.min() and occupancy.max() <= 100 and occupancy.std() > 0
