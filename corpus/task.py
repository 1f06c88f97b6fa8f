"""A task and the part of it a model may see.

``Task`` is everything the corpus holds about one task: the model's inputs, the ground truth,
the counterfactual and the recipe. As in fev (``get_input_data`` / ``get_ground_truth``), it
splits in two: ``Task.input_data()`` is a ``TaskInput`` (what a forecaster may see: history,
future covariates and a description), ``Task.ground_truth()`` the future target, seen only by
the metrics. ``Corpus.task_inputs`` and ``Corpus.ground_truths`` read the two parts straight
from the file, without the counterfactual or the recipe.
"""

from __future__ import annotations

import datetime
import functools
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

# step lengths in seconds and their pandas aliases, largest first (see ``frequency_alias``)
_FREQ_UNITS = ((86400, "D"), (3600, "h"), (60, "min"), (1, "s"))


def frequency_alias(interval_s: int) -> str:
    """The pandas frequency alias of a step of ``interval_s`` seconds, always with a count:
    ``300`` -> ``"5min"``, ``60`` -> ``"1min"``, ``3600`` -> ``"1h"``, ``90`` -> ``"90s"``.

    GluonTS wants the count (``"1min"``, not the ``"min"`` pandas infers); the alias is built
    here rather than by pandas so it is the same under pandas 2 and 3."""
    if isinstance(interval_s, bool) or int(interval_s) != interval_s or interval_s <= 0:
        raise ValueError(
            f"interval_s must be a positive whole number of seconds, got {interval_s!r}"
        )
    return _alias(int(interval_s))


@functools.lru_cache(maxsize=256)
def _alias(seconds: int) -> str:
    """``frequency_alias`` of a checked whole number of seconds (once per distinct step)."""
    for size, unit in _FREQ_UNITS:
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    raise AssertionError("unreachable: every whole number of seconds is a count of 's'")


def utc_naive(moment: pd.Timestamp) -> pd.Timestamp:
    """A time without a zone: zoned times (OpenDC's trace start) are converted to UTC first."""
    if moment.tzinfo is not None:
        return moment.tz_convert("UTC").tz_localize(None)
    return moment


def window_start_time(baseline_start: str, start_step: int, interval_s: int) -> pd.Timestamp:
    """Time of a window's first step: the baseline's start (ISO 8601) + ``start_step`` steps of
    ``interval_s`` seconds."""
    seconds = start_step * interval_s
    moment, unit = _baseline_moment(baseline_start)
    if moment is None or not isinstance(seconds, int):
        return _baseline_time(baseline_start) + pd.Timedelta(seconds=seconds)
    # the Timestamp pandas' arithmetic gives (value, unit, zone), in 40-65 % of its time
    return pd.Timestamp(moment + datetime.timedelta(seconds=seconds)).as_unit(unit)


def window_start_text(baseline_start: str, start_step: int, interval_s: int) -> str:
    """``window_start_time(...).isoformat()``, made with the standard library's datetime where
    that is exact (the same cases as ``window_start_time``)."""
    return window_start_texts(baseline_start, (start_step,), interval_s)[0]


def window_start_texts(
    baseline_start: str, start_steps: Sequence[int], interval_s: int
) -> list[str]:
    """``window_start_text`` of each of ``start_steps``, the baseline's start looked up once (a
    description has a time per event)."""
    moment, _ = _baseline_moment(baseline_start)
    texts = []
    for start_step in start_steps:
        seconds = start_step * interval_s
        if moment is None or not isinstance(seconds, int):
            texts.append(window_start_time(baseline_start, start_step, interval_s).isoformat())
        else:
            texts.append((moment + datetime.timedelta(seconds=seconds)).isoformat())
    return texts


@functools.lru_cache(maxsize=256)
def _baseline_moment(text: str) -> tuple[datetime.datetime | None, str]:
    """A baseline's start as a ``datetime`` and the unit of a ``Timestamp`` some seconds after
    it; ``None`` for a start a ``datetime`` cannot hold exactly (nanoseconds) or a zone other
    than a fixed offset (where wall-clock and elapsed time could part)."""
    start = _baseline_time(text)
    unit = (start + pd.Timedelta(seconds=1)).unit
    fixed = start.tzinfo is None or isinstance(start.tzinfo, datetime.timezone)
    return (_baseline_datetime(text) if fixed and not start.nanosecond else None), unit


@functools.lru_cache(maxsize=256)
def _baseline_time(text: str) -> pd.Timestamp:
    """A baseline's start, parsed once per distinct text (a stream asks for it per task)."""
    return pd.Timestamp(text)


def start_text(baseline_start: str, seconds: int) -> str:
    """``Task.start.isoformat()`` of a task ``seconds`` after its baseline's start: as
    ``window_start_text`` makes it (the standard library's datetime where that is exact; pandas'
    Timestamp arithmetic costs ~15 us a task), so a start with nanoseconds keeps them."""
    return window_start_text(baseline_start, seconds, 1)


@functools.lru_cache(maxsize=256)
def _baseline_datetime(text: str) -> datetime.datetime:
    return pd.Timestamp(text).to_pydatetime()


@dataclass(frozen=True)
class TaskInput:
    """What a model may see: the history and the future covariates (the what-if scenario).

    The arrays are all a model needs; the other fields describe the task for models that use
    calendars, names or units (foundation models, GluonTS). They have defaults, so a
    ``TaskInput`` of arrays alone is still valid; ``evaluate`` fills them all.
    """

    history_target: np.ndarray  # (C,)
    history_covariates: np.ndarray  # (K, C)
    future_covariates: np.ndarray  # (K, H)
    task_id: str = ""
    start: pd.Timestamp | None = None  # time of the first history step
    freq: str = ""  # pandas alias of the step, e.g. "5min" (see frequency_alias)
    interval_s: int = 0  # the step in seconds
    covariate_names: tuple[str, ...] = ()  # (K,)
    covariate_units: tuple[str, ...] = ()  # (K,); "" where unknown
    target_name: str = ""
    target_unit: str = ""

    @property
    def prediction_length(self) -> int:
        return int(self.future_covariates.shape[1])

    @property
    def context_length(self) -> int:
        return int(self.history_target.shape[0])

    def timestamps(self) -> pd.DatetimeIndex:
        """Time of every step, history then future, shape (C + H,)."""
        if self.start is None or not self.interval_s:
            raise ValueError("this task input has no start or interval")
        return pd.date_range(
            self.start,
            periods=self.context_length + self.prediction_length,
            freq=pd.Timedelta(seconds=self.interval_s),
        )

    @classmethod
    def from_task(cls, task, covariate_units: dict[str, str] | None = None) -> TaskInput:
        """The model's view of a ``Task`` (or anything with its fields): its arrays and
        description, not the truth.

        ``covariate_units`` maps covariate names to units (the corpus stores only the target's);
        names it lacks get ``""``."""
        return cls.from_parts(
            task.history_target,
            task.history_covariates,
            task.future_covariates,
            task_id=task.task_id,
            start=task.start,
            interval_s=task.interval_s,
            covariates=task.covariates,
            covariate_units=covariate_units,
            target=task.target,
            target_unit=task.units.get(task.target, ""),
        )

    @classmethod
    def from_parts(
        cls,
        history_target: np.ndarray,
        history_covariates: np.ndarray,
        future_covariates: np.ndarray,
        *,
        task_id: str,
        start: pd.Timestamp,
        interval_s: int,
        covariates: tuple[str, ...],
        covariate_units: dict[str, str] | None,
        target: str,
        target_unit: str,
    ) -> TaskInput:
        """A full ``TaskInput``: the arrays, and the description derived from the task's
        dates (``start`` as stored, possibly zoned), names and units."""
        units = covariate_units or {}
        return cls(
            history_target=history_target,
            history_covariates=history_covariates,
            future_covariates=future_covariates,
            task_id=task_id,
            start=utc_naive(start),
            freq=frequency_alias(interval_s),
            interval_s=int(interval_s),
            covariate_names=tuple(covariates),
            covariate_units=tuple(units.get(name, "") for name in covariates),
            target_name=target,
            target_unit=target_unit,
        )


@dataclass(frozen=True)
class Task:
    """One forecasting task: what a model sees, the truth, and how it was made."""

    task_id: str
    future: str
    simulator: str
    target: str
    k: int
    c_label: str
    event_length: int
    e_setting: str
    covariates: tuple[str, ...]
    units: dict[str, str]
    interval_s: int
    baseline_start: str  # ISO time of the baseline's first step
    start_step: int  # window start within the baseline series
    history_target: np.ndarray  # (C,)
    history_covariates: np.ndarray  # (K, C)
    future_covariates: np.ndarray  # (K, H) the what-if scenario
    future_target: np.ndarray  # (H,) ground truth under the scenario
    counterfactual_history: np.ndarray  # (C,) the target without any event
    counterfactual_future: np.ndarray  # (H,)
    recipe: dict = field(repr=False)
    world: str = "benchmark"  # the baselines the window was cut from (see whatif_bench.stream)

    @property
    def context_length(self) -> int:
        return int(self.history_target.size)

    @property
    def prediction_length(self) -> int:
        return int(self.future_target.size)

    @property
    def start(self) -> pd.Timestamp:
        """Time of the first history step: the baseline's start + ``start_step`` intervals."""
        return window_start_time(self.baseline_start, self.start_step, self.interval_s)

    def timestamps(self) -> pd.DatetimeIndex:
        """Timestamps of the whole window (history, then future)."""
        return pd.date_range(
            self.start,
            periods=self.context_length + self.prediction_length,
            freq=pd.Timedelta(seconds=self.interval_s),
        )

    def input_data(self, covariate_units: dict[str, str] | None = None) -> TaskInput:
        """What a model may see of this task (``covariate_units``: see ``TaskInput.from_task``)."""
        return TaskInput.from_task(self, covariate_units)

    def ground_truth(self) -> np.ndarray:
        """The future target under the scenario, shape (H,): what the metrics score against."""
        return self.future_target
