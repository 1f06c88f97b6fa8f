"""A new data source for WhatIf-Bench: EPANET's Net3 network, run with wntr, written as a CSV
file in the toolkit's table layout (docs/BASELINES_FORMAT.md).

This script stands for your own simulator or measurements: it lives outside the package and
only has to write the layout. Walk-through 2 of docs/AUTHORING.md runs it:

    python examples/net3/simulate_net3.py --out out/net3.csv [--days 32]

Net3 (EPANET Example 3, shipped inside wntr) has two sources, the River reservoir and the Lake
behind pump 10, and a booster pump 335. The run keeps Net3's own patterns and controls and only
sets the duration and a 300 s hydraulic and report step. Results are converted from wntr's SI
units back to the network's US units (psi, GPM, ft).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import tempfile
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import wntr
from wntr.epanet.util import FlowUnits, HydParam, from_si

INTERVAL_S = 300
START = datetime(2024, 1, 8)  # Net3 has no calendar; a Monday, as the shipped EPANET baseline
JUNCTIONS = ("15", "123", "247")  # near the river, mid-network, far end
PUMPS = ("10", "335")


def base_values(model: wntr.network.WaterNetworkModel) -> dict[str, float]:
    """The five covariates' physical values at factor 1, read from the network (US units)."""
    gpm = FlowUnits.GPM
    return {
        "river_base_head": round(
            float(from_si(gpm, model.get_node("River").base_head, HydParam.HydraulicHead)), 6
        ),
        "lake_base_head": round(
            float(from_si(gpm, model.get_node("Lake").base_head, HydParam.HydraulicHead)), 6
        ),
        "pump_10_speed": float(model.get_link("10").speed_timeseries.base_value),
        "pump_335_speed": float(model.get_link("335").speed_timeseries.base_value),
        "junction_15_base_demand": round(
            float(
                from_si(
                    gpm,
                    model.get_node("15").demand_timeseries_list[0].base_value,
                    HydParam.Demand,
                )
            ),
            6,
        ),
    }


def simulate(days: float) -> tuple[dict[str, np.ndarray], dict[str, str], dict[str, float]]:
    """Series (n_steps,) by name, their units and the covariates' base values."""
    n_steps = int(round(days * 86400 / INTERVAL_S))
    path = Path(wntr.__file__).parent / "library" / "networks" / "Net3.inp"
    model = wntr.network.WaterNetworkModel(str(path))
    model.options.time.duration = n_steps * INTERVAL_S
    model.options.time.hydraulic_timestep = INTERVAL_S
    model.options.time.report_timestep = INTERVAL_S
    with tempfile.TemporaryDirectory(prefix="net3-") as tmp:
        results = wntr.sim.EpanetSimulator(model).run_sim(file_prefix=str(Path(tmp) / "run"))
    gpm = FlowUnits.GPM
    series: dict[str, np.ndarray] = {}
    units: dict[str, str] = {}
    for j in JUNCTIONS:
        values = results.node["pressure"][j].to_numpy(dtype=np.float64)[:n_steps]
        series[f"pressure_{j}"] = np.asarray(from_si(gpm, values, HydParam.Pressure))
        units[f"pressure_{j}"] = "psi"
    for p in PUMPS:
        values = results.link["flowrate"][p].to_numpy(dtype=np.float64)[:n_steps]
        series[f"flowrate_pump_{p}"] = np.asarray(from_si(gpm, values, HydParam.Flow))
        units[f"flowrate_pump_{p}"] = "GPM"
    return series, units, base_values(model)


def write_csv(out: Path, series: dict[str, np.ndarray], units: dict[str, str], bases: dict) -> None:
    """The table layout: metadata lines, a header of 'name [unit]' columns, one row a step.
    Written to a temporary file in the same folder and renamed when complete."""
    out.parent.mkdir(parents=True, exist_ok=True)
    n_steps = len(next(iter(series.values())))
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
    try:
        with os.fdopen(fd, "w", newline="", encoding="utf-8") as handle:
            handle.write("# simulator: net3\n")
            handle.write(f"# simulator_version: EPANET 2.2 via wntr {wntr.__version__}, Net3\n")
            handle.write(f"# covariate_base_values: {json.dumps(bases)}\n")
            handle.write("# notes: Net3 from wntr's package data, its own patterns and controls\n")
            writer = csv.writer(handle)
            writer.writerow(["time", *(f"{name} [{units[name]}]" for name in series)])
            for step in range(n_steps):
                time = (START + timedelta(seconds=step * INTERVAL_S)).isoformat()
                writer.writerow([time, *(repr(float(v[step])) for v in series.values())])
        os.replace(tmp, out)
    except BaseException:
        os.unlink(tmp)
        raise


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path, help="CSV file to write (required)")
    parser.add_argument("--days", type=float, default=32.0, help="simulated days (default: 32)")
    args = parser.parse_args()
    series, units, bases = simulate(args.days)
    write_csv(args.out, series, units, bases)
    print(f"wrote {args.out}: {len(series)} series x {len(next(iter(series.values())))} steps")


if __name__ == "__main__":
    main()
