"""The forecaster protocol and the baseline forecasters (docs/METHOD.md, section 9).

A forecaster receives a batch of ``TaskInput`` (numpy arrays only) and returns one
``Forecast`` per task: a point forecast (H,), or quantiles (H, 9) at the levels 0.1 … 0.9.
To score your own model, implement ``predict``::

    class MyModel:
        name = "my-model"
        def predict(self, batch: list[TaskInput]) -> list[Forecast]:
            return [Forecast(point=np.full(t.prediction_length, t.history_target.mean()))
                    for t in batch]

A task the model cannot forecast gets ``NoForecast("why")`` in its place: that task fails with
the reason, the others are scored.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from whatif_bench._version import __version__

# What a model may see, defined with the corpus's Task (corpus/task.py); importable from here
# too, as the forecaster interface has always named it.
from whatif_bench.corpus import TaskInput as TaskInput
from whatif_bench.corpus import frequency_alias as frequency_alias
from whatif_bench.corpus import utc_naive as utc_naive
from whatif_bench.errors import WhatIfError
from whatif_bench.evaluation.metrics import QUANTILE_LEVELS
from whatif_bench.seeding import rng as seeded_rng


class ModelError(WhatIfError, ValueError):
    """A model cannot be used: unknown baseline name, bad name, no ``predict``."""


@dataclass(frozen=True)
class Forecast:
    """A point forecast (H,) and/or quantiles (H, 9) at ``QUANTILE_LEVELS``.

    ``imputed``: the model gave no forecast of its own for this task and this one stands in
    for it (an LLM whose every answer failed gets the naive forecast); it is scored like any
    other and counted in the leaderboard's ``num_imputed``. ``seconds``: the model's own
    measure of its inference time for this task (an LLM's request latency), used instead of
    the runner's share of the predict call's wall time when given.
    """

    point: np.ndarray | None = None
    quantiles: np.ndarray | None = None
    imputed: bool = False
    seconds: float | None = None

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


@dataclass(frozen=True)
class NoForecast:
    """What a model returns, in place of a ``Forecast``, for a task it cannot forecast:
    that task fails with ``reason`` (in the ``failed`` column), the batch's others are scored."""

    reason: str


class Forecaster(Protocol):
    """Anything with a ``name`` and a batch ``predict``.

    ``name`` names the model's folder of results, so it must be a safe file name (letters,
    digits and ``. _ + - = @``). An optional ``params()`` returning a JSON-able dict replaces
    the instance's attributes in the model's fingerprint (see ``fingerprint``).
    """

    name: str

    def predict(self, batch: list[TaskInput]) -> Sequence[Forecast | NoForecast]: ...


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

    ``x`` (T, K) and ``x_new`` (H, K) are used in their own float dtype (float32 for raw corpus
    covariates; ``linear`` and ``tuned-linear`` pass standardised float64), ``y`` (T,) is cast
    to it. The data are centred and solved by SVD (LAPACK gelsd)
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
    """Ordinary least squares of the target on the covariates at the same step, the covariates
    standardised on the history first (``_standardise``, as ``ridge`` does; float64).

    Equal to scikit-learn's ``LinearRegression`` fitted on the same standardised covariates; see
    ``_least_squares_fit_predict`` for the solver and its cutoff.

    Why the scaling matters although least squares is scale-invariant on a full-rank history: a
    rescaled covariate only gets a rescaled coefficient, so the forecast does not change. A
    rank-deficient history (step covariates that move together, a covariate that is constant)
    has a whole line or plane of least-squares fits that agree on the history and disagree
    once the covariates part in the future, and the SVD solver picks the one with the smallest
    coefficient norm. That norm depends on the units: on raw covariates, a covariate with a
    large spread in its units (W rather than kW) needs only a small coefficient, and each
    collinear covariate takes a share of the effect in proportion to its squared spread, so
    the forecast after the covariates part would change with a change of units.
    Standardised, every coefficient is per history standard deviation: the fit is the same in
    any units, and covariates that move together in the history (identical once standardised)
    get equal shares of the effect, so the future is predicted from their mean standardised
    value. The relative cutoff is scale-dependent too: on raw covariates a covariate with a
    small spread can fall below 10^-6 of the largest singular value and be dropped although it
    is informative; standardised, only a true (near) collinearity is.
    ``standardise=False`` fits the raw covariates (the toolkit's former ``linear``).
    """

    name = "linear"

    def __init__(self, standardise: bool = True) -> None:
        self.standardise = standardise

    def predict(self, batch: list[TaskInput]) -> list[Forecast]:
        out = []
        for t in batch:
            if self.standardise:
                x, x_new = _standardise(
                    t.history_covariates.astype(np.float64),
                    t.future_covariates.astype(np.float64),
                )
            else:
                x, x_new = t.history_covariates.T, t.future_covariates.T
            out.append(Forecast(point=_least_squares_fit_predict(x, t.history_target, x_new)))
        return out


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
TUNED_REGRESSORS = ("linear", "ridge", "xgboost")


def _feasible_horizons(context: int, horizon: int, first: int) -> int:
    """The largest horizon with a feasible origin: ``min(H, C - 1 - first)``; a history too
    short for any (origin, horizon) pair is a ``ValueError``."""
    if first + 2 > context:
        raise ValueError(
            f"a history of {context} steps is too short for (origin, horizon) pairs whose first "
            f"origin is step {first}: it needs at least {first + 2} steps"
        )
    return min(horizon, context - 1 - first)


def feasible_pairs(context: int, horizon: int, first: int) -> tuple[np.ndarray, np.ndarray]:
    """Every (origin tau, horizon h) pair of a history of ``context`` steps: ``1 <= h <= H``
    and ``first <= tau <= C - 1 - h`` (so the target y_{tau+h} is in the history), ordered by
    h, then tau. Returns (origins, horizons), int64."""
    top = _feasible_horizons(context, horizon, first)
    horizons = np.arange(1, top + 1)
    counts = context - first - horizons  # origins per horizon
    starts = np.cumsum(counts) - counts
    steps = np.arange(int(counts.sum())) - np.repeat(starts, counts)
    return first + steps, np.repeat(horizons, counts)


def draw_pairs(
    context: int, horizon: int, max_rows: int, rng: np.random.Generator, first: int
) -> tuple[np.ndarray, np.ndarray]:
    """Up to ``max_rows`` distinct (origin, horizon) pairs of a history, as ``TunedPairs`` fits.

    A history with at most ``max_rows`` feasible pairs (``feasible_pairs``) gives all of them.
    Otherwise each draw takes h uniformly from the feasible horizons 1 … min(H, C - 1 - first)
    first, then the origin tau uniformly from the origins feasible for that h
    (first … C - 1 - h); a draw that repeats a pair already taken is discarded and drawn again,
    until ``max_rows`` pairs are taken (in the order drawn). Draws come in vectorised rounds
    of candidates, each kept if it is the first of its pair, so this is the one-at-a-time
    rejection process; ``rng`` alone decides the pairs. Returns (origins, horizons), int64.
    """
    if max_rows < 1:
        raise ValueError(f"max_rows must be at least 1, got {max_rows}")
    top = _feasible_horizons(context, horizon, first)
    counts = context - first - np.arange(1, top + 1)  # origins per horizon
    if counts.sum() <= max_rows:
        return feasible_pairs(context, horizon, first)
    keys = np.empty(0, dtype=np.int64)  # (h - 1) * C + tau, one per pair taken
    while keys.size < max_rows:
        need = max_rows - keys.size
        size = max(2 * need, 1024)
        horizons = rng.integers(1, top + 1, size)
        origins = first + rng.integers(0, counts[horizons - 1])
        candidates = (horizons - 1) * context + origins
        _, firsts = np.unique(candidates, return_index=True)
        candidates = candidates[np.sort(firsts)]  # the first draw of each pair, in draw order
        candidates = candidates[~np.isin(candidates, keys)]
        keys = np.concatenate([keys, candidates[:need]])
    return keys % context, keys // context + 1


class TunedPairs:
    """The appendix's (origin, horizon) family: rows are (tau, h) pairs sampled from the history.

    Rows: up to ``max_rows`` distinct pairs, h drawn before tau (``draw_pairs``). Features
    (switchable): ``z_future`` = z_{t+h}, ``z_future_lag`` = z_{t+h-1}, ``z_origin`` = z_t,
    ``z_delta`` = z_{t+h} - z_t, ``target_stats`` = mean, std and slope of the last 32 target
    values up to the origin, ``horizon`` = h; then ``target_lags`` = L target values
    y_t, y_{t-1}, … y_{t-L+1} at the origin (0: none). Target: y_{t+h}. Regressor, on features
    standardised over the rows: ``linear`` (least squares, as the ``linear`` baseline),
    ``ridge`` (alpha 10) or ``xgboost`` (raw features). The forecast takes the last history
    step as origin and h = 1 … H. The first origin is step max(32, L) - 1, so every window and
    lag is inside the history.
    """

    WINDOW = 32

    def __init__(
        self,
        features: tuple[str, ...] = FEATURES,
        regressor: str = "ridge",
        max_rows: int = 8000,
        seed: int = 0,
        target_lags: int = 0,
    ) -> None:
        unknown = sorted(set(features) - set(FEATURES))
        if unknown:
            raise ValueError(f"unknown feature(s) {unknown}; choose from {list(FEATURES)}")
        if regressor not in TUNED_REGRESSORS:
            raise ValueError(
                f"regressor must be one of {list(TUNED_REGRESSORS)}, got {regressor!r}"
            )
        for label, value, least in (("max_rows", max_rows, 1), ("target_lags", target_lags, 0)):
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < least:
                raise ValueError(f"{label} must be a whole number >= {least}, got {value!r}")
        self.features, self.regressor, self.max_rows, self.seed = (
            tuple(features),
            regressor,
            int(max_rows),
            seed,
        )
        self.target_lags = int(target_lags)
        self.name = f"tuned-{regressor}"

    @property
    def first_origin(self) -> int:
        """The earliest origin: the target window and the lags end there and start in the
        history."""
        return max(self.WINDOW, self.target_lags) - 1

    def feature_matrix(
        self, z: np.ndarray, y: np.ndarray, origins: np.ndarray, horizons: np.ndarray
    ) -> np.ndarray:
        """Feature rows for (origin, horizon) pairs; ``z`` is (T, K) over the whole window,
        ``y`` the target over at least the steps up to the latest origin."""
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
            window = sliding_window_view(y, self.WINDOW)[origins - self.WINDOW + 1]
            steps = np.arange(self.WINDOW) - (self.WINDOW - 1) / 2
            slope = (window - window.mean(axis=1, keepdims=True)) @ steps / (steps @ steps)
            parts.append(np.column_stack([window.mean(axis=1), window.std(axis=1), slope]))
        if "horizon" in self.features:
            parts.append(horizons[:, None].astype(np.float64))
        if self.target_lags:
            parts.append(y[origins[:, None] - np.arange(self.target_lags)])
        return np.column_stack(parts) if parts else np.zeros((origins.size, 0))

    def pairs(self, task: TaskInput) -> tuple[np.ndarray, np.ndarray]:
        """The (origins, horizons) this model fits on for ``task``, seeded by the model's seed
        and the task's key (``task_key``)."""
        rng = seeded_rng("tuned", self.seed, *task_key(task))
        return draw_pairs(
            task.history_target.size,
            task.prediction_length,
            self.max_rows,
            rng,
            self.first_origin,
        )

    def predict(self, batch: list[TaskInput]) -> list[Forecast]:
        out = []
        for t in batch:
            y = t.history_target.astype(np.float64)
            context, horizon = y.size, t.prediction_length
            z = np.concatenate([t.history_covariates, t.future_covariates], axis=1).T.astype(
                np.float64
            )
            origins, horizons = self.pairs(t)
            x = self.feature_matrix(z, y, origins, horizons)
            target = y[origins + horizons]
            last = np.full(horizon, context - 1)
            x_new = self.feature_matrix(z, y, last, np.arange(1, horizon + 1))
            if self.regressor == "xgboost":
                point = _xgboost_fit_predict(x, target, x_new, self.seed, 1)
            else:
                scale = x.std(axis=0)
                scale[scale == 0] = 1.0
                if self.regressor == "ridge":
                    point = _ridge_fit_predict(x / scale, target, x_new / scale, 10.0)
                else:
                    point = _least_squares_fit_predict(x / scale, target, x_new / scale)
            out.append(Forecast(point=point))
        return out


BASELINES: dict[str, Callable[[], Forecaster]] = {
    "naive": Naive,
    "linear": LinearRegression,
    "ridge": RidgeRegression,
    "xgboost": XGBoost,
    "tuned-linear": lambda: TunedPairs(regressor="linear"),
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
