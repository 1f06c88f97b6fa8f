"""Running forecasters over a corpus: per-task errors (resumable), then aggregates and reports.

Per-task results are written in chunks of ``CHUNK`` tasks per model under
``<out>/per_task/<model>/``; a chunk already on disk is not computed again, so an interrupted
evaluation resumes where it stopped. A ``manifest.json`` ties the folder to one corpus and one
task selection; each model folder's ``model.json`` holds the model's fingerprint, and a model
whose fingerprint changed has its chunks deleted and recomputed. A chunk that cannot be read
(truncated, empty) is recomputed, and so is a chunk with failed tasks (a retry). A chunk of the
format before per-task timings (no ``seconds`` and ``imputed`` columns) is read, not recomputed:
its tasks get ``seconds`` NaN (not measured) and ``imputed`` False (that format had no imputed
forecasts), and a note says so (``_read_chunk``).

Each task's row also holds ``seconds``, the model's inference time for it (``_task_row``), and
``imputed`` (``Forecast.imputed``). ``seconds`` is a measurement: it is the one output that
differs between two runs of the same evaluation (``TIMING_COLUMNS``; docs/METHOD.md, section 8).

A model that fails (``predict`` raises, returns None or the wrong number of forecasts, a
forecast of the wrong shape or with NaN/inf) fails only the tasks concerned: they are kept in
``per_task.parquet`` with the reason in the ``failed`` column (empty when scored) and NaN
errors, and are left out of that model's aggregates. ``EvaluationResult.failures`` lists them.

Models cannot harm each other or the run (``evaluate``; docs/RELIABILITY.md): read-only inputs;
a model of the user runs ``predict`` in a forked child process with a time limit per batch, so
an endless loop, ``exit()``, ``os._exit`` or a crash fails that model's tasks with the reason;
a worker process that dies is replaced and its chunks run again (``_run_pool``).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import json
import math
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from whatif_bench.cluster import WORKER_DIED, WorkerDied
from whatif_bench.corpus import covariate_units, select_tasks
from whatif_bench.corpus.axes import pair_columns, strata
from whatif_bench.errors import WhatIfError
from whatif_bench.evaluation.forecasters import (
    Forecaster,
    ModelError,
    NoForecast,
    TaskInput,
    fingerprint,
    make_forecaster,
)
from whatif_bench.evaluation.metrics import QUANTILE_LEVELS, score
from whatif_bench.evaluation.relational import (
    EVENT_FUTURES,
    RESTRAINT,
    SCORE_COLUMNS,
    HistoryTruth,
    history_scores,
)
from whatif_bench.outputs import (
    IDENTITY,
    OutputError,
    OutputLockedError,
    atomic_output,
    check_folder_kind,
    check_output_path,
    lock_path,
    make_folder,
    os_error,
    output_lock,
    read_identity,
    safe_name,
    write_identity,
    write_text_atomic,
)
from whatif_bench.usercode import run_in_child

if TYPE_CHECKING:
    from whatif_bench.corpus import Corpus

CHUNK = 256
STRATA = strata()  # import-time copy, for callers; select_tasks reads ``strata()``

# Measured, not computed: the only columns of the outputs that differ between two runs of the
# same evaluation (per_task.parquet's ``seconds``, leaderboard.{md,csv}'s ``seconds_per_task``).
# Everything else is the same bit for bit; ``without_timings`` drops them for a comparison.
TIMING_COLUMNS = ("seconds", "seconds_per_task")


def without_timings(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` without the measured columns (``TIMING_COLUMNS``), which two runs of the same
    evaluation cannot reproduce; what is left is reproducible bit for bit."""
    return frame.drop(columns=[c for c in TIMING_COLUMNS if c in frame.columns])


class EvaluationError(WhatIfError):
    """The evaluation cannot run (unknown model, mismatched output folder, bad subset)."""


@dataclass
class EvaluationResult:
    """Per-task errors of every model, and the overall leaderboard."""

    per_task: pd.DataFrame
    leaderboard: pd.DataFrame
    reference: str
    out: Path
    notes: list[str] = field(default_factory=list)
    relational: pd.DataFrame | None = None  # per history and model (``relational=True`` only)

    @property
    def failures(self) -> pd.DataFrame:
        """The failed (task, model) rows: task_id, model and the reason in ``failed``."""
        failed = self.per_task[self.per_task["failed"] != ""]
        return failed[["task_id", "model", "failed"]].reset_index(drop=True)

    def failure_summary(self) -> list[str]:
        """One line per model that failed on some task: count, first task and its reason."""
        lines = []
        total = self.per_task["task_id"].nunique()
        for model, rows in self.failures.groupby("model", sort=False):
            first = rows.iloc[0]
            line = (
                f"model {model!r} failed on {len(rows):,} of {total:,} tasks (first: "
                f"{first['task_id']}: {first['failed']}); it is scored on the other "
                f"{total - len(rows):,}"
            )
            if model == self.reference:
                line += "; as the reference, it leaves those tasks out of every skill score"
            lines.append(line)
        if self.relational is not None:
            failed = self.relational[self.relational["failed"] != ""]
            total = self.relational["pair_id"].nunique()
            for model, rows in failed.groupby("model", sort=False):
                first = rows.iloc[0]
                lines.append(
                    f"model {model!r} failed on {len(rows):,} of {total:,} histories of the "
                    f"relational scores (first: {first['pair_id']}: {first['failed']}); they are "
                    "left out of its relational scores"
                )
        return lines

    def imputed_summary(self) -> list[str]:
        """One line per model with imputed forecasts (``Forecast.imputed``): count and first
        task. Imputed tasks are scored as the model's forecasts; they are not failures."""
        lines = []
        total = self.per_task["task_id"].nunique()
        imputed = self.per_task[self.per_task["imputed"]]
        for model, rows in imputed.groupby("model", sort=False):
            lines.append(
                f"model {model!r} imputed {len(rows):,} of {total:,} forecasts (first: "
                f"{rows.iloc[0]['task_id']}); they are scored as its own (num_imputed in the "
                "leaderboard)"
            )
        return lines


def check_task_ids(task_ids: Sequence[str] | None, subset: float | None) -> list[str] | None:
    """``evaluate``'s ``task_ids`` as a list (None: no restriction), or an ``EvaluationError``:
    not a collection of strings (a bare string is refused), empty, with repeats, or given
    together with ``subset``."""
    if task_ids is None:
        return None
    if isinstance(task_ids, str | bytes | dict) or not isinstance(task_ids, Iterable):
        raise EvaluationError(
            f"task_ids must be a list of task ids, got a {type(task_ids).__name__}"
        )
    ids = list(task_ids)  # a list, tuple, array or Series of ids: the order does not matter
    if subset is not None:
        raise EvaluationError(
            f"give subset ({subset!r}) or task_ids ({len(ids):,} ids), not both: task_ids "
            "selects exactly the tasks to score"
        )
    if not ids:
        raise EvaluationError("task_ids is empty; give at least one task id (None: all tasks)")
    wrong = [i for i in ids if not isinstance(i, str)]
    if wrong:
        raise EvaluationError(f"task_ids must be strings, got {_one_line(repr(wrong[0]), 80)}")
    repeated = sorted({i for i in ids if ids.count(i) > 1}) if len(set(ids)) < len(ids) else []
    if repeated:
        raise EvaluationError(f"task_ids lists {repeated[:5]} more than once")
    return ids


def tasks_with_ids(frame: pd.DataFrame, task_ids: list[str], corpus: object) -> pd.DataFrame:
    """The rows of ``frame`` (the corpus's tasks) with these ids, in the corpus's order (so the
    chunks do not depend on the order given); an id the corpus does not hold is an
    ``EvaluationError`` naming it (``corpus``: the file, for the message)."""
    known = frame["task_id"].isin(task_ids)
    missing = sorted(set(task_ids) - set(frame.loc[known, "task_id"]))
    if missing:
        more = f" (and {len(missing) - 1:,} more of the {len(task_ids):,} given)"
        raise EvaluationError(
            f"{corpus} holds no task {missing[0]!r}{more if len(missing) > 1 else ''}; "
            "task_ids must name tasks of the corpus evaluated (kept pairs only)"
        )
    return frame[known].reset_index(drop=True)


def _model_label(model: Forecaster | str) -> str:
    return model if isinstance(model, str) else model.name


def _class_name(model: object) -> str:
    return f"{type(model).__module__}.{type(model).__qualname__}"


def check_models(models: list[Forecaster | str]) -> list[str]:
    """The models' names, once each is known to be usable; a clear error naming the model if
    not (unknown baseline, name missing, not a string or not a safe file name, no predict)."""
    if not isinstance(models, list | tuple) or not models:
        raise ModelError(f"give a non-empty list of models, got {models!r}")
    labels = []
    for model in models:
        if isinstance(model, str):
            make_forecaster(model)  # unknown names fail before any work
            labels.append(model)
            continue
        klass = _class_name(model)
        if not hasattr(model, "name"):
            raise ModelError(f"model {klass} has no name attribute")
        if not isinstance(model.name, str):
            raise ModelError(f"model {klass}: name must be a string, got {model.name!r}")
        labels.append(safe_name(model.name, f"model {klass}: its name"))
        if not callable(getattr(model, "predict", None)):
            raise ModelError(f"model {model.name!r} ({klass}) has no predict method")
    duplicates = sorted({label for label in labels if labels.count(label) > 1})
    if duplicates:
        raise EvaluationError(f"model names must be unique, got {duplicates} twice or more")
    return labels


def _one_line(text: object, limit: int = 300) -> str:
    text = " ".join(str(text).split()) or "no message"
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass
class _Predicted:
    """A model's forecasts of a batch and the wall time of its predict call (s), measured in
    the process that ran it (``_predict``)."""

    forecasts: list
    seconds: float

    @property
    def share(self) -> float:
        """The wall time's share of one task (s): the time of a task whose forecast does not
        give its own ``seconds``."""
        return self.seconds / max(len(self.forecasts), 1)


def _predict(forecaster, inputs: list[TaskInput]) -> _Predicted | str:
    """The model's forecasts, or the reason they are unusable as a whole (in this process).

    The wall time (``time.perf_counter``) covers ``predict`` and the reading of what it
    returns (a generator does its work then), nothing else: in a model's child process it is
    measured there, so the fork and the sending back are not charged to the model."""
    started = time.perf_counter()
    try:
        forecasts = forecaster.predict(inputs)
    except Exception as exc:  # a model's own bug fails its tasks, not the evaluation
        return _one_line(f"predict raised {type(exc).__name__}: {exc}")
    except SystemExit as exc:  # exit() in a model ends its tasks, not the run
        return _one_line(f"predict called exit({exc.code!r})")
    if forecasts is None:
        return "predict returned None, not a list of forecasts"
    try:
        forecasts = list(forecasts)
    except TypeError:
        return f"predict returned a {type(forecasts).__name__}, not a list of forecasts"
    except Exception as exc:  # a generator that raises while it is read
        return _one_line(f"reading predict's forecasts raised {type(exc).__name__}: {exc}")
    seconds = time.perf_counter() - started
    if len(forecasts) != len(inputs):
        return f"predict returned {len(forecasts)} forecasts for {len(inputs)} tasks"
    return _Predicted(forecasts, seconds)


DEFAULT_MODEL_TIMEOUT_S = 600.0  # per batch of tasks (a chunk): see ``evaluate``
TIMEOUT_REASON = "predict took longer than {timeout:g} s"


class _Unusable:
    """A forecast that cannot be sent back from a model's process, with the reason."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


class _NotNumeric:
    """Stands for a point or quantile forecast that is not numeric (``_forecast_arrays``
    says so, as for the forecast itself)."""


def _forecast_extras(forecast) -> tuple[bool, float | None] | str:
    """A forecast's ``imputed`` flag and its own ``seconds`` (None: not given), as
    ``Forecast`` defines them (absent: False and None), or why they are unusable: ``imputed``
    must be a bool, ``seconds`` None or a finite number >= 0."""
    imputed = getattr(forecast, "imputed", False)
    seconds = getattr(forecast, "seconds", None)
    if not isinstance(imputed, bool | np.bool_):
        return _one_line(f"the forecast's imputed must be True or False, got {imputed!r}", 160)
    if seconds is not None and (
        isinstance(seconds, bool | np.bool_)
        or not isinstance(seconds, int | float | np.integer | np.floating)
        or not math.isfinite(seconds)
        or seconds < 0
    ):
        return _one_line(
            f"the forecast's seconds must be a finite number >= 0 (or None), got {seconds!r}", 160
        )
    return bool(imputed), None if seconds is None else float(seconds)


def _portable(forecast):
    """A forecast as plain arrays (and its ``imputed`` and ``seconds``, checked by
    ``_forecast_extras``) that can be pickled back to the evaluation (a model's own classes
    cannot: its module is not importable by name), or why it is unusable."""
    if forecast is None:
        return None
    if isinstance(forecast, NoForecast):
        return _Unusable(_one_line(f"the model gave no forecast: {forecast.reason}"))
    try:
        if not hasattr(forecast, "point") and not hasattr(forecast, "quantiles"):
            return _Unusable(f"forecast is a {type(forecast).__name__}, not a Forecast")
        fields: dict[str, Any] = {}
        for name in ("point", "quantiles"):
            value = getattr(forecast, name, None)
            if value is not None:
                try:
                    value = np.array(value, dtype=np.float64)
                except (TypeError, ValueError):
                    value = _NotNumeric()
            fields[name] = value
        extras = _forecast_extras(forecast)
    except Exception as exc:  # a property of the model's own class that raises
        return _Unusable(_one_line(f"reading the forecast raised {type(exc).__name__}: {exc}"))
    if isinstance(extras, str):
        return _Unusable(extras)
    fields["imputed"], fields["seconds"] = extras
    return SimpleNamespace(**fields)


def _exit_reason(status: int) -> str:
    """Why the process running a model's predict ended early, from its wait status."""
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        return f"the model's process died during predict ({name}, signal {number})"
    code = os.waitstatus_to_exitcode(status)
    return f"predict ended the model's process (exit status {code}; os._exit?)"


def _predict_in_child(forecaster, inputs: list[TaskInput], timeout: float) -> _Predicted | str:
    """``_predict`` in a forked child process, stopped (killed) after ``timeout`` seconds
    (``usercode.run_in_child``).

    The child has the model and the inputs already (fork); it sends back the forecasts as
    plain arrays (``_portable``). Whatever the model does there (exit, ``os._exit``, a crash,
    an endless loop, writes to memory) ends at most that child: it becomes the reason."""
    result = run_in_child(functools.partial(_portable_predict, forecaster, inputs), timeout)
    if result.ok:
        return result.value
    if result.timed_out:
        return TIMEOUT_REASON.format(timeout=timeout)
    if result.status is not None:
        return _exit_reason(result.status)
    return _one_line(f"the forecasts cannot be sent back: {result.unsent}")


def _portable_predict(forecaster, inputs: list[TaskInput]) -> _Predicted | str:
    """``_predict``, with the forecasts as plain arrays (``_portable``)."""
    result = _predict(forecaster, inputs)
    if isinstance(result, str):
        return result
    return _Predicted([_portable(forecast) for forecast in result.forecasts], result.seconds)


def _isolated(model: Forecaster | str, timeout: float | None) -> bool:
    """Whether ``model`` runs in a child process: models of the user (not the shipped
    baselines) when there is a time limit, where processes can fork."""
    return timeout is not None and not isinstance(model, str) and hasattr(os, "fork")


def _read_only(inputs: list[TaskInput]) -> list[TaskInput]:
    """Shallow copies of the inputs whose arrays cannot be written: a model that writes into
    them gets a ValueError (its own tasks fail), never changes what the next model sees."""
    shown = []
    for given in inputs:
        for name in ("history_target", "history_covariates", "future_covariates"):
            value = getattr(given, name)
            if isinstance(value, np.ndarray):
                value.flags.writeable = False
        shown.append(copy.copy(given))
    return shown


def _model_forecasts(
    model: Forecaster | str,
    inputs: list[TaskInput],
    timeout: float | None,
    given_up: dict[str, str] | None,
) -> _Predicted | str:
    """One model's forecasts of a batch (or why none): read-only inputs; the model's own
    process with a time limit (``_isolated``); a model that ran out of time on an earlier
    batch (``given_up``: label -> reason) is not called again."""
    label = _model_label(model)
    if given_up and label in given_up:
        return given_up[label]
    forecaster = make_forecaster(model) if isinstance(model, str) else model
    batch = _read_only(inputs)
    loading = _load_first(forecaster)  # not timed: the latency column is inference alone
    if loading:
        return loading
    if _isolated(model, timeout) and _forkable(forecaster):
        assert timeout is not None
        return _predict_in_child(forecaster, batch, timeout)
    return _predict(forecaster, batch)


def _load_first(forecaster) -> str:
    """Load a foundation model's weights in this process before its first batch: a batch's
    forked child inherits them instead of reading the checkpoint again, and the loading is
    not counted in the model's ``seconds``. The reason when loading fails (the adapter keeps
    it: every batch of the model fails with it, the checkpoint is not read again), else
    ``""``. Only the toolkit's own adapters are loaded here: a user's model code runs in the
    child alone."""
    from whatif_bench.evaluation.foundation.common import FoundationForecaster

    if not isinstance(forecaster, FoundationForecaster):
        return ""
    try:
        forecaster.loaded()
    except Exception as exc:
        return _one_line(f"loading the model raised {type(exc).__name__}: {exc}")
    return ""


def _forkable(forecaster) -> bool:
    """Whether a model can run in a forked child: not a foundation model on a GPU (CUDA and
    MPS do not survive a fork), which runs in this process, without the time limit."""
    from whatif_bench.evaluation.foundation.common import FoundationForecaster

    return not isinstance(forecaster, FoundationForecaster) or forecaster.device == "cpu"


def _fatal(reason: str) -> bool:
    """A failure after which the model is not called again in this run: it ran out of time,
    or its run killed the worker process (``_run_alone``)."""
    return reason.startswith((TIMEOUT_REASON.split("{", 1)[0], WORKER_DIED))


def _score_forecast(truth: np.ndarray, forecast) -> dict[str, float] | str:
    """wql and wape of one forecast, or the reason it cannot be scored."""
    arrays = _forecast_arrays(forecast, truth.shape[0])
    if isinstance(arrays, str):
        return arrays
    metrics = score(truth, arrays.get("point"), arrays.get("quantiles"))
    if not all(np.isfinite(v) for v in metrics.values()):
        return f"score is not finite ({metrics})"
    return metrics


def _central(forecast, horizon: int) -> np.ndarray | str:
    """A forecast's point forecast, else its median (H,) float64, as WAPE scores it; or the
    reason it is unusable."""
    arrays = _forecast_arrays(forecast, horizon)
    if isinstance(arrays, str):
        return arrays
    if "point" in arrays:
        return arrays["point"]
    return arrays["quantiles"][:, QUANTILE_LEVELS.index(0.5)]


def _forecast_arrays(forecast, horizon: int) -> dict[str, np.ndarray] | str:
    """The point and/or quantile arrays of one forecast (float64, checked), or why not."""
    if forecast is None:
        return "forecast is None"
    if isinstance(forecast, _Unusable):
        return forecast.reason
    if isinstance(forecast, NoForecast):
        return _one_line(f"the model gave no forecast: {forecast.reason}")
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


def _file_identity(path: str | os.PathLike) -> tuple[int, int, int, int]:
    """What tells one corpus file from another at the same path: device, inode, size and
    modification time (a regenerated corpus is renamed into place: a new inode)."""
    stat = os.stat(path)
    return (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)


# This thread's open corpus: (path, identity, reader, covariate units), or absent. A worker
# process opens the corpus once, for its first chunk, and keeps it for the next ones.
_open_corpus = threading.local()


def _corpus_reader(path: str, identity: tuple | None = None) -> tuple[Corpus, dict, tuple]:
    """The open reader of the corpus ``path``, its covariate units (see ``covariate_units``) and
    the file's identity (``_file_identity``); opened on first use in this process (thread) and
    kept for the next chunks.

    ``identity`` is the file's identity when the evaluation started (None: whatever is there
    now). A reader already open goes on reading the file it opened; opening a file that has
    changed since (regenerated in the meantime) or gone is an ``EvaluationError``."""
    from whatif_bench.corpus import Corpus

    cached = getattr(_open_corpus, "value", None)
    if identity is not None and cached is not None and cached[:2] == (path, identity):
        return cached[2], cached[3], identity
    close_corpus_reader()
    if identity is not None:
        try:
            found = _file_identity(path)
        except OSError:
            found = None
        if found != identity:
            raise EvaluationError(
                f"{path}: the corpus changed (or went away) while it was being evaluated; run "
                "the evaluation again"
            )
    corpus = Corpus(path)  # a CorpusError says why a file cannot be read
    try:
        identity = identity or _file_identity(path)
        units = covariate_units(corpus.attrs)
    except BaseException:
        corpus.close()
        raise
    _open_corpus.value = (path, identity, corpus, units)
    return corpus, units, identity


def close_corpus_reader() -> None:
    """Close this thread's open corpus reader, if any."""
    cached = getattr(_open_corpus, "value", None)
    _open_corpus.value = None
    if cached is not None:
        cached[2].close()


def _score_chunk(
    corpus_path: str,
    identity: tuple,
    task_ids: list[str],
    models: list[Forecaster | str],
    timeout: float | None = None,
    given_up: dict[str, str] | None = None,
) -> list[pd.DataFrame]:
    """Forecast and score one chunk of tasks with several models, reading from this process's
    open corpus only what the models see and the truth the metrics need.

    Each frame has ``CHUNK_COLUMNS``: task_id, model, wql, wape, failed (the reason, empty when
    scored), seconds and imputed (``_task_row``)."""
    corpus, units, _ = _corpus_reader(corpus_path, identity)
    return _score_tasks(
        corpus.task_inputs(task_ids, units),
        corpus.ground_truths(task_ids),
        models,
        timeout,
        given_up,
    )


def _score_tasks(
    inputs: list[TaskInput],
    truths: list[np.ndarray],
    models: list[Forecaster | str],
    timeout: float | None = None,
    given_up: dict[str, str] | None = None,
) -> list[pd.DataFrame]:
    """``_score_chunk`` on tasks already read (a dask worker may not see the corpus file):
    each model sees ``inputs`` (read-only; see ``_model_forecasts`` for ``timeout`` and
    ``given_up``); ``truths`` (the future targets, (H,) each) only the metrics."""
    ids = [given.task_id for given in inputs]
    frames = []
    for model in models:
        predicted = _model_forecasts(model, inputs, timeout, given_up)  # copies of the list
        label = _model_label(model)
        rows = [
            {"task_id": task_id, "model": label, **_task_row(truth, predicted, index)}
            for index, (task_id, truth) in enumerate(zip(ids, truths, strict=True))
        ]
        frames.append(_chunk_frame(rows))
    return frames


def _task_row(truth: np.ndarray, predicted: _Predicted | str, index: int) -> dict[str, Any]:
    """The result of forecast ``index`` of a batch: wql, wape, failed, seconds and imputed.

    ``seconds`` is the forecast's own ``seconds`` when it gives one, else the predict call's
    share per task (``_Predicted.share``); a failed task (the batch, the forecast, its
    ``imputed`` or ``seconds`` unusable) has NaN errors and seconds and ``imputed`` False."""
    if isinstance(predicted, str):
        return {**FAILED_VALUES, "failed": predicted}
    forecast = predicted.forecasts[index]
    try:
        metrics = _score_forecast(truth.astype(np.float64), forecast)
        extras = metrics if isinstance(metrics, str) else _forecast_extras(forecast)
    except Exception as exc:
        extras = _one_line(f"scoring raised {type(exc).__name__}: {exc}")
    if isinstance(extras, str):
        return {**FAILED_VALUES, "failed": extras}
    assert isinstance(metrics, dict)
    imputed, seconds = extras
    own = predicted.share if seconds is None else seconds
    return {**metrics, "failed": "", "seconds": own, "imputed": imputed}


def _chunk_frame(rows: list[dict]) -> pd.DataFrame:
    """Rows of ``CHUNK_COLUMNS`` as a chunk's frame, with its column types (``imputed`` bool,
    the numbers float64)."""
    frame = pd.DataFrame(rows, columns=CHUNK_COLUMNS)
    return frame.astype({"wql": "float64", "wape": "float64", "seconds": "float64"}).astype(
        {"imputed": bool}
    )


# A chunk of tasks: the errors, why the task failed (empty: scored), the model's inference
# seconds of it (a measurement; NaN when failed) and whether its forecast was imputed.
CHUNK_COLUMNS = ["task_id", "model", "wql", "wape", "failed", "seconds", "imputed"]
# A chunk written before the per-task timings: read, with ``LEGACY_FILL`` (``_read_chunk``)
LEGACY_CHUNK_COLUMNS = CHUNK_COLUMNS[:5]
LEGACY_FILL = {"seconds": np.nan, "imputed": False}
# What a task that failed holds, but for the reason in ``failed``
FAILED_VALUES = {"wql": np.nan, "wape": np.nan, "seconds": np.nan, "imputed": False}
RELATIONAL_COLUMNS = ["pair_id", "model", *SCORE_COLUMNS, "failed"]
RELATIONAL_CHUNK = CHUNK // 2  # histories per relational chunk: three inputs each


def relational_parts(
    corpus: Corpus, pair_ids: list[str], units: dict | None = None
) -> tuple[list[TaskInput], list[HistoryTruth]]:
    """The inputs of each history's three futures (Replay, Novel, Restraint, history by
    history) and their truths, read from ``corpus``."""
    inputs = {
        future: corpus.task_inputs([f"{p}/{future}" for p in pair_ids], units)
        for future in EVENT_FUTURES
    }
    inputs[RESTRAINT] = corpus.restraint_inputs(pair_ids, units)
    truths = {
        future: corpus.ground_truths([f"{p}/{future}" for p in pair_ids])
        for future in EVENT_FUTURES
    }
    counterfactuals = corpus.counterfactual_futures(pair_ids)
    rows = corpus.pairs.set_index("pair_id").loc[pair_ids]
    batch, made = [], []
    for index, pair_id in enumerate(pair_ids):
        batch += [inputs[future][index] for future in (*EVENT_FUTURES, RESTRAINT)]
        restraint_input = inputs[RESTRAINT][index]
        made.append(
            HistoryTruth(
                pair_id=pair_id,
                counterfactual=counterfactuals[index].astype(np.float64),
                replay=truths["replay"][index].astype(np.float64),
                novel=truths["novel"][index].astype(np.float64),
                event_steps=int(
                    min(rows["event_length"].iloc[index], rows["prediction"].iloc[index])
                ),
                last_value=float(restraint_input.history_target[-1]),
            )
        )
    return batch, made


def _relational_chunk(
    corpus_path: str,
    identity: tuple,
    pair_ids: list[str],
    models: list[Forecaster | str],
    timeout: float | None = None,
    given_up: dict[str, str] | None = None,
) -> list[pd.DataFrame]:
    """Relational scores of one chunk of histories with several models (``_relational_tasks``),
    read from this process's open corpus."""
    corpus, units, _ = _corpus_reader(corpus_path, identity)
    return _relational_tasks(*relational_parts(corpus, pair_ids, units), models, timeout, given_up)


def _relational_tasks(
    inputs: list[TaskInput],
    truths: list[HistoryTruth],
    models: list[Forecaster | str],
    timeout: float | None = None,
    given_up: dict[str, str] | None = None,
) -> list[pd.DataFrame]:
    """Each model forecasts ``inputs`` (three per history, as ``relational_parts`` orders them)
    in one batch; one frame of ``RELATIONAL_COLUMNS`` per model, a row per history. A history
    whose forecasts cannot be used has NaN scores and the reason in ``failed``."""
    futures = (*EVENT_FUTURES, RESTRAINT)
    frames = []
    for model in models:
        predicted = _model_forecasts(model, inputs, timeout, given_up)
        forecasts = predicted if isinstance(predicted, str) else predicted.forecasts
        rows = []
        for index, truth in enumerate(truths):
            failed = forecasts if isinstance(forecasts, str) else ""
            central: dict[str, np.ndarray] = {}
            for offset, future in enumerate(futures):
                if failed:
                    break
                value = _central(forecasts[3 * index + offset], truth.counterfactual.size)
                if isinstance(value, str):
                    failed = f"{future} forecast: {value}"
                else:
                    central[future] = value
            scores = (
                dict.fromkeys(SCORE_COLUMNS, np.nan) if failed else history_scores(central, truth)
            )
            label = _model_label(model)
            rows.append({"pair_id": truth.pair_id, "model": label, **scores, "failed": failed})
        frames.append(pd.DataFrame(rows, columns=RELATIONAL_COLUMNS))
    return frames


def _write_chunk(frame: pd.DataFrame, path: Path) -> None:
    """Write a chunk atomically (no lock of its own: the folder lock is already held)."""
    with atomic_output(path, lock=False) as tmp:
        frame.to_parquet(tmp, index=False)


def _read_chunk(
    path: Path, ids: list[str], label: str, columns: list[str] = CHUNK_COLUMNS
) -> tuple[pd.DataFrame | None, str | None, bool]:
    """A chunk on disk if it is complete and clean; else None (recompute) and why, if notable;
    and whether it is of the format before per-task timings (``LEGACY_CHUNK_COLUMNS``).

    ``columns``: ``CHUNK_COLUMNS`` (a chunk of tasks, ``ids`` its task ids) or
    ``RELATIONAL_COLUMNS`` (a chunk of histories, ``ids`` their pair ids). A chunk of tasks of
    the older format is read, with ``seconds`` NaN (not measured) and ``imputed`` False (no
    forecast could be marked imputed then): its scores are the same as a new run's."""
    if not path.exists():
        return None, None, False
    try:
        frame = pd.read_parquet(path)
    except Exception as exc:  # truncated, empty or not parquet at all
        return None, f"{path}: unreadable ({_one_line(exc, 120)}); recomputing it", False
    legacy = columns == CHUNK_COLUMNS and list(frame.columns) == LEGACY_CHUNK_COLUMNS
    if legacy:
        frame = frame.assign(**LEGACY_FILL).astype({"seconds": "float64", "imputed": bool})
    if (
        list(frame.columns) != columns
        or frame[columns[0]].tolist() != ids
        or set(frame["model"]) != {label}
    ):
        return None, f"{path}: does not hold this chunk's results; recomputing it", False
    if (frame["failed"] != "").any():
        return None, None, False  # failed tasks are retried
    return frame, None, legacy


def _saved_and_pending(
    chunks: list[list[str]],
    models: list,
    labels: list[str],
    path_of: Callable[[str, int], Path],
    note: Callable[[str], None],
    columns: list[str] = CHUNK_COLUMNS,
) -> tuple[dict[tuple[str, int], pd.DataFrame], list]:
    """The chunks already saved (``(label, index) -> frame``) and the work left: ``(index,
    chunk, [(model, label), ...])`` for every chunk some model still needs, in chunk order.
    ``path_of(label, index)`` is a chunk's file; ``note`` receives why a saved chunk is redone."""
    done: dict[tuple[str, int], pd.DataFrame] = {}
    todo = []
    legacy: dict[str, int] = {}  # label -> chunks of the format before per-task timings
    for index, chunk in enumerate(chunks):
        pending = []
        for model, label in zip(models, labels, strict=True):
            frame, why, old = _read_chunk(path_of(label, index), chunk, label, columns)
            if why:
                note(why)
            if frame is None:
                pending.append((model, label))
            else:
                done[label, index] = frame
                legacy[label] = legacy.get(label, 0) + old
        if pending:
            todo.append((index, chunk, pending))
    for label, count in legacy.items():
        if count:
            note(
                f"model {label!r}: {count:,} saved chunk(s) in {path_of(label, 0).parent} "
                "predate per-task timings; their tasks are kept with seconds NaN (left out of "
                "seconds_per_task) and imputed False"
            )
    return done, todo


MAX_WORKER_DEATHS = 3  # deaths of a worker of the full pool; then one chunk at a time


@dataclass
class _Pass:
    """One pass over chunks (the tasks', or the relational histories'), as it is saved: each
    model's frame of a chunk goes to ``path_of(label, index)`` and into ``done``; ``columns``
    are a frame's; ``given_up`` (label -> reason) holds the models not called again (``_fatal``);
    ``bar`` counts the chunks finished."""

    done: dict[tuple[str, int], pd.DataFrame]
    path_of: Callable[[str, int], Path]
    columns: list[str]
    given_up: dict[str, str]
    note: Callable[[str], None]
    bar: Any
    left: dict[int, int] = field(default_factory=dict)  # chunk index -> models not saved yet

    def save(self, unit: tuple, frames: list[pd.DataFrame]) -> None:
        """Write the frames of ``unit`` (``(index, ids, [(model, label), ...])``, a model's
        frame each); a model with a fatal failure enters ``given_up``."""
        index, _, pending = unit
        for (_, label), frame in zip(pending, frames, strict=True):
            _write_chunk(frame, self.path_of(label, index))
            self.done[label, index] = frame
            if label not in self.given_up:
                fatal = [reason for reason in frame["failed"] if reason and _fatal(reason)]
                if fatal:
                    self.given_up[label] = f"{fatal[0]} (on an earlier batch; not called again)"
        self.left[index] -= len(pending)
        if self.left[index] == 0:
            self.bar.update()

    def fail(self, unit: tuple, reason: str) -> None:
        """Save every task (history) of ``unit`` as failed with ``reason``, for its models."""
        index, ids, pending = unit
        self.save(unit, [_failed_frame(ids, label, reason, self.columns) for _, label in pending])


def _failed_frame(ids: list[str], label: str, reason: str, columns: list[str]) -> pd.DataFrame:
    """A model's frame of a chunk in which every task (history) of ``ids`` failed with
    ``reason``: NaN scores (and a task's ``FAILED_VALUES``), as ``_score_tasks`` and
    ``_relational_tasks`` write them."""
    if columns == CHUNK_COLUMNS:
        rows = [{"task_id": i, "model": label, **FAILED_VALUES, "failed": reason} for i in ids]
        return _chunk_frame(rows)
    scores = dict.fromkeys(columns[2:-1], np.nan)
    rows = [{columns[0]: i, "model": label, **scores, "failed": reason} for i in ids]
    return pd.DataFrame(rows, columns=columns)


def _save_results(
    pool,
    function: Callable,
    call_of: Callable[[tuple], tuple],
    todo: list,
    state: _Pass,
    labels: list[str],
    n_chunks: int,
) -> list[pd.DataFrame]:
    """Compute the work of ``todo`` (``(index, ids, [(model, label), ...])`` per chunk, as
    ``_saved_and_pending`` gives it): ``function(*call_of(unit))`` on ``pool``
    (``_run_pool``), each result saved as it comes (``state.save``); then every chunk's
    frame, model by model and chunk by chunk. A model that ran out of time or killed its
    worker (``_fatal``) enters ``state.given_up``: the chunks sent out after this are not
    given to it."""
    state.left = {index: len(pending) for index, _, pending in todo}
    _run_pool(pool, function, call_of, todo, state)
    state.bar.close()
    return [state.done[label, index] for label in labels for index in range(n_chunks)]


def _run_pool(
    pool, function: Callable, call_of: Callable[[tuple], tuple], todo: list, state: _Pass
) -> None:
    """Run every unit of ``todo`` on ``pool`` and save its result, in order.

    A local worker process that dies (``WorkerDied``: the OOM killer, a kill, a model run in
    the worker itself that ends or crashes it) loses the calls in flight, never what was
    saved. The rest runs again in new worker processes, the first unit not saved alone
    first (``_run_alone``: a model whose run alone kills its worker fails there and is given
    up); a death that does not repeat loses nothing. After ``MAX_WORKER_DEATHS`` deaths of
    a worker of the full pool, the rest runs one unit at a time. A Ctrl-C stops it all."""
    queue = list(todo)
    deaths = 0
    while queue:
        if deaths >= MAX_WORKER_DEATHS:
            _run_alone(pool, function, call_of, queue.pop(0), state)
            continue
        batch, saved = list(queue), 0
        try:
            for frames in pool.ordered(function, (call_of(unit) for unit in batch)):
                state.save(batch[saved], frames)
                saved += 1
            return
        except WorkerDied as died:
            del queue[:saved]
            deaths += 1
            state.note(
                f"{died.reason}; chunk {queue[0][0]} and the ones after it run again in new "
                "worker processes, that chunk alone first"
                + ("; the rest one at a time" if deaths == MAX_WORKER_DEATHS else "")
            )
            _run_alone(pool, function, call_of, queue.pop(0), state)


def _run_alone(
    pool, function: Callable, call_of: Callable[[tuple], tuple], unit: tuple, state: _Pass
) -> None:
    """Run ``unit`` by itself in a worker process; if that dies too, each of its models by
    itself: a model whose run kills its worker then fails the chunk with the reason (and is
    not called again)."""
    try:
        _run_one(pool, function, call_of, unit, state)
        return
    except WorkerDied as died:
        if len(unit[2]) == 1:
            _blame(unit, died.reason, state)
            return
    index, ids, pending = unit
    for model_and_label in pending:
        single = (index, ids, [model_and_label])
        try:
            _run_one(pool, function, call_of, single, state)
        except WorkerDied as died:
            _blame(single, died.reason, state)


def _run_one(
    pool, function: Callable, call_of: Callable[[tuple], tuple], unit: tuple, state: _Pass
) -> None:
    """Run ``unit`` alone on ``pool`` and save its result."""
    for frames in pool.ordered(function, [call_of(unit)]):
        state.save(unit, frames)


def _blame(unit: tuple, reason: str, state: _Pass) -> None:
    """Fail the one model of ``unit``, whose run alone killed its worker process."""
    index, _, [(_, label)] = unit
    state.note(
        f"model {label!r} killed its worker process again when chunk {index} ran it alone: "
        f"{reason}; its tasks there fail and it is not called again"
    )
    state.fail(unit, reason)


def _unit_models(unit: tuple) -> list[Forecaster | str]:
    """The models of a unit of work ``(index, ids, [(model, label), ...])``."""
    return [model for model, _ in unit[2]]


def _manifest(
    corpus_path: Path, attrs: dict, tasks: pd.DataFrame, subset: float | None, seed: int
) -> dict:
    digest = hashlib.sha256("\n".join(tasks["task_id"]).encode()).hexdigest()
    return {
        "corpus": str(corpus_path.resolve()),
        "corpus_baselines_hash": attrs.get("baselines_hash"),
        "corpus_registry_hash": attrs.get("registry_hash"),
        "corpus_seed": attrs.get("master_seed"),
        "subset": subset,
        "subset_seed": seed,
        "tasks": len(tasks),
        "tasks_hash": digest,
    }


def _read_json(path: Path) -> dict:
    """A JSON object from ``path``, or ``EvaluationError`` naming the file."""
    try:
        value = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        why = "empty" if path.is_file() and path.stat().st_size == 0 else _one_line(exc, 120)
        raise EvaluationError(
            f"{path}: not a readable evaluation manifest ({why}); delete it or use a new --out"
        ) from None
    if not isinstance(value, dict):
        raise EvaluationError(
            f"{path}: not an evaluation manifest (a JSON object); delete it or use a new --out"
        )
    return value


@contextlib.contextmanager
def _lock_folder(out: Path) -> Iterator[None]:
    """Hold ``out/.evaluation.lock`` so two evaluations never write the same folder."""
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(output_lock(out / "evaluation"))
        except OutputLockedError:
            raise OutputLockedError(
                f"{out}: another whatif evaluate is writing into this folder; wait for it to "
                "finish or choose another --out"
            ) from None
        yield


EVALUATION = "evaluation"  # the kind of an evaluation folder's identity record (outputs)
_LOCK_NAME = lock_path(Path("evaluation")).name  # what _lock_folder leaves in the folder
_NEW_FOLDER = "choose a new or empty folder (or an earlier whatif evaluate's, to resume it)"


def check_out_folder(
    out: str | os.PathLike, corpus_path: str | os.PathLike, create: bool = True
) -> Path:
    """``out`` as a folder that exists and can be written, or a clear ``OutputError``;
    ``create=False`` checks it without creating anything.

    An existing folder must be empty (but for the lock file ``_lock_folder`` leaves) or hold
    this toolkit's identity record of kind ``evaluation`` (``outputs.read_identity``: an
    evaluation to resume); a folder of anyone else's, or another whatif output (an export, a
    stream, a diagnosis), is refused before anything is written in it. A folder without the
    record gets it when it is created (``create``), so other commands never replace it.
    """
    if str(out).strip() == "":
        raise OutputError("the output folder (--out) is empty; give a folder for the results")
    out = check_output_path(out, inputs=[corpus_path], folder=True)
    if out.is_dir():
        check_folder_kind(
            out, "whatif evaluate", EVALUATION, "write into", [_LOCK_NAME], _NEW_FOLDER
        )
    if not create:
        return out
    make_folder(out)
    if read_identity(out) is None:
        try:
            write_identity(out, EVALUATION)
        except OSError as exc:
            raise os_error(exc, out) from None
    return out


def _new_folders(out: str | os.PathLike) -> list[Path]:
    """``out`` and those of its parents that do not exist yet, deepest first: the folders
    ``check_out_folder`` is about to make."""
    made = []
    for folder in (Path(out), *Path(out).parents):
        if os.path.lexists(folder):
            break
        made.append(folder)
    return made


def _remove_unused(out: Path, made: list[Path]) -> bool:
    """Remove the folders ``made`` by this run (``_new_folders``) while ``out`` holds nothing
    but its identity record and lock file; a folder holding anything else is kept. Returns
    False (an exit callback that never swallows the exception)."""
    if not made:
        return False
    try:
        names = {entry.name for entry in out.iterdir()}
    except OSError:
        return False
    if not names <= {IDENTITY, _LOCK_NAME}:
        return False
    for name in names:
        with contextlib.suppress(OSError):
            (out / name).unlink()
    for folder in made:
        try:
            folder.rmdir()  # only ever an empty folder
        except OSError:
            break
    return False


def _prepare_model_folder(
    folder: Path, label: str, model: Forecaster | str, log: Callable[[str], None]
) -> None:
    """Make ``folder`` hold results of this very model: a changed fingerprint deletes the old
    chunks (they were scored by another version of the model)."""
    make_folder(folder)
    current = fingerprint(model)
    meta = folder / "model.json"
    try:
        stored = json.loads(meta.read_text())
    except (OSError, ValueError):
        stored = None
    if isinstance(stored, dict) and stored.get("id") == current["id"]:
        return
    old = sorted(folder.glob("chunk-*.parquet"))
    if old:
        was = stored.get("id") if isinstance(stored, dict) else "unknown"
        log(
            f"model {label!r} changed since its results in {folder} were written (fingerprint "
            f"{was} -> {current['id']}); recomputing them"
        )
        for path in old:
            path.unlink()
    write_text_atomic(meta, json.dumps(current, indent=1) + "\n", lock=False)


def evaluate(
    corpus_path: str | os.PathLike,
    models: list[Forecaster | str],
    out: str | os.PathLike,
    subset: float | None = None,
    jobs: int = 1,
    reference: str = "naive",
    seed: int = 0,
    progress: bool = True,
    log: Callable[[str], None] | None = None,
    cluster=None,
    relational: bool = False,
    model_timeout: float | None = DEFAULT_MODEL_TIMEOUT_S,
    task_ids: Sequence[str] | None = None,
) -> EvaluationResult:
    """Score every model on the corpus (or a stratified subset, or the tasks ``task_ids``) and
    write the reports to ``out``.

    ``task_ids`` restricts the evaluation to exactly these tasks of the corpus (scored in the
    corpus's order, whatever the order given), instead of ``subset``: giving both, an empty
    list, repeats or an id the corpus does not hold (a dropped pair's, another corpus's) is an
    ``EvaluationError`` naming it. The manifest of ``out`` records the selection (its tasks'
    hash), so a folder is resumed only by the same selection.

    Each task's row holds the model's inference ``seconds`` and whether its forecast is
    ``imputed`` (``Forecast``); the leaderboard has their summaries ``seconds_per_task`` and
    ``num_imputed`` next to ``num_tasks`` and ``num_failed``. An imputed forecast is scored as
    the model's own: it is not a failure. ``seconds`` is measured, so it differs from run to
    run; every other output is the same bit for bit for the same corpus, models and options
    (``TIMING_COLUMNS``).

    ``log`` receives notes as they happen (a changed model or an unreadable chunk recomputed);
    they are also in ``result.notes``. Model failures do not raise: see ``result.failures``.
    ``cluster`` (a ``whatif_bench.cluster.DaskCluster`` or a connected ``distributed.Client``)
    scores the chunks on a dask cluster instead of ``jobs`` local processes: it is connected
    before ``out`` is created; this process reads the tasks' inputs and truths and sends them
    with each chunk, so the workers need no access to the corpus file. Local worker processes
    open the corpus once each and read only the inputs and truths of their chunks. The results
    are the same either way.

    ``relational=True`` also scores every history of the selection (a pair with a selected
    task) on the relational scores (docs/RELATIONAL.md): each model forecasts the history's
    Replay, Novel and Restraint inputs in one batch; ``relational.parquet`` holds a row per
    history and model, and the leaderboard and ``slices/relational_<axis>`` their summaries.

    Models cannot harm each other or the run (docs/RELIABILITY.md, section "Models cannot harm
    each other"): every model gets read-only input arrays (a write is a ValueError that fails
    that model's batch). A model that is not a shipped baseline runs each batch's ``predict``
    in a forked child process, killed after ``model_timeout`` seconds (default
    ``DEFAULT_MODEL_TIMEOUT_S``): then that batch and the model's later ones fail with
    "predict took longer than N s". A model that calls ``exit()``, ``os._exit`` or crashes
    its process (a segfault, a kill) fails that batch with the reason; the others go on.
    ``model_timeout=None`` runs every model in the worker process itself, without a limit
    (for a model that cannot run in a forked process, e.g. one that has initialised CUDA).

    A local worker process (``jobs`` > 1) that dies (the OOM killer, a kill, a model run in
    the worker itself that ends or crashes it) stops nothing: the chunks scored are kept and
    the rest runs again in new workers, the first chunk not scored alone first, then, if that
    dies too, each of its models alone. A model whose run alone kills its worker fails that
    chunk's tasks with the reason ("the worker process died (killed by signal 9 SIGKILL: out
    of memory, or killed)") and is not called again; a death that does not repeat loses
    nothing. After ``MAX_WORKER_DEATHS`` deaths the rest runs one chunk at a time. Each death
    is a note. A Ctrl-C stops the whole run; the chunks scored are kept.
    """
    from whatif_bench.cluster import open_pool

    if model_timeout is not None and (
        isinstance(model_timeout, bool)
        or not isinstance(model_timeout, int | float)
        or not math.isfinite(model_timeout)
        or model_timeout <= 0
    ):
        raise EvaluationError(
            f"model_timeout must be a finite number of seconds > 0 (or None: no limit), got "
            f"{model_timeout!r}"
        )

    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise EvaluationError(f"jobs must be a positive integer, got {jobs!r}")
    if cluster is not None and jobs != 1:
        raise EvaluationError(f"give jobs ({jobs} local processes) or a cluster, not both")
    labels = check_models(models)
    if reference not in labels:
        raise EvaluationError(
            f"the reference model {reference!r} must be one of the models {labels}"
        )
    ids = check_task_ids(task_ids, subset)
    check_out_folder(out, corpus_path, create=False)
    with open_pool(jobs, cluster) as pool:
        return _run_evaluation(
            corpus_path,
            models,
            labels,
            out,
            subset,
            reference,
            seed,
            pool,
            progress,
            log,
            relational,
            model_timeout,
            ids,
        )


def _run_evaluation(
    corpus_path,
    models,
    labels,
    out,
    subset,
    reference,
    seed,
    pool,
    progress,
    log,
    relational,
    timeout=None,
    task_ids=None,
) -> EvaluationResult:
    """``evaluate`` once the models are checked and the pool is ready."""
    from tqdm import tqdm

    from whatif_bench.evaluation.report import write_reports

    corpus_path = Path(corpus_path)
    notes: list[str] = []

    def note(message: str) -> None:
        notes.append(message)
        if log is not None:
            log(message)

    with contextlib.ExitStack() as stack:
        # this process's reader: the index here, and the chunks when they run in this process;
        # opened before the folder is made, so a corpus that cannot be read leaves nothing
        stack.callback(close_corpus_reader)
        corpus, units, identity = _corpus_reader(str(corpus_path))
        made = _new_folders(out)
        out = check_out_folder(out, corpus_path)
        # a run that fails before writing anything removes the folders it made (only those)
        stack.push(lambda failed, *_: failed is not None and _remove_unused(out, made))
        stack.enter_context(_lock_folder(out))
        frame, attrs = corpus.tasks_frame(), corpus.attrs
        if frame.empty:
            raise EvaluationError(f"{corpus_path} holds no tasks")
        if task_ids is None:
            tasks = select_tasks(frame, subset, seed)
        else:
            tasks = tasks_with_ids(frame, task_ids, corpus_path)
        if subset is not None and log is not None:
            log(  # said, but not a note of the result: nothing went wrong
                f"--subset {subset:g} selects {len(tasks):,} of {len(frame):,} tasks "
                f"({len(tasks) / len(frame):.1%}): ceil({subset:g} x size) of each stratum"
            )
        manifest = _manifest(corpus_path, attrs, tasks, subset, seed)
        manifest_path = out / "manifest.json"
        if manifest_path.exists():
            if _read_json(manifest_path) != manifest:
                raise EvaluationError(
                    f"{out} holds results of another evaluation (corpus or selection differ); "
                    "use a new --out"
                )
        else:
            write_text_atomic(manifest_path, json.dumps(manifest, indent=1), lock=False)

        ids = tasks["task_id"].tolist()
        chunks = [ids[i : i + CHUNK] for i in range(0, len(ids), CHUNK)]
        folders = {label: out / "per_task" / label for label in labels}
        for model, label in zip(models, labels, strict=True):
            _prepare_model_folder(folders[label], label, model, note)
        done, todo = _saved_and_pending(
            chunks, models, labels, lambda label, index: folders[label] / _chunk_name(index), note
        )
        bar = tqdm(total=len(todo), desc="evaluating", unit="chunk", disable=not progress)
        # models that ran out of time: label -> reason; each chunk is sent with what is known
        # when it is sent (the calls are generated lazily)
        given_up: dict[str, str] = {}
        if pool.distributed:  # read here, a few chunks ahead of the workers
            function: Callable = _score_tasks

            def call_of(unit: tuple) -> tuple:
                _, c, _ = unit
                inputs, truths = corpus.task_inputs(c, units), corpus.ground_truths(c)
                return (inputs, truths, _unit_models(unit), timeout, dict(given_up))

        else:  # each worker process opens the corpus once (_corpus_reader)
            function = _score_chunk

            def call_of(unit: tuple) -> tuple:
                path = str(corpus_path)
                return (path, identity, unit[1], _unit_models(unit), timeout, dict(given_up))

        state = _Pass(
            done, lambda lb, i: folders[lb] / _chunk_name(i), CHUNK_COLUMNS, given_up, note, bar
        )
        parts = _save_results(pool, function, call_of, todo, state, labels, len(chunks))
        per_task = pd.concat(parts, ignore_index=True).merge(tasks, on="task_id", how="inner")
        with atomic_output(out / "per_task.parquet", lock=False) as tmp:
            per_task.to_parquet(tmp, index=False)
        per_history = None
        if relational:
            per_history = _run_relational(
                corpus,
                units,
                str(corpus_path),
                identity,
                tasks,
                models,
                labels,
                folders,
                pool,
                progress,
                note,
                timeout,
                given_up,
            )
            with atomic_output(out / "relational.parquet", lock=False) as tmp:
                per_history.to_parquet(tmp, index=False)
        board = write_reports(per_task, reference, out, per_history)
    return EvaluationResult(per_task, board, reference, out, notes, per_history)


def _run_relational(
    corpus,
    units,
    corpus_path,
    identity,
    tasks,
    models,
    labels,
    folders,
    pool,
    progress,
    note,
    timeout=None,
    given_up=None,
) -> pd.DataFrame:
    """Relational scores of every history with a selected task, chunk by chunk (resumable as
    the task chunks are: ``per_task/<model>/chunk-relational-<n>.parquet``); one row per
    history and model, with the history's axis columns."""
    from tqdm import tqdm

    histories = tasks.drop_duplicates("pair_id").sort_values("row", kind="stable")
    ids = histories["pair_id"].tolist()
    chunks = [ids[i : i + RELATIONAL_CHUNK] for i in range(0, len(ids), RELATIONAL_CHUNK)]
    done, todo = _saved_and_pending(
        chunks,
        models,
        labels,
        lambda label, index: folders[label] / _relational_chunk_name(index),
        note,
        RELATIONAL_COLUMNS,
    )
    bar = tqdm(total=len(todo), desc="relational", unit="chunk", disable=not progress)
    given_up = {} if given_up is None else given_up
    if pool.distributed:
        function: Callable = _relational_tasks

        def call_of(unit: tuple) -> tuple:
            inputs_and_truths = relational_parts(corpus, unit[1], units)
            return (*inputs_and_truths, _unit_models(unit), timeout, dict(given_up))

    else:
        function = _relational_chunk

        def call_of(unit: tuple) -> tuple:
            return (corpus_path, identity, unit[1], _unit_models(unit), timeout, dict(given_up))

    state = _Pass(
        done,
        lambda label, index: folders[label] / _relational_chunk_name(index),
        RELATIONAL_COLUMNS,
        given_up,
        note,
        bar,
    )
    parts = _save_results(pool, function, call_of, todo, state, labels, len(chunks))
    axes = ["pair_id", "target", *pair_columns()]
    return pd.concat(parts, ignore_index=True).merge(histories[axes], on="pair_id", how="inner")


def _chunk_name(index: int) -> str:
    return f"chunk-{index:05d}.parquet"


def _relational_chunk_name(index: int) -> str:
    return f"chunk-relational-{index:05d}.parquet"
