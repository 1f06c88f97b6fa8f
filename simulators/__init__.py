"""Simulator wrappers: each runs a real simulator once on its base setting and returns baselines.

Every wrapper has the same interface, keyword-only ``run(*, days, workdir, **options) ->
Baselines`` (``base.SimulatorRun``), runs in its own temporary directory and raises
``SimulatorUnavailable`` (with an install hint) when its engine is missing.
``whatif simulate`` writes the results to one HDF5 baselines store.
"""

from typing import TYPE_CHECKING

from whatif_bench._lazy import lazy_exports

if TYPE_CHECKING:
    from whatif_bench.simulators.base import Baselines, SimulatorUnavailable
    from whatif_bench.simulators.catalog import SIMULATORS, get_simulator
    from whatif_bench.simulators.store import (
        read_baselines,
        shipped_baselines_path,
        write_baselines,
    )

# Imported on first use (see whatif_bench._lazy): the command line reads this package's
# argument parsing without loading numpy, numba, h5py or pandas.
_EXPORTS = {
    "Baselines": "whatif_bench.simulators.base",
    "SimulatorUnavailable": "whatif_bench.simulators.base",
    "SIMULATORS": "whatif_bench.simulators.catalog",
    "get_simulator": "whatif_bench.simulators.catalog",
    "read_baselines": "whatif_bench.simulators.store",
    "shipped_baselines_path": "whatif_bench.simulators.store",
    "write_baselines": "whatif_bench.simulators.store",
}
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)

__all__ = [
    "SIMULATORS",
    "Baselines",
    "SimulatorUnavailable",
    "get_simulator",
    "read_baselines",
    "shipped_baselines_path",
    "write_baselines",
]
