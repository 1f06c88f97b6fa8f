"""A task as a flat dict of arrays for training code, and the padding that gives tasks one shape.

``task_item`` turns a ``Task`` (streamed or read from a corpus) into the item that
``StreamDataset``, ``CorpusDataset`` and ``ForecastEnv`` work with; it needs numpy only.
Values are in the target's and covariates' physical units; the time axis counts steps of
``interval_s`` seconds. History arrays end at the last observed step, future arrays start at the
first forecast step, so padding puts zeros *before* a history and *after* a future.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from whatif_bench.corpus import Task, start_text
from whatif_bench.corpus.axes import E_SETTINGS, future_choices
from whatif_bench.stream.distribution import CONTEXT_LABELS
from whatif_bench.stream.slot_blocks import FUTURE_ARRAYS, HISTORY_ARRAYS
from whatif_bench.stream.task_stream import StreamError

K_MAX = 5  # the most covariates a task has (axes.K_VALUES)
ITEM_DTYPE = np.float32

# whole numbers (collated into int64 tensors)
INT_FIELDS = (
    "index",
    "k",
    "context_length",
    "prediction_length",
    "event_length",
    "interval_s",
    "start_step",
    "future_index",
    "c_index",
    "e_index",
)
# text and names (collated into lists)
TEXT_FIELDS = (
    "task_id",
    "simulator",
    "target",
    "unit",
    "future",
    "c_label",
    "e_setting",
    "world",
    "start",
    "covariates",
)


def task_item(task: Task, index: int) -> dict:
    """The item of one task: its arrays, its axes as small integers, and its description.

    Parameters
    ----------
    task : Task
        A streamed or corpus task.
    index : int
        Its position: the stream slot, or its place in a corpus view's ``task_ids()``.

    Returns
    -------
    dict
        float32 numpy arrays ``history_target`` (C,), ``history_covariates`` (K, C),
        ``future_covariates`` (K, H), ``future_target`` (H,), ``counterfactual_history`` (C,)
        and ``counterfactual_future`` (H,), in physical units; then ``task_fields(task,
        index)``.
    """
    item: dict[str, Any] = {
        name: np.ascontiguousarray(getattr(task, name), dtype=ITEM_DTYPE)
        for name in (*HISTORY_ARRAYS, *FUTURE_ARRAYS)
    }
    item.update(task_fields(task, index))
    return item


def task_fields(task: Task, index: int) -> dict:
    """A task's item without its arrays: ints ``index``, ``k``, ``context_length`` (C),
    ``prediction_length`` (H), ``event_length`` (steps), ``interval_s`` (seconds a step),
    ``start_step`` (window start in its baseline), ``future_index`` (0 replay, 1 novel, 2
    restraint), ``c_index`` (0..3 for C1..C4), ``e_index`` (0 Efew, 1 Emax); strings
    ``task_id``, ``simulator``, ``target``, ``unit`` (the target's), ``future``, ``c_label``,
    ``e_setting``, ``world``, ``start`` (ISO time of the first history step); ``covariates``,
    the K covariate names."""
    return {
        "index": int(index),
        "k": int(task.k),
        "context_length": task.context_length,
        "prediction_length": task.prediction_length,
        "event_length": int(task.event_length),
        "interval_s": int(task.interval_s),
        "start_step": int(task.start_step),
        "future_index": future_choices().index(task.future),
        "c_index": CONTEXT_LABELS.index(task.c_label),
        "e_index": E_SETTINGS.index(task.e_setting),
        "task_id": task.task_id,
        "simulator": task.simulator,
        "target": task.target,
        "unit": task.units.get(task.target, ""),
        "future": task.future,
        "c_label": task.c_label,
        "e_setting": task.e_setting,
        "world": task.world,
        "start": start_text(task.baseline_start, task.start_step * task.interval_s),
        "covariates": tuple(task.covariates),
    }


def pad_history(values: np.ndarray, length: int, rows: int | None = None) -> np.ndarray:
    """``values`` (T,) or (K, T) left-padded with zeros to ``length`` steps (see
    ``place_history``); ``rows`` pads the K axis with zero rows at the end. Returns float32
    (length,) or (rows, length)."""
    out = _zeros(values, length, rows)
    place_history(out, values)
    return out


def pad_future(values: np.ndarray, length: int, rows: int | None = None) -> np.ndarray:
    """``values`` (T,) or (K, T) right-padded with zeros to ``length`` steps (see
    ``place_future``); ``rows`` pads the K axis. Returns float32 (length,) or (rows, length)."""
    out = _zeros(values, length, rows)
    place_future(out, values)
    return out


def place_history(out: np.ndarray, values: np.ndarray) -> None:
    """Write a history ``values`` (T,) or (K, T) into the zeroed ``out`` (L,) or (R, L), R >= K,
    so its last step lands on ``out``'s last; a history longer than L keeps its latest L
    steps."""
    length = out.shape[-1]
    values = _as_rows(values[..., max(values.shape[-1] - length, 0) :])
    rows, steps = values.shape
    _check_rows(rows, out)
    _as_rows(out)[:rows, length - steps :] = values


def place_future(out: np.ndarray, values: np.ndarray) -> None:
    """Write a future ``values`` (T,) or (K, T) into the zeroed ``out`` (L,) or (R, L), so its
    first step lands on ``out``'s first. A future longer than L is a ``StreamError`` (a
    forecast cannot be scored on steps it does not cover)."""
    values = _as_rows(values)
    rows, steps = values.shape
    if steps > out.shape[-1]:
        raise StreamError(
            f"a future of {steps} steps does not fit in {out.shape[-1]} steps; "
            "raise the horizon maximum"
        )
    _check_rows(rows, out)
    _as_rows(out)[:rows, :steps] = values


def history_mask(observed: int, length: int) -> np.ndarray:
    """(length,) bool: ``True`` on the last ``min(observed, length)`` steps (the real history)."""
    mask = np.zeros(length, dtype=bool)
    mask[max(length - observed, 0) :] = True
    return mask


def future_mask(observed: int, length: int) -> np.ndarray:
    """(length,) bool: ``True`` on the first ``observed`` steps (the real future)."""
    mask = np.zeros(length, dtype=bool)
    mask[:observed] = True
    return mask


def _as_rows(values: np.ndarray) -> np.ndarray:
    """A (T,) array as a (1, T) view; a (K, T) array as itself."""
    return values.reshape(1, -1) if values.ndim == 1 else values


def _check_rows(rows: int, out: np.ndarray) -> None:
    if out.ndim == 2 and rows > out.shape[0]:
        raise StreamError(f"{rows} covariates do not fit in {out.shape[0]} rows")


def _zeros(values: np.ndarray, length: int, rows: int | None) -> np.ndarray:
    if values.ndim == 1:
        return np.zeros(length, dtype=ITEM_DTYPE)
    return np.zeros((values.shape[0] if rows is None else rows, length), dtype=ITEM_DTYPE)
