"""Picture of one pair: the history, both futures and the covariates, events shaded."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from whatif_bench.figures import literal, new_figure, save_png, with_unit

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from whatif_bench.corpus import Task

COLOURS = {"replay": "#1f77b4", "novel": "#d62728"}
HISTORY_EVENT = "#f2c14e"  # yellow: an event the history shows
FUTURE_EVENT = "#9467bd"  # violet: the what-if event of the forecast window


def event_spans(task: Task) -> tuple[list[tuple[int, int]], tuple[int, int]]:
    """The history events and the future event as ``[start, end)`` steps of the window.

    Steps count from the window start (step 0 is the first history step); the future event
    starts at the first forecast step and is cut by the window end (``docs/METHOD.md``).
    """
    length = int(task.recipe["event_length"])
    history = [(int(start), int(start) + length) for start in task.recipe["event_starts"]]
    context = task.context_length
    return history, (context, context + min(length, task.prediction_length))


def covariate_units(task: Task) -> dict[str, str]:
    """Units of the task's covariates, from the shipped relationship registry.

    A corpus stores only the target's unit; its relationships are the registry's (``whatif
    verify`` checks it). A target the registry does not know gets no units (``{}``).
    """
    from whatif_bench.errors import RelationshipError
    from whatif_bench.relationships import load_registry

    try:
        relationship = load_registry().get(task.simulator, task.target)
    except RelationshipError:
        return {}
    return {info.name: info.unit for info in relationship.covariates}


def _mark_events(axis: Axes, task: Task, label: bool) -> None:
    """Shade the history events and the future event; a dashed line at the forecast start."""
    history, (start, end) = event_spans(task)
    for index, (first, last) in enumerate(history):
        axis.axvspan(
            first,
            last,
            color=HISTORY_EVENT,
            alpha=0.3,
            linewidth=0,
            label="history event" if label and index == 0 else None,
        )
    axis.axvspan(
        start,
        end,
        color=FUTURE_EVENT,
        alpha=0.18,
        linewidth=0,
        label="future event" if label else None,
    )
    axis.axvline(
        task.context_length,
        color="0.3",
        linestyle="--",
        linewidth=0.8,
        label="forecast start" if label else None,
    )


def _wrapped(name: str, width: int = 18) -> str:
    """``name`` broken after underscores into lines of at most about ``width`` characters."""
    lines = [""]
    for part in name.split("_"):
        piece = part if not lines[-1] else "_" + part
        if lines[-1] and len(lines[-1]) + len(piece) > width:
            lines[-1] += "_"
            lines.append(part)
        else:
            lines[-1] += piece
    return "\n".join(lines)


def _draw_row(axis: Axes, task: Task, futures: list[Task], row: int, label: bool) -> None:
    """One panel: row 0 is the target, row ``1 + c`` covariate ``c``; events marked."""
    context, horizon = task.context_length, task.prediction_length
    past = np.arange(context)
    ahead = np.arange(context, context + horizon)
    _mark_events(axis, task, label=label)
    if row == 0:
        axis.plot(past, task.counterfactual_history, color="0.65", linewidth=0.8, label="no events")
        axis.plot(ahead, task.counterfactual_future, color="0.65", linewidth=0.8)
        axis.plot(past, task.history_target, color="black", linewidth=0.8, label="history")
    else:
        axis.plot(past, task.history_covariates[row - 1], color="black", linewidth=0.8)
    for item in futures:
        values = item.future_target if row == 0 else item.future_covariates[row - 1]
        axis.plot(
            ahead, values, color=COLOURS[item.future], linewidth=1.0, label=f"{item.future} future"
        )
    axis.tick_params(labelsize=7)


def task_figure(task: Task, other: Task, units: Mapping[str, str] | None = None) -> Figure:
    """The target (history, both futures, no-event counterfactual) above each covariate.

    ``task`` and ``other`` are the two tasks of one pair (Replay and Novel, either order).
    ``units`` maps covariate names to units (default: ``covariate_units(task)``). The left
    column shows the whole window, the right one the last ``H`` history steps and the ``H``
    forecast steps. The x axis is the step within the window, so the shaded spans are the
    recipe's event windows exactly.
    """
    units = covariate_units(task) if units is None else units
    futures = sorted([task, other], key=lambda t: t.future != "replay")  # replay, then novel
    context, horizon = task.context_length, task.prediction_length
    rows = 1 + task.k
    figure = new_figure(13, 2.6 + 1.5 * rows)
    axes = figure.subplots(
        rows, 2, sharex="col", sharey="row", squeeze=False, gridspec_kw={"width_ratios": (3, 1)}
    )
    for row in range(rows):
        for column in range(2):
            _draw_row(axes[row, column], task, futures, row, label=row == 0 and column == 0)
        axes[row, 1].set_xlim(max(0, context - horizon) - 0.5, context + horizon - 0.5)
    n_events = len(event_spans(task)[0])
    axes[0, 0].set_ylabel(
        with_unit(_wrapped(task.target), task.units.get(task.target, "")), fontsize=8
    )
    axes[0, 0].set_title(
        f"target {literal(task.target)}: history and both what-if futures, whole window",
        fontsize=9,
        loc="left",
    )
    axes[0, 0].legend(fontsize=7, loc="upper left", ncol=4, framealpha=0.85)
    for c, name in enumerate(task.covariates):
        unit = units.get(name, "")
        axes[1 + c, 0].set_ylabel(with_unit(_wrapped(name), unit), fontsize=8)
        shape, base = task.recipe["shapes"][c], task.recipe["base_values"][c]
        role = "primary" if c == 0 else "secondary"
        axes[1 + c, 0].set_title(
            f"covariate {c + 1} of {task.k}, {role}: {literal(name)} ({shape} events, "
            f"base value {base:g} {literal(unit)})",
            fontsize=8,
            loc="left",
        )
    for row in range(rows):
        axes[row, 1].set_title("around the forecast start", fontsize=8, loc="left")
    axes[-1, 0].set_xlabel(
        f"step within the window ({task.interval_s} s each; window starts "
        f"{task.start:%Y-%m-%d %H:%M}, forecast from step {context})",
        fontsize=8,
    )
    axes[-1, 1].set_xlabel(f"step (last {horizon} history steps, {horizon} forecast)", fontsize=8)
    figure.suptitle(
        f"{literal(task.task_id.rsplit('/', 1)[0])}: {n_events} history "
        f"event{'s' if n_events != 1 else ''} of {task.recipe['event_length']} steps; "
        "Replay and Novel futures",
        fontsize=10,
    )
    figure.tight_layout()
    return figure


def plot_task(
    task: Task,
    other: Task,
    out: str | os.PathLike,
    inputs: Iterable[str | os.PathLike] = (),
    units: Mapping[str, str] | None = None,
) -> Path:
    """Save ``task_figure(task, other, units)`` as a PNG at ``out`` (never over one of
    ``inputs``).

    Written through ``outputs.atomic_output``.
    """
    from whatif_bench.outputs import check_output_path

    path = check_output_path(out, inputs)
    return save_png(task_figure(task, other, units), path, inputs, lock=True)
