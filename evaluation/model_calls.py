"""Calling one model on one batch of inputs without letting it harm the run: read-only inputs,
a forked child process with a time limit for a model of the user, and the failures after which
a model is not called again (docs/RELIABILITY.md, section "Models cannot harm each other")."""

from __future__ import annotations

import copy
import functools
import os
import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from whatif_bench.cluster import WORKER_DIED
from whatif_bench.evaluation.forecast_checks import Predicted, one_line, portable, predict
from whatif_bench.evaluation.forecasters import Forecaster, TaskInput, make_forecaster
from whatif_bench.usercode import run_in_child

DEFAULT_MODEL_TIMEOUT_S = 600.0  # per batch of tasks (a chunk): see ``evaluate``
TIMEOUT_REASON = "predict took longer than {timeout:g} s"


@dataclass(frozen=True)
class ModelCalls:
    """How the models of one chunk are called: ``timeout``, the time limit (s) of one predict
    call of a model of the user (None: no limit, in the worker process itself), and
    ``given_up``, label -> reason of the models not called again (``fatal``), as known when
    the chunk was sent."""

    timeout: float | None = None
    given_up: Mapping[str, str] = field(default_factory=dict)


def model_label(model: Forecaster | str) -> str:
    """A model's name in the results: a baseline's name, or a model object's ``name``."""
    return model if isinstance(model, str) else model.name


def exit_reason(status: int) -> str:
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


def predict_in_child(forecaster: Any, inputs: list[TaskInput], timeout: float) -> Predicted | str:
    """``predict`` in a forked child process, stopped (killed) after ``timeout`` seconds
    (``usercode.run_in_child``).

    The child has the model and the inputs already (fork); it sends back the forecasts as
    plain arrays (``forecast_checks.portable``). Whatever the model does there (exit,
    ``os._exit``, a crash, an endless loop, writes to memory) ends at most that child: it
    becomes the reason."""
    result = run_in_child(functools.partial(portable_predict, forecaster, inputs), timeout)
    if result.ok:
        return result.value
    if result.timed_out:
        return TIMEOUT_REASON.format(timeout=timeout)
    if result.status is not None:
        return exit_reason(result.status)
    return one_line(f"the forecasts cannot be sent back: {result.unsent}")


def portable_predict(forecaster: Any, inputs: list[TaskInput]) -> Predicted | str:
    """``predict``, with the forecasts as plain arrays (``forecast_checks.portable``)."""
    result = predict(forecaster, inputs)
    if isinstance(result, str):
        return result
    return Predicted([portable(forecast) for forecast in result.forecasts], result.seconds)


def isolated(model: Forecaster | str, timeout: float | None) -> bool:
    """Whether ``model`` runs in a child process: models of the user (not the shipped
    baselines) when there is a time limit, where processes can fork."""
    return timeout is not None and not isinstance(model, str) and hasattr(os, "fork")


def read_only(inputs: list[TaskInput]) -> list[TaskInput]:
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


def model_forecasts(
    model: Forecaster | str, inputs: list[TaskInput], calls: ModelCalls
) -> Predicted | str:
    """One model's forecasts of a batch (or why none): read-only inputs; the model's own
    process with a time limit (``isolated``); a model that ran out of time on an earlier
    batch (``calls.given_up``) is not called again."""
    label = model_label(model)
    if calls.given_up and label in calls.given_up:
        return calls.given_up[label]
    forecaster = make_forecaster(model) if isinstance(model, str) else model
    batch = read_only(inputs)
    loading = load_first(forecaster)  # not timed: the latency column is inference alone
    if loading:
        return loading
    if isolated(model, calls.timeout) and forkable(forecaster):
        assert calls.timeout is not None
        return predict_in_child(forecaster, batch, calls.timeout)
    return predict(forecaster, batch)


def load_first(forecaster: Any) -> str:
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
        return one_line(f"loading the model raised {type(exc).__name__}: {exc}")
    return ""


def forkable(forecaster: Any) -> bool:
    """Whether a model can run in a forked child: not a foundation model on a GPU (CUDA and
    MPS do not survive a fork), which runs in this process, without the time limit."""
    from whatif_bench.evaluation.foundation.common import FoundationForecaster

    return not isinstance(forecaster, FoundationForecaster) or forecaster.device == "cpu"


def fatal(reason: str) -> bool:
    """A failure after which the model is not called again in this run: it ran out of time,
    or its run killed the worker process (a worker death blamed on the model)."""
    return reason.startswith((TIMEOUT_REASON.split("{", 1)[0], WORKER_DIED))
