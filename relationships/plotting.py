"""Response curves: how each covariate's factor moves a target (one PNG per target)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from whatif_bench.outputs import atomic_output
from whatif_bench.relationships.engine import Relationship
from whatif_bench.relationships.ranges import factor_grid


def plot_response(relationship: Relationship, out: str | os.PathLike) -> Path:
    """One panel per covariate: the target against the factor (log scale), others at 1, K = 5.

    ``out`` is written atomically (``outputs.atomic_output``); the caller builds it from a safe
    name (``outputs.safe_name``).

    Three curves per panel, for baselines at the low, middle and high end of the typical range.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grid = factor_grid(relationship.history_pool, points=200)
    low, high = relationship.typical_range
    levels = np.array([low + 0.1 * (high - low), (low + high) / 2, high - 0.1 * (high - low)])
    k = relationship.max_k
    figure, axes = plt.subplots(1, k, figsize=(3.3 * k, 3.0), squeeze=False)
    for index, (axis, info) in enumerate(zip(axes[0], relationship.covariates, strict=True)):
        for level in levels:
            factors = np.ones((k, grid.size))
            factors[index] = grid
            values = relationship.evaluate(np.full(grid.size, level), factors)
            axis.plot(grid, values, label=f"y = {level:.3g}")
        axis.set_xscale("log")
        axis.axvline(1.0, color="0.7", linewidth=0.8)
        role = "primary" if index == 0 else "secondary"
        axis.set_title(f"{info.name}\n{role}, {info.direction}, {info.shape}", fontsize=8)
        axis.set_xlabel("factor", fontsize=8)
        axis.tick_params(labelsize=7)
    # a unit comes from a spec file: "$" would start matplotlib math text, which can fail to parse
    unit = relationship.unit.replace("$", r"\$")
    axes[0, 0].set_ylabel(f"{relationship.target} [{unit}]", fontsize=8)
    axes[0, -1].legend(fontsize=7)
    figure.suptitle(
        f"{relationship.simulator}/{relationship.target}: {relationship.form.name} primary, "
        f"{relationship.combination} combination (K = {k}, other factors at 1)",
        fontsize=9,
    )
    figure.tight_layout()
    path = Path(out)
    try:
        with atomic_output(path, lock=False) as tmp:
            figure.savefig(tmp, dpi=100, format="png")
    finally:
        plt.close(figure)
    return path
