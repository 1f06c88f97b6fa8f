"""GridLAB-D on the single-house feeder: real short runs, repeatable, physically sensible."""

from __future__ import annotations

import numpy as np
import pytest

from whatif_bench.simulators import gridlabd
from whatif_bench.simulators.base import SimulatorError, SimulatorUnavailable


@pytest.fixture(scope="module")
def three_days():
    return gridlabd.run(days=3)


def test_short_run_has_the_11_registry_targets(three_days, registry):
    assert three_days.n_steps == 3 * 1440 and three_days.interval_s == 60
    assert set(three_days.series) == {r.target for r in registry.relationships("gridlabd")}


def test_runs_are_repeatable(three_days):
    assert gridlabd.run(days=3).content_hash() == three_days.content_hash()


def test_covariate_base_values_match_the_registry(three_days, registry):
    spec = {c.name: c.base_value for c in registry.simulators["gridlabd"].covariates}
    assert three_days.covariate_base_values == pytest.approx(spec)


def test_hvac_cycles_and_temperatures_stay_near_the_set_points(three_days):
    hvac = three_days.series["hvac_load"] > 0.01
    assert np.count_nonzero(np.diff(hvac.astype(int))) >= 10, "the HVAC should cycle on and off"
    air = three_days.series["air_temperature"]
    assert 60 - 2 < air.min() and air.max() < 77 + 3  # heating 60 F, cooling 77 F, deadband 1.6 F
    assert np.all(three_days.series["heating_demand"] > 0)


def test_indicators_are_stored_plus_one(three_days):
    for name in gridlabd.STATE_TARGETS:
        assert set(np.unique(three_days.series[name])) <= {1.0, 2.0}
    assert three_days.series["is_HEAT_on"].max() == 2.0  # a January week needs heat


def test_series_are_finite_and_vary(three_days):
    for name, values in three_days.series.items():
        assert np.all(np.isfinite(values)) and np.ptp(values) > 0, name


def test_nan_house_temperatures_are_reported_as_missing_weather():
    series = {
        "air_temperature": np.array([70.0, np.nan]),
        "mass_temperature": np.array([70.0, 70.0]),
    }
    with pytest.raises(
        SimulatorError, match="air_temperature is NaN: the house model needs a weather"
    ):
        gridlabd.require_house_temperatures(series)


def test_a_missing_weather_file_stops_the_run(monkeypatch):
    monkeypatch.setattr(gridlabd, "WEATHER_FILE", "absent.csv")
    with pytest.raises(SimulatorUnavailable, match="ships no absent.csv"):
        gridlabd.run(days=0.1)


def test_the_model_reads_pvlibs_greensboro_tmy3_file():
    path = gridlabd.weather_path()
    assert path.name == "723170TYA.CSV" and path.read_text().startswith("723170")
    assert 'tmyfile "weather.tmy3"' in gridlabd.render_glm("1988-01-02 00:00:00")


def _outdoor_temperatures_read_by_the_engine(weather_file: str, tmp_path) -> np.ndarray:
    """The first 12 hourly outdoor temperatures (degF, from 00:00) GridLAB-D's climate reads."""
    import gridlabd as engine_module

    name = gridlabd.WEATHER_FILES[weather_file][0]
    glm = gridlabd.render_glm("1988-01-01 12:00:00", weather=name)
    glm += "object recorder { parent weather; property temperature; interval 3600; file w.csv; }\n"
    (tmp_path / name).write_bytes(gridlabd.weather_path(weather_file).read_bytes())
    (tmp_path / "model.glm").write_text(glm)
    engine = engine_module.GridLabD()
    engine.load_glm(str(tmp_path / "model.glm"), workdir=str(tmp_path))
    status = engine.run()
    engine.finalize()
    assert status == 0, f"GridLAB-D failed on {weather_file}"
    rows = [r for r in (tmp_path / "w.csv").read_text().splitlines() if not r.startswith("#")]
    return np.array([float(r.split(",")[1]) for r in rows[:12]])


@pytest.mark.parametrize("weather_file", sorted(gridlabd.WEATHER_FILES))
@pytest.mark.one_quick  # about 2 s over all its cases
def test_every_weather_file_is_read_hour_for_hour_as_pvlib_reads_it(weather_file, tmp_path):
    from pvlib import iotools

    path = gridlabd.weather_path(weather_file)
    if weather_file.endswith(".tm2"):
        data, _ = iotools.read_tmy2(str(path))
        celsius = data["DryBulb"].to_numpy()[:12] / 10.0  # TMY2 stores tenths of a degree
    else:
        data, _ = iotools.read_tmy3(str(path), map_variables=True)
        celsius = data["temp_air"].to_numpy()[:12]
    expected = celsius * 9 / 5 + 32
    # three runs: gridlabd 6.0 reading a file by an extension it does not know failed at random
    for _ in range(3):
        read = _outdoor_temperatures_read_by_the_engine(weather_file, tmp_path)
        if weather_file.endswith(".tm2"):  # GridLAB-D's TMY2 reader: a record at its hour's start
            np.testing.assert_allclose(read, expected, atol=0.01)
        else:  # its TMY3 reader: a record at its hour's end (00:00 holds the year's last hour)
            np.testing.assert_allclose(read[1:], expected[:-1], atol=0.01)


def test_an_engine_failure_is_a_simulator_error_with_its_messages(monkeypatch, tmp_path):
    bad = tmp_path / "bad.tm2"
    bad.write_text("not a weather file\n")
    monkeypatch.setattr(gridlabd, "weather_path", lambda name=None: bad)
    monkeypatch.setitem(gridlabd.WEATHER_FILES, "12839.tm2", ("weather.tmy2", "garbage"))
    with pytest.raises(SimulatorError, match=r"GridLAB-D stopped with status \d+ .*weather"):
        gridlabd.run(days=0.1, weather_file="12839.tm2")
