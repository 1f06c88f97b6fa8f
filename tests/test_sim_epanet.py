"""EPANET through WNTR on Net1: real short runs, repeatable, physically sensible."""

from __future__ import annotations

import numpy as np
import pytest

from whatif_bench.simulators import epanet


@pytest.fixture(scope="module")
def two_days():
    return epanet.run(days=2)


def test_short_run_has_the_37_registry_targets(two_days, registry):
    assert two_days.n_steps == 2 * 288 and two_days.interval_s == 300
    assert set(two_days.series) == {r.target for r in registry.relationships("epanet")}


def test_runs_are_repeatable(two_days):
    assert epanet.run(days=2).content_hash() == two_days.content_hash()


def test_covariate_base_values_come_from_the_network_and_match_the_registry(two_days, registry):
    spec = {c.name: c.base_value for c in registry.simulators["epanet"].covariates}
    assert two_days.covariate_base_values == pytest.approx(spec)
    assert two_days.covariate_base_values["pipe_10_diameter"] == 18.0  # inches, Net1's own value


def test_tank_cycles_with_the_pump(two_days):
    pump = two_days.series["flowrate_9"]
    on = pump > 1.0
    switches = int(np.count_nonzero(np.diff(on.astype(int))))
    assert switches >= 2, "the pump should switch on and off as the tank level crosses its limits"
    level = two_days.series["pressure_2"]
    # the tank fills while the pump runs and drains while it is off
    assert np.mean(np.diff(level)[on[1:]]) > 0 > np.mean(np.diff(level)[~on[1:]])


def test_reservoir_supplies_what_the_pump_delivers(two_days):
    np.testing.assert_allclose(
        -two_days.series["demand_9"], two_days.series["flowrate_9"], atol=1e-3
    )


def test_series_are_finite_and_vary(two_days):
    for name, values in two_days.series.items():
        assert np.all(np.isfinite(values)), name
        assert np.ptp(values) > 0, name
