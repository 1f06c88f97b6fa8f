"""Adapters: other libraries' models as toolkit forecasters.

- ``from_gluonts(predictor, name=...)``: any GluonTS ``Predictor`` (or a factory that builds one
  per prediction length and frequency, and, if it asks, per number and names of covariates).
  GluonTS is imported only when the model predicts.
- ``from_dict_model(predict_fn, name=..., quantile_levels=None)``: a callable taking a list of
  dicts in Chronos-2's ``predict`` input convention (one covariate schema and horizon per
  call) and returning quantiles, at the nine levels or at the model's own, or point forecasts;
  Chronos-2's own ``pipeline.predict`` is one.

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
from whatif_bench.evaluation.foundation.common import covariate_names, to_nine_levels
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


# the keywords a from_gluonts factory may take besides (prediction_length, freq)
FACTORY_KEYWORDS = ("num_feat_dynamic_real", "covariate_names")


def _factory_keywords(factory: Callable) -> tuple[str, ...]:
    """Which of ``FACTORY_KEYWORDS`` the factory takes: those it names as keyword-capable
    parameters, or all when it takes ``**kwargs``; none when its signature cannot be read."""
    try:
        parameters = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return ()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return FACTORY_KEYWORDS
    named = {
        p.name
        for p in parameters
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    }
    return tuple(keyword for keyword in FACTORY_KEYWORDS if keyword in named)


def _gluonts_key(task: TaskInput) -> tuple[int, str, int, tuple[str, ...]]:
    """What one predictor call shares: horizon H, frequency, K and the covariate names."""
    names = covariate_names(task)
    return (task.prediction_length, _freq(task), len(names), names)


class GluonTSForecaster:
    """A GluonTS ``Predictor`` as a toolkit forecaster (see ``from_gluonts``)."""

    def __init__(self, predictor, name: str) -> None:
        self.name = name
        self.predictor = predictor
        self._keywords = () if hasattr(predictor, "predict") else _factory_keywords(predictor)
        self._built: dict[tuple, Any] = {}
        if "gluonts" in sys.modules:  # (a predictor was made): import what predict needs now,
            _import_gluonts()  # once, not in every forked child process that runs a batch

    def params(self) -> dict:
        return {"predictor": _identity(self.predictor)}

    def _predictor(self, horizon: int, freq: str, k: int, names: tuple[str, ...]):
        """The predictor, or the factory's for these arguments (built once per the arguments
        it takes: (H, freq), plus K and the names when it asks for them)."""
        if hasattr(self.predictor, "predict"):
            return self.predictor
        given = {"num_feat_dynamic_real": k, "covariate_names": names}
        keywords = {keyword: given[keyword] for keyword in self._keywords}
        key = (horizon, freq, *keywords.values())
        if key not in self._built:
            self._built[key] = self.predictor(horizon, freq, **keywords)
        return self._built[key]

    def predict(self, batch: list[TaskInput]) -> list[Forecast | None]:
        common = _import_gluonts()
        out: list[Forecast | None] = [None] * len(batch)
        for (horizon, freq, k, names), positions in _groups(batch, _gluonts_key).items():
            predictor = self._predictor(horizon, freq, k, names)
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

    ``predictor`` is a Predictor, or a factory ``(prediction_length, freq, **covariates) ->
    Predictor``. The factory is called with the horizon H and the pandas frequency positionally
    and, if its signature takes them (by name, or through ``**kwargs``), the keywords
    ``num_feat_dynamic_real`` (K, the number of covariates, e.g. for a DeepAR or TFT built for
    them) and ``covariate_names`` (their names, (K,) tuple; ``covariate_1`` … when the task
    has none). An old factory ``(prediction_length, freq)`` gets only those two. One predictor
    is built, and kept, per set of arguments passed: per (H, freq, K, names) for a factory
    that asks for both keywords, per (H, freq) for an old one. A Predictor has one fixed
    prediction length; a fixed one leaves the tasks of other horizons unforecast, so they
    fail.

    The batch is split by (H, freq, K, names), one ``predictor.predict`` call each. Each task
    becomes a data entry with ``start`` (a Period of the task's frequency), the target's
    history and ``feat_dynamic_real`` (the K covariates over history and future, (K, C + H));
    the forecast's quantiles at the toolkit's nine levels are scored. GluonTS is imported when
    the model predicts."""
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
    names = covariate_names(task)
    return {
        "target": task.history_target,
        "past_covariates": dict(zip(names, task.history_covariates, strict=True)),
        "future_covariates": dict(zip(names, task.future_covariates, strict=True)),
    }


def _dict_key(task: TaskInput) -> tuple[int, tuple[str, ...]]:
    """What one call of a dict model shares: the horizon H and the covariate names."""
    return (task.prediction_length, covariate_names(task))


def _takes_prediction_length(function: Callable) -> bool:
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(
        p.name == "prediction_length" or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters
    )


def _as_forecast(
    value, horizon: int, task_id: str, levels: tuple[float, ...] | None = None
) -> Forecast:
    """A model's output for one task as a forecast.

    Accepted: a point forecast (H,) or (1, H); quantiles with the levels last, (H, Q) or
    (1, H, Q); quantiles in Chronos-2 ``predict``'s layout, (1, Q, H) (one variate, the
    model's levels along axis 1). Q is ``len(levels)`` (the model's own levels, mapped onto
    the nine with ``to_nine_levels``) or, without ``levels``, 9 (the values are taken as the
    nine ``QUANTILE_LEVELS`` as they are). When H equals Q a 3-D output fits both layouts: it
    is read as (1, Q, H) when ``levels`` are given (the ``predict`` route), else as
    (1, H, 9)."""
    array = np.asarray(value, dtype=np.float64)
    width = len(levels) if levels is not None else len(QUANTILE_LEVELS)
    if array.ndim == 3 and array.shape[0] == 1:
        levels_first = array.shape[1:] == (width, horizon)
        levels_last = array.shape[1:] == (horizon, width)
        if levels_first and (levels is not None or not levels_last):
            array = array[0].T
        elif levels_last:
            array = array[0]
    elif array.ndim == 2 and array.shape == (1, horizon):
        array = array[0]
    if array.shape == (horizon,):
        return Forecast(point=array)
    if array.shape == (horizon, width):
        if levels is not None:
            array = to_nine_levels(levels, array)
        return Forecast(quantiles=array)
    if levels is None and array.ndim in (2, 3) and horizon in array.shape[-2:]:
        hint = "; pass quantile_levels= (the model's levels) for quantiles at other levels"
    else:
        hint = ""
    raise ValueError(
        f"task {task_id or '(no id)'}: the model returned shape {array.shape}; expected "
        f"quantiles ({horizon}, {width}) or (1, {width}, {horizon}) or a point forecast "
        f"({horizon},){hint}"
    )


class DictModel:
    """A callable on Chronos-2-style dicts as a toolkit forecaster (see ``from_dict_model``)."""

    def __init__(
        self, predict_fn: Callable, name: str, quantile_levels: tuple[float, ...] | None = None
    ) -> None:
        self.name = name
        self.predict_fn = predict_fn
        self.quantile_levels = quantile_levels
        self._pass_horizon = _takes_prediction_length(predict_fn)

    def params(self) -> dict:
        params: dict[str, Any] = {"predict_fn": _identity(self.predict_fn)}
        if self.quantile_levels is not None:
            params["quantile_levels"] = list(self.quantile_levels)
        return params

    def predict(self, batch: list[TaskInput]) -> list[Forecast]:
        out: list[Forecast | None] = [None] * len(batch)
        for (horizon, _), positions in _groups(batch, _dict_key).items():
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
                out[index] = _as_forecast(
                    value, task.prediction_length, task.task_id, self.quantile_levels
                )
        return cast(list[Forecast], out)  # the groups cover every position


def _levels(quantile_levels: Sequence[float] | None) -> tuple[float, ...] | None:
    """``quantile_levels`` checked: strictly increasing numbers in (0, 1) (a ``ModelError``
    otherwise)."""
    if quantile_levels is None:
        return None
    try:
        levels = tuple(float(level) for level in quantile_levels)
    except (TypeError, ValueError):
        levels = ()
    if not (
        levels
        and all(0.0 < level < 1.0 for level in levels)
        and all(a < b for a, b in zip(levels, levels[1:], strict=False))
    ):
        raise ModelError(
            "from_dict_model: quantile_levels must be strictly increasing numbers in (0, 1), "
            f"got {quantile_levels!r}"
        )
    return levels


def from_dict_model(
    predict_fn: Callable, name: str, quantile_levels: Sequence[float] | None = None
) -> DictModel:
    """Wrap ``predict_fn(inputs) -> outputs`` as a toolkit forecaster named ``name``.

    ``inputs`` is a list of dicts, one per task, in Chronos-2's ``predict`` convention:
    ``{"target": (C,), "past_covariates": {name: (C,)}, "future_covariates": {name: (H,)}}``
    (covariates named as in the task, ``covariate_1`` … when it has no names). The batch is
    split by horizon and covariate names, so each call gets tasks of one schema and one horizon
    (what Chronos-2 requires); if ``predict_fn`` takes a ``prediction_length`` keyword (or
    ``**kwargs``), it is passed the call's horizon H.

    Each output (numpy arrays or CPU torch tensors) is one of

    - a point forecast (H,) or (1, H);
    - quantiles at the toolkit's nine ``QUANTILE_LEVELS`` (H, 9) or (1, H, 9), or in
      Chronos-2 ``predict``'s layout (1, 9, H);
    - with ``quantile_levels`` (the model's Q levels, strictly increasing in (0, 1)): quantiles
      at those levels, (1, Q, H) as Chronos-2's ``predict`` returns them (one variate, the
      levels along axis 1) or (H, Q) / (1, H, Q); they are mapped onto the nine levels with
      ``foundation.common.to_nine_levels`` (exact at shared levels, linear in between, the
      nearest end outside). When H equals Q, a 3-D output is read as (1, Q, H).

    Without ``quantile_levels`` an output with other than nine levels is an error that says to
    pass them. Chronos-2 itself::

        from_dict_model(pipeline.predict, name="chronos2", quantile_levels=pipeline.quantiles)
    """
    if not isinstance(name, str) or not name:
        raise ModelError(f"from_dict_model needs a name (a non-empty string), got {name!r}")
    if not callable(predict_fn):
        raise ModelError(f"from_dict_model needs a callable, got {type(predict_fn).__name__}")
    return DictModel(predict_fn, name, _levels(quantile_levels))
