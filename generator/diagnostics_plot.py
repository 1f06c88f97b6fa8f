"""Pictures of the diagnostics (``whatif diagnose --out``): one PNG per simulator, one overview.

``simulator_figure`` and ``overview_figure`` return a matplotlib ``Figure`` (built with
``whatif_bench.figures``: no pyplot, no backend switch); ``plot_simulator`` and ``plot_overview``
save it. Distributions are drawn as ranges, not box plots, so the look
does not depend on the matplotlib version: a thin line from the 5th to the 95th percentile, a
thick one over the quartiles, a dot at the median.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from whatif_bench.figures import literal, new_figure, save_png
from whatif_bench.generator.diagnostics import MARGIN_THRESHOLD

if TYPE_CHECKING:
    from matplotlib.figure import Figure

FLOOR, CEILING = 1e-3, 1e3  # log axes: smaller values are drawn at FLOOR, larger at CEILING
COLOURS = {"history": "#4d4d4d", "replay": "#1f77b4", "novel": "#d62728"}
DROP_COLOURS = {
    "kept": "#59a14f",
    "history": "#9d9d9d",
    "replay": "#1f77b4",
    "novel": "#d62728",
}
SIMULATOR_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2")


def _log_axis(axis) -> None:
    """Log scale labelled in plain numbers (0.1, 1, 2, 10), minor ticks unlabelled; the
    narrower the data range, the more labelled ticks per decade. Call after drawing."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    if axis.axis_name == "x":
        axis.axes.set_xscale("log")
        low, high = axis.axes.get_xlim()
    else:
        axis.axes.set_yscale("log")
        low, high = axis.axes.get_ylim()
    decades = np.log10(high / low) if low > 0 and high > low else 1.0
    subs = (1.0, 1.2, 1.5, 2.0, 3.0, 5.0, 7.0) if decades < 1 else (1.0, 2.0, 5.0)
    axis.set_major_locator(LogLocator(base=10, subs=subs if decades < 4 else (1.0,)))
    axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axis.set_minor_formatter(NullFormatter())


def _range(axis, y: float, values: np.ndarray, colour: str, log: bool = True) -> None:
    """One distribution at height ``y``: 5-95 % line, quartile bar, median dot (finite values)."""
    values = values[np.isfinite(values)]
    if values.size == 0:
        return
    if log:
        values = np.clip(values, FLOOR, CEILING)
    p5, p25, p50, p75, p95 = np.quantile(values, [0.05, 0.25, 0.5, 0.75, 0.95])
    axis.hlines(y, p5, p95, color=colour, linewidth=0.8)
    axis.hlines(y, p25, p75, color=colour, linewidth=3.5)
    axis.plot([p50], [y], "o", color="white", markeredgecolor=colour, markersize=3.5)


def plot_simulator(report, simulator: str, path: str | os.PathLike) -> Path:
    """Save ``simulator_figure`` as a PNG (atomically, see ``figures.save_png``)."""
    return save_png(simulator_figure(report, simulator), path, dpi=100)


def plot_overview(report, path: str | os.PathLike) -> Path:
    """Save ``overview_figure`` as a PNG (atomically, see ``figures.save_png``)."""
    return save_png(overview_figure(report), path, dpi=100)


def simulator_figure(report, simulator: str) -> Figure:
    """Four panels sharing one row per target: pass rate and drop reasons; the effect of history,
    Replay and Novel events (all pairs); the Novel amplification and the Novel margin (kept
    pairs). Flagged targets are named in red."""
    from matplotlib.artist import Artist
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    targets = [t for t in report.targets if t["simulator"] == simulator]
    pairs = report.pairs[report.pairs["simulator"] == simulator]
    n = len(targets)
    figure = new_figure(15, 2.4 + 0.34 * n, layout="constrained")
    axes = figure.subplots(1, 4, sharey=True, width_ratios=[0.7, 1.3, 1, 1])
    rows = np.arange(n)[::-1]  # the first target at the top
    for row, summary in zip(rows, targets, strict=True):
        mine = pairs[pairs["target"] == summary["target"]]
        kept = mine[mine["kept"]]
        left = 0.0
        for part, colour in DROP_COLOURS.items():
            count = summary["kept"] if part == "kept" else summary["dropped"][part]
            share = count / summary["pairs"] if summary["pairs"] else 0.0
            axes[0].barh(row, share, left=left, color=colour, height=0.7)
            left += share
        effects = {
            "history": report.history_effects[(simulator, summary["target"])],
            "replay": mine["replay_effect"].to_numpy(dtype=np.float64),
            "novel": mine["novel_effect"].to_numpy(dtype=np.float64),
        }
        for offset, (kind, values) in zip((0.25, 0.0, -0.25), effects.items(), strict=True):
            _range(axes[1], row + offset, values, COLOURS[kind])
        _range(axes[2], row, kept["novel_amplification"].to_numpy(dtype=np.float64), "black")
        _range(axes[3], row, kept["novel_margin"].to_numpy(dtype=np.float64), COLOURS["novel"])
    names = [literal(t["target"]) for t in targets]
    axes[0].set_yticks(rows, names, fontsize=8)
    for label, summary in zip(axes[0].get_yticklabels(), targets, strict=True):
        if summary["flagged"]:
            label.set_color(COLOURS["novel"])
            label.set_fontweight("bold")
    axes[0].set_xlim(0, 1)
    axes[0].set_title("pairs: kept, or dropped by an event", fontsize=9)
    axes[0].set_xlabel("share of generated pairs", fontsize=8)
    axes[1].set_title("effect of each event (all pairs)", fontsize=9)
    axes[1].set_xlabel("mean |y' - y| / mean |y| over the event", fontsize=8)
    axes[2].set_title("Novel amplification (kept pairs)", fontsize=9)
    axes[2].set_xlabel("Novel effect / largest history effect", fontsize=8)
    axes[2].axvline(1.0, color="0.5", linewidth=0.8, linestyle="--")
    axes[3].set_title("Novel margin (kept pairs)", fontsize=9)
    axes[3].set_xlabel("distance to the nearest history response / mean |y|", fontsize=8)
    axes[1].axvline(MARGIN_THRESHOLD, color="0.3", linewidth=0.8, linestyle="--")
    axes[3].axvline(MARGIN_THRESHOLD, color=COLOURS["novel"], linewidth=0.8, linestyle="--")
    for axis in axes[1:]:
        _log_axis(axis.xaxis)
        axis.grid(axis="x", color="0.9", linewidth=0.6)
        axis.set_axisbelow(True)
    for axis in axes:
        axis.tick_params(axis="x", labelsize=7)
        axis.set_ylim(-0.7, n - 0.3)
    handles: list[Artist] = [
        Patch(color=c, label=p if p == "kept" else f"dropped: {p}") for p, c in DROP_COLOURS.items()
    ]
    handles += [
        Line2D([], [], color=c, linewidth=3, label=f"{k} effect") for k, c in COLOURS.items()
    ]
    figure.legend(
        handles=handles, loc="outside lower center", ncol=len(handles), fontsize=8, frameon=False
    )
    flagged = sum(1 for t in targets if t["flagged"])
    figure.suptitle(
        f"{literal(simulator)}: {n} targets, {flagged} flagged (median Novel margin < "
        f"{MARGIN_THRESHOLD:g}, dashed). Ranges: 5th-95th percentile, quartiles, median; values "
        f"outside [{FLOOR:g}, {CEILING:g}] drawn at the edge",
        fontsize=9,
    )
    return figure


def overview_figure(report) -> Figure:
    """Every target as one point: median Novel amplification against median Novel margin,
    coloured by simulator; flagged targets (below the dashed line) are named."""
    figure = new_figure(9, 6.5, layout="constrained")
    axis = figure.subplots()
    simulators = list(dict.fromkeys(t["simulator"] for t in report.targets))
    for index, simulator in enumerate(simulators):
        points = [
            (t["novel_amplification"]["p50"], t["novel_margin"]["p50"])
            for t in report.targets
            if t["simulator"] == simulator
            and t["novel_amplification"]["p50"] is not None
            and t["novel_margin"]["p50"] is not None
        ]
        if not points:
            continue
        x, y = np.clip(np.array(points, dtype=np.float64).T, FLOOR, CEILING)
        colour = SIMULATOR_COLOURS[index % len(SIMULATOR_COLOURS)]
        axis.scatter(
            x, y, s=22, color=colour, label=f"{literal(simulator)} ({len(points)})", alpha=0.85
        )
    named = [
        t
        for t in report.flagged()
        if t["novel_amplification"]["p50"] is not None and t["novel_margin"]["p50"] is not None
    ]
    named.sort(key=lambda t: t["novel_margin"]["p50"])
    for index, t in enumerate(named):  # neighbours' names alternate above and below their dot
        point = np.clip([t["novel_amplification"]["p50"], t["novel_margin"]["p50"]], FLOOR, CEILING)
        axis.annotate(
            f"{literal(t['simulator'])}/{literal(t['target'])}",
            (float(point[0]), float(point[1])),
            fontsize=7.5,
            xytext=(5, 3 if index % 2 else -9),
            textcoords="offset points",
            color=COLOURS["novel"],
        )
    axis.axhline(MARGIN_THRESHOLD, color=COLOURS["novel"], linewidth=0.8, linestyle="--")
    axis.axvline(1.0, color="0.5", linewidth=0.8, linestyle=":")
    _log_axis(axis.xaxis)
    _log_axis(axis.yaxis)
    axis.grid(color="0.92", linewidth=0.6)
    axis.set_axisbelow(True)
    axis.set_xlabel("median Novel amplification (Novel effect / largest history effect)")
    axis.set_ylabel("median Novel margin (distance to the nearest history response / mean |y|)")
    axis.legend(fontsize=8, title="simulator (targets)", title_fontsize=8)
    flagged = len(report.flagged())
    axis.set_title(
        f"Do Novel futures leave the history's response range? {flagged} of "
        f"{len(report.targets)} targets flagged (median margin below {MARGIN_THRESHOLD:g}, "
        "dashed)",
        fontsize=10,
    )
    return figure
