"""Where a pair's Novel future sits against the range its history showed (docs/METHOD.md, section 5).

The paper's Novel future pushes every covariate "beyond the range seen in the history". Here
that is a property of the factors (value / base value, so a covariate whose base value is 0
counts too): for each of the task's K covariates, the history's range is the smallest and largest
factor over the whole context, the base value (factor 1) outside events included; the Novel
future's *reach* is its furthest factor inside the prediction window, in the direction the
Novel rule pushes that covariate (up for a direct covariate, down for an inverse one). The
future holds the property when every reach lies strictly beyond the range. ``beyond`` says how
far: ``reach / largest`` for a covariate pushed up, ``smallest / reach`` for one pushed down
(both > 1 when the property holds; 2 means twice as far from 0 as anything in the history).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from whatif_bench.generator.recipe import Recipe
from whatif_bench.relationships.engine import EventSchedule, Relationship


@dataclass(frozen=True)
class NovelReach:
    """One pair's Novel future against its history, per covariate, shapes (K,), factors."""

    history_low: np.ndarray  # smallest factor over the context (at most 1: the base value)
    history_high: np.ndarray  # largest factor over the context (at least 1)
    reach: np.ndarray  # the Novel future's furthest factor inside the window, its direction
    rises: np.ndarray  # bool: the Novel rule pushes this covariate up (a direct covariate)

    @property
    def beyond(self) -> np.ndarray:
        """How far beyond the history's range each reach lies, (K,): > 1 beyond, <= 1 inside."""
        return np.where(self.rises, self.reach / self.history_high, self.history_low / self.reach)

    @property
    def holds(self) -> bool:
        """Every covariate's reach lies strictly beyond the history's range."""
        return bool(np.all(self.beyond > 1.0))

    def inside(self, names: tuple[str, ...]) -> list[str]:
        """The names (of ``names``, the task's covariates in order) whose reach is not beyond."""
        return [name for name, b in zip(names, self.beyond, strict=False) if not b > 1.0]


def novel_reach(recipe: Recipe, relationship: Relationship) -> NovelReach:
    """The Novel future of ``recipe`` against its history (``NovelReach``), from the factor
    trajectories the engine builds the pair with: the history's (K, C) and the Novel future's
    (K, H) (its event of ``future_event_length("novel")`` steps at the first forecast step, cut
    by the window end)."""
    layout = recipe.layout
    k = recipe.factors.shape[1]
    history = relationship.factor_trajectories(
        layout.context,
        EventSchedule(
            np.asarray(layout.starts),
            np.full(len(layout.starts), layout.event_length),
            recipe.factors,
        ),
    )
    length = layout.future_event_length("novel")
    future = relationship.factor_trajectories(
        max(length, layout.prediction),
        EventSchedule(np.array([0]), np.array([length]), recipe.novel_factors[None, :]),
    )[:, : layout.prediction]
    rises = np.array([c.sign > 0 for c in relationship.covariates[:k]])
    return NovelReach(
        history_low=history.min(axis=1),
        history_high=history.max(axis=1),
        reach=np.where(rises, future.max(axis=1), future.min(axis=1)),
        rises=rises,
    )
