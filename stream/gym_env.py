"""``ForecastEnv``: a one-step Gymnasium environment over the training stream.

Each episode is one task: ``reset`` shows the history and the what-if scenario, the action is
the forecast, ``step`` scores it (reward ``-wQL``, the evaluation's metric) and ends the
episode. Registered as ``whatif/Forecast-v0`` by ``register_envs()`` (called when this module
is imported, so ``gymnasium.make("whatif_bench.stream.gym_env:whatif/Forecast-v0")`` works
too). Bump the version whenever an episode's observation or reward would change.

Needs the ``train`` extra (gymnasium).
"""

from __future__ import annotations

import copy
import os
from typing import Any

import numpy as np

try:
    import gymnasium
    from gymnasium import spaces
except ImportError as exc:  # pragma: no cover - the test venv installs the extra
    raise ImportError(
        "install Gymnasium to use ForecastEnv: pip install 'whatif-bench[train]'"
    ) from exc

from whatif_bench.corpus import QUANTILE_LEVELS, Task, axes
from whatif_bench.errors import WhatIfError
from whatif_bench.evaluation.metrics import score
from whatif_bench.stream.distribution import AxisDistribution
from whatif_bench.stream.items import (
    ITEM_DTYPE,
    K_MAX,
    future_mask,
    history_mask,
    pad_future,
    pad_history,
)
from whatif_bench.stream.seeding import resolve_seed
from whatif_bench.stream.sources import WorldSource
from whatif_bench.stream.task_stream import (
    DEFAULT_MAX_ATTEMPTS,
    StreamStats,
    TaskStream,
)

ENV_ID = "whatif/Forecast-v0"
MASK_DTYPE = np.int8  # MultiBinary's


class EnvError(WhatIfError, ValueError):
    """The environment was used out of order or given an action it cannot score."""


def window_maxima(stream: TaskStream) -> tuple[int, int]:
    """The longest context and prediction (steps) any task of ``stream`` can have: the largest
    layout over its worlds' fitting (C, l, E) settings, context extensions included."""
    longest_context = longest_prediction = 0
    for entry in stream.entries():
        settings = axes.contexts(entry.relationship.c4)
        for c_label, event_length, e_setting in entry.fits:
            layout = axes.layout(*settings[c_label], event_length, e_setting)
            longest_context = max(longest_context, layout.context)
            longest_prediction = max(longest_prediction, layout.prediction)
    return longest_context, longest_prediction


def _positive_or_none(name: str, value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise EnvError(f"{name} must be a positive integer or None, got {value!r}")


class ForecastEnv(gymnasium.Env):
    """One task per episode: observe history and scenario, forecast, get ``-wQL``.

    Observation (a ``spaces.Dict`` of fixed shapes, values in physical units, 0 where padded):
    ``history_target`` (C_max,) and ``history_covariates`` (K_MAX=5, C_max) float32,
    left-padded so the last observed step is at index C_max - 1 (a longer history keeps its
    latest C_max steps); ``future_covariates`` (5, H_max) float32, right-padded so the first
    forecast step is at index 0; int8 masks ``history_mask`` (C_max,), ``future_mask``
    (H_max,) and ``covariate_mask`` (5,), 1 where a value is real.

    Action: the forecast of the next H_max steps, float32 (H_max,) (``quantiles=False``), or
    (H_max, 9) at the levels 0.1 .. 0.9 (``quantiles=True``). Only the first H steps (where
    ``future_mask`` is 1) are scored; they must be finite.

    Reward: ``-wql`` of ``whatif_bench.evaluation.metrics.score``, as ``whatif evaluate`` scores
    the forecast: a point forecast at the single level 0.5 (which equals its WAPE), quantiles
    at the nine levels. ``terminated`` is ``True`` after the one step.

    Seeding (Gymnasium's convention): ``reset(seed=s)`` starts the stream of seed ``s``
    (checked by ``resolve_seed``) at slot 0; each ``reset()`` without a seed takes the next
    slot; the first reset without any seed draws fresh entropy. ``self.stream.seed`` and the
    ``seed``/``slot`` of the reset info record which task an episode was. ``self.np_random``
    is seeded with the stream's seed but tasks come from the stream alone.

    Parameters
    ----------
    simulators, holdout, worlds, cache, distribution, sources, max_attempts
        The stream's, as ``TaskStream`` takes them (worlds not yet cached are built here).
    context_max, horizon_max : int or None
        The observation's lengths; by default the longest context and prediction the stream
        can draw (``window_maxima``). A ``horizon_max`` below that is refused.
    quantiles : bool
        Forecast the nine quantiles rather than one point.
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(
        self,
        *,
        simulators: tuple[str, ...] | list[str] | None = None,
        holdout: bool = True,
        worlds: tuple[str, ...] | list[str] | None = None,
        cache: str | os.PathLike | None = None,
        distribution: AxisDistribution | None = None,
        sources: list[WorldSource] | None = None,
        context_max: int | None = None,
        horizon_max: int | None = None,
        quantiles: bool = False,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    ) -> None:
        _positive_or_none("context_max", context_max)
        _positive_or_none("horizon_max", horizon_max)
        self._template = TaskStream(
            0,
            simulators=simulators,
            holdout=holdout,
            worlds=worlds,
            cache=cache,
            distribution=distribution,
            sources=sources,
            max_attempts=max_attempts,
        )
        longest_context, longest_prediction = window_maxima(self._template)
        if horizon_max is not None and horizon_max < longest_prediction:
            raise EnvError(
                f"horizon_max {horizon_max} is below the longest prediction the stream can "
                f"draw ({longest_prediction} steps); raise it or narrow the distribution"
            )
        self.context_max = context_max or longest_context
        self.horizon_max = horizon_max or longest_prediction
        self.quantiles = bool(quantiles)
        self.observation_space = spaces.Dict(
            {
                "history_target": _box((self.context_max,)),
                "history_covariates": _box((K_MAX, self.context_max)),
                "future_covariates": _box((K_MAX, self.horizon_max)),
                "history_mask": spaces.MultiBinary(self.context_max),
                "future_mask": spaces.MultiBinary(self.horizon_max),
                "covariate_mask": spaces.MultiBinary(K_MAX),
            }
        )
        shape = (self.horizon_max, len(QUANTILE_LEVELS)) if self.quantiles else (self.horizon_max,)
        self.action_space = _box(shape)
        self.stream: TaskStream | None = None
        self.slot = -1
        self.task: Task | None = None  # the episode's task until it is scored

    # ---- episodes -------------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Draw the next task (slot 0 of a new stream when ``seed`` is given); returns the
        observation and an info dict with ``seed``, ``slot``, ``task_id`` and the task's
        description. ``options`` takes no keys."""
        if options:
            raise EnvError(f"ForecastEnv.reset takes no options, got {sorted(options)}")
        if seed is not None or self.stream is None:
            stream = copy.copy(self._template)  # shares the loaded worlds
            stream.seed = resolve_seed(seed)
            stream.stats = StreamStats()
            self.stream, self.slot = stream, 0
            super().reset(seed=stream.seed)
        else:
            super().reset()
            self.slot += 1
        self.task = self.stream.task(self.slot)
        return self._observation(self.task), self._reset_info(self.task)

    def step(
        self, action: np.ndarray
    ) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        """Score the forecast ``action`` against the task's future; the episode ends.

        Returns the episode's observation again, the reward ``-wql``, ``terminated=True``,
        ``truncated=False`` and an info dict with ``task_id``, ``wql``, ``wape`` and the truth:
        ``future_target`` and ``counterfactual_future`` (H,) float32. A refused action
        (``EnvError``) leaves the episode open.
        """
        task = self.task
        if task is None:
            raise EnvError("call reset() before step(): the episode has ended or not begun")
        forecast = np.asarray(action, dtype=np.float64)
        if forecast.shape != self.action_space.shape:
            raise EnvError(
                f"the action must have shape {self.action_space.shape}, got {forecast.shape}"
            )
        horizon = task.prediction_length
        scored = forecast[:horizon]
        if not np.all(np.isfinite(scored)):
            raise EnvError(f"the forecast's first {horizon} steps (the scored ones) must be finite")
        if self.quantiles:
            metrics = score(task.future_target, None, scored)
        else:
            metrics = score(task.future_target, scored, None)
        self.task = None  # scored: the episode is over
        info = {
            "task_id": task.task_id,
            "wql": metrics["wql"],
            "wape": metrics["wape"],
            "future_target": task.future_target.copy(),
            "counterfactual_future": task.counterfactual_future.copy(),
        }
        return self._observation(task), -float(metrics["wql"]), True, False, info

    # ---- views ----------------------------------------------------------------------------
    def _observation(self, task: Task) -> dict[str, np.ndarray]:
        context, horizon = self.context_max, self.horizon_max
        covariates = np.zeros(K_MAX, dtype=MASK_DTYPE)
        covariates[: task.k] = 1
        return {
            "history_target": pad_history(task.history_target, context),
            "history_covariates": pad_history(task.history_covariates, context, K_MAX),
            "future_covariates": pad_future(task.future_covariates, horizon, K_MAX),
            "history_mask": history_mask(task.context_length, context).astype(MASK_DTYPE),
            "future_mask": future_mask(task.prediction_length, horizon).astype(MASK_DTYPE),
            "covariate_mask": covariates,
        }

    def _reset_info(self, task: Task) -> dict[str, Any]:
        assert self.stream is not None, "reset() sets the stream before the first task"
        return {
            "seed": self.stream.seed,
            "slot": self.slot,
            "task_id": task.task_id,
            "simulator": task.simulator,
            "target": task.target,
            "unit": task.units.get(task.target, ""),
            "future": task.future,
            "world": task.world,
            "covariates": tuple(task.covariates),
            "k": task.k,
            "context_length": task.context_length,
            "prediction_length": task.prediction_length,
            "interval_s": int(task.interval_s),
            "start": task.start.isoformat(),
        }


def _box(shape: tuple[int, ...]) -> spaces.Box:
    return spaces.Box(-np.inf, np.inf, shape=shape, dtype=ITEM_DTYPE)


def register_envs() -> None:
    """Register ``whatif/Forecast-v0`` with Gymnasium (once; later calls do nothing)."""
    if ENV_ID not in gymnasium.registry:
        gymnasium.register(id=ENV_ID, entry_point=f"{__name__}:ForecastEnv")


register_envs()
