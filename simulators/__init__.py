"""Simulator wrappers: each runs a real simulator once on its base setting and returns baselines.

Every wrapper has the same interface, ``run(days, workdir) -> Baselines``, runs in its own
temporary directory and raises ``SimulatorUnavailable`` (with an install hint) when its engine
is missing. ``whatif simulate`` writes the results to one HDF5 baselines store.
"""

from whatif_bench.simulators.base import Baselines, SimulatorUnavailable
from whatif_bench.simulators.catalog import SIMULATORS, get_simulator
from whatif_bench.simulators.store import read_baselines, shipped_baselines_path, write_baselines

__all__ = [
    "SIMULATORS",
    "Baselines",
    "SimulatorUnavailable",
    "get_simulator",
    "read_baselines",
    "shipped_baselines_path",
    "write_baselines",
]
