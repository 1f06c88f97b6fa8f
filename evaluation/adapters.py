"""Adapters: other libraries' models as toolkit forecasters.

- ``from_gluonts(predictor, name=...)``: any GluonTS ``Predictor`` (or a factory that builds one
  per prediction length and frequency). GluonTS is imported only when the model predicts.
- ``from_dict_model(predict_fn, name=...)``: a callable taking a list of dicts in Chronos-2's
  ``predict`` input convention and returning quantiles or point forecasts.

Both return an object with a ``name`` and a batch ``predict``, ready for ``evaluate``::

    from gluonts.model.seasonal_naive import SeasonalNaivePredictor
    from whatif_bench.evaluation import evaluate
    from whatif_bench.evaluation.adapters import from_gluonts

    model = from_gluonts(
        lambda h, freq: SeasonalNaivePredictor(prediction_length=h, season_length=1),
        name="seasonal-naive",
    )
    evaluate("whatif-corpus.h5", ["naive", model], "results/")
"""

from __future__ import annotations

import hashlib
import inspect
import sys
from collections.abc import Callable, Sequence
from typing import Any, cast

import numpy as np
import pandas as pd

from whatif_bench.evaluation.forecasters import (
    Forecast,
    ModelError,
    TaskInput,
    _json_safe,
    frequency_alias,
)
from whatif_bench.evaluation.metrics import QUANTILE_LEVELS

__all__ = ["DictModel", "GluonTSForecaster", "from_dict_model", "from_gluonts"]


def _import_gluonts():
    try:
        import gluonts.dataset.common as common
    except ImportError as exc:
        raise ImportError(
            "install GluonTS to use from_gluonts: pip install 'whatif-bench[export]' (GluonTS "
            "0.17 needs pandas < 3)"
        ) from exc
    return common


def _identity(function: Callable) -> dict[str, Any]:
    """What identifies a wrapped callable in the model's fingerprint: its qualified name, the
    SHA-256 of its source file (a changed model is recomputed, not read from old chunks) and
    its validated GluonTS arguments, if it has them."""
    target = function if inspect.isroutine(function) else type(function)
    source = None
    try:
        path = inspect.getsourcefile(target)
        if path:
            with open(path, "rb") as handle:
                source = hashlib.sha256(handle.read()).hexdigest()
    except (OSError, TypeError):
        pass
    name = f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', '?')}"
    return {
        "callable": name,
        "source_sha256": source,
        "init_args": _json_safe(getattr(function, "__init_args__", None)),
    }


def _groups(batch: Sequence[TaskInput], key: Callable[[TaskInput], Any]) -> dict[Any, list[int]]:
    """Positions of the batch's tasks by ``key``, in first-seen order."""
    groups: dict[Any, list[int]] = {}
    for index, task in enumerate(batch):
        groups.setdefault(key(task), []).append(index)
    return groups


def _freq(task: TaskInput) -> str:
    if task.freq:
        return task.freq
    if task.interval_s:
        return frequency_alias(task.interval_s)
    raise ValueError(
        f"task {task.task_id or '(no id)'}: a GluonTS model needs the task's freq and start; "
        "evaluate fills them (build TaskInput with TaskInput.from_task)"
    )


def _period(task: TaskInput, freq: str) -> pd.Period:
    if task.start is None:
        raise ValueError(
            f"task {task.task_id or '(no id)'}: a GluonTS model needs the task's start; "
            "evaluate fills it (build TaskInput with TaskInput.from_task)"
        )
    start = pd.Timestamp(task.start)
    if start.tzinfo is not None:
        start = start.tz_convert("UTC").tz_localize(None)
    return pd.Period(start, freq=freq)


def gluonts_entry(task: TaskInput) -> dict[str, Any]:
    """One task as a GluonTS data entry: what a model may see, as the gluonts export writes it
    up to the split (target history only; covariates over history and future)."""
    freq = _freq(task)
    entry = {
        "start": _period(task, freq),
        "target": np.asarray(task.history_target, dtype=np.float32),
        "item_id": task.task_id,
    }
    if task.history_covariates.shape[0]:
        entry["feat_dynamic_real"] = np.concatenate(
            [task.history_covariates, task.future_covariates], axis=1
        ).astype(np.float32)
    return entry


def quantiles_of(forecast) -> np.ndarray:
    """A GluonTS forecast's quantiles at ``QUANTILE_LEVELS``, (H, 9) float64."""
    return np.stack(
        [np.asarray(forecast.quantile(q), dtype=np.float64) for q in QUANTILE_LEVELS], axis=1
    )


class GluonTSForecaster:
    """A GluonTS ``Predictor`` as a toolkit forecaster (see ``from_gluonts``)."""

    def __init__(self, predictor, name: str) -> None:
        self.name = name
        self.predictor = predictor
        self._built: dict[tuple[int, str], Any] = {}
        if "gluonts" in sys.modules:  # (a predictor was made): import what predict needs now,
            _import_gluonts()  # once, not in every forked child process that runs a batch

    def params(self) -> dict:
        return {"predictor": _identity(self.predictor)}

    def _predictor(self, horizon: int, freq: str):
        if hasattr(self.predictor, "predict"):
            return self.predictor
        key = (horizon, freq)
        if key not in self._built:
            self._built[key] = self.predictor(horizon, freq)
        return self._built[key]

    def predict(self, batch: list[TaskInput]) -> list[Forecast | None]:
        common = _import_gluonts()
        out: list[Forecast | None] = [None] * len(batch)
        for (horizon, freq), positions in _groups(
            batch, lambda t: (t.prediction_length, _freq(t))
        ).items():
            predictor = self._predictor(horizon, freq)
            fixed = getattr(predictor, "prediction_length", horizon)
            if fixed != horizon:
                continue  # left None: that task fails, the others are scored
            entries = [gluonts_entry(batch[i]) for i in positions]
            dataset = common.ListDataset(entries, freq=freq)
            forecasts = list(predictor.predict(dataset))
            if len(forecasts) != len(positions):
                raise ValueError(
                    f"the GluonTS predictor returned {len(forecasts)} forecasts for "
                    f"{len(positions)} series"
                )
            for index, forecast in zip(positions, forecasts, strict=True):
                out[index] = Forecast(quantiles=quantiles_of(forecast))
        return out


def from_gluonts(predictor, name: str) -> GluonTSForecaster:
    """Wrap a GluonTS ``Predictor`` as a toolkit forecaster named ``name``.

    ``predictor`` is a Predictor, or a factory ``(prediction_length, freq) -> Predictor``
    called once per horizon and frequency met (a Predictor has one fixed prediction length; a
    fixed one leaves the tasks of other horizons unforecast, so they fail). Each task becomes a
    data entry with ``start`` (a Period of the task's frequency), the target's history and
    ``feat_dynamic_real`` (the K covariates over history and future); the forecast's quantiles
    at the toolkit's nine levels are scored. GluonTS is imported when the model predicts."""
    if not isinstance(name, str) or not name:
        raise ModelError(f"from_gluonts needs a name (a non-empty string), got {name!r}")
    if not hasattr(predictor, "predict") and not callable(predictor):
        raise ModelError(
            f"from_gluonts needs a GluonTS Predictor or a factory (prediction_length, freq) -> "
            f"Predictor, got {type(predictor).__name__}"
        )
    return GluonTSForecaster(predictor, name)


def dict_entry(task: TaskInput) -> dict[str, Any]:
    """One task in Chronos-2's ``predict`` input convention: ``target`` (C,),
    ``past_covariates`` {name: (C,)} and ``future_covariates`` {name: (H,)}; covariates are
    named as in the task (``covariate_1``, ... when the task carries no names)."""
    k = task.history_covariates.shape[0]
    names = list(task.covariate_names) or [f"covariate_{i}" for i in range(1, k + 1)]
    return {
        "target": task.history_target,
        "past_covariates": dict(zip(names, task.history_covariates, strict=True)),
        "future_covariates": dict(zip(names, task.future_covariates, strict=True)),
    }


def _takes_prediction_length(function: Callable) -> bool:
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(
        p.name == "prediction_length" or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters
    )


def _as_forecast(value, horizon: int, task_id: str) -> Forecast:
    """A model's output for one task: quantiles (H, 9) or a point forecast (H,); a leading
    axis of one (one variate, as Chronos-2 returns) is dropped."""
    array = np.asarray(value, dtype=np.float64)
    if array.ndim >= 2 and array.shape[0] == 1 and array.shape[1:] in ((horizon,), (horizon, 9)):
        array = array[0]
    if array.shape == (horizon, len(QUANTILE_LEVELS)):
        return Forecast(quantiles=array)
    if array.shape == (horizon,):
        return Forecast(point=array)
    raise ValueError(
        f"task {task_id or '(no id)'}: the model returned shape {array.shape}; expected "
        f"quantiles ({horizon}, {len(QUANTILE_LEVELS)}) or a point forecast ({horizon},)"
    )


class DictModel:
    """A callable on Chronos-2-style dicts as a toolkit forecaster (see ``from_dict_model``)."""

    def __init__(self, predict_fn: Callable, name: str) -> None:
        self.name = name
        self.predict_fn = predict_fn
        self._pass_horizon = _takes_prediction_length(predict_fn)

    def params(self) -> dict:
        return {"predict_fn": _identity(self.predict_fn)}

    def predict(self, batch: list[TaskInput]) -> list[Forecast]:
        out: list[Forecast | None] = [None] * len(batch)
        groups = (
            _groups(batch, lambda t: t.prediction_length)
            if self._pass_horizon
            else {None: list(range(len(batch)))}
        )
        for horizon, positions in groups.items():
            inputs = [dict_entry(batch[i]) for i in positions]
            if self._pass_horizon:
                results = self.predict_fn(inputs, prediction_length=horizon)
            else:
                results = self.predict_fn(inputs)
            results = list(results)
            if len(results) != len(positions):
                raise ValueError(
                    f"the model returned {len(results)} forecasts for {len(positions)} tasks"
                )
            for index, value in zip(positions, results, strict=True):
                task = batch[index]
                out[index] = _as_forecast(value, task.prediction_length, task.task_id)
        return cast(list[Forecast], out)  # the groups cover every position


def from_dict_model(predict_fn: Callable, name: str) -> DictModel:
    """Wrap ``predict_fn(inputs) -> outputs`` as a toolkit forecaster named ``name``.

    ``inputs`` is a list of dicts, one per task, in Chronos-2's ``predict`` convention:
    ``{"target": (C,), "past_covariates": {name: (C,)}, "future_covariates": {name: (H,)}}``.
    Each output is quantiles (H, 9) at ``QUANTILE_LEVELS`` or a point forecast (H,) (a leading
    axis of one is dropped; torch tensors on the CPU are accepted). If ``predict_fn`` takes a
    ``prediction_length`` keyword, it is called once per horizon in the batch with it."""
    if not isinstance(name, str) or not name:
        raise ModelError(f"from_dict_model needs a name (a non-empty string), got {name!r}")
    if not callable(predict_fn):
        raise ModelError(f"from_dict_model needs a callable, got {type(predict_fn).__name__}")
    return DictModel(predict_fn, name)
