"""The forecaster protocol and the baseline forecasters (docs/METHOD.md, section 9).

A forecaster receives a batch of ``TaskInput`` (numpy arrays only) and returns one
``Forecast`` per task: a point forecast (H,), or quantiles (H, 9) at the levels 0.1 … 0.9.
To score your own model, implement ``predict``::

    class MyModel:
        name = "my-model"
        def predict(self, batch: list[TaskInput]) -> list[Forecast]:
            return [Forecast(point=np.full(t.prediction_length, t.history_target.mean()))
                    for t in batch]
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from whatif_bench._version import __version__
from whatif_bench.errors import WhatIfError
from whatif_bench.evaluation.metrics import QUANTILE_LEVELS

# What a model may see, defined with the corpus's Task (generator/task.py); importable from here
# too, as the forecaster interface has always named it.
from whatif_bench.generator.task import TaskInput as TaskInput
from whatif_bench.generator.task import frequency_alias as frequency_alias
from whatif_bench.generator.task import utc_naive as utc_naive


class ModelError(WhatIfError, ValueError):
    """A model cannot be used: unknown baseline name, bad name, no ``predict``."""


@dataclass(frozen=True)
class Forecast:
    """A point forecast (H,) and/or quantiles (H, 9) at ``QUANTILE_LEVELS``."""

    point: np.ndarray | None = None
    quantiles: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.point is None and self.quantiles is None:
            raise ValueError("a forecast needs a point forecast or quantiles")
        for name in ("point", "quantiles"):
            value = getattr(self, name)
            if value is not None and not np.all(np.isfinite(value)):
                raise ValueError(f"the {name} forecast has non-finite values")
        if self.quantiles is not None and np.asarray(self.quantiles).shape[-1] != len(
            QUANTILE_LEVELS
        ):
            raise ValueError(
                f"quantiles must have {len(QUANTILE_LEVELS)} columns (levels {QUANTILE_LEVELS})"
            )


class Forecaster(Protocol):
    """Anything with a ``name`` and a batch ``predict``.

    ``name`` names the model's folder of results, so it must be a safe file name (letters,
    digits and ``. _ + - = @``). An optional ``params()`` returning a JSON-able dict replaces
    the instance's attributes in the model's fingerprint (see ``fingerprint``).
    """

    name: str

    def predict(self, batch: list[TaskInput]) -> list[Forecast]: ...


class Naive:
    """Repeats the last observed value; ignores covariates."""

    name = "naive"

    def predict(self, batch: list[TaskInput]) -> list[Forecast]:
        return [
            Forecast(point=np.full(t.prediction_length, float(t.history_target[-1]))) for t in batch
        ]


def _standardise(history: np.ndarray, future: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Covariates (K, T) scaled by their history mean and standard deviation (rows: time)."""
    mean = history.mean(axis=1, keepdims=True)
    std = history.std(axis=1, keepdims=True)
    std[std == 0] = 1.0
    return ((history - mean) / std).T, ((future - mean) / std).T


def _ridge_fit_predict(x: np.ndarray, y: np.ndarray, x_new: np.ndarray, alpha: float) -> np.ndarray:
    """Ridge regression with an unpenalised intercept (rows: time; float64)."""
    x_mean, y_mean = x.mean(axis=0), y.mean()
    xc, yc = x - x_mean, y - y_mean
    gram = xc.T @ xc + alpha * np.eye(x.shape[1])
    coef = np.linalg.solve(gram, xc.T @ yc)
    return y_mean + (x_new - x_mean) @ coef


LSTSQ_CUTOFF = 1e-6  # relative singular-value cutoff of `linear` (scikit-learn's default tol)


def _least_squares_fit_predict(x: np.ndarray, y: np.ndarray, x_new: np.ndarray) -> np.ndarray:
    """Ordinary least squares with an intercept, at the precision of the covariates as given.

    ``x`` (T, K) and ``x_new`` (H, K) are used in their own float dtype (float32 for corpus
    tasks), ``y`` (T,) is cast to it. The data are centred and solved by SVD (LAPACK gelsd)
    with singular values below ``LSTSQ_CUTOFF`` times the largest treated as zero, as
    scikit-learn's ``LinearRegression`` does (its ``tol``). So collinear or nearly collinear
    covariates get a minimum-norm fit, not huge opposite coefficients fitted to noise that
    explode once the covariates move apart in the future. Returns (H,) float64.
    """
    import scipy.linalg

    dtype = x.dtype if x.dtype in (np.float32, np.float64) else np.dtype(np.float64)
    x, x_new, y = x.astype(dtype, copy=False), x_new.astype(dtype, copy=False), y.astype(dtype)
    x_mean, y_mean = x.mean(axis=0), y.mean()
    coef, *_ = scipy.linalg.lstsq(x - x_mean, y - y_mean, cond=LSTSQ_CUTOFF)
    intercept = y_mean - x_mean @ coef
    return (x_new @ coef + intercept).astype(np.float64)


class LinearRegression:
    """Ordinary least squares of the target on the covariates at the same step.

    Equal to scikit-learn's ``LinearRegression`` (fitted on the raw covariates as stored); see
    ``_least_squares_fit_predict`` for how rank-deficient histories are handled.
    """

    name = "linear"

    def predict(self, batch: list[TaskInput]) -> list[Forecast]:
        return [
            Forecast(
                point=_least_squares_fit_predict(
                    t.history_covariates.T, t.history_target, t.future_covariates.T
                )
            )
            for t in batch
        ]


class RidgeRegression:
    """Ridge regression, strength 10, covariates standardised on the history."""

    name = "ridge"
    alpha = 10.0

    def predict(self, batch: list[TaskInput]) -> list[Forecast]:
        out = []
        for t in batch:
            x, x_new = _standardise(
                t.history_covariates.astype(np.float64), t.future_covariates.astype(np.float64)
            )
            y = t.history_target.astype(np.float64)
            out.append(Forecast(point=_ridge_fit_predict(x, y, x_new, self.alpha)))
        return out


XGBOOST_PARAMS = {
    "objective": "reg:squarederror",
    "max_depth": 6,
    "eta": 0.05,
    "subsample": 0.9,
    "colsample_bytree": 0.9,
    "tree_method": "hist",
}
XGBOOST_TREES = 150


def _xgboost_fit_predict(
    x: np.ndarray, y: np.ndarray, x_new: np.ndarray, seed: int, threads: int
) -> np.ndarray:
    """Fit 150 boosted trees on (x, y) with xgboost's own API and predict x_new."""
    try:
        import xgboost
    except ImportError as exc:
        raise ImportError(
            "install xgboost (pip install xgboost-cpu) to use the xgboost baselines"
        ) from exc
    params = {**XGBOOST_PARAMS, "seed": seed, "nthread": threads}
    booster = xgboost.train(params, xgboost.DMatrix(x, label=y), num_boost_round=XGBOOST_TREES)
    return booster.predict(xgboost.DMatrix(x_new)).astype(np.float64)


class XGBoost:
    """Gradient-boosted trees: 150 trees, depth 6, learning rate 0.05, row/column subsampling 0.9."""

    name = "xgboost"

    def __init__(self, seed: int = 0, threads: int = 1) -> None:
        self.seed, self.threads = seed, threads

    def predict(self, batch: list[TaskInput]) -> list[Forecast]:
        return [
            Forecast(
                point=_xgboost_fit_predict(
                    t.history_covariates.T,
                    t.history_target,
                    t.future_covariates.T,
                    self.seed,
                    self.threads,
                )
            )
            for t in batch
        ]


def task_key(task: TaskInput) -> tuple[int, ...]:
    """Four 32-bit words naming a task, to seed per-task randomness.

    From the task id when there is one, else from the bytes of the task's arrays; never from
    its position in a batch, so a forecast does not depend on chunking or subsetting.
    """
    digest = hashlib.sha256()
    if task.task_id:
        digest.update(b"id:" + task.task_id.encode())
    else:
        for array in (task.history_target, task.history_covariates, task.future_covariates):
            values = np.ascontiguousarray(array)
            digest.update(f"{values.dtype.str}{values.shape}".encode() + values.tobytes())
    return tuple(int.from_bytes(digest.digest()[i : i + 4], "little") for i in range(0, 16, 4))


FEATURES = ("z_future", "z_future_lag", "z_origin", "z_delta", "target_stats", "horizon")


class TunedPairs:
    """The appendix's (origin, horizon) family: rows are (tau, h) pairs sampled from the history.

    Features (switchable): ``z_future`` = z_{t+h}, ``z_future_lag`` = z_{t+h-1}, ``z_origin`` =
    z_t, ``z_delta`` = z_{t+h} - z_t, ``target_stats`` = mean, std and slope of the last 32
    target values before the origin, ``horizon`` = h. Target: y_{t+h}. Regressor: ridge (alpha
    10, standardised features) or xgboost.
    """

    WINDOW = 32

    def __init__(
        self,
        features: tuple[str, ...] = FEATURES,
        regressor: str = "ridge",
        max_rows: int = 8000,
        seed: int = 0,
    ) -> None:
        unknown = sorted(set(features) - set(FEATURES))
        if unknown:
            raise ValueError(f"unknown feature(s) {unknown}; choose from {list(FEATURES)}")
        if regressor not in ("ridge", "xgboost"):
            raise ValueError(f"regressor must be 'ridge' or 'xgboost', got {regressor!r}")
        self.features, self.regressor, self.max_rows, self.seed = (
            tuple(features),
            regressor,
            max_rows,
            seed,
        )
        self.name = f"tuned-{regressor}"

    def _rows(
        self, z: np.ndarray, y: np.ndarray, origins: np.ndarray, horizons: np.ndarray
    ) -> np.ndarray:
        """Feature matrix for (origin, horizon) pairs; ``z`` is (T, K) over the whole window."""
        parts = []
        ahead = origins + horizons
        if "z_future" in self.features:
            parts.append(z[ahead])
        if "z_future_lag" in self.features:
            parts.append(z[ahead - 1])
        if "z_origin" in self.features:
            parts.append(z[origins])
        if "z_delta" in self.features:
            parts.append(z[ahead] - z[origins])
        if "target_stats" in self.features:
            window = np.stack([y[o - self.WINDOW + 1 : o + 1] for o in origins])
            steps = np.arange(self.WINDOW) - (self.WINDOW - 1) / 2
            slope = (window - window.mean(axis=1, keepdims=True)) @ steps / (steps @ steps)
            parts.append(np.column_stack([window.mean(axis=1), window.std(axis=1), slope]))
        if "horizon" in self.features:
            parts.append(horizons[:, None].astype(np.float64))
        return np.column_stack(parts) if parts else np.zeros((origins.size, 0))

    def predict(self, batch: list[TaskInput]) -> list[Forecast]:
        out = []
        for t in batch:
            y = t.history_target.astype(np.float64)
            context, horizon = y.size, t.prediction_length
            z = np.concatenate([t.history_covariates, t.future_covariates], axis=1).T.astype(
                np.float64
            )
            rng = np.random.default_rng([self.seed, *task_key(t)])
            first = self.WINDOW - 1
            origins = rng.integers(first, context - 1, self.max_rows)
            horizons = rng.integers(1, np.minimum(horizon, context - 1 - origins) + 1)
            x = self._rows(z, y, origins, horizons)
            target = y[origins + horizons]
            last = np.full(horizon, context - 1)
            x_new = self._rows(
                z, np.concatenate([y, np.zeros(horizon)]), last, np.arange(1, horizon + 1)
            )
            if self.regressor == "ridge":
                scale = x.std(axis=0)
                scale[scale == 0] = 1.0
                point = _ridge_fit_predict(x / scale, target, x_new / scale, 10.0)
            else:
                point = _xgboost_fit_predict(x, target, x_new, self.seed, 1)
            out.append(Forecast(point=point))
        return out


BASELINES: dict[str, Callable[[], Forecaster]] = {
    "naive": Naive,
    "linear": LinearRegression,
    "ridge": RidgeRegression,
    "xgboost": XGBoost,
    "tuned-ridge": lambda: TunedPairs(regressor="ridge"),
    "tuned-xgboost": lambda: TunedPairs(regressor="xgboost"),
}


def make_forecaster(name: str) -> Forecaster:
    """A baseline by name; the error lists the valid names."""
    try:
        factory = BASELINES[name]
    except (KeyError, TypeError):
        raise ModelError(f"unknown model {name!r}; baselines: {list(BASELINES)}") from None
    return factory()


def _json_safe(value: object, depth: int = 0) -> object:
    """``value`` as plain JSON: numbers, strings, lists and dicts as they are, arrays by a hash
    of their bytes, anything else by its type alone (its repr may hold a memory address)."""
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int | float | np.integer | np.floating):
        number = value.item() if isinstance(value, np.generic) else value
        return number if not isinstance(number, float) or np.isfinite(number) else repr(number)
    if depth < 4 and isinstance(value, list | tuple):
        return [_json_safe(v, depth + 1) for v in value]
    if depth < 4 and isinstance(value, dict):
        return {str(k): _json_safe(v, depth + 1) for k, v in sorted(value.items(), key=str)}
    if isinstance(value, np.ndarray):
        data = np.ascontiguousarray(value)
        digest = hashlib.sha256(data.tobytes()).hexdigest()[:16]
        return {"array": str(data.dtype), "shape": list(data.shape), "sha256": digest}
    kind = type(value)
    return {"type": f"{kind.__module__}.{kind.__qualname__}"}


def _params(model: object) -> object:
    """The model's ``params()`` if it has one, else its public non-callable class and instance
    attributes (instance ones win)."""
    method = getattr(model, "params", None)
    if callable(method):
        try:
            return {"params()": _json_safe(method())}
        except Exception as exc:
            raise ModelError(
                f"model {getattr(model, 'name', type(model).__qualname__)!r}: params() raised "
                f"{type(exc).__name__}: {exc}"
            ) from None
    params = {}
    for klass in reversed(type(model).__mro__[:-1]):  # object's own attributes are not params
        for key, value in vars(klass).items():
            if (
                not key.startswith("_")
                and not callable(value)
                and not isinstance(value, property | classmethod | staticmethod)
            ):
                params[key] = value
    params.update(
        {k: v for k, v in getattr(model, "__dict__", {}).items() if not k.startswith("_")}
    )
    return _json_safe(params)


def _source_file(model: object) -> Path | None:
    predict = getattr(type(model), "predict", None)
    code = getattr(predict, "__code__", None)
    if code is not None and Path(code.co_filename).is_file():
        return Path(code.co_filename)
    return None


def fingerprint(model: Forecaster | str) -> dict:
    """What identifies a model's results, so changed models are not scored from old chunks.

    A baseline by name: its name, the toolkit version and its parameters. A model object: its
    qualified class name, the SHA-256 of the file defining its ``predict``, and its parameters
    (``params()``, or its attributes). ``fingerprint["id"]`` is a short hash of the rest.
    """
    if isinstance(model, str):
        instance = make_forecaster(model)
        content: dict[str, object] = {
            "baseline": model,
            "version": __version__,
            "params": _params(instance),
        }
    else:
        klass = type(model)
        source = _source_file(model)
        content = {
            "class": f"{klass.__module__}.{klass.__qualname__}",
            "source": str(source) if source else None,
            "source_sha256": hashlib.sha256(source.read_bytes()).hexdigest() if source else None,
            "params": _params(model),
        }
    hashed = {k: v for k, v in content.items() if k != "source"}  # moving the file is no change
    text = json.dumps(hashed, sort_keys=True, default=str)
    return {"id": hashlib.sha256(text.encode()).hexdigest()[:16], **content}
