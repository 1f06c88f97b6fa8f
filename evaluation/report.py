"""Leaderboards overall and per axis value, as Markdown and CSV, and skill plots."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from whatif_bench.evaluation.aggregate import leaderboard
from whatif_bench.outputs import atomic_output, make_folder, write_text_atomic

SLICES = {
    "simulator": "simulator",
    "future": "future",
    "K": "k",
    "E": "e_setting",
    "ell": "event_length",
    "C": "c_label",
}


def errors_table(per_task: pd.DataFrame, metric: str = "wql") -> pd.DataFrame:
    """Task x model matrix of one metric; NaN where a model failed on the task."""
    models = list(dict.fromkeys(per_task["model"]))
    table = per_task.pivot_table(
        index="task_id", columns="model", values=metric, aggfunc="first", dropna=False
    )
    return table.reindex(columns=models)


def sliced(per_task: pd.DataFrame, column: str, reference: str) -> pd.DataFrame:
    """Leaderboard of every value of one axis: rows (value, model)."""
    frames = []
    for value, group in per_task.groupby(column, sort=True):
        board = leaderboard(errors_table(group), reference)
        board.insert(0, column, value)
        frames.append(board.reset_index(names="model"))
    return pd.concat(frames, ignore_index=True)


def _markdown(frame: pd.DataFrame) -> str:
    columns = list(frame.columns)
    lines = ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    for row in frame.itertuples(index=False):
        cells = [f"{v:.4f}" if isinstance(v, float) else str(v) for v in row]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _write(path: Path, write: Callable[[Path], None]) -> None:
    """Write ``path`` atomically: ``write`` fills a temporary file that is renamed when done."""
    with atomic_output(path, lock=False) as tmp:
        write(tmp)


def _write_csv(frame: pd.DataFrame, path: Path) -> None:
    _write(path, lambda tmp: frame.to_csv(tmp, index=False))


def write_reports(per_task: pd.DataFrame, reference: str, out: Path) -> pd.DataFrame:
    """Write leaderboard.{md,csv}, slices/<axis>.{md,csv} and plots/skill_by_<axis>.png.

    The leaderboard has ``num_tasks`` (tasks each model was scored on) and ``num_failed``
    (tasks it failed on, left out of its scores; see the ``failed`` column of per_task)."""
    board = leaderboard(errors_table(per_task), reference).reset_index(names="model")
    failed = per_task[per_task["failed"] != ""].groupby("model").size()
    board["num_failed"] = board["model"].map(failed).fillna(0).astype(int)
    _write_csv(board, out / "leaderboard.csv")
    text = [
        f"# Leaderboard (reference: {reference}; metric: wQL, point forecasts at the 0.5 level)\n",
        "num_tasks: tasks the model was scored on; num_failed: tasks it failed on (left out of "
        "its scores; see the failed column of per_task.parquet).\n",
        _markdown(board),
    ]
    slices = make_folder(out / "slices")
    for axis, column in SLICES.items():
        table = sliced(per_task, column, reference)
        _write_csv(table, slices / f"{axis}.csv")
        write_text_atomic(
            slices / f"{axis}.md",
            f"# Skill score and win rate by {axis}\n\n" + _markdown(table),
            lock=False,
        )
        text += [
            f"\n## By {axis}\n",
            _markdown(
                table.pivot(index=column, columns="model", values="skill_score").reset_index()
            ),
        ]
    write_text_atomic(out / "leaderboard.md", "\n".join(text), lock=False)
    _plots(per_task, reference, out / "plots")
    return board


def _plots(per_task: pd.DataFrame, reference: str, folder: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    make_folder(folder)
    for axis, column in SLICES.items():
        if axis == "future":
            continue
        splits = [("future", f) for f in sorted(per_task["future"].unique())]
        splits += (
            [("simulator", s) for s in sorted(per_task["simulator"].unique())]
            if axis != "simulator"
            else []
        )
        figure, axes = plt.subplots(
            1, len(splits), figsize=(4.2 * len(splits), 3.4), squeeze=False, sharey=True
        )
        for axis_plot, (split_column, split_value) in zip(axes[0], splits, strict=True):
            part = per_task[per_task[split_column] == split_value]
            table = sliced(part, column, reference)
            for model, rows in table.groupby("model", sort=True):
                axis_plot.plot(
                    rows[column].astype(str), rows["skill_score"], marker="o", label=model
                )
            axis_plot.axhline(0.0, color="0.6", linewidth=0.8)
            axis_plot.set_title(f"{split_value}", fontsize=9)
            axis_plot.set_xlabel(axis)
        axes[0, 0].set_ylabel(f"skill score vs {reference}")
        axes[0, -1].legend(fontsize=7)
        figure.suptitle(f"Skill score by {axis}, split by future type and simulator", fontsize=10)
        figure.tight_layout()
        _write(
            folder / f"skill_by_{axis}.png",
            functools.partial(figure.savefig, dpi=100, format="png"),
        )
        plt.close(figure)
