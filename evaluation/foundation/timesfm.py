"""Google's TimesFM 2.5 (``timesfm``, the 200M PyTorch model) as a toolkit forecaster.

Covariates go through the library's ``forecast_with_covariates``: an in-context linear
regression of the target on the dynamic numerical covariates (the library's "XReg", run in
jax), with TimesFM forecasting what the regression leaves (mode ``"xreg + timesfm"``, the
library's default) or the regression fitted to what TimesFM leaves (``"timesfm + xreg"``).
The library fits one regression over all the series of a call, so every task with covariates
is its own call: its covariate effect is fitted on its own history only, and its forecast
does not depend on which tasks share its batch. Tasks without covariates are forecast
together, ``batch_size`` at a time.

The model's quantile head gives the levels 0.1 … 0.9 (its output column 0 is the mean,
columns 1 … 9 the quantiles), which are the toolkit's nine; they pass through
``to_nine_levels`` (sorted, taken as they are). The point forecast is the library's: the
0.5 quantile.

Limits (TimesFM 2.5): context + horizon, each rounded up to the model's patches (32 steps in,
128 out), at most 16,384 steps. A longer history is cut to its most recent steps (the
regression still sees all of it); a horizon above 128 steps is decoded autoregressively by
the library, 128 steps at a time; a horizon whose rounded length leaves no room for one input
patch is a ``ModelError``. Horizons up to 1,024 steps take their quantiles from the
continuous quantile head, longer ones from the per-patch quantiles of the decoder.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from typing import Any

import numpy as np

from whatif_bench.evaluation.forecasters import Forecast, ModelError, TaskInput
from whatif_bench.evaluation.foundation.common import (
    FoundationForecaster,
    check_whole_number,
    covariate_names,
    import_library,
    to_nine_levels,
)

__all__ = ["TimesFMForecaster", "XREG_MODES"]

XREG_MODES = ("xreg + timesfm", "timesfm + xreg")
QUANTILE_HEAD_STEPS = 1024  # the continuous quantile head's reach (the model's own limit)


class TimesFMForecaster(FoundationForecaster):
    """TimesFM 2.5 through ``timesfm``: point (H,) and nine quantiles (H, 9) per task.

    Parameters
    ----------
    model
        A Hugging Face id (``google/timesfm-2.5-200m-pytorch``) or a local folder holding
        ``model.safetensors``, loaded by ``TimesFM_2p5_200M_torch.from_pretrained`` without
        ``torch.compile``; or a built ``timesfm`` TimesFM 2.5 model object.
    device, batch_size, seed, name
        As ``FoundationForecaster``; ``batch_size`` bounds the tasks without covariates
        forecast in one call (tasks with covariates are one call each, see the module).
    max_context
        At most this many history steps reach the model (rounded up to its 32-step patches;
        the model's own limit, 16,384 minus the rounded horizon, applies too). None: the
        model's limit.
    xreg_mode
        ``"xreg + timesfm"`` (regression first, TimesFM on its residuals) or
        ``"timesfm + xreg"`` (TimesFM first, regression on its residuals).
    ridge
        The ridge penalty of the covariate regression (on standardised covariates; 0 is
        ordinary least squares).
    """

    adapter = "timesfm"
    package = "timesfm"
    extra = "timesfm"

    def __init__(
        self,
        model: Any,
        device: str = "cpu",
        batch_size: int = 64,
        seed: int = 0,
        name: str | None = None,
        max_context: int | None = None,
        xreg_mode: str = "xreg + timesfm",
        ridge: float = 0.0,
    ) -> None:
        super().__init__(model, device=device, batch_size=batch_size, seed=seed, name=name)
        check_whole_number("timesfm", "max_context", max_context, optional=True)
        if xreg_mode not in XREG_MODES:
            raise ModelError(f"timesfm: xreg_mode must be one of {XREG_MODES}, got {xreg_mode!r}")
        if (
            isinstance(ridge, bool)
            or not isinstance(ridge, (int, float))
            or not math.isfinite(ridge)
            or ridge < 0
        ):
            raise ModelError(f"timesfm: ridge must be a finite number >= 0, got {ridge!r}")
        self.max_context, self.xreg_mode, self.ridge = max_context, xreg_mode, float(ridge)

    def _identity(self) -> dict:
        identity: dict[str, Any] = {
            "family": "TimesFM 2.5",
            "max_context": self.max_context,
            "xreg_mode": self.xreg_mode,
            "ridge": self.ridge,
        }
        definition = getattr(getattr(self._given, "model", None), "config", None)
        if dataclasses.is_dataclass(definition) and not isinstance(definition, type):
            text = json.dumps(dataclasses.asdict(definition), sort_keys=True, default=str)
            identity["definition_sha256"] = hashlib.sha256(text.encode()).hexdigest()[:16]
        return identity

    def _load(self) -> Any:
        torch_models = import_library(
            "timesfm.timesfm_2p5.timesfm_2p5_torch", "timesfm (with torch)", self.extra
        )
        import_library("timesfm.utils.xreg_lib", "jax and scikit-learn", self.extra)
        wrapper = torch_models.TimesFM_2p5_200M_torch
        import torch

        if self._given is not None:
            if not isinstance(self._given, wrapper):
                raise ModelError(
                    f"timesfm: a model object must be a timesfm TimesFM 2.5 torch model, got "
                    f"{type(self._given).__name__}"
                )
            built = self._given
        else:
            try:
                built = wrapper.from_pretrained(self.model_id, torch_compile=False)
            except Exception as exc:  # noqa: BLE001 - any loading failure is the model's error
                raise ModelError(
                    f"timesfm: cannot load {self.model_id!r}: {type(exc).__name__}: {exc}"
                ) from None
        try:
            device = torch.device(self.device)
            built.model.to(device)
        except (RuntimeError, AssertionError) as exc:  # torch's "not compiled with CUDA"
            raise ModelError(f"timesfm: cannot use device {self.device!r}: {exc}") from None
        built.model.device, built.model.device_count = device, 1
        built.model.eval()
        return built

    def _forecast_group(self, tasks: list[TaskInput]) -> list[Forecast]:
        built = self.loaded()
        module = built.model
        horizon = tasks[0].prediction_length
        max_horizon = math.ceil(horizon / module.o) * module.o
        room = module.config.context_limit - max_horizon
        if room < module.p:
            raise ModelError(
                f"timesfm: a horizon of {horizon} steps is beyond TimesFM 2.5 (context + "
                f"horizon at most {module.config.context_limit} steps)"
            )
        out: list[Forecast | None] = [None] * len(tasks)
        if tasks[0].history_covariates.shape[0]:
            for index, task in enumerate(tasks):
                self._compile(built, [task], max_horizon, room, backcast=True)
                out[index] = self._with_covariates(built, task)
        else:
            by_context: dict[int, list[int]] = {}
            for index, task in enumerate(tasks):
                by_context.setdefault(self._context(task, module.p, room), []).append(index)
            for positions in by_context.values():
                chosen = [tasks[i] for i in positions]
                self._compile(built, chosen, max_horizon, room, backcast=False)
                _, quantiles = built.forecast(horizon=horizon, inputs=[_history(t) for t in chosen])
                for index, values in zip(positions, quantiles, strict=True):
                    out[index] = self._forecast(module, values)
        return [forecast for forecast in out if forecast is not None]

    def _context(self, task: TaskInput, patch: int, room: int) -> int:
        """The context the model is compiled for on ``task``: its history, rounded up to
        whole patches, within ``max_context`` and the model's ``room``."""
        steps = (
            task.context_length
            if self.max_context is None
            else min(task.context_length, self.max_context)
        )
        return min(math.ceil(max(steps, 1) / patch) * patch, room - room % patch)

    def _compile(
        self, built: Any, tasks: list[TaskInput], max_horizon: int, room: int, backcast: bool
    ) -> None:
        """Set the library's forecasting flags for one call (its ``compile`` only records
        them; nothing is traced)."""
        timesfm = import_library("timesfm", self.package, self.extra)
        module = built.model
        built.compile(
            timesfm.ForecastConfig(
                max_context=self._context(tasks[0], module.p, room),
                max_horizon=max_horizon,
                normalize_inputs=True,
                per_core_batch_size=len(tasks),
                use_continuous_quantile_head=max_horizon <= QUANTILE_HEAD_STEPS,
                force_flip_invariance=True,
                infer_is_positive=True,
                fix_quantile_crossing=True,
                return_backcast=backcast,
            )
        )

    def _with_covariates(self, built: Any, task: TaskInput) -> Forecast:
        names = covariate_names(task)
        series = np.concatenate([task.history_covariates, task.future_covariates], axis=1).astype(
            np.float64
        )
        _, quantiles = built.forecast_with_covariates(
            inputs=[_history(task)],
            dynamic_numerical_covariates={
                name: [row] for name, row in zip(names, series, strict=True)
            },
            xreg_mode=self.xreg_mode,
            ridge=self.ridge,
            force_on_cpu=True,
        )
        return self._forecast(built.model, np.asarray(quantiles[0]))

    def _forecast(self, module: Any, values: np.ndarray) -> Forecast:
        """A forecast from the model's output for one task, (H, 10): the mean, then the
        quantiles at the model's levels."""
        levels = list(module.config.quantiles)
        quantiles = to_nine_levels(levels, np.asarray(values, dtype=np.float64)[:, 1:])
        median = values[:, 1 + levels.index(0.5)]
        return Forecast(point=np.asarray(median, dtype=np.float64), quantiles=quantiles)


def _history(task: TaskInput) -> np.ndarray:
    """The task's history as the library takes it, (C,) float64."""
    return np.asarray(task.history_target, dtype=np.float64)
