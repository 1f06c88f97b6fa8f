"""What every foundation-model adapter shares: grouping by covariate schema, mapping a model's
own quantile levels onto the toolkit's nine, batching, devices, seeds and the fingerprint.

An adapter subclasses ``FoundationForecaster`` and implements ``_load`` (build or load the
model, once, on first use) and ``_forecast_group`` (forecast tasks that share one covariate
schema and horizon).
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from whatif_bench.evaluation.forecasters import Forecast, ModelError, NoForecast, TaskInput
from whatif_bench.evaluation.metrics import QUANTILE_LEVELS

__all__ = [
    "FoundationForecaster",
    "batches",
    "check_whole_number",
    "covariate_names",
    "import_library",
    "library_version",
    "schema_groups",
    "to_nine_levels",
]

DEVICES = ("cpu", "cuda", "mps")


def import_library(module: str, package: str, extra: str):
    """``importlib.import_module(module)``, or a ``ModelError`` saying which ``pip install``
    brings ``package`` (the ``extra`` of this toolkit that pins it)."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ModelError(
            f"{package} is not installed ({exc}); install it with: pip install "
            f"'whatif-bench[{extra}]'"
        ) from None


def library_version(package: str) -> str | None:
    """The installed version of distribution ``package``, or None."""
    if not package:
        return None
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def covariate_names(task: TaskInput) -> tuple[str, ...]:
    """The task's covariate names, (K,): its own, or ``covariate_1`` … when it has none (as
    ``adapters.dict_entry`` names them)."""
    k = task.history_covariates.shape[0]
    return tuple(task.covariate_names) or tuple(f"covariate_{i}" for i in range(1, k + 1))


def schema_groups(batch: Sequence[TaskInput]) -> dict[tuple[int, tuple[str, ...]], list[int]]:
    """Positions of the batch's tasks by (horizon H, covariate names), in first-seen order:
    the tasks one model call can take together (one covariate schema, one horizon)."""
    groups: dict[tuple[int, tuple[str, ...]], list[int]] = {}
    for index, task in enumerate(batch):
        groups.setdefault((task.prediction_length, covariate_names(task)), []).append(index)
    return groups


def batches(positions: Sequence[int], size: int) -> Iterator[list[int]]:
    """``positions`` in consecutive runs of at most ``size``."""
    for start in range(0, len(positions), size):
        yield list(positions[start : start + size])


def to_nine_levels(levels: Sequence[float], values: np.ndarray) -> np.ndarray:
    """Quantiles at a model's own ``levels`` (L,), ``values`` (..., L), as quantiles at the
    toolkit's nine ``QUANTILE_LEVELS`` (..., 9) float64.

    A level the model has is taken as it is. A level between two of the model's is linearly
    interpolated in the level; a level outside the model's range takes the nearest end (no
    extrapolation). The values are sorted along the last axis first, so crossed quantiles of
    the model become a monotone set; the result is monotone along the last axis and within
    the row's [min, max] (tests/test_foundation_common.py). ``levels`` must be strictly
    increasing in (0, 1).
    """
    grid = np.asarray(levels, dtype=np.float64)
    array = np.asarray(values, dtype=np.float64)
    if grid.ndim != 1 or grid.size == 0 or array.shape[-1:] != grid.shape:
        raise ValueError(f"quantile values of shape {array.shape} do not match {grid.size} levels")
    if not (np.all(np.diff(grid) > 0) and grid[0] > 0 and grid[-1] < 1):
        raise ValueError(f"quantile levels must increase strictly in (0, 1), got {list(grid)}")
    array = np.sort(array, axis=-1)
    flat = array.reshape(-1, grid.size)
    out = np.empty((flat.shape[0], len(QUANTILE_LEVELS)))
    for j, level in enumerate(QUANTILE_LEVELS):
        upper = int(np.searchsorted(grid, level))
        if upper < grid.size and grid[upper] == level:
            out[:, j] = flat[:, upper]
        elif upper == 0:
            out[:, j] = flat[:, 0]
        elif upper == grid.size:
            out[:, j] = flat[:, -1]
        else:
            low, high = grid[upper - 1], grid[upper]
            weight = (level - low) / (high - low)
            below, above = flat[:, upper - 1], flat[:, upper]
            # below + w (above - below), kept in [below, above]: exact where the two are equal,
            # and monotone in the level despite rounding
            out[:, j] = np.clip(below + weight * (above - below), below, above)
    return out.reshape(*array.shape[:-1], len(QUANTILE_LEVELS))


def _check_options(name: str, device: str, batch_size: int, seed: int) -> None:
    kind = device.split(":", 1)[0] if isinstance(device, str) else None
    if kind not in DEVICES:
        raise ModelError(
            f"{name}: device must be one of {', '.join(DEVICES)} (cuda:N for one GPU), got "
            f"{device!r}"
        )
    check_whole_number(name, "batch_size", batch_size, least=1)
    check_whole_number(name, "seed", seed, least=0)


def check_whole_number(
    adapter: str, label: str, value: object, least: int = 1, optional: bool = False
) -> None:
    """An adapter's integer option: a whole number >= ``least`` (not a bool), or None when
    ``optional``; else a ``ModelError`` naming the adapter and the option."""
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        allowed = f"a whole number >= {least}" + (" or None" if optional else "")
        raise ModelError(f"{adapter}: {label} must be {allowed}, got {value!r}")


class FoundationForecaster:
    """The shared part of an adapter: a toolkit forecaster (``name``, batch ``predict``).

    ``model`` is a checkpoint (a Hugging Face id or a local folder, loaded by the library) or
    an already built model object of the library (what the tests pass: tiny random
    configurations, nothing downloaded). ``predict`` groups the batch by covariate schema
    (``schema_groups``), splits each group into runs of ``batch_size`` tasks and calls
    ``_forecast_group`` on each, seeding torch with ``seed`` first when the library uses it:
    the same tasks in the same runs give identical forecasts. A library that keeps tasks apart
    in a call (as Chronos-2 does) gives the same forecasts whatever the chunking up to float32
    rounding (batched matrix products are not bit-identical across batch sizes), which is why
    ``batch_size`` is part of ``params``.
    """

    #: the adapter's name in ``--models`` (``ADAPTERS``); the distribution whose version is
    #: recorded in the fingerprint; its extra
    adapter = ""
    package = ""
    extra = ""
    #: said after the ``pip install`` line when the library is missing
    install_note = ""

    def __init__(
        self,
        model: Any,
        device: str = "cpu",
        batch_size: int = 64,
        seed: int = 0,
        name: str | None = None,
    ) -> None:
        _check_options(self.adapter, device, batch_size, seed)
        if self.package and library_version(self.package) is None:
            note = f" ({self.install_note})" if self.install_note else ""
            raise ModelError(
                f"{self.adapter} needs {self.package}, which is not installed; install it with: "
                f"pip install 'whatif-bench[{self.extra}]'{note}"
            )
        self.model_id = model if isinstance(model, str) else _object_label(model)
        self._given = None if isinstance(model, str) else model
        self.device, self.batch_size, self.seed = device, batch_size, seed
        self.name = name or self.adapter
        self._model: Any = None
        self._load_error: Exception | None = None
        self._pid = os.getpid()  # the process that built it (see _fork_safe_threads)

    def params(self) -> dict:
        """What identifies this model's results (see ``forecasters.fingerprint``)."""
        return {
            "adapter": self.adapter,
            "model": self.model_id,
            "library": self.package,
            "library_version": library_version(self.package),
            "batch_size": self.batch_size,
            "seed": self.seed,
            **self._identity(),
        }

    def _identity(self) -> dict:
        """More of the model's identity (its configuration), for ``params``."""
        return {}

    def loaded(self) -> Any:
        """The library's model, built or loaded on first use. A load that fails raises the
        same error again on every later call, without reading the checkpoint again (with
        network access, without trying the download again)."""
        if self._load_error is not None:
            raise self._load_error
        if self._model is None:
            try:
                self._model = self._load()
            except Exception as exc:
                self._load_error = exc
                raise
        return self._model

    def _load(self) -> Any:
        raise NotImplementedError

    def _forecast_group(self, tasks: list[TaskInput]) -> list[Forecast]:
        """Forecasts of tasks sharing one horizon and covariate names (at most
        ``batch_size`` of them), one per task."""
        raise NotImplementedError

    def _seed(self) -> None:
        """Seed the library's random numbers before a call (torch by default)."""
        torch = sys.modules.get("torch")
        if torch is not None:
            torch.manual_seed(self.seed)

    def _fork_safe_threads(self) -> None:
        """In a process forked from the one that built this forecaster (``evaluate`` runs
        each batch of a model in a forked child) where torch was already imported before the
        fork: one torch thread. A child whose parent had run torch's OpenMP thread pool hangs
        in its first parallel operation otherwise (checked with torch 2.x). ``sys.modules``
        is the parent's at the fork, so torch found there came from the parent. The runner
        loads the model in the parent before it forks each batch (``model_calls.load_first``:
        the checkpoint is read once per process, not once per batch), so under ``evaluate``
        the children always run torch on one thread."""
        torch = sys.modules.get("torch")
        if torch is not None and os.getpid() != self._pid:
            torch.set_num_threads(1)

    def predict(self, batch: list[TaskInput]) -> list[Forecast | NoForecast]:
        """One forecast per task of ``batch``. A call of the library that fails (it raises,
        or returns the wrong number of forecasts) fails only the tasks of that call: each
        gets ``NoForecast`` with the reason, the batch's other schemas and runs are kept."""
        out: list[Forecast | NoForecast | None] = [None] * len(batch)
        self._fork_safe_threads()
        self.loaded()
        for positions in schema_groups(batch).values():
            for run in batches(positions, self.batch_size):
                self._seed()
                for index, forecast in zip(run, self._forecast_run(batch, run), strict=True):
                    out[index] = forecast
        return [forecast for forecast in out if forecast is not None]

    def _forecast_run(self, batch: list[TaskInput], run: list[int]) -> list[Forecast | NoForecast]:
        """``_forecast_group`` on the tasks at ``run``, or a ``NoForecast`` for each of them
        saying why that call failed."""
        try:
            forecasts: list[Forecast | NoForecast] = list(
                self._forecast_group([batch[i] for i in run])
            )
        except Exception as exc:  # a library's failure on these tasks fails them alone
            text = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
            return [NoForecast(f"{self.name} failed on these tasks: {text}")] * len(run)
        if len(forecasts) != len(run):
            reason = f"{self.name} returned {len(forecasts)} forecasts for {len(run)} tasks"
            return [NoForecast(reason)] * len(run)
        return forecasts


def _object_label(model: object) -> str:
    """A model object given instead of a checkpoint, as the fingerprint names it: its class,
    the hash of its configuration's JSON when it has one (its own ``config`` or that of the
    module it wraps, ``model.model``) and the hash of its weights when it is (or wraps) a torch
    module, so two objects of one configuration with other weights are told apart."""
    import hashlib
    import json

    kind = type(model)
    label = f"{kind.__module__}.{kind.__qualname__}"
    inner = getattr(model, "model", None)
    config = getattr(model, "config", None) or getattr(inner, "config", None)
    to_dict = getattr(config, "to_dict", None)
    if callable(to_dict):
        try:
            text = json.dumps(to_dict(), sort_keys=True, default=str)
            label += f"@config-sha256:{hashlib.sha256(text.encode()).hexdigest()[:16]}"
        except Exception:  # noqa: BLE001 - a configuration that does not serialise: class only
            pass
    weights = _weights_digest(model) or _weights_digest(inner)
    if weights:
        label += f"@weights-sha256:{weights[:16]}"
    return label


def _weights_digest(module: object) -> str | None:
    """SHA-256 over a torch module's ``state_dict`` (names, dtypes, shapes and bytes), or None
    when ``module`` has none."""
    import hashlib

    state_dict = getattr(module, "state_dict", None)
    if not callable(state_dict) or not hasattr(module, "parameters"):
        return None
    import torch

    digest = hashlib.sha256()
    for key, tensor in sorted(state_dict().items()):
        if not isinstance(tensor, torch.Tensor):  # a module's extra state
            continue
        array = tensor.detach().cpu().contiguous()
        digest.update(f"{key}|{array.dtype}|{tuple(array.shape)}\0".encode())
        digest.update(array.view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()
