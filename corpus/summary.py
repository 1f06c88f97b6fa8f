"""``whatif info``: counts by simulator, future type and each axis, and the pass rate."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from whatif_bench.corpus import axes

if TYPE_CHECKING:  # (pandas only names a type here: ``whatif generate`` never imports it)
    import pandas as pd

    from whatif_bench.corpus.reader import Corpus


def pair_axes() -> dict[str, str]:
    """Axis name -> column of the axes ``whatif info`` counts by (futures share a pair)."""
    return {a.name: a.column for a in axes.table() if a.per_pair}


def summarise(corpus: Corpus) -> dict:
    """Generated, kept and dropped counts overall, by axis and by drop reason."""
    pairs = corpus.pairs
    n_futures = len(corpus.futures)

    def counts(frame: pd.DataFrame, futures: int = n_futures) -> dict:
        """Tasks made from the pairs in ``frame``: one per pair and future type."""
        generated = len(frame) * futures
        kept = int(frame["kept"].sum()) * futures
        return {
            "generated": generated,
            "kept": kept,
            "pass_rate": round(kept / generated, 4) if generated else None,
        }

    by_axis = {
        axis: {str(value): counts(group) for value, group in pairs.groupby(column, sort=True)}
        for axis, column in pair_axes().items()
    }
    # a pair is kept or dropped as a whole, so each future type has one task per kept pair
    by_future = {future: counts(pairs, futures=1) for future in corpus.futures}
    reasons = pairs.loc[~pairs["kept"], "drop_reason"].value_counts().to_dict()
    attrs = corpus.attrs
    return {
        "file": str(corpus.path),
        "toolkit_version": attrs.get("toolkit_version"),
        "master_seed": attrs.get("master_seed"),
        "baselines_hash": attrs.get("baselines_hash"),
        "targets": int(pairs[["simulator", "target"]].drop_duplicates().shape[0]),
        "pairs": {"generated": len(pairs), "kept": int(pairs["kept"].sum())},
        "tasks": counts(pairs),
        "by_future": by_future,
        "dropped_pairs_by_reason": {str(k): int(v) for k, v in reasons.items()},
        "by_axis": by_axis,
    }


def headline(file: str, kept: int, generated: int, targets: int, seed, version) -> str:
    """The first line of ``format_summary``: ``FILE: KEPT of GENERATED tasks kept (RATE) over
    N targets; seed S, toolkit V`` (RATE ``no tasks`` when none were generated)."""
    rate = f"{round(kept / generated, 4):.1%}" if generated else "no tasks"
    return (
        f"{file}: {kept:,} of {generated:,} tasks kept ({rate}) over {targets} targets; "
        f"seed {seed}, toolkit {version}"
    )


def file_headline(path: str | os.PathLike) -> str:
    """``headline`` of the corpus file at ``path`` (what ``whatif generate`` prints when it is
    done), read with h5py alone: the file's task counts, seed and version attributes and its
    pairs' simulator and target columns. Opening a ``Corpus`` (its index, its checks) and
    ``summarise`` give the same line for about half a second more on the default corpus."""
    import h5py

    with h5py.File(path, "r") as h5:
        attrs = h5.attrs
        pairs = h5["pairs"]
        simulators, names = pairs["simulator"].asstr()[...], pairs["target"].asstr()[...]
        targets = len(set(zip(simulators, names, strict=True)))
        return headline(
            str(Path(path)),  # as a Corpus names its file
            int(attrs["n_tasks_kept"]),
            int(attrs["n_tasks_generated"]),
            targets,
            attrs.get("master_seed"),
            attrs.get("toolkit_version"),
        )


def format_summary(summary: dict) -> str:
    tasks = summary["tasks"]
    lines = [
        headline(
            summary["file"],
            tasks["kept"],
            tasks["generated"],
            summary["targets"],
            summary["master_seed"],
            summary["toolkit_version"],
        ),
        "by future: "
        + ", ".join(
            f"{future}: {c['kept']:,}/{c['generated']:,} ({c['pass_rate']:.0%})"
            for future, c in summary["by_future"].items()
        ),
        "dropped pairs by reason: "
        + (
            ", ".join(f"{k} event {v}" for k, v in summary["dropped_pairs_by_reason"].items())
            or "none"
        ),
    ]
    for axis, table in summary["by_axis"].items():
        cells = ", ".join(
            f"{value}: {c['kept']:,}/{c['generated']:,} ({c['pass_rate']:.0%})"
            for value, c in table.items()
        )
        lines.append(f"by {axis}: {cells}")
    return "\n".join(lines)
