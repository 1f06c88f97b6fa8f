"""SUMO (the ``eclipse-sumo`` binaries) on one signalised four-arm intersection.

Base setting: a centre node and four approach nodes at +-500 m; every edge has two
lanes at 13.89 m/s in both directions; a fixed signal plan on a 90 s cycle (42 s green, 3 s
yellow, twice); four through-movements whose demand follows a five-period daily profile,
repeated every day; induction loops, lane-area detectors and an edge emissions record written
every 300 s. SUMO runs with a fixed seed, so a run is repeatable.

Choices made here: the daily profile's rates are the intersection's total (split
evenly over the four movements), so the peak of 2,000 veh/h stays below the signal's capacity;
an interval in which no vehicle passed a detector has no measured speed (SUMO writes -1), and
the last measured speed is carried forward.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from whatif_bench.simulators.base import Baselines, SimulatorError, SimulatorUnavailable

NAME = "sumo"
INTERVAL_S = 300
DEFAULT_DAYS = 30  # 8,640 steps at 300 s
SEED = 42
# The intersection has no calendar: the same daily profile runs every day, with no weekday,
# weekend or holiday difference. The run is dated to a Monday so that a weekly reading starts at
# a week's first day; February 2024 has no Easter and its 30 days (to 6 March) include a leap day
# only as a date, never as a different profile.
START = "2024-02-05T00:00:00"  # Monday; the model's local time (no time zone)
EDGE_LENGTH_M = 500.0
LANE_SPEED = 13.89
_INSTALL = "pip install 'whatif-bench[simulators]'  (installs eclipse-sumo)"

# Five periods per day: (start hour, end hour, total demand of the intersection in veh/h).
DAILY_PROFILE = ((0, 6, 120), (6, 9, 2000), (9, 16, 900), (16, 19, 2000), (19, 24, 500))
MOVEMENTS = (("n2c", "c2s"), ("s2c", "c2n"), ("e2c", "c2w"), ("w2c", "c2e"))
SIGNAL_PLAN = (("GGrrGGrr", 42), ("yyrryyrr", 3), ("rrGGrrGG", 42), ("rryyrryy", 3))
SIGNAL_OFFSET_S = 10

# The vehicle type every vehicle uses; its values are the covariates' base values.
VEHICLE_TYPE: dict[str, float] = {
    "minGap": 2.5,
    "accel": 2.6,
    "decel": 4.5,
    "maxSpeed": 55.56,
    "sigma": 0.5,
    "tau": 1.0,
    "length": 5.0,
    "speedDev": 0.1,
    "width": 1.8,
    "height": 1.5,
    "lcStrategic": 1.0,
    "lcCooperative": 1.0,
    "lcSpeedGain": 1.0,
    "impatience": 0.5,
    "actionStepLength": 1.0,
}

LOOPS = {  # detector id: (lane, position measured from the lane's start; negative = from its end)
    "loop_e_0_near": ("e2c_0", -10.0),
    "loop_e_1_near": ("e2c_1", -10.0),
    "loop_e_0_far": ("e2c_0", 100.0),
    "loop_exit_e_0": ("c2e_0", 50.0),
    "loop_exit_e_1": ("c2e_1", 50.0),
}
LANE_AREAS = {"e2_e_0": "e2c_0", "e2_e_1": "e2c_1"}
LANE_AREA_LENGTH_M = 200.0
EMISSIONS_EDGE = "e2c"

LOOP_FIELDS = {"flow": "veh/h", "occupancy": "%", "speed": "m/s"}
LANE_AREA_FIELDS = {
    "meanOccupancy": "%",
    "meanSpeed": "m/s",
    "meanHaltingDuration": "s",
    "meanTimeLoss": "s",
    "meanVehicleNumber": "veh",
    "meanMaxJamLengthInMeters": "m",
}
EMISSION_FIELDS = {"CO2_abs": "mg", "NOx_abs": "mg", "PMx_abs": "mg", "fuel_abs": "mg"}
SPEED_FIELDS = {"speed", "meanSpeed"}  # -1 when no vehicle was measured: carried forward
ZERO_WHEN_EMPTY = {"meanTimeLoss"}  # -1 when no vehicle was measured: no time was lost
# The 29 targets (the far loop reports its flow only).
TARGETS = (
    *(f"{g}_abs_edge_{EMISSIONS_EDGE}" for g in ("CO2", "NOx", "PMx", "fuel")),
    *(f"flow_{d}" for d in LOOPS),
    *(f"{f}_{d}" for f in ("occupancy", "speed") for d in LOOPS if d != "loop_e_0_far"),
    *(f"{f}_{d}" for f in ("meanOccupancy", "meanSpeed") for d in LANE_AREAS),
    *(
        f"{f}_{d}"
        for f in ("meanHaltingDuration", "meanTimeLoss", "meanVehicleNumber")
        for d in LANE_AREAS
    ),
    *(f"meanMaxJamLengthInMeters_{d}" for d in LANE_AREAS),
)
# What SUMO measures and no shipped target uses, returned by run(extra_series=True) for authors
# adding targets (docs/AUTHORING.md): the far loop's occupancy and speed, from the same loop
# output as its flow.
EXTRA_SERIES = tuple(f"{f}_loop_e_0_far" for f in ("occupancy", "speed"))


def binaries() -> tuple[str, str]:
    """Paths of ``sumo`` and ``netconvert`` (from eclipse-sumo, SUMO_HOME or PATH)."""
    found = []
    for tool in ("sumo", "netconvert"):
        path = None
        try:
            import sumo as sumo_package

            candidate = Path(sumo_package.SUMO_HOME) / "bin" / tool
            path = str(candidate) if candidate.is_file() else None
        except ImportError:
            pass
        path = path or shutil.which(tool)
        if path is None and os.environ.get("SUMO_HOME"):
            candidate = Path(os.environ["SUMO_HOME"]) / "bin" / tool
            path = str(candidate) if candidate.is_file() else None
        if path is None:
            raise SimulatorUnavailable(f"SUMO's {tool} binary was not found: {_INSTALL}")
        found.append(path)
    return found[0], found[1]


def network_files() -> dict[str, str]:
    """Plain-XML inputs of netconvert: nodes, edges, through connections, signal plan."""
    half = EDGE_LENGTH_M
    nodes = [
        ("c", 0, 0, "traffic_light"),
        ("n", 0, half, "priority"),
        ("s", 0, -half, "priority"),
        ("e", half, 0, "priority"),
        ("w", -half, 0, "priority"),
    ]
    node_xml = "\n".join(
        f'    <node id="{i}" x="{x:g}" y="{y:g}" type="{t}"/>' for i, x, y, t in nodes
    )
    edges = [(f"{a}2c", a, "c") for a in "nsew"] + [(f"c2{a}", "c", a) for a in "nsew"]
    edge_xml = "\n".join(
        f'    <edge id="{i}" from="{a}" to="{b}" numLanes="2" speed="{LANE_SPEED}"/>'
        for i, a, b in edges
    )
    connection_xml = "\n".join(
        f'    <connection from="{src}" to="{dst}" fromLane="{lane}" toLane="{lane}"/>'
        for src, dst in MOVEMENTS
        for lane in (0, 1)
    )
    phases = "\n".join(f'        <phase duration="{d}" state="{s}"/>' for s, d in SIGNAL_PLAN)
    return {
        "intersection.nod.xml": f"<nodes>\n{node_xml}\n</nodes>\n",
        "intersection.edg.xml": f"<edges>\n{edge_xml}\n</edges>\n",
        "intersection.con.xml": f"<connections>\n{connection_xml}\n</connections>\n",
        "intersection.tll.xml": (
            "<tlLogics>\n"
            f'    <tlLogic id="c" type="static" programID="base" offset="{SIGNAL_OFFSET_S}">\n'
            f"{phases}\n    </tlLogic>\n</tlLogics>\n"
        ),
    }


Profile = tuple[tuple[float, float, float], ...]


def _whole(value: object) -> float:
    """``value`` as a number, an int when it is whole (so route ids read ``h8``, not ``h8.0``)."""
    number = float(value)  # type: ignore[arg-type]
    return int(number) if number.is_integer() else number


def check_profile(profile: object) -> Profile:
    """A daily profile checked: (start hour, end hour, veh/h) periods, in order, within a day."""
    try:
        periods = tuple(
            (_whole(a), _whole(b), _whole(rate))
            for a, b, rate in profile  # type: ignore[attr-defined]  # a non-iterable: TypeError below
        )
    except (TypeError, ValueError):
        raise SimulatorError(
            f"SUMO: a daily profile is (start hour, end hour, veh/h) periods, got {profile!r}"
        ) from None
    previous_end = 0.0
    for start_h, end_h, rate in periods:
        if not (previous_end <= start_h < end_h <= 24 and np.isfinite(rate) and rate >= 0):
            raise SimulatorError(
                "SUMO: daily profile periods must be in order within 0-24 h with a rate >= 0, "
                f"got {(start_h, end_h, rate)}"
            )
        previous_end = end_h
    if not periods:
        raise SimulatorError("SUMO: a daily profile needs at least one period")
    return periods


def route_file(days: float, profile: Profile = DAILY_PROFILE) -> str:
    """The vehicle type and the four through-flows, period by period, for ``days`` days."""
    attributes = " ".join(f'{k}="{v:g}"' for k, v in VEHICLE_TYPE.items())
    lines = ["<routes>", f'    <vType id="car" vClass="passenger" {attributes}/>']
    end_of_run = days * 86400
    for day in range(int(np.ceil(days))):
        for start_h, end_h, total in profile:
            begin = day * 86400 + start_h * 3600
            end = min(day * 86400 + end_h * 3600, end_of_run)
            if begin >= end:
                continue
            for src, dst in MOVEMENTS:
                lines.append(
                    f'    <flow id="{src}_{dst}_d{day}_h{start_h}" type="car" from="{src}" to="{dst}" '
                    f'begin="{begin}" end="{end}" vehsPerHour="{total / len(MOVEMENTS):g}" '
                    'departLane="random" departSpeed="max"/>'
                )
    lines.append("</routes>")
    return "\n".join(lines) + "\n"


def detector_file(lane_lengths: dict[str, float]) -> str:
    """Induction loops, lane-area detectors and the emissions record, all every 300 s."""
    lines = ["<additional>"]
    for name, (lane, pos) in LOOPS.items():
        position = pos if pos >= 0 else lane_lengths[lane] + pos
        lines.append(
            f'    <inductionLoop id="{name}" lane="{lane}" pos="{position:.2f}" '
            f'period="{INTERVAL_S}" file="loops.xml"/>'
        )
    for name, lane in LANE_AREAS.items():
        end = lane_lengths[lane] - 1.0
        lines.append(
            f'    <laneAreaDetector id="{name}" lane="{lane}" pos="{end - LANE_AREA_LENGTH_M:.2f}" '
            f'endPos="{end:.2f}" period="{INTERVAL_S}" file="lane_areas.xml"/>'
        )
    lines.append(
        f'    <edgeData id="emissions" type="emissions" period="{INTERVAL_S}" '
        f'file="emissions.xml" edges="{EMISSIONS_EDGE}"/>'
    )
    lines.append("</additional>")
    return "\n".join(lines) + "\n"


def _run(command: list[str], cwd: Path, what: str) -> None:
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    if result.returncode != 0:
        raise SimulatorError(
            f"{what} failed (exit {result.returncode}): {result.stderr.strip()[-2000:]}"
        )


def _intervals(path: Path):
    """Every <interval> element of a SUMO output file (sumolib's XML reader)."""
    import sumolib

    if not path.is_file():
        raise SimulatorError(f"SUMO wrote no {path.name}")
    return sumolib.xml.parse(str(path), "interval")


def _carry_forward(values: np.ndarray, name: str) -> np.ndarray:
    """Replace SUMO's -1 (no vehicle measured) by the last measured value (first one backwards)."""
    missing = values < 0
    if missing.all():
        raise SimulatorError(f"SUMO measured no vehicle at all for {name}")
    index = np.where(missing, 0, np.arange(values.size))
    np.maximum.accumulate(index, out=index)
    filled = values[index]
    first = int(np.argmax(~missing))
    filled[:first] = values[first]
    return filled


def parse_outputs(
    folder: Path, n_steps: int, extra_series: bool = False
) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """The 29 targets from SUMO's detector and emission outputs, on a regular 300 s grid (each
    ``(n_steps,)``), then ``EXTRA_SERIES`` when ``extra_series``."""
    series: dict[str, np.ndarray] = {}
    units: dict[str, str] = {}

    emitted = {field: np.zeros(n_steps) for field in EMISSION_FIELDS}  # no vehicle, no emission
    for interval in _intervals(folder / "emissions.xml"):
        step = int(round(float(interval.begin) / INTERVAL_S))
        for edge in interval.getChildList() if step < n_steps else ():
            if edge.getAttribute("id") == EMISSIONS_EDGE:
                for field in EMISSION_FIELDS:
                    emitted[field][step] = float(edge.getAttribute(field))
    for field, unit in EMISSION_FIELDS.items():
        name = f"{field}_edge_{EMISSIONS_EDGE}"
        series[name], units[name] = emitted[field], unit

    for file, detectors, fields in (
        ("loops.xml", LOOPS, LOOP_FIELDS),
        ("lane_areas.xml", LANE_AREAS, LANE_AREA_FIELDS),
    ):
        grids = {(d, f): np.full(n_steps, np.nan) for d in detectors for f in fields}
        for interval in _intervals(folder / file):
            step = int(round(float(interval.begin) / INTERVAL_S))
            if step < n_steps and interval.id in detectors:
                for field in fields:
                    grids[(interval.id, field)][step] = float(interval.getAttribute(field))
        for (detector, field), values in grids.items():
            name = f"{field}_{detector}"
            if np.isnan(values).any():
                missing = int(np.isnan(values).sum())
                raise SimulatorError(
                    f"SUMO's {file} misses {missing} of {n_steps} intervals for {name}: SUMO "
                    "stopped before the end (it ends cleanly on SIGTERM, so a stopped run "
                    "exits 0); run it again"
                )
            if field in SPEED_FIELDS:
                values = _carry_forward(values, name)
            elif field in ZERO_WHEN_EMPTY:
                values = np.maximum(values, 0.0)
            series[name], units[name] = values, fields[field]
    names = (*TARGETS, *EXTRA_SERIES) if extra_series else TARGETS
    return {name: series[name] for name in names}, {name: units[name] for name in names}


def run(
    *,
    days: float = DEFAULT_DAYS,
    workdir: str | os.PathLike | None = None,
    seed: int = SEED,
    profile: Profile = DAILY_PROFILE,
    extra_series: bool = False,
) -> Baselines:
    """Build the intersection, run SUMO for ``days`` and return the 29 targets at 300 s.

    ``seed`` is SUMO's random seed (the network is always built with ``SEED``) and ``profile``
    the daily demand, (start hour, end hour, veh/h of the whole intersection) periods; both
    default to the benchmark's base setting. ``extra_series`` also returns what SUMO measures
    and no shipped target uses (``EXTRA_SERIES``: the far loop's occupancy in % and speed in
    m/s), for authors adding targets (docs/AUTHORING.md). The run itself is the same either way.
    """
    import sumolib

    sumo, netconvert = binaries()
    n_steps = int(round(days * 86400 / INTERVAL_S))
    if n_steps < 2:
        raise SimulatorError(f"SUMO: {days} days gives fewer than 2 steps of {INTERVAL_S} s")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**31:
        raise SimulatorError(f"SUMO: seed must be a whole number in 0..2**31-1, got {seed!r}")
    if profile is not DAILY_PROFILE:
        profile = check_profile(profile)
    inputs = network_files()
    with tempfile.TemporaryDirectory(prefix="whatif-sumo-", dir=workdir) as tmp:
        folder = Path(tmp)
        for name, text in inputs.items():
            (folder / name).write_text(text)
        _run(
            [
                netconvert,
                "--node-files",
                "intersection.nod.xml",
                "--edge-files",
                "intersection.edg.xml",
                "--connection-files",
                "intersection.con.xml",
                "--tllogic-files",
                "intersection.tll.xml",
                "--no-turnarounds",
                "true",
                "--output-file",
                "intersection.net.xml",
                "--seed",
                str(SEED),
            ],
            folder,
            "netconvert",
        )
        net = sumolib.net.readNet(str(folder / "intersection.net.xml"))
        lane_lengths = {
            lane.getID(): lane.getLength() for edge in net.getEdges() for lane in edge.getLanes()
        }
        inputs["routes.rou.xml"] = route_file(days, profile)
        inputs["detectors.add.xml"] = detector_file(lane_lengths)
        for name in ("routes.rou.xml", "detectors.add.xml"):
            (folder / name).write_text(inputs[name])
        _run(
            [
                sumo,
                "--net-file",
                "intersection.net.xml",
                "--route-files",
                "routes.rou.xml",
                "--additional-files",
                "detectors.add.xml",
                "--begin",
                "0",
                "--end",
                str(n_steps * INTERVAL_S),
                "--seed",
                str(seed),
                "--step-length",
                "1",
                "--no-step-log",
                "true",
                "--no-warnings",
                "true",
                "--duration-log.disable",
                "true",
                "--time-to-teleport",
                "300",
            ],
            folder,
            "sumo",
        )
        series, units = parse_outputs(folder, n_steps, extra_series)
        version = subprocess.run(
            [sumo, "--version"], capture_output=True, text=True
        ).stdout.splitlines()[0]
    return Baselines(
        simulator=NAME,
        simulator_version=version.strip(),
        interval_s=INTERVAL_S,
        start=START,
        series=series,
        units=units,
        covariate_base_values={**VEHICLE_TYPE, "offset": float(SIGNAL_OFFSET_S)},
        inputs=inputs,
        notes=f"Seed {seed}; daily profile {profile} (veh/h, whole intersection).",
    )
