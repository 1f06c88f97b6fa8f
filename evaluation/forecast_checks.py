"""Checking a model's forecasts against their tasks: batch length, shape, numbers, finiteness,
``imputed`` and ``seconds``; each failure is the reason, one line, that fails the task.

A check returns what it checked (arrays, flags) or a ``str``: the reason the forecast cannot be
scored, written into the ``failed`` column of the task (or history). Nothing here raises for a
model's mistake. Arrays are float64; ``H`` is a task's horizon (prediction length) and ``Q`` the
number of ``QUANTILE_LEVELS``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np

from whatif_bench.evaluation.forecasters import NoForecast, TaskInput
from whatif_bench.evaluation.metrics import QUANTILE_LEVELS, score


def one_line(text: object, limit: int = 300) -> str:
    """``text`` on one line (runs of white space made one space), cut to ``limit`` characters
    with "..." at the end; "no message" for an empty text."""
    text = " ".join(str(text).split()) or "no message"
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass
class Predicted:
    """A model's forecasts of a batch and the wall time of its predict call (s), measured in
    the process that ran it (``predict``)."""

    forecasts: list
    seconds: float

    @property
    def share(self) -> float:
        """The wall time's share of one task (s): the time of a task whose forecast does not
        give its own ``seconds``."""
        return self.seconds / max(len(self.forecasts), 1)


def predict(forecaster: Any, inputs: list[TaskInput]) -> Predicted | str:
    """The model's forecasts of ``inputs`` (one per input), or the reason they are unusable
    as a whole (in this process): ``predict`` raised or called ``exit()``, returned None, not
    a list, or a list of the wrong length.

    The wall time (``time.perf_counter``) covers ``predict`` and the reading of what it
    returns (a generator does its work then), nothing else: in a model's child process it is
    measured there, so the fork and the sending back are not charged to the model."""
    started = time.perf_counter()
    try:
        forecasts = forecaster.predict(inputs)
    except Exception as exc:  # a model's own bug fails its tasks, not the evaluation
        return one_line(f"predict raised {type(exc).__name__}: {exc}")
    except SystemExit as exc:  # exit() in a model ends its tasks, not the run
        return one_line(f"predict called exit({exc.code!r})")
    if forecasts is None:
        return "predict returned None, not a list of forecasts"
    try:
        forecasts = list(forecasts)
    except TypeError:
        return f"predict returned a {type(forecasts).__name__}, not a list of forecasts"
    except Exception as exc:  # a generator that raises while it is read
        return one_line(f"reading predict's forecasts raised {type(exc).__name__}: {exc}")
    seconds = time.perf_counter() - started
    if len(forecasts) != len(inputs):
        return f"predict returned {len(forecasts)} forecasts for {len(inputs)} tasks"
    return Predicted(forecasts, seconds)


class Unusable:
    """A forecast that cannot be sent back from a model's process, with the reason."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


class NotNumeric:
    """Stands for a point or quantile forecast that is not numeric (``forecast_arrays``
    says so, as for the forecast itself)."""


def forecast_extras(forecast: Any) -> tuple[bool, float | None] | str:
    """A forecast's ``imputed`` flag and its own ``seconds`` (None: not given), as
    ``Forecast`` defines them (absent: False and None), or why they are unusable: ``imputed``
    must be a bool, ``seconds`` None or a finite number >= 0."""
    imputed = getattr(forecast, "imputed", False)
    seconds = getattr(forecast, "seconds", None)
    if not isinstance(imputed, bool | np.bool_):
        return one_line(f"the forecast's imputed must be True or False, got {imputed!r}", 160)
    if seconds is not None and (
        isinstance(seconds, bool | np.bool_)
        or not isinstance(seconds, int | float | np.integer | np.floating)
        or not math.isfinite(seconds)
        or seconds < 0
    ):
        return one_line(
            f"the forecast's seconds must be a finite number >= 0 (or None), got {seconds!r}", 160
        )
    return bool(imputed), None if seconds is None else float(seconds)


def portable(forecast: Any) -> SimpleNamespace | Unusable | None:
    """A forecast as plain arrays (and its ``imputed`` and ``seconds``, checked by
    ``forecast_extras``) that can be pickled back to the evaluation (a model's own classes
    cannot: its module is not importable by name), or why it is unusable."""
    if forecast is None:
        return None
    if isinstance(forecast, NoForecast):
        return Unusable(one_line(f"the model gave no forecast: {forecast.reason}"))
    try:
        if not hasattr(forecast, "point") and not hasattr(forecast, "quantiles"):
            return Unusable(f"forecast is a {type(forecast).__name__}, not a Forecast")
        fields: dict[str, Any] = {}
        for name in ("point", "quantiles"):
            value = getattr(forecast, name, None)
            if value is not None:
                try:
                    value = np.array(value, dtype=np.float64)
                except (TypeError, ValueError):
                    value = NotNumeric()
            fields[name] = value
        extras = forecast_extras(forecast)
    except Exception as exc:  # a property of the model's own class that raises
        return Unusable(one_line(f"reading the forecast raised {type(exc).__name__}: {exc}"))
    if isinstance(extras, str):
        return Unusable(extras)
    fields["imputed"], fields["seconds"] = extras
    return SimpleNamespace(**fields)


def forecast_arrays(forecast: Any, horizon: int) -> dict[str, np.ndarray] | str:
    """The point (H,) and/or quantile (H, Q) arrays of one forecast, float64 and finite, or
    why not: None, unusable, no forecast, not a forecast, not numeric, of the wrong shape,
    with NaN or inf, or with neither."""
    if forecast is None:
        return "forecast is None"
    if isinstance(forecast, Unusable):
        return forecast.reason
    if isinstance(forecast, NoForecast):
        return one_line(f"the model gave no forecast: {forecast.reason}")
    if not hasattr(forecast, "point") and not hasattr(forecast, "quantiles"):
        return f"forecast is a {type(forecast).__name__}, not a Forecast"
    arrays = {}
    for name, shape in (("point", (horizon,)), ("quantiles", (horizon, len(QUANTILE_LEVELS)))):
        value = getattr(forecast, name, None)
        if value is None:
            continue
        try:
            array = np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError):
            return f"{name} forecast is not numeric"
        if array.shape != shape:
            return f"{name} forecast has shape {array.shape}, expected {shape}"
        if not np.all(np.isfinite(array)):
            return f"{name} forecast has NaN or infinite values"
        arrays[name] = array
    if not arrays:
        return "forecast has neither a point forecast nor quantiles"
    return arrays


def score_forecast(truth: np.ndarray, forecast: Any) -> dict[str, float] | str:
    """wql and wape of one forecast against ``truth`` (H,) float64, or the reason it cannot be
    scored (``forecast_arrays``, or a score that is not finite)."""
    arrays = forecast_arrays(forecast, truth.shape[0])
    if isinstance(arrays, str):
        return arrays
    metrics = score(truth, arrays.get("point"), arrays.get("quantiles"))
    if not all(np.isfinite(v) for v in metrics.values()):
        return f"score is not finite ({metrics})"
    return metrics


def central(forecast: Any, horizon: int) -> np.ndarray | str:
    """A forecast's point forecast, else its median (H,) float64, as WAPE scores it; or the
    reason it is unusable (``forecast_arrays``)."""
    arrays = forecast_arrays(forecast, horizon)
    if isinstance(arrays, str):
        return arrays
    if "point" in arrays:
        return arrays["point"]
    return arrays["quantiles"][:, QUANTILE_LEVELS.index(0.5)]
