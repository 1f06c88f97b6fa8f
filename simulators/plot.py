"""Overview figures of a baselines store: one PNG per simulator, one panel pair per target.

A month of 5-minute steps is 8,640 points: drawn as one line in a panel a few hundred pixels
wide it becomes a solid band. So a run longer than ``ZOOM_DAYS`` + 1 days is drawn twice per
target: the whole run as a daily minimum-maximum band with the daily mean (how the level and
range move over the days), and the first ``ZOOM_DAYS`` days at every step (the shape of a day).
A shorter run is drawn at every step only.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from whatif_bench.figures import literal, new_figure, save_png, with_unit
from whatif_bench.simulators.base import Baselines

if TYPE_CHECKING:
    from matplotlib.artist import Artist
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

ZOOM_DAYS = 2
LINE = "#1f5f8b"
BAND = "#9ecae1"


def daily_summary(values: np.ndarray, interval_s: int) -> dict[str, np.ndarray]:
    """Per day of a series (the last day may be partial): its min, mean and max.

    ``values`` has shape (n_steps,), one value every ``interval_s`` seconds from the start.
    ``min``, ``mean`` and ``max`` have shape (n_days,); ``edges`` (n_days + 1,) are the days'
    bounds and ``day`` (n_days,) their middles, in days since the start.
    """
    per_day = max(1, round(86400 / interval_s))
    starts = np.arange(0, values.size, per_day)
    counts = np.diff(np.append(starts, values.size))
    edges = np.append(starts, values.size) * interval_s / 86400.0
    return {
        "edges": edges,
        "day": (edges[:-1] + edges[1:]) / 2,
        "min": np.minimum.reduceat(values, starts),
        "mean": np.add.reduceat(values, starts) / counts,
        "max": np.maximum.reduceat(values, starts),
    }


def _draw_days(axis: Axes, values: np.ndarray, interval_s: int) -> None:
    summary = daily_summary(values, interval_s)
    axis.stairs(
        summary["max"],
        summary["edges"],
        baseline=summary["min"],
        fill=True,
        color=BAND,
        linewidth=0,
        label="daily min to max",
    )
    axis.plot(
        summary["day"], summary["mean"], color=LINE, linewidth=0.9, marker=".", label="daily mean"
    )


def overview_figure(baselines: Baselines) -> Figure:
    """Every target of one simulator against time: the whole run by day, and its first days."""
    names = list(baselines.series)
    days = baselines.n_steps * baselines.interval_s / 86400.0
    zoom = days > ZOOM_DAYS + 1
    pairs = (3 if len(names) > 12 else 2) if zoom else (4 if len(names) > 12 else 3)
    rows = max(1, math.ceil(len(names) / pairs))
    per_pair = 2 if zoom else 1
    figure = new_figure((5.4 if zoom else 4.2) * pairs, 1.9 * rows + 1.0, layout="constrained")
    grid = figure.subplots(
        rows,
        pairs * per_pair,
        squeeze=False,
        gridspec_kw={"width_ratios": (2.2, 1) * pairs} if zoom else None,
    )
    time_days = np.arange(baselines.n_steps) * baselines.interval_s / 86400.0
    zoom_steps = min(baselines.n_steps, round(ZOOM_DAYS * 86400 / baselines.interval_s))
    last_row = {}  # the lowest row with a panel, per panel column
    for index, name in enumerate(names):
        row, pair = divmod(index, pairs)
        whole = grid[row, pair * per_pair]
        values = baselines.series[name]
        unit = baselines.units[name]
        if zoom:
            _draw_days(whole, values, baselines.interval_s)
            first = grid[row, pair * per_pair + 1]
            first.sharey(whole)
            first.plot(
                time_days[:zoom_steps] * 24,
                values[:zoom_steps],
                color=LINE,
                linewidth=0.6,
                label="every step",
            )
            first.set_title(f"first {ZOOM_DAYS} days", fontsize=8)
            first.set_xticks(np.arange(0, ZOOM_DAYS * 24 + 1, 12))
            first.set_xlim(0, ZOOM_DAYS * 24)
            first.tick_params(labelsize=7, labelleft=False)
        else:  # a short run: hours, every step
            whole.plot(time_days * 24, values, color=LINE, linewidth=0.6, label="every step")
        whole.set_title(with_unit(name, unit), fontsize=8)
        whole.set_ylabel(literal(unit), fontsize=7)
        whole.set_xlim(0, days if zoom else days * 24)
        whole.tick_params(labelsize=7)
        for column in range(pair * per_pair, (pair + 1) * per_pair):
            last_row[column] = row
    for axis in list(grid.flat)[len(names) * per_pair :]:
        axis.set_visible(False)
    start = baselines.start.replace("T", " ")[:16]  # to the minute
    for column, row in last_row.items():
        for above in range(row):
            grid[above, column].tick_params(labelbottom=False)
        in_days = zoom and column % 2 == 0
        grid[row, column].set_xlabel(
            f"days since {start}" if in_days else f"hours since {start}", fontsize=8
        )
    handles: list[Artist] = []
    labels: list[str] = []
    for axis in grid[0, :per_pair]:
        more = axis.get_legend_handles_labels()
        handles, labels = handles + more[0], labels + more[1]
    figure.legend(handles, labels, loc="outside lower center", ncols=len(labels), fontsize=8)
    figure.suptitle(
        f"{literal(baselines.simulator)}: {len(names)} baseline series, {baselines.n_steps} "
        f"steps of {baselines.interval_s} s ({days:g} day{'' if days == 1 else 's'}; "
        f"{literal(baselines.simulator_version)})",
        fontsize=10,
    )
    return figure


def plot_overview(baselines: Baselines, out: str | os.PathLike) -> Path:
    """Save ``overview_figure(baselines)`` as a PNG at ``out`` (written atomically)."""
    return save_png(overview_figure(baselines), out)
