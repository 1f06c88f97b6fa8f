"""EPANET 2.2 through WNTR on the stock Net1 network (EPANET Example 1).

Net1 ships inside the ``wntr`` package. The wrapper extends the run to ``days`` at a 300 s
hydraulic and report step, converts WNTR's SI results back to the network's own US units (GPM,
psi, ft/s) and returns its 37 targets (listed in docs/RELATIONSHIPS.md). The pump opens below
a tank level of 110 ft and closes above 140 ft (Net1's own controls), so the tank cycles.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from whatif_bench.simulators.base import Baselines, SimulatorError, SimulatorUnavailable

NAME = "epanet"
INTERVAL_S = 300
DEFAULT_DAYS = 32  # 9,216 steps at 300 s
# Net1 has no calendar: its demand pattern repeats every 24 h with no weekday, season or holiday.
# The run is dated to a Monday so that a weekly reading starts at a week's first day, and the
# first full week of 2024 keeps the New Year holiday out of the dates a reader sees.
START = "2024-01-08T00:00:00"  # Monday; the model's local time (no time zone)
JUNCTIONS = ("10", "11", "12", "13", "21", "22", "23", "31", "32")
PIPES = ("10", "11", "12", "21", "22", "31", "110", "111", "112", "113", "121", "122")
TANK, RESERVOIR, PUMP = "2", "9", "9"

_INSTALL = "pip install wntr six"


def _wntr():
    try:
        import wntr  # noqa: F401  (wntr 1.5 imports six without declaring it)
        from wntr.epanet.util import FlowUnits, HydParam, from_si
    except ImportError as exc:
        raise SimulatorUnavailable(f"EPANET needs the wntr package: {_INSTALL} ({exc})") from None
    return wntr, FlowUnits, HydParam, from_si


def net1_path() -> Path:
    """The Net1.inp file shipped inside the installed wntr package."""
    wntr, *_ = _wntr()
    path = Path(wntr.__file__).parent / "library" / "networks" / "Net1.inp"
    if not path.is_file():
        raise SimulatorUnavailable(f"wntr is installed but ships no Net1.inp at {path}")
    return path


def covariate_base_values(model) -> dict[str, float]:
    """Covariates' base values read from the network model, in its US units."""
    _, flow_units, hyd, from_si = _wntr()
    gpm = flow_units.GPM
    values: dict[str, float] = {}
    for j in JUNCTIONS:
        demand = model.get_node(j).demand_timeseries_list[0].base_value
        values[f"junction_{j}_base_demand"] = float(from_si(gpm, demand, hyd.Demand))
    values["reservoir_9_base_head"] = float(
        from_si(gpm, model.get_node(RESERVOIR).base_head, hyd.HydraulicHead)
    )
    values["tank_2_init_level"] = float(from_si(gpm, model.get_node(TANK).init_level, hyd.Length))
    values["pump_9_setting"] = float(model.get_link(PUMP).speed_timeseries.base_value)
    for p in PIPES:
        pipe = model.get_link(p)
        values[f"pipe_{p}_diameter"] = float(from_si(gpm, pipe.diameter, hyd.PipeDiameter))
        values[f"pipe_{p}_roughness"] = float(pipe.roughness)
    return {k: round(v, 6) for k, v in values.items()}


def _without_volatile_header(text: str) -> str:
    """Drop WNTR's "; Filename:" and "; Created:" comment lines (they change every run)."""
    volatile = ("; Filename:", "; Created:")
    return "".join(line for line in text.splitlines(keepends=True) if not line.startswith(volatile))


def _check_pattern(
    demand_pattern: Sequence[float] | None, pattern_step_s: int | None
) -> tuple[tuple[float, ...] | None, int | None]:
    """The demand pattern as floats (each finite and >= 0) and its step in whole seconds."""
    if demand_pattern is None:
        if pattern_step_s is not None:
            raise SimulatorError("EPANET: pattern_step_s needs a demand_pattern")
        return None, None
    pattern = tuple(float(m) for m in demand_pattern)
    if not pattern or not all(np.isfinite(m) and m >= 0 for m in pattern):
        raise SimulatorError(
            f"EPANET: demand_pattern must be one or more finite multipliers >= 0, got {pattern}"
        )
    if pattern_step_s is not None and (
        isinstance(pattern_step_s, bool)
        or not isinstance(pattern_step_s, int)
        or pattern_step_s < INTERVAL_S
        or pattern_step_s % INTERVAL_S
    ):
        raise SimulatorError(
            f"EPANET: pattern_step_s must be a whole multiple of {INTERVAL_S} s, got {pattern_step_s}"
        )
    return pattern, pattern_step_s


def _replace_demand_pattern(model, pattern: tuple[float, ...], step_s: int | None) -> None:
    """Give every junction's demand the multipliers ``pattern`` (one per ``step_s`` seconds).

    Net1's junctions all follow its one demand pattern "1" (2 h steps); only that pattern's
    multipliers (and, with ``step_s``, the pattern step) change, never the base demands.
    """
    used = {
        demand.pattern_name
        for _, junction in model.junctions()
        for demand in junction.demand_timeseries_list
    }
    if len(used) != 1 or None in used:
        raise SimulatorError(f"EPANET: expected one demand pattern on all junctions, got {used}")
    model.get_pattern(used.pop()).multipliers = np.array(pattern, dtype=np.float64)
    if step_s is not None:
        model.options.time.pattern_timestep = step_s


def run(
    *,
    days: float = DEFAULT_DAYS,
    workdir: str | os.PathLike | None = None,
    demand_pattern: Sequence[float] | None = None,
    pattern_step_s: int | None = None,
    extra_series: bool = False,
) -> Baselines:
    """Run Net1 for ``days`` and return the 37 EPANET targets at 300 s.

    ``extra_series`` also returns series no shipped target uses (Net1's own
    chlorine model: ``chlorine_<node>``, the concentration at every junction and the tank in
    mg/L), for authors
    adding targets (docs/AUTHORING.md). The run itself is the same either way.

    ``demand_pattern`` (dimensionless multipliers of the base demands, repeated) replaces
    Net1's demand pattern, and ``pattern_step_s`` (seconds, a multiple of 300) its 2 h step;
    both default to Net1's own, which is the benchmark's base setting.
    """
    wntr, flow_units, hyd, from_si = _wntr()
    n_steps = int(round(days * 86400 / INTERVAL_S))
    if n_steps < 2:
        raise SimulatorError(f"EPANET: {days} days gives fewer than 2 steps of {INTERVAL_S} s")
    pattern, pattern_step_s = _check_pattern(demand_pattern, pattern_step_s)
    inp_text = net1_path().read_text()
    with tempfile.TemporaryDirectory(prefix="whatif-epanet-", dir=workdir) as tmp:
        inp = Path(tmp) / "Net1.inp"
        inp.write_text(inp_text)
        model = wntr.network.WaterNetworkModel(str(inp))
        model.options.time.duration = n_steps * INTERVAL_S
        model.options.time.hydraulic_timestep = INTERVAL_S
        model.options.time.report_timestep = INTERVAL_S
        if pattern is not None:
            _replace_demand_pattern(model, pattern, pattern_step_s)
        try:
            results = wntr.sim.EpanetSimulator(model).run_sim(file_prefix=str(Path(tmp) / "run"))
        except Exception as exc:  # EPANET's toolkit errors arrive as several exception types
            raise SimulatorError(f"EPANET failed on Net1: {exc}") from exc
        base_values = covariate_base_values(model)
        wntr.network.io.write_inpfile(model, str(Path(tmp) / "base.inp"), units="GPM")
        base_inp = _without_volatile_header((Path(tmp) / "base.inp").read_text())

    gpm = flow_units.GPM
    node, link = results.node, results.link

    def column(frame, key, param) -> np.ndarray:
        values = frame[key].to_numpy(dtype=np.float64)[:n_steps]
        return np.asarray(from_si(gpm, values, param), dtype=np.float64)

    series: dict[str, np.ndarray] = {}
    units: dict[str, str] = {}
    for j in (*JUNCTIONS, TANK):
        series[f"pressure_{j}"] = column(node["pressure"], j, hyd.Pressure)
        units[f"pressure_{j}"] = "psi"
    for n in (RESERVOIR, TANK):
        series[f"demand_{n}"] = column(node["demand"], n, hyd.Demand)
        units[f"demand_{n}"] = "GPM"
    for p in (*PIPES, PUMP):
        series[f"flowrate_{p}"] = column(link["flowrate"], p, hyd.Flow)
        units[f"flowrate_{p}"] = "GPM"
    for p in PIPES:
        series[f"velocity_{p}"] = column(link["velocity"], p, hyd.Velocity)
        units[f"velocity_{p}"] = "ft/s"
    if extra_series:
        from wntr.epanet.util import QualParam

        for n in (*JUNCTIONS, TANK):
            values = node["quality"][n].to_numpy(dtype=np.float64)[:n_steps]
            series[f"chlorine_{n}"] = np.asarray(
                from_si(gpm, values, QualParam.Concentration), dtype=np.float64
            )
            units[f"chlorine_{n}"] = "mg/L"
    return Baselines(
        simulator=NAME,
        simulator_version=f"EPANET 2.2 via wntr {wntr.__version__}",
        interval_s=INTERVAL_S,
        start=START,
        series=series,
        units=units,
        covariate_base_values=base_values,
        inputs={"Net1.inp": inp_text, "run.inp": base_inp},
        notes="Stock Net1 from wntr's package data; duration and time steps set by the wrapper.",
    )
