"""GridLAB-D 6 (the ``gridlabd`` package, run in-process) on a single-house feeder.

Base setting: SWING node at 2400 V -> 75 kVA centre-tapped transformer -> 120 V
triplex node -> one 1550 sq ft house (heating set-point 60 F, cooling 77 F, deadband 1.6 F)
with a constant 10 kW ZIP load (impedance/current/power fractions 0.3/0.5/0.2), recorded every
60 s. Weather: the recorded TMY3 file of Greensboro, North Carolina (USAF 723170) that pvlib
ships; no Seattle file is available from the package index.

Two choices made here, and why:
- the ZIP load releases 30 % of its power inside the house (``heat_fraction`` 0.3); with
  GridLAB-D's default 0.9, 9 kW of internal gains keep the house above its heating set-point
  all winter, and the heating indicators would never switch;
- the heat pump hands over to its electric auxiliary below 35 F outdoors (``LOCKOUT``), the
  usual way an auxiliary heater is run, so ``is_AUX_on`` switches too.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from pathlib import Path

import numpy as np

from whatif_bench.simulators.base import Baselines, SimulatorError, SimulatorUnavailable

NAME = "gridlabd"
INTERVAL_S = 60
DEFAULT_DAYS = 14  # 20,160 steps at 60 s
# The GLM clock starts where the weather does. A TMY3 file is a "typical" year stitched from
# months of different real years, and GridLAB-D reads it by month, day and hour; this file's
# January is the one recorded in January 1988 (the year its rows carry), so the default 14-day
# run is dated in 1988, local standard time (EST, UTC-5, as the weather file). A run longer than
# January crosses into TMY months recorded in other years (February: 1996), still dated 1988.
START = "1988-01-01 00:00:00"  # Friday; GLM clock in local standard time
WEATHER_FILE = "723170TYA.CSV"  # pvlib/data: Greensboro Piedmont Triad Intl, NC (TMY3)
# The recorded weather files pvlib ships: file name -> (GridLAB-D file name, what it is).
# GridLAB-D's climate object picks its reader by extension: .tmy3 for TMY3, .tmy2 for TMY2.
# pvlib's own TMY2 extension (.tm2) is not one it knows: gridlabd 6.0 then warns "unrecognized
# filetype, assuming TMY2" and failed about one run in two here ("weather file header improperly
# formed"). Read as .tmy2 it runs every time. Its TMY2 reader puts each hourly record at the
# start of its hour, its TMY3 reader at the end (tests/test_sim_gridlabd.py checks both).
WEATHER_FILES: dict[str, tuple[str, str]] = {
    WEATHER_FILE: ("weather.tmy3", "TMY3, Greensboro NC"),
    "703165TY.csv": ("weather.tmy3", "TMY3, Sand Point AK"),
    "12839.tm2": ("weather.tmy2", "TMY2, Miami FL"),
}
_INSTALL = "pip install 'whatif-bench[simulators]'  (installs gridlabd and pvlib)"

# The ZIP load's settings; they are also the covariates' base values.
ZIP_SETTINGS: dict[str, float] = {
    "base_power": 10.0,
    "current_pf": 1.0,
    "power_pf": 1.0,
    "impedance_pf": 1.0,
    "duty_cycle": 1.0,
    "period": 1.0,
    "phase": 0.5,
    "heat_fraction": 0.3,
    "multiplier": 1.0,
    "number_of_devices": 100,
    "thermostatic_control_range": 10,
    "rate_of_cooling": 2.0,
    "rate_of_heating": 2.0,
    "temperature": 60,
    "phi": 0.2,
    "demand_rate": 0.2,
    "nominal_power": 10.0,
    "recovery_duty_cycle": 0.5,
}
# Covariates GridLAB-D computes or defaults rather than reads from the GLM.
DERIVED_BASE_VALUES: dict[str, float] = {
    "voltage_factor": 1.0,  # supply voltage / nominal at the load
    "breaker_amps": 1000.0,  # ZIP load breaker_val default ("never trips")
    "power_factor": 1.0,  # all three parts at unity power factor
}
HOUSE_TARGETS = (
    "hvac_load",
    "total_load",
    "fan_power",
    "air_temperature",
    "mass_temperature",
    "heating_demand",
    "hvac_power",
    "is_AUX_on",
    "is_HEAT_on",
    "is_COOL_on",
)
UNITS = {
    "actual_power": "kW",
    "total_load": "kW",
    "hvac_load": "kW",
    "hvac_power": "kW",
    "fan_power": "kW",
    "air_temperature": "degF",
    "mass_temperature": "degF",
    "heating_demand": "kW",
    "is_AUX_on": "indicator+1",
    "is_HEAT_on": "indicator+1",
    "is_COOL_on": "indicator+1",
}
STATE_TARGETS = ("is_AUX_on", "is_HEAT_on", "is_COOL_on")


def _engine():
    try:
        import gridlabd
    except ImportError as exc:
        raise SimulatorUnavailable(
            f"GridLAB-D needs the gridlabd package: {_INSTALL} ({exc})"
        ) from None
    return gridlabd


def weather_path(name: str | None = None) -> Path:
    """The recorded weather file ``name`` shipped by pvlib (the benchmark's TMY3 by default)."""
    name = WEATHER_FILE if name is None else name
    try:
        import pvlib
    except ImportError as exc:
        raise SimulatorUnavailable(
            f"GridLAB-D's weather file comes from pvlib: {_INSTALL} ({exc})"
        ) from None
    path = Path(pvlib.__file__).parent / "data" / name
    if not path.is_file():
        raise SimulatorUnavailable(f"pvlib is installed but ships no {name}")
    return path


def _recorded_house_properties() -> str:
    """The house properties the recorder writes (the complex HVAC power as its real part)."""
    return ",".join(t + (".real" if t == "hvac_power" else "") for t in HOUSE_TARGETS)


def render_glm(stop: str, weather: str | None = "weather.tmy3", start: str | None = None) -> str:
    """The feeder model as GLM text; ``weather=None`` leaves out the climate object and
    ``start`` defaults to ``START``."""
    start = START if start is None else start
    zip_lines = "\n".join(f"        {key} {value};" for key, value in ZIP_SETTINGS.items())
    climate = (
        f'object climate {{ name weather; tmyfile "{weather}"; interpolate QUADRATIC; }}'
        if weather
        else ""
    )
    return f"""// WhatIf-Bench GridLAB-D base setting: single-house feeder (see simulators/gridlabd.py)
#set randomseed=20000101
clock {{
    timezone EST+5EDT;
    starttime '{start}';
    stoptime '{stop}';
}}
module climate;
module tape;
module residential {{ implicit_enduses NONE; }}
module powerflow {{ solver_method FBS; }}
{climate}
object transformer_configuration {{
    name xfmr_config; connect_type SINGLE_PHASE_CENTER_TAPPED; install_type POLETOP;
    primary_voltage 2400 V; secondary_voltage 120 V; power_rating 75; powerA_rating 75;
    impedance 0.006+0.0136j; impedance1 0.012+0.0204j; impedance2 0.012+0.0204j;
    shunt_impedance 1728000+691200j;
}}
object triplex_line_conductor {{ name tl_conductor; resistance 0.97; geometric_mean_radius 0.0111; }}
object triplex_line_configuration {{
    name tl_config; conductor_1 tl_conductor; conductor_2 tl_conductor; conductor_N tl_conductor;
    insulation_thickness 0.08; diameter 0.368;
}}
object meter {{ name swing; bustype SWING; phases ABCN; nominal_voltage 2400; }}
object transformer {{ name xfmr; phases AS; from swing; to triplex_node; configuration xfmr_config; }}
object triplex_node {{ name triplex_node; phases AS; nominal_voltage 120; }}
object triplex_line {{
    name service; phases AS; from triplex_node; to house_meter; length 30 ft; configuration tl_config;
}}
object triplex_meter {{ name house_meter; phases AS; nominal_voltage 120; }}
object house {{
    name house; parent house_meter; floor_area 1550;
    heating_setpoint 60; cooling_setpoint 77; thermostat_deadband 1.6;
    heating_system_type HEAT_PUMP; cooling_system_type ELECTRIC; auxiliary_system_type ELECTRIC;
    auxiliary_strategy LOCKOUT; aux_heat_temperature_lockout 35;
    object ZIPload {{
        name zip_load;
        impedance_fraction 0.3; current_fraction 0.5; power_fraction 0.2;
{zip_lines}
    }};
}}
object recorder {{
    parent house; property "{_recorded_house_properties()}"; interval {INTERVAL_S}; file house.csv;
}}
object recorder {{ parent zip_load; property "actual_power.real"; interval {INTERVAL_S}; file zip_load.csv; }}
"""


def _engine_errors(engine: object) -> str:
    """The engine's error and fatal messages of its last run, joined ('' if it keeps none)."""
    get_messages = getattr(engine, "get_messages", None)
    if get_messages is None:
        return ""
    try:
        messages = get_messages()
    except RuntimeError:
        return ""
    return "; ".join(
        str(m.get("message", "")).strip()
        for m in messages
        if isinstance(m, dict) and m.get("type") in ("ERROR", "FATAL")
    )


def _read_recorder(path: Path, n_steps: int) -> np.ndarray:
    """Values (n_steps, columns) of a tape recorder file, checked to be complete."""
    if not path.is_file():
        raise SimulatorError(f"GridLAB-D wrote no {path.name}")
    rows = [line for line in path.read_text().splitlines() if line and not line.startswith("#")]
    if len(rows) < n_steps:
        raise SimulatorError(f"GridLAB-D's {path.name} has {len(rows)} rows, expected {n_steps}")
    return np.array([[float(v) for v in row.split(",")[1:]] for row in rows[:n_steps]])


def require_house_temperatures(series: dict[str, np.ndarray]) -> None:
    """Raise if a house temperature is NaN, GridLAB-D's symptom of missing weather data."""
    for name in ("air_temperature", "mass_temperature"):
        if np.isnan(series[name]).any():
            raise SimulatorError(
                f"GridLAB-D's {name} is NaN: the house model needs a weather (TMY) file"
            )


def _check_start(start: str | None) -> str:
    """``start`` (``YYYY-MM-DD HH:MM:SS``) checked, or the benchmark's start."""
    if start is None:
        return START
    try:
        parsed = np.datetime64(str(start).replace(" ", "T"), "s")
    except ValueError:
        raise SimulatorError(f"GridLAB-D: start {start!r} is not 'YYYY-MM-DD HH:MM:SS'") from None
    if str(parsed).replace("T", " ") != start:
        raise SimulatorError(f"GridLAB-D: start {start!r} is not 'YYYY-MM-DD HH:MM:SS'")
    return start


def run(
    *,
    days: float = DEFAULT_DAYS,
    workdir: str | os.PathLike | None = None,
    weather_file: str | None = None,
    start: str | None = None,
) -> Baselines:
    """Run the feeder for ``days`` and return the 11 GridLAB-D targets at 60 s.

    ``weather_file`` names one of pvlib's recorded weather files (``WEATHER_FILES``) and
    ``start`` (local time, ``YYYY-MM-DD HH:MM:SS``) moves the run within the weather year;
    both default to the benchmark's base setting (Greensboro from ``START``). A run across a
    daylight-saving change (the clock is EST+5EDT) is not supported: across the spring change
    the recorders write an hour less and the run fails with a row-count ``SimulatorError``
    (the autumn change is unchecked); choose a period without one.
    """
    gridlabd = _engine()
    n_steps = int(round(days * 86400 / INTERVAL_S))
    if n_steps < 2:
        raise SimulatorError(f"GridLAB-D: {days} days gives fewer than 2 steps of {INTERVAL_S} s")
    begin = _check_start(start)
    if weather_file is not None and weather_file not in WEATHER_FILES:
        raise SimulatorError(
            f"GridLAB-D: unknown weather file {weather_file!r}; expected one of "
            f"{list(WEATHER_FILES)}"
        )
    weather_file = WEATHER_FILE if weather_file is None else weather_file
    weather = weather_path(weather_file)
    weather_name, weather_what = WEATHER_FILES.get(weather_file, ("weather.tmy3", "TMY3"))
    stop = np.datetime64(begin.replace(" ", "T")) + np.timedelta64(n_steps * INTERVAL_S, "s")
    glm = render_glm(str(stop).replace("T", " "), weather=weather_name, start=begin)
    with tempfile.TemporaryDirectory(prefix="whatif-gridlabd-", dir=workdir) as tmp:
        folder = Path(tmp)
        (folder / weather_name).write_bytes(weather.read_bytes())
        (folder / "model.glm").write_text(glm)
        engine = gridlabd.GridLabD()
        try:
            engine.load_glm(str(folder / "model.glm"), workdir=str(folder))
            status = engine.run()
            failure = _engine_errors(engine) if status else ""
            engine.finalize()  # flushes and closes the recorders
        except RuntimeError as exc:
            raise SimulatorError(f"GridLAB-D failed on the base setting: {exc}") from exc
        if status:
            raise SimulatorError(
                f"GridLAB-D stopped with status {status} before the end of the run"
                + (f": {failure}" if failure else "")
            )
        house = _read_recorder(folder / "house.csv", n_steps)
        load = _read_recorder(folder / "zip_load.csv", n_steps)

    series = {name: house[:, i].copy() for i, name in enumerate(HOUSE_TARGETS)}
    series["actual_power"] = load[:, 0].copy()
    require_house_temperatures(series)
    for name in STATE_TARGETS:
        series[name] = series[name] + 1.0  # 0/1 indicators stored as 1/2, never at 0
    order = [
        "actual_power",
        "total_load",
        "hvac_load",
        "hvac_power",
        "fan_power",
        "air_temperature",
        "mass_temperature",
        "heating_demand",
        *STATE_TARGETS,
    ]
    baselines = Baselines(
        simulator=NAME,
        simulator_version=f"GridLAB-D {getattr(gridlabd, '__version__', '?')} (gridlabd package)",
        interval_s=INTERVAL_S,
        start=START.replace(" ", "T"),
        series={name: series[name] for name in order},
        units=dict(UNITS),
        covariate_base_values={**ZIP_SETTINGS, **DERIVED_BASE_VALUES},
        inputs={"model.glm": glm, "weather": f"pvlib/data/{weather_file} ({weather_what})"},
        notes="Weather: recorded TMY3 of Greensboro, North Carolina (USAF 723170), shipped by pvlib.",
    )
    if weather_file == WEATHER_FILE and begin == START:
        return baselines
    return dataclasses.replace(
        baselines,
        start=begin.replace(" ", "T"),
        notes=f"Weather: recorded {weather_what} (pvlib/data/{weather_file}); run from {begin}.",
    )
