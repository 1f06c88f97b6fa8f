"""Training worlds: real simulator runs on base settings the benchmark never uses.

A forecaster trained on an endless stream of tasks must not see the benchmark's baselines. A
training world is the benchmark's simulator with one or more settings changed that are *not*
covariates (a demand pattern, the weather, a random seed), so the series are new while the
targets, their units and every covariate's base value stay those of the benchmark and the
registry's relationships apply unchanged. Every series comes from a real run of the simulator
through its wrapper (``epanet.run``, ``gridlabd.run``, ``sumo.run``); nothing is synthesised.

OpenDC's worlds put other VMs of the same Bitbrains trace into the benchmark's VM slots (its
targets keep their names, e.g. ``cpu_usage_1019`` is the VM in slot 1019); they run like the
benchmark (``opendc.run``), so they need a JDK, Maven and the trace (``$WHATIF_OPENDC_TRACE``).

``WorldCache`` keeps each world's run as a one-simulator baselines file (``store.py``), built
once under a lock and re-checked on every read; ``whatif worlds {list,build}`` is the command
line.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from whatif_bench.errors import WhatIfError
from whatif_bench.outputs import (
    BASELINES,
    OutputLockedError,
    describe_kind,
    file_kind,
    is_safe_name,
    output_lock,
    path_problem,
    refuse_empty,
    safe_name,
)
from whatif_bench.simulators import epanet, gridlabd, opendc, sumo
from whatif_bench.simulators.base import Baselines, SimulatorRun
from whatif_bench.simulators.catalog import SIMULATORS
from whatif_bench.simulators.world_defaults import CACHE_ENV, DEFAULT_CACHE

# Bumped whenever a wrapper's output for an unchanged setting changes (2: GridLAB-D reads
# TMY2 weather by its own extension, see simulators/gridlabd.py), so older cache files rebuild.
RUNS_VERSION = 2
SETTING_INPUT = "world.json"  # the input "file" of a world's Baselines that records its setting


class WorldError(WhatIfError, ValueError):
    """A training world is unknown or malformed, or its cache file cannot be used."""


# Keyword parameters each wrapper's ``run`` takes, with the values that give the benchmark's.
BENCHMARK_PARAMS: dict[str, dict[str, tuple[object, ...]]] = {
    "epanet": {"demand_pattern": (None,), "pattern_step_s": (None,)},
    "gridlabd": {"weather_file": (None, gridlabd.WEATHER_FILE), "start": (None, gridlabd.START)},
    "sumo": {"seed": (sumo.SEED,), "profile": (sumo.DAILY_PROFILE,)},
    "opendc": {"vms": (None, opendc.VM_SLOTS)},
}
_RUNNERS: dict[str, SimulatorRun] = {
    "epanet": epanet.run,
    "gridlabd": gridlabd.run,
    "sumo": sumo.run,
    "opendc": opendc.run,
}


@dataclass(frozen=True)
class WorldSetting:
    """One training world: what differs from the benchmark's base setting of ``simulator``.

    ``name`` is globally unique and a safe file name; ``description`` is one line for humans;
    ``params`` are (keyword, value) pairs passed to the simulator wrapper's ``run`` (values
    hashable, e.g. tuples), sorted by keyword.
    """

    name: str
    simulator: str
    description: str
    params: tuple[tuple[str, object], ...]

    def __post_init__(self) -> None:
        if not is_safe_name(self.name):
            raise WorldError(
                f"world name {self.name!r} is not a safe file name (letters, digits, . _ + - = @)"
            )
        if self.simulator not in _RUNNERS:
            raise WorldError(
                f"world {self.name!r}: simulator {self.simulator!r} has no training worlds; "
                f"expected one of {sorted(_RUNNERS)}"
            )
        if not isinstance(self.description, str) or not self.description.strip():
            raise WorldError(f"world {self.name!r}: description must be non-empty text")
        if "\n" in self.description:
            raise WorldError(f"world {self.name!r}: description must be one line")
        if not isinstance(self.params, tuple) or not all(
            isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str) for p in self.params
        ):
            raise WorldError(f"world {self.name!r}: params must be a tuple of (keyword, value)")
        allowed = BENCHMARK_PARAMS[self.simulator]
        keys = [key for key, _ in self.params]
        unknown = sorted(set(keys) - set(allowed))
        if unknown:
            raise WorldError(
                f"world {self.name!r}: unknown parameter(s) {unknown} for {self.simulator}; "
                f"expected some of {sorted(allowed)}"
            )
        if len(set(keys)) != len(keys):
            raise WorldError(f"world {self.name!r}: a parameter is given twice: {keys}")
        try:
            hash(self.params)
        except TypeError:
            raise WorldError(f"world {self.name!r}: parameter values must be hashable") from None
        if keys != sorted(keys):
            object.__setattr__(self, "params", tuple(sorted(self.params)))
        if all(value in allowed[key] for key, value in self.params):
            raise WorldError(
                f"world {self.name!r}: its parameters are the benchmark's own base setting; "
                "a training world must differ from the benchmark"
            )

    def kwargs(self) -> dict[str, object]:
        """``params`` as keyword arguments of the wrapper's ``run``."""
        return dict(self.params)

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready description (tuples become lists)."""
        return {
            "name": self.name,
            "simulator": self.simulator,
            "description": self.description,
            "params": {key: _plain(value) for key, value in self.params},
        }


def _plain(value: object) -> object:
    return [_plain(v) for v in value] if isinstance(value, tuple | list) else value


# Net1's own demand pattern: 12 multipliers at 2 h steps, peak 1.6 at 06:00-08:00. (Shifting it
# in time is no training world: the tank and pump settle into the same daily cycle, so the run
# repeats whole days of the benchmark a few hours later.)
_NET1 = (1.0, 1.2, 1.4, 1.6, 1.4, 1.2, 1.0, 0.8, 0.6, 0.4, 0.6, 0.8)
# A residential day at 1 h steps: low at night, a morning peak at 07-09 and an evening peak at
# 18-20 (mean 0.99, the same daily volume as Net1's pattern within 1 %).
_RESIDENTIAL = (
    *(0.5, 0.45, 0.4, 0.4, 0.45, 0.6, 1.0, 1.45, 1.5, 1.3, 1.15, 1.1),
    *(1.1, 1.05, 1.0, 1.0, 1.1, 1.3, 1.5, 1.55, 1.35, 1.1, 0.8, 0.6),
)
# An office district's week at 1 h steps: working days high from 08 to 18, weekends low all day.
_OFFICE_WORKDAY = (
    *(0.4, 0.4, 0.4, 0.4, 0.4, 0.5, 0.8, 1.4, 1.7, 1.7, 1.6, 1.5),
    *(1.5, 1.6, 1.6, 1.5, 1.3, 1.0, 0.8, 0.6, 0.5, 0.5, 0.4, 0.4),
)
_OFFICE_WEEKEND = (
    *(0.4, 0.4, 0.4, 0.4, 0.4, 0.4, 0.45, 0.5, 0.6, 0.7, 0.75, 0.75),
    *(0.75, 0.7, 0.7, 0.65, 0.6, 0.6, 0.55, 0.5, 0.5, 0.45, 0.4, 0.4),
)

TRAINING_WORLDS: dict[str, tuple[WorldSetting, ...]] = {
    "epanet": (
        WorldSetting(
            "epanet-demand-residential",
            "epanet",
            "Net1 with a residential double-peak day (1 h steps) instead of its 2 h pattern",
            (("demand_pattern", _RESIDENTIAL), ("pattern_step_s", 3600)),
        ),
        WorldSetting(
            "epanet-demand-office-week",
            "epanet",
            "Net1 with an office district's week: busy 08-18 on five workdays, quiet weekends",
            (
                ("demand_pattern", (*_OFFICE_WORKDAY * 5, *_OFFICE_WEEKEND * 2)),
                ("pattern_step_s", 3600),
            ),
        ),
        WorldSetting(
            "epanet-demand-night-irrigation",
            "epanet",
            "Net1's demand pattern plus 0.6 from 22:00 to 02:00 (night-time garden irrigation)",
            (("demand_pattern", (1.6, *_NET1[1:-1], 1.4)),),
        ),
        WorldSetting(
            "epanet-demand-summer",
            "epanet",
            "Net1's demand pattern scaled by 1.25 (summer use); base demands unchanged",
            (("demand_pattern", tuple(round(1.25 * m, 6) for m in _NET1)),),
        ),
    ),
    "gridlabd": (
        WorldSetting(
            "gridlabd-greensboro-february",
            "gridlabd",
            "the same house two weeks from 5 February in Greensboro (benchmark: January)",
            (("start", "2000-02-05 00:00:00"),),
        ),
        WorldSetting(
            "gridlabd-greensboro-december",
            "gridlabd",
            "the same house two weeks from 1 December in Greensboro",
            (("start", "2000-12-01 00:00:00"),),
        ),
        WorldSetting(
            "gridlabd-greensboro-july",
            "gridlabd",
            "the same house two weeks from 8 July in Greensboro (cooling season)",
            (("start", "2000-07-08 00:00:00"),),
        ),
        WorldSetting(
            "gridlabd-sandpoint-january",
            "gridlabd",
            "the same house in January at Sand Point, Alaska (pvlib's 703165 TMY3 file)",
            (("weather_file", "703165TY.csv"),),
        ),
        WorldSetting(
            "gridlabd-miami-january",
            "gridlabd",
            "the same house in January in Miami, Florida (pvlib's 12839 TMY2 file)",
            (("weather_file", "12839.tm2"),),
        ),
    ),
    "sumo": (
        WorldSetting(
            "sumo-seed-7",
            "sumo",
            "the benchmark intersection and demand with SUMO's random seed 7 (benchmark: 42)",
            (("seed", 7),),
        ),
        WorldSetting(
            "sumo-seed-2024",
            "sumo",
            "the benchmark intersection and demand with SUMO's random seed 2024",
            (("seed", 2024),),
        ),
        WorldSetting(
            "sumo-demand-weekend",
            "sumo",
            "a weekend-like day: no commuter peaks, one broad midday high of 1,400 veh/h",
            (
                (
                    "profile",
                    ((0, 8, 150), (8, 11, 900), (11, 18, 1400), (18, 22, 1000), (22, 24, 300)),
                ),
            ),
        ),
        WorldSetting(
            "sumo-demand-peaks-later",
            "sumo",
            "both commuter peaks one hour later and 15 % lighter (1,700 veh/h), seed 11",
            # Another seed too: up to 06:00 the profile is the benchmark's, so with its seed
            # the first day's first six hours were the benchmark's, vehicle for vehicle.
            (
                (
                    "profile",
                    ((0, 7, 120), (7, 10, 1700), (10, 17, 900), (17, 20, 1700), (20, 24, 500)),
                ),
                ("seed", 11),
            ),
        ),
    ),
    # VMs of the benchmark's trace submitted with the benchmark's (OpenDC starts them together),
    # whose traces hold at least C4's 8,352 windows; slot order 1019, 1023, 1026, then the fourth
    # VM (host-2, read by no target)
    "opendc": (
        WorldSetting(
            "opendc-vms-1147-1152-1138",
            "opendc",
            "the rack running Bitbrains VMs 1147, 1152, 1138 (and 857): quiet 1-core VMs",
            (("vms", ("1147", "1152", "1138", "857")),),
        ),
        WorldSetting(
            "opendc-vms-554-796-607",
            "opendc",
            "the rack running Bitbrains VMs 554, 796, 607 (and 578): busier 1-core VMs",
            (("vms", ("554", "796", "607", "578")),),
        ),
        WorldSetting(
            "opendc-vms-141-323-841",
            "opendc",
            "the rack running Bitbrains VMs 141, 323, 841 (and 851): 2-core VMs",
            (("vms", ("141", "323", "841", "851")),),
        ),
        WorldSetting(
            "opendc-vms-871-957-116",
            "opendc",
            "the rack running Bitbrains VMs 871, 957, 116 (and 506): 4-core VMs",
            (("vms", ("871", "957", "116", "506")),),
        ),
    ),
}


def training_worlds(simulators: Iterable[str] | None = None) -> list[WorldSetting]:
    """The training worlds of ``simulators`` (default: all), in ``TRAINING_WORLDS`` order."""
    if simulators is None:
        wanted = set(TRAINING_WORLDS)
    else:
        wanted = {simulators} if isinstance(simulators, str) else set(simulators)
        unknown = sorted(str(s) for s in wanted - set(TRAINING_WORLDS))
        if unknown:
            raise WorldError(
                f"unknown simulator(s) {unknown}; expected some of {list(TRAINING_WORLDS)}"
            )
    return [world for sim, worlds in TRAINING_WORLDS.items() if sim in wanted for world in worlds]


def get_world(name: str) -> WorldSetting:
    """The training world called ``name``; the error lists the valid names."""
    for world in training_worlds():
        if world.name == name:
            return world
    raise WorldError(
        f"unknown training world {name!r}; expected one of {[w.name for w in training_worlds()]}"
    )


def default_days(simulator: str) -> float:
    """The benchmark run's length of ``simulator`` in days (every context length fits)."""
    return float(SIMULATORS[simulator].default_days)


def _resolve_days(setting: WorldSetting, days: float | None) -> float:
    if days is None:
        return default_days(setting.simulator)
    if isinstance(days, bool) or not isinstance(days, int | float) or not 0 < days < float("inf"):
        raise WorldError(f"world {setting.name!r}: days must be a finite number > 0, got {days!r}")
    return float(days)


def setting_record(setting: WorldSetting, days: float) -> str:
    """The JSON text a world's Baselines records as its ``world.json`` input.

    It names ``RUNS_VERSION``, so a cache file made before a wrapper changed how a setting runs
    holds another record and is rebuilt.
    """
    record = {**setting.to_dict(), "days": days, "runs_version": RUNS_VERSION}
    return json.dumps(record, sort_keys=True)


def run_world(
    setting: WorldSetting, days: float | None = None, workdir: str | os.PathLike | None = None
) -> Baselines:
    """Run the real simulator of ``setting`` for ``days`` (default: the benchmark's length).

    The returned Baselines record the setting as the input ``world.json`` (so its content hash
    differs from every other world's and from the benchmark's) and name it in ``notes``.
    """
    if not isinstance(setting, WorldSetting):
        raise WorldError(f"expected a WorldSetting, got {type(setting).__name__}")
    days = _resolve_days(setting, days)
    baselines = _RUNNERS[setting.simulator](days=days, workdir=workdir, **setting.kwargs())
    return replace(
        baselines,
        inputs={**baselines.inputs, SETTING_INPUT: setting_record(setting, days)},
        notes=f"Training world {setting.name}: {setting.description}. {baselines.notes}",
    )


# Rough wall time of a world's run per simulated day on this two-core machine (the benchmark's
# base runs: SUMO's month took about 2 min, OpenDC's about 25 s with the JVM's start, EPANET's
# and GridLAB-D's a few seconds), for the note a build prints first. A loaded machine is slower.
ROUGH_SECONDS_PER_DAY = {"sumo": 4.0, "opendc": 0.8, "gridlabd": 0.15, "epanet": 0.05}


def build_note(setting: WorldSetting, days: float, path: Path) -> str:
    """What a build says before it runs: the world, its simulator, how long, where it goes."""
    rough = ROUGH_SECONDS_PER_DAY.get(setting.simulator, 1.0) * days
    when = f"about {rough / 60:.0f} min" if rough >= 90 else f"about {max(1, round(rough))} s"
    title = SIMULATORS[setting.simulator].title if setting.simulator in SIMULATORS else ""
    return (
        f"note: building training world {setting.name}: {title or setting.simulator}, "
        f"{days:g} simulated days ({when} on two cores), once: it is kept in {path}"
    )


class WorldCache:
    """Training-world runs kept as baselines files in ``folder``, each built once.

    ``folder`` defaults to ``$WHATIF_WORLDS`` or ``~/.cache/whatif-bench/worlds`` (an empty
    path is refused, never taken for the current folder). A world is run by at most one process
    at a time (a lock beside its file; others wait for it) and its file appears only when
    complete. ``runs`` counts the simulations this object ran. Before each run it prints
    ``build_note`` on the error stream (``announce=False``: nothing).

    Only this toolkit's baselines stores (``outputs.file_kind``: the HDF5 ``format``
    attribute) are read or replaced: anything else under a world's file name (a user's file, a
    corpus, a link, a folder, an HDF5 file too damaged to read its attributes) is a
    ``WorldError`` naming it and saying to move it away, with or without ``rebuild``.
    """

    poll_s = 0.2  # how often a waiting process looks at a world another process is building

    def __init__(self, folder: str | os.PathLike | None = None, *, announce: bool = True) -> None:
        if folder is None:
            folder = os.environ.get(CACHE_ENV) or DEFAULT_CACHE.expanduser()
        self.folder = Path(refuse_empty(folder, "--cache", WorldError))
        self.runs = 0
        self.announce = announce

    def path(self, setting: WorldSetting, days: float | None = None) -> Path:
        """The cache file of ``setting`` run for ``days`` (default: the benchmark's length)."""
        days = _resolve_days(setting, days)
        name = safe_name(setting.name, "world name")
        if days != default_days(setting.simulator):
            name += f"-{days:g}d"
        return self.folder / f"{name}.h5"

    def cached(self, setting: WorldSetting, days: float | None = None) -> bool:
        """Whether the run of ``setting`` for ``days`` is in the cache (not checked)."""
        return self.path(setting, days).is_file()

    def get(
        self, setting: WorldSetting, days: float | None = None, *, rebuild: bool = False
    ) -> Baselines:
        """The cached run of ``setting``, or run it once, store it and return it.

        ``rebuild`` runs the world again and replaces its file. A corrupt cache file (a
        baselines store of this toolkit's that fails its checks) is a ``WorldError`` naming the
        file and how to rebuild it; a file that is not one is never read or replaced
        (``_check_own``).
        """
        days = _resolve_days(setting, days)
        path = self.path(setting, days)
        self._check_own(path)
        if not rebuild and path.is_file():
            found = self._read(setting, days, path)
            if found is not None:
                return found
        with self._building(path):
            self._check_own(path)
            if not rebuild and path.is_file():  # another process built it while we waited
                found = self._read(setting, days, path)
                if found is not None:
                    return found
            from whatif_bench.simulators.store import write_baselines

            if self.announce:
                from tqdm import tqdm

                tqdm.write(build_note(setting, days, path), file=sys.stderr)
            baselines = run_world(setting, days)
            self.runs += 1
            write_baselines(path, [baselines])
            return baselines

    def _check_own(self, path: Path) -> None:
        """Refuse whatever is at ``path`` unless it is a regular file this toolkit wrote as a
        baselines store (``outputs.file_kind``, read from its content): a user's file, a corpus,
        a symbolic link, a folder or a special file is never opened, read or replaced; an HDF5
        file whose attributes cannot be read at all (truncated) is not recognisable as ours
        either, so it is left for the user to remove. Nothing there is no problem."""
        if not os.path.lexists(path):
            return
        move = f"refusing to read or replace it: move it out of the cache folder {self.folder}"
        special = "a symbolic link" if path.is_symlink() else path_problem(path)
        if special is None and path.is_dir():
            special = "a folder"
        if special is not None:
            raise WorldError(f"{path}: is {special}, not a training-world cache file; {move}")
        kind = file_kind(path)
        if kind == BASELINES:
            return
        if kind is not None:
            raise WorldError(
                f"{path}: holds {describe_kind(kind)}, not a training-world cache file (a "
                f"whatif baselines store); {move}"
            )
        raise WorldError(
            f"{path}: not recognisable as a training-world cache file (no whatif baselines "
            f"format in it: another program's file, or one too damaged to read); {move}, or "
            "delete it by hand"
        )

    @contextlib.contextmanager
    def _building(self, path: Path) -> Iterator[None]:
        """Hold the build lock of ``path``, waiting while another process holds it."""
        lock = path.with_name(f"{path.name}.build")
        with contextlib.ExitStack() as stack:
            while True:
                try:
                    stack.enter_context(output_lock(lock))
                    break
                except OutputLockedError:
                    time.sleep(self.poll_s)
            yield

    def _read(self, setting: WorldSetting, days: float, path: Path) -> Baselines | None:
        """The world's Baselines from ``path``; ``None`` if the file holds another setting
        (an older definition of the world), which is then rebuilt."""
        from whatif_bench.simulators.store import BaselinesFileError, read_baselines

        hint = (
            f"rebuild it with: whatif worlds build --world {setting.name} --cache {self.folder}"
            + ("" if days == default_days(setting.simulator) else f" --days {days:g}")
            + " --rebuild"
        )
        try:
            stored = read_baselines(path)
        except BaselinesFileError as exc:
            raise WorldError(f"corrupt training-world cache file: {exc}; {hint}") from None
        item = stored.get(setting.simulator)
        if len(stored) != 1 or item is None:
            raise WorldError(
                f"{path}: not a cache file of world {setting.name!r} (holds {sorted(stored)}); "
                f"{hint}"
            )
        if item.inputs.get(SETTING_INPUT) != setting_record(setting, days):
            return None
        return item
