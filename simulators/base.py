"""What every simulator wrapper returns: a ``Baselines`` record, the errors they raise, and
the shape of their ``run`` (``SimulatorRun``)."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from whatif_bench.errors import WhatIfError

MAX_INTERVAL_S = 366 * 86400  # a step longer than a year is not a time series we can use


class SimulatorError(WhatIfError):
    """A simulator ran but failed, or produced output the wrapper cannot use."""


class BaselinesFileError(WhatIfError):
    """A baselines file is missing, unreadable, of the wrong format or corrupted."""


class SimulatorUnavailable(SimulatorError):
    """The simulator's engine is not installed or cannot run on this machine."""


@dataclass(frozen=True)
class Baselines:
    """Intervention-free series of one simulator's targets at a fixed interval.

    ``series`` maps target name to a float64 array of shape (n_steps,); ``inputs`` holds the
    exact text of every input file of the base setting, so a run can be repeated.
    """

    simulator: str
    simulator_version: str
    interval_s: int
    start: str
    series: dict[str, np.ndarray]
    units: dict[str, str]
    covariate_base_values: dict[str, float]
    inputs: dict[str, str] = field(default_factory=dict)
    notes: str = ""

    def __post_init__(self) -> None:
        lengths = {name: np.asarray(values).shape for name, values in self.series.items()}
        if len(set(lengths.values())) > 1:
            raise SimulatorError(f"{self.simulator}: series have different lengths: {lengths}")
        missing_units = sorted(set(self.series) - set(self.units))
        if missing_units:
            raise SimulatorError(f"{self.simulator}: no unit for {missing_units}")
        for name, values in self.series.items():
            array = np.ascontiguousarray(values, dtype=np.float64)
            if array.ndim != 1:
                raise SimulatorError(f"{self.simulator}/{name}: series must be one-dimensional")
            if not np.all(np.isfinite(array)):
                bad = int(np.flatnonzero(~np.isfinite(array))[0])
                raise SimulatorError(
                    f"{self.simulator}/{name}: non-finite value {array[bad]} at step {bad}"
                )
            self.series[name] = array

    @property
    def n_steps(self) -> int:
        return len(next(iter(self.series.values()))) if self.series else 0

    def time_s(self) -> np.ndarray:
        """Seconds since ``start`` of every step, shape (n_steps,)."""
        return np.arange(self.n_steps, dtype=np.int64) * self.interval_s

    def content_hash(self) -> str:
        """SHA-256 of the series, their names, units, timing, base values and input files."""
        digest = hashlib.sha256()
        header = {
            "simulator": self.simulator,
            "interval_s": self.interval_s,
            "start": self.start,
            "targets": sorted(self.series),
            "units": {k: self.units[k] for k in sorted(self.series)},
            "covariate_base_values": dict(sorted(self.covariate_base_values.items())),
            "inputs": dict(sorted(self.inputs.items())),
        }
        digest.update(json.dumps(header, sort_keys=True).encode())
        for name in sorted(self.series):
            digest.update(self.series[name].astype("<f8").tobytes())
        return digest.hexdigest()


@runtime_checkable
class SimulatorRun(Protocol):
    """The ``run`` function of a simulator wrapper module (``catalog.SIMULATORS``).

    A wrapper promises: every parameter is keyword-only; ``days`` is the run length (default
    the module's ``DEFAULT_DAYS``) and ``workdir`` the folder its temporary directory is made
    in (default the system's); any further parameters are the wrapper's own options, each
    defaulting to the benchmark's base setting. It returns the ``Baselines`` of the run,
    raises ``SimulatorUnavailable`` (with an install hint) when the engine is missing and
    ``SimulatorError`` when a run fails or its output is unusable.

    The wrapper's own options are not part of this type: pass them as ``**options`` from a
    ``dict[str, Any]``. ``isinstance(f, SimulatorRun)`` only checks that ``f`` is callable;
    ``tests/test_simulator_protocol.py`` checks the signatures.
    """

    def __call__(
        self, *, days: float = ..., workdir: str | os.PathLike | None = None
    ) -> Baselines: ...


Simulator = SimulatorRun  # the name issue 25 gives it
