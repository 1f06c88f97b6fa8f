"""The baselines shipped in the package: complete, verified, and reproduced by re-simulating."""

from __future__ import annotations

import numpy as np
import pytest

from whatif_bench.simulators import epanet, gridlabd, read_baselines, shipped_baselines_path, sumo


@pytest.fixture(scope="module")
def shipped():
    return read_baselines(shipped_baselines_path())


def test_shipped_file_holds_the_three_runnable_simulators(shipped):
    assert set(shipped) == {"epanet", "gridlabd", "sumo"}
    assert shipped["epanet"].n_steps == 9216 and shipped["epanet"].interval_s == 300
    assert shipped["gridlabd"].n_steps == 20160 and shipped["gridlabd"].interval_s == 60
    assert shipped["sumo"].n_steps == 8640 and shipped["sumo"].interval_s == 300


def test_every_registry_target_has_a_shipped_series(shipped, registry):
    for simulator, baselines in shipped.items():
        assert set(baselines.series) == {r.target for r in registry.relationships(simulator)}
        spec = {c.name: c.base_value for c in registry.simulators[simulator].covariates}
        assert baselines.covariate_base_values == pytest.approx(spec)


def test_every_shipped_series_is_finite_and_varies(shipped):
    for simulator, baselines in shipped.items():
        for name, values in baselines.series.items():
            assert np.all(np.isfinite(values)) and np.ptp(values) > 0, f"{simulator}/{name}"


@pytest.mark.parametrize("module", [epanet, gridlabd], ids=["epanet", "gridlabd"])
def test_re_simulating_reproduces_the_shipped_series_exactly(shipped, module):
    again = module.run(days=module.DEFAULT_DAYS)
    assert again.content_hash() == shipped[module.NAME].content_hash()


def test_a_short_sumo_run_reproduces_the_start_of_the_shipped_month(shipped):
    day = sumo.run(days=1)
    for name, values in day.series.items():
        np.testing.assert_array_equal(
            values, shipped["sumo"].series[name][: day.n_steps], err_msg=name
        )


@pytest.mark.slow
def test_re_simulating_sumo_reproduces_the_shipped_month_exactly(shipped):
    assert sumo.run(days=sumo.DEFAULT_DAYS).content_hash() == shipped["sumo"].content_hash()
