"""Leaderboards overall and per axis value, as Markdown and CSV, and skill plots."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from whatif_bench.corpus.axes import report_axes
from whatif_bench.evaluation.aggregate import leaderboard
from whatif_bench.evaluation.relational import summarise
from whatif_bench.outputs import atomic_output, make_folder, write_text_atomic

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def slices() -> dict[str, str]:
    """Axis name -> column of every report slice, in the reports' order (the axis table's)."""
    return {a.name: a.column for a in report_axes()}


def slice_labels() -> dict[str, str]:
    """Axis name -> what it is, for the x label of its skill plot (the axis table's labels)."""
    return {a.name: a.label for a in report_axes()}


SLICES = slices()  # import-time copy, for callers; the reports read ``slices()``


def errors_table(per_task: pd.DataFrame, metric: str = "wql") -> pd.DataFrame:
    """Task x model matrix of one metric (float64; tasks sorted by id, models in the order they
    first appear); NaN where a model failed on the task or has no row for it.

    A (task, model) given more than once takes its first value that is not NaN, as pandas'
    ``pivot_table(aggfunc="first")`` does. It is built with numpy rather than by that pivot,
    which took most of a report's leaderboard time (tests/test_report_tables.py checks that the
    two tables are equal)."""
    models = list(dict.fromkeys(per_task["model"]))
    tasks, task_codes = np.unique(per_task["task_id"].to_numpy(dtype=object), return_inverse=True)
    model_codes = pd.Index(models).get_indexer(per_task["model"])
    values = per_task[metric].to_numpy(dtype=np.float64)
    present = np.flatnonzero(~np.isnan(values))
    cells = task_codes[present] * len(models) + model_codes[present]
    filled, first = np.unique(cells, return_index=True)  # each cell's first row, in row order
    matrix = np.full(len(tasks) * len(models), np.nan)
    matrix[filled] = values[present[first]]
    return pd.DataFrame(
        matrix.reshape(len(tasks), len(models)),
        index=pd.Index(tasks, name="task_id"),
        columns=pd.Index(models, name="model"),
    )


def sliced(per_task: pd.DataFrame, column: str, reference: str) -> pd.DataFrame:
    """Leaderboard of every value of one axis: rows (value, model).

    Each value's leaderboard is over the tasks of that value and the models that have rows
    for them (in the order they first appear there): the rows of one task x model table."""
    table = errors_table(per_task)
    task_of_row = table.index.get_indexer(per_task["task_id"])  # (rows,) positions in table
    model_of_row = per_task["model"].to_numpy(dtype=object)
    frames = []
    for value, rows in per_task.groupby(column, sort=True).indices.items():
        tasks = np.unique(task_of_row[rows])  # sorted positions: the table's task order
        models = list(dict.fromkeys(model_of_row[rows]))  # rows ascend: first appearance
        board = leaderboard(table.iloc[tasks][models], reference)
        board.insert(0, column, value)
        frames.append(board.reset_index(names="model"))
    return pd.concat(frames, ignore_index=True)


# Number formats of the Markdown tables: scores to 4 decimals, seconds to 3 significant digits
# (a baseline takes microseconds per task, a foundation model or an LLM seconds)
FORMATS = {"seconds_per_task": ".3g"}


def _markdown(frame: pd.DataFrame) -> str:
    columns = list(frame.columns)
    lines = ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    specs = [FORMATS.get(str(column), ".4f") for column in columns]
    for row in frame.itertuples(index=False):
        cells = [
            format(v, spec) if isinstance(v, float) else str(v)
            for v, spec in zip(row, specs, strict=True)
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _write(path: Path, write: Callable[[Path], None]) -> None:
    """Write ``path`` atomically: ``write`` fills a temporary file that is renamed when done."""
    with atomic_output(path, lock=False) as tmp:
        write(tmp)


def _write_csv(frame: pd.DataFrame, path: Path) -> None:
    _write(path, lambda tmp: frame.to_csv(tmp, index=False))


def write_reports(
    per_task: pd.DataFrame,
    reference: str,
    out: Path,
    relational: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Write leaderboard.{md,csv}, slices/<axis>.{md,csv} and plots/skill_by_<axis>.png.

    The leaderboard has ``num_tasks`` (tasks each model was scored on), ``num_failed``
    (tasks it failed on, left out of its scores; see the ``failed`` column of per_task),
    ``num_imputed`` (tasks whose forecast it marked imputed: scored, among ``num_tasks``) and
    ``seconds_per_task`` (mean inference seconds over the tasks it forecast, NaN where none was
    measured; the one column that differs between two runs, ``runner.TIMING_COLUMNS``). The
    slices have neither, so they are the same bit for bit. With ``relational`` (per-history
    relational scores, ``evaluate(relational=True)``) it also has each model's relational
    summary (``relational.summarise``), and every axis that names a history gets
    ``slices/relational_<axis>.{md,csv}``."""
    board = leaderboard(errors_table(per_task), reference).reset_index(names="model")
    failed = per_task[per_task["failed"] != ""].groupby("model").size()
    board["num_failed"] = board["model"].map(failed).fillna(0).astype(int)
    imputed = per_task[per_task["imputed"]].groupby("model").size()
    board["num_imputed"] = board["model"].map(imputed).fillna(0).astype(int)
    seconds = per_task.groupby("model")["seconds"].mean()  # NaN (failed, not measured) skipped
    board["seconds_per_task"] = board["model"].map(seconds).astype("float64")
    if relational is not None:
        summary = summarise(relational).set_index("model")
        for column in summary.columns:
            board[column] = board["model"].map(summary[column])
        board["num_histories"] = board["num_histories"].fillna(0).astype(int)
    _write_csv(board, out / "leaderboard.csv")
    text = [
        f"# Leaderboard (reference: {reference}; metric: wQL, point forecasts at the 0.5 level)\n",
        "num_tasks: tasks the model was scored on; num_failed: tasks it failed on (left out of "
        "its scores; see the failed column of per_task.parquet); num_imputed: tasks whose "
        "forecast the model marked as imputed (a stand-in, scored as its own and counted in "
        "num_tasks); seconds_per_task: mean inference seconds per task it forecast (a "
        "measurement: the one number that differs between two runs).\n",
        _markdown(board),
    ]
    slice_folder = make_folder(out / "slices")
    for axis, column in slices().items():
        table = sliced(per_task, column, reference)
        _write_csv(table, slice_folder / f"{axis}.csv")
        write_text_atomic(
            slice_folder / f"{axis}.md",
            f"# Skill score and win rate by {axis}\n\n" + _markdown(table),
            lock=False,
        )
        text += [
            f"\n## By {axis}\n",
            _markdown(
                table.pivot(index=column, columns="model", values="skill_score").reset_index()
            ),
        ]
    if relational is not None:
        text += _relational_slices(relational, slice_folder)
    write_text_atomic(out / "leaderboard.md", "\n".join(text), lock=False)
    _plots(per_task, reference, out / "plots")
    return board


RELATIONAL_NOTE = (
    "Relational scores (docs/RELATIONAL.md), over the histories of the selection: direction "
    "(share of event steps whose forecast effect, event minus restraint forecast, has the true "
    "effect's sign) and contrast (Novel moved further than Replay exactly when the truth did) "
    "and restraint (share of restraint steps no further from the counterfactual than the naive "
    "forecast) are means over histories; intensity (median forecast effect / true effect) is "
    "the median over histories."
)


def _relational_slices(relational: pd.DataFrame, folder: Path) -> list[str]:
    """Write slices/relational_<axis>.{md,csv} for the axes that name a history; the
    leaderboard.md sections (direction and intensity by axis)."""
    text = [f"\n## Relational scores\n\n{RELATIONAL_NOTE}\n"]
    for axis, column in slices().items():
        if column not in relational.columns:  # the future type: each history has all three
            continue
        table = summarise(relational, [column])
        _write_csv(table, folder / f"relational_{axis}.csv")
        write_text_atomic(
            folder / f"relational_{axis}.md",
            f"# Relational scores by {axis}\n\n{RELATIONAL_NOTE}\n\n" + _markdown(table),
            lock=False,
        )
        for score in ("direction", "intensity"):
            text += [
                f"\n### {score.capitalize()} by {axis}\n",
                _markdown(table.pivot(index=column, columns="model", values=score).reset_index()),
            ]
    return text


# skill scores below this are drawn as bars cut at the axis floor, their value written on them
SKILL_FLOOR = -2.0


def skill_figure(per_task: pd.DataFrame, reference: str, axis: str) -> Figure:
    """Skill score of each model against one axis (``slices()``), as grouped bars.

    One panel per future type, and (for every axis but ``simulator``) per simulator; the panels
    share the y axis. The axis values are categories: each gets a group of bars, one per model,
    never a line joining values. The reference model scores 0 by definition: it is the zero line,
    not a bar. A score below ``SKILL_FLOOR`` is drawn cut at the floor with its value written.
    """
    from whatif_bench.figures import inch_margins, literal, new_figure

    column = slices()[axis]
    splits = [("future", f) for f in sorted(per_task["future"].unique())]
    if axis != "simulator":
        splits += [("simulator", s) for s in sorted(per_task["simulator"].unique())]
    models = list(dict.fromkeys(per_task["model"]))
    shown = [m for m in models if m != reference]
    colours = {m: f"C{i % 10}" for i, m in enumerate(shown)}
    # a fixed layout, margins in inches (the labels' font sizes are fixed too): a layout engine
    # makes every save draw the figure twice (about 40 % of the five plots' time, profiled)
    figure = new_figure(3.6 * len(splits) + 1.6, 3.6)
    margins = inch_margins(figure, left=0.6, right=0.15, bottom=0.7, top=0.55)
    axes = figure.subplots(
        1, len(splits), squeeze=False, sharey=True, gridspec_kw={**margins, "wspace": 0.06}
    )[0]
    tables = [
        sliced(per_task[per_task[split] == value], column, reference) for split, value in splits
    ]
    scores = np.concatenate([t["skill_score"].to_numpy(dtype=float) for t in tables])
    finite = scores[np.isfinite(scores)]
    low = min(float(finite.min()) if finite.size else 0.0, 0.0)
    floor = max(low, SKILL_FLOOR)
    width = 0.8 / max(len(shown), 1)
    for panel, (split, value), table in zip(axes, splits, tables, strict=True):
        values = list(dict.fromkeys(table[column]))
        where = {v: i for i, v in enumerate(values)}
        for index, model in enumerate(shown):
            rows = table[table["model"] == model]
            x = np.array([where[v] for v in rows[column]]) + (index - (len(shown) - 1) / 2) * width
            heights = rows["skill_score"].to_numpy(dtype=float)
            panel.bar(
                x,
                np.maximum(heights, floor),
                width=width,
                color=colours[model],
                label=literal(model),
            )
            for xi, height in zip(x, heights, strict=True):
                if height < floor:  # a cut bar: its value written up from the floor, in white
                    panel.text(
                        xi,
                        floor + 0.02 * (1.0 - floor),
                        f"{height:.3g}",
                        rotation=90,
                        ha="center",
                        va="bottom",
                        fontsize=7,
                        color="white",
                        fontweight="bold",
                    )
        panel.axhline(0.0, color="0.3", linewidth=0.8, label=f"{literal(reference)} (reference)")
        panel.set_xticks(range(len(values)), [str(v) for v in values])
        tasks = int(per_task.loc[per_task[split] == value, "task_id"].nunique())
        panel.set_title(f"{split}: {literal(str(value))} ({tasks} tasks)", fontsize=9)
        panel.set_xlabel(slice_labels()[axis], fontsize=8)
        panel.tick_params(labelsize=7)
        panel.grid(axis="y", color="0.9", linewidth=0.6)
        panel.set_axisbelow(True)
    axes[0].set_ylim(bottom=floor - 0.05 * (1.0 - floor))
    cut = f"; bars cut at {floor:g}" if floor > low else ""
    axes[0].set_ylabel(f"skill score vs {literal(reference)} (wQL{cut})", fontsize=8)
    handles, labels = axes[0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="lower center", ncols=len(labels), fontsize=8)
    by = "future type" if axis == "simulator" else "future type and per simulator"
    figure.suptitle(
        f"Skill score vs {literal(reference)} by {slice_labels()[axis].split(':')[0]}, one panel "
        f"per {by} (1: perfect; 0: as good as {literal(reference)}; below 0: worse)",
        fontsize=10,
    )
    return figure


def _plots(per_task: pd.DataFrame, reference: str, folder: Path) -> None:
    """``plots/skill_by_<axis>.png`` for every axis but ``future`` (each plot splits by it)."""
    from whatif_bench.figures import save_png

    make_folder(folder)
    for axis in slices():
        if axis != "future":
            figure = skill_figure(per_task, reference, axis)
            # inside the evaluation folder (its identity record): replaced whatever it holds
            save_png(figure, folder / f"skill_by_{axis}.png", check_existing=False)
