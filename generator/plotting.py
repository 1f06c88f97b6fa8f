"""Picture of one pair: the history, both futures and the covariates."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np


def plot_task(task, other, out: str | os.PathLike, inputs=()) -> Path:
    """Target (history, Replay and Novel futures, counterfactual) above each covariate.

    Written as a PNG through ``outputs.atomic_output`` (never over one of ``inputs``).
    """
    from whatif_bench.outputs import atomic_output, check_output_path

    path = check_output_path(out, inputs)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    futures = {task.future: task, other.future: other}
    context, horizon = task.context_length, task.prediction_length
    past = np.arange(context)
    ahead = np.arange(context, context + horizon)
    rows = 1 + task.k
    figure, axes = plt.subplots(rows, 1, figsize=(11, 2.3 + 1.4 * rows), sharex=True, squeeze=False)
    top = axes[0, 0]
    top.plot(past, task.counterfactual_history, color="0.7", linewidth=0.8, label="no events")
    top.plot(ahead, task.counterfactual_future, color="0.7", linewidth=0.8)
    top.plot(past, task.history_target, color="black", linewidth=0.8, label="history")
    colours = {"replay": "#1f77b4", "novel": "#d62728"}
    for name, item in futures.items():
        top.plot(
            ahead, item.future_target, color=colours[name], linewidth=1.0, label=f"{name} future"
        )
    for start in task.recipe["event_starts"]:
        top.axvspan(start, start + task.event_length, color="#f2c14e", alpha=0.25, linewidth=0)
    top.axvline(context, color="0.3", linestyle="--", linewidth=0.8)
    top.set_ylabel(task.units.get(task.target, ""))
    top.set_title(task.task_id.rsplit("/", 1)[0], fontsize=10)
    top.legend(fontsize=7, loc="upper left", ncol=4)
    for c, name in enumerate(task.covariates):
        axis = axes[1 + c, 0]
        axis.plot(past, task.history_covariates[c], color="black", linewidth=0.8)
        for future, item in futures.items():
            axis.plot(ahead, item.future_covariates[c], color=colours[future], linewidth=1.0)
        axis.set_ylabel(name, fontsize=7)
        axis.axvline(context, color="0.3", linestyle="--", linewidth=0.8)
    axes[-1, 0].set_xlabel("step")
    figure.tight_layout()
    try:
        with atomic_output(path, inputs) as tmp:
            figure.savefig(tmp, dpi=110, format="png")
    finally:
        plt.close(figure)
    return path
