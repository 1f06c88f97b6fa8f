"""Chronos-2 (Amazon, ``chronos-forecasting``) as a toolkit forecaster: ``--models chronos2``.

Each task goes to the library as one dict of its ``predict`` input convention
(``adapters.dict_entry``): the target's history (C,), every covariate's history (C,) under
``past_covariates`` and its future values, the what-if scenario (H,), under
``future_covariates``, keyed by the task's covariate names. Chronos-2 reads the covariates in
context (group attention over the target and its covariates); one call takes tasks of one
covariate schema and horizon only, which ``FoundationForecaster.predict`` arranges.

Quantiles: the model predicts at its own levels (``pipeline.quantiles``: 21 levels 0.01, 0.05,
0.1 … 0.95, 0.99 for ``amazon/chronos-2``); ``Chronos2Pipeline.predict`` returns them all,
(1, L, H) per task, and ``common.to_nine_levels`` takes the nine 0.1 … 0.9 from them. When the
nine are among the model's levels this is the values ``predict_quantiles`` would select, sorted
along the levels (so crossed quantiles become a monotone set); otherwise they are interpolated
linearly between the model's levels, never extrapolated.

Context: the pipeline keeps the last ``chronos_config.context_length`` steps of the target and
the past covariates (8,192 for ``amazon/chronos-2``) and drops the older ones, without a
warning; a horizon beyond ``max_output_patches × output_patch_size`` (1,024) is predicted by
the library's autoregressive unrolling, with a warning of its own.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np

from whatif_bench.evaluation.adapters import dict_entry
from whatif_bench.evaluation.forecasters import Forecast, ModelError, TaskInput
from whatif_bench.evaluation.foundation.common import (
    FoundationForecaster,
    covariate_names,
    import_library,
    to_nine_levels,
)

__all__ = ["Chronos2Forecaster"]

# the files of a saved checkpoint that decide its forecasts (hashed for the fingerprint)
_CHECKPOINT_FILES = ("config.json", "model.safetensors", "pytorch_model.bin")


class Chronos2Forecaster(FoundationForecaster):
    """Chronos-2 on the toolkit's tasks (see the module docstring for covariates, quantiles and
    long contexts).

    Parameters
    ----------
    model
        A Hugging Face id (``"amazon/chronos-2"``, downloaded to the Hugging Face cache on
        first use) or a local folder written by ``save_pretrained``, both loaded with
        ``Chronos2Pipeline.from_pretrained``; or a built ``Chronos2Pipeline`` or
        ``Chronos2Model`` (used as it is, moved to ``device`` and put in evaluation mode).
    device
        ``cpu``, ``cuda``, ``cuda:N`` or ``mps``: where the model runs.
    batch_size
        Tasks per library call. The library counts series, not tasks (a task of K covariates
        is 1 + K series), so it is given ``batch_size × (1 + K)``: each run of tasks is one
        forward pass.
    seed
        Seeds torch before each call (Chronos-2's inference draws no random numbers; the seed
        is there for the fingerprint and for the shared interface).
    name
        The model's name in the results (default ``chronos2``).

    Forecasts do not depend on which other tasks share a call (each task is its own group in
    the model's attention; ``cross_learning`` stays off), up to float32 rounding (about 1e-8
    relative, from the batched matrix products).
    """

    adapter = "chronos2"
    package = "chronos-forecasting"
    extra = "chronos"

    def __init__(
        self,
        model: Any,
        device: str = "cpu",
        batch_size: int = 64,
        seed: int = 0,
        name: str | None = None,
    ) -> None:
        if not isinstance(model, str) and not hasattr(model, "predict") and not _is_model(model):
            raise ModelError(
                "chronos2: model must be a Hugging Face id, a local folder, a Chronos2Pipeline "
                f"or a Chronos2Model, got {type(model).__name__}"
            )
        if isinstance(model, str) and not model:
            raise ModelError("chronos2: model must be a Hugging Face id or a local folder, got ''")
        super().__init__(model, device=device, batch_size=batch_size, seed=seed, name=name)
        self._checkpoint_sha256: str | None = None

    def _identity(self) -> dict:
        folder = _local_folder(self.model_id) if self._given is None else None
        if folder is None or not folder.is_dir():
            return {}
        if self._checkpoint_sha256 is None:
            self._checkpoint_sha256 = _checkpoint_digest(folder)
        return {"checkpoint_sha256": self._checkpoint_sha256}

    def _load(self) -> Any:
        chronos2 = import_library("chronos.chronos2", self.package, self.extra)
        given = self._given
        if given is None:
            pipeline = self._from_pretrained(chronos2.Chronos2Pipeline)
        elif isinstance(given, chronos2.Chronos2Model):
            pipeline = chronos2.Chronos2Pipeline(given)
        else:
            pipeline = given
        pipeline.model.to(self.device)
        pipeline.model.eval()  # a freshly built model is in training mode: dropout on
        return pipeline

    def _from_pretrained(self, pipeline_class) -> Any:
        folder = _local_folder(self.model_id)
        if folder is not None and not folder.is_dir():
            raise ModelError(f"chronos2: {self.model_id!r} is not a folder")
        try:
            return pipeline_class.from_pretrained(self.model_id)
        except Exception as exc:  # noqa: BLE001 - any loading failure, named with its cause
            raise ModelError(
                f"chronos2: cannot load {self.model_id!r} with Chronos2Pipeline.from_pretrained "
                f"({type(exc).__name__}: {exc})"
            ) from exc

    def _forecast_group(self, tasks: list[TaskInput]) -> list[Forecast]:
        pipeline = self.loaded()
        horizon = tasks[0].prediction_length
        series = 1 + len(covariate_names(tasks[0]))
        outputs = pipeline.predict(
            [dict_entry(task) for task in tasks],
            prediction_length=horizon,
            batch_size=len(tasks) * series,
        )
        levels = list(pipeline.quantiles)
        forecasts = []
        for output in outputs:
            values = np.asarray(output.detach().cpu().numpy(), dtype=np.float64)  # (1, L, H)
            forecasts.append(Forecast(quantiles=to_nine_levels(levels, values[0].T)))
        return forecasts


def _is_model(model: object) -> bool:
    """Whether ``model`` looks like a torch module (a ``Chronos2Model``), without importing
    the library."""
    return hasattr(model, "forward") and hasattr(model, "config")


def _local_folder(model: str) -> Path | None:
    """``model`` as a local folder when it names one (an existing path, or one written as a
    path: absolute, ``./``, ``../``, ``~``); None for a Hugging Face id such as
    ``amazon/chronos-2``."""
    path = Path(model).expanduser()
    if path.exists() or model.startswith(("/", "./", "../", "~", ".\\", "..\\")):
        return path
    return None


def _checkpoint_digest(folder: Path) -> str:
    """SHA-256 over the checkpoint files of ``folder`` that exist (name and bytes), so a
    changed local checkpoint gets a new fingerprint."""
    digest = hashlib.sha256()
    for name in _CHECKPOINT_FILES:
        path = folder / name
        if path.is_file():
            digest.update(name.encode() + b"\0")
            with path.open("rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
    return digest.hexdigest()
