"""Response curves: how each covariate's factor moves a target (one PNG per target)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from whatif_bench.figures import literal, new_figure, save_png, with_unit
from whatif_bench.relationships.engine import Relationship
from whatif_bench.relationships.ranges import factor_grid

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def response_figure(relationship: Relationship) -> Figure:
    """One panel per covariate: the target against the factor (log scale), others at 1, K = 5.

    Three curves per panel, for baselines at the low, middle and high end of the typical range.
    The factor multiplies the covariate's base value; each panel's x label gives that value and
    its unit, and the y label the target's unit.
    """
    grid = factor_grid(relationship.history_pool, points=200)
    low, high = relationship.typical_range
    levels = np.array([low + 0.1 * (high - low), (low + high) / 2, high - 0.1 * (high - low)])
    k = relationship.max_k
    figure = new_figure(3.4 * k, 3.5, layout="constrained")
    axes = figure.subplots(1, k, squeeze=False)[0]
    unit = literal(relationship.unit)
    for index, (axis, info) in enumerate(zip(axes, relationship.covariates, strict=True)):
        for level in levels:
            factors = np.ones((k, grid.size))
            factors[index] = grid
            values = relationship.evaluate(np.full(grid.size, level), factors)
            axis.plot(grid, values, label=f"baseline y = {level:.3g} {unit}")
        axis.set_xscale("log")
        axis.axvline(1.0, color="0.7", linewidth=0.8, label="factor 1: the base value")
        role = "primary" if index == 0 else "secondary"
        axis.set_title(f"{literal(info.name)}\n{role}, {info.direction}, {info.shape}", fontsize=8)
        axis.set_xlabel(
            f"factor on {literal(info.name)}\n(× base value {info.base_value:g} "
            f"{literal(info.unit)})",
            fontsize=8,
        )
        axis.set_ylabel(with_unit(relationship.target, relationship.unit), fontsize=8)
        axis.tick_params(labelsize=7)
    handles, labels = axes[0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="outside lower center", ncols=len(labels), fontsize=8)
    figure.suptitle(
        f"{literal(relationship.simulator)}/{literal(relationship.target)}: "
        f"{relationship.form.name} primary, {relationship.combination} combination "
        f"(K = {k}, other factors at 1)",
        fontsize=9,
    )
    return figure


def plot_response(relationship: Relationship, out: str | os.PathLike) -> Path:
    """Save ``response_figure(relationship)`` as a PNG at ``out``.

    ``out`` is written atomically (``outputs.atomic_output``); the caller builds it from a safe
    name (``outputs.safe_name``).
    """
    return save_png(response_figure(relationship), out, dpi=100)
