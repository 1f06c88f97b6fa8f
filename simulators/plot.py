"""Overview figures of a baselines store: one PNG per simulator, one panel per target."""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

from whatif_bench.outputs import atomic_output
from whatif_bench.simulators.base import Baselines


def plot_overview(baselines: Baselines, out: str | os.PathLike) -> Path:
    """Draw every target of one simulator against time (days) and save a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(baselines.series)
    columns = 4 if len(names) > 12 else 3
    rows = math.ceil(len(names) / columns)
    figure, axes = plt.subplots(
        rows, columns, figsize=(4.2 * columns, 1.9 * rows), sharex=True, squeeze=False
    )
    days = np.arange(baselines.n_steps) * baselines.interval_s / 86400.0
    for axis, name in zip(axes.flat, names, strict=False):
        axis.plot(days, baselines.series[name], linewidth=0.5, color="#1f5f8b")
        unit = baselines.units[name].replace("$", r"\$")  # no matplotlib math text from data
        axis.set_title(f"{name} [{unit}]", fontsize=8)
        axis.tick_params(labelsize=7)
    for axis in list(axes.flat)[len(names) :]:
        axis.set_visible(False)
    for axis in axes[-1]:
        axis.set_xlabel("days", fontsize=8)
    figure.suptitle(
        f"{baselines.simulator}: {len(names)} baseline series, {baselines.n_steps} steps of "
        f"{baselines.interval_s} s ({baselines.simulator_version})",
        fontsize=10,
    )
    figure.tight_layout(rect=(0, 0, 1, 0.97))
    path = Path(out)
    try:
        with atomic_output(path, lock=False) as tmp:
            figure.savefig(tmp, dpi=110, format="png")
    finally:
        plt.close(figure)
    return path
