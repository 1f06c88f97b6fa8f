"""The baselines shipped in the package: complete, verified, and reproduced by re-simulating."""

from __future__ import annotations

from datetime import datetime

import numpy as np
import pytest

from whatif_bench.simulators import epanet, gridlabd, read_baselines, shipped_baselines_path, sumo


@pytest.fixture(scope="module")
def shipped():
    return read_baselines(shipped_baselines_path())


def test_shipped_file_holds_all_four_simulators(shipped):
    assert set(shipped) == {"epanet", "gridlabd", "opendc", "sumo"}
    assert shipped["epanet"].n_steps == 9216 and shipped["epanet"].interval_s == 300
    assert shipped["gridlabd"].n_steps == 20160 and shipped["gridlabd"].interval_s == 60
    assert shipped["sumo"].n_steps == 8640 and shipped["sumo"].interval_s == 300
    # 8,616 windows of 300 s: VM 1026's trace ends there (tests/test_opendc_library.py re-runs it)
    assert shipped["opendc"].n_steps == 8616 and shipped["opendc"].interval_s == 300
    assert shipped["opendc"].start == "2013-08-12T13:35:46+00:00"


def test_every_registry_target_has_a_shipped_series(shipped, registry):
    for simulator, baselines in shipped.items():
        assert set(baselines.series) == {r.target for r in registry.relationships(simulator)}
        spec = {c.name: c.base_value for c in registry.simulators[simulator].covariates}
        assert baselines.covariate_base_values == pytest.approx(spec)


def test_every_shipped_series_is_finite_and_varies(shipped):
    for simulator, baselines in shipped.items():
        for name, values in baselines.series.items():
            assert np.all(np.isfinite(values)) and np.ptp(values) > 0, f"{simulator}/{name}"


@pytest.mark.parametrize(
    ("module", "start", "weekday"),
    [
        (epanet, "2024-01-08T00:00:00", "Monday"),  # no calendar in Net1: a documented Monday
        (gridlabd, "1988-01-01T00:00:00", "Friday"),  # the TMY3 file's January: recorded 1988
        (sumo, "2024-02-05T00:00:00", "Monday"),  # no calendar in the profile: a Monday
    ],
    ids=["epanet", "gridlabd", "sumo"],
)
def test_each_shipped_simulator_starts_on_its_documented_day(shipped, module, start, weekday):
    assert shipped[module.NAME].start == start
    assert module.START.replace(" ", "T") == start
    assert datetime.fromisoformat(start).strftime("%A") == weekday


def test_gridlabd_is_dated_in_the_year_its_january_weather_was_recorded():
    rows = gridlabd.weather_path().read_text().splitlines()
    month, day, year = rows[2].split(",")[0].split("/")  # the first hour of data
    assert (month, day) == ("01", "01")
    assert gridlabd.START.startswith(f"{year}-01-01 ")


@pytest.mark.parametrize("module", [epanet, gridlabd], ids=["epanet", "gridlabd"])
def test_re_simulating_reproduces_the_shipped_series_exactly(shipped, module):
    again = module.run(days=module.DEFAULT_DAYS)
    assert again.content_hash() == shipped[module.NAME].content_hash()


@pytest.mark.slow  # about 5 s
def test_a_short_sumo_run_reproduces_the_start_of_the_shipped_month(shipped, sumo_one_day):
    day = sumo_one_day  # sumo.run(days=1), once per session
    for name, values in day.series.items():
        np.testing.assert_array_equal(
            values, shipped["sumo"].series[name][: day.n_steps], err_msg=name
        )


@pytest.mark.heavy  # a month of SUMO: 2 min idle, 7 min beside the suite; its first day is
# is checked in every run (test_a_short_sumo_run_reproduces_the_start_of_the_shipped_month)
def test_re_simulating_sumo_reproduces_the_shipped_month_exactly(shipped):
    assert sumo.run(days=sumo.DEFAULT_DAYS).content_hash() == shipped["sumo"].content_hash()
