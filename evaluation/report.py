"""Leaderboards overall and per axis value, as Markdown and CSV, and skill plots."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from whatif_bench.evaluation.aggregate import leaderboard

SLICES = {
    "simulator": "simulator",
    "future": "future",
    "K": "k",
    "E": "e_setting",
    "ell": "event_length",
    "C": "c_label",
}


def errors_table(per_task: pd.DataFrame, metric: str = "wql") -> pd.DataFrame:
    """Task x model matrix of one metric (only tasks every model was scored on)."""
    return per_task.pivot_table(
        index="task_id", columns="model", values=metric, aggfunc="first"
    ).dropna()


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


def write_reports(per_task: pd.DataFrame, reference: str, out: Path) -> pd.DataFrame:
    """Write leaderboard.{md,csv}, slices/<axis>.{md,csv} and plots/skill_by_<axis>.png."""
    board = leaderboard(errors_table(per_task), reference).reset_index(names="model")
    board.to_csv(out / "leaderboard.csv", index=False)
    text = [
        f"# Leaderboard (reference: {reference}; metric: wQL, point forecasts at the 0.5 level)\n",
        _markdown(board),
    ]
    slices = out / "slices"
    slices.mkdir(exist_ok=True)
    for axis, column in SLICES.items():
        table = sliced(per_task, column, reference)
        table.to_csv(slices / f"{axis}.csv", index=False)
        (slices / f"{axis}.md").write_text(
            f"# Skill score and win rate by {axis}\n\n" + _markdown(table)
        )
        text += [
            f"\n## By {axis}\n",
            _markdown(
                table.pivot(index=column, columns="model", values="skill_score").reset_index()
            ),
        ]
    (out / "leaderboard.md").write_text("\n".join(text))
    _plots(per_task, reference, out / "plots")
    return board


def _plots(per_task: pd.DataFrame, reference: str, folder: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder.mkdir(exist_ok=True)
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
        figure.savefig(folder / f"skill_by_{axis}.png", dpi=100)
        plt.close(figure)
