"""The four simulators by name, with their default run lengths (imports are lazy)."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from whatif_bench.errors import WhatIfError

if TYPE_CHECKING:  # base imports numpy; the command line reads this catalogue without it
    from whatif_bench.simulators.base import SimulatorRun


@dataclass(frozen=True)
class SimulatorEntry:
    """A simulator wrapper module and how long its base run lasts by default."""

    name: str
    module: str
    default_days: float
    title: str
    extra_series: str = ""  # what ``run(extra_series=True)`` adds; "" when the wrapper has none

    def runner(self) -> SimulatorRun:
        """The wrapper's ``run`` (imports the module); its options are keyword-only."""
        return importlib.import_module(self.module).run


SIMULATORS: dict[str, SimulatorEntry] = {
    entry.name: entry
    for entry in (
        SimulatorEntry("opendc", "whatif_bench.simulators.opendc", 30, "OpenDC data centre"),
        SimulatorEntry("gridlabd", "whatif_bench.simulators.gridlabd", 14, "GridLAB-D feeder"),
        SimulatorEntry(
            "epanet",
            "whatif_bench.simulators.epanet",
            32,
            "EPANET Net1",
            extra_series="chlorine_<node> [mg/L] at every junction and the tank",
        ),
        SimulatorEntry(
            "sumo",
            "whatif_bench.simulators.sumo",
            30,
            "SUMO intersection",
            extra_series="occupancy_loop_e_0_far [%] and speed_loop_e_0_far [m/s], the far loop",
        ),
    )
}


def get_simulator(name: str) -> SimulatorEntry:
    """The catalogue entry of ``name``; the error lists the valid names."""
    try:
        return SIMULATORS[name]
    except KeyError:
        raise WhatIfError(
            f"unknown simulator {name!r}; expected one of {list(SIMULATORS)}"
        ) from None
