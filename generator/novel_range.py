"""Where a pair's Novel future sits against the range its history showed (docs/METHOD.md, section 5).

The paper's Novel future pushes every covariate "beyond the range seen in the history". Here
that is a property of the factors (value / base value, so a covariate whose base value is 0
counts too): for each of the task's K covariates, the history's range is the smallest and largest
factor over the whole context, the base value (factor 1) outside events included; the Novel
future's *reach* is its furthest factor inside the prediction window, in the direction the
Novel rule pushes that covariate (up for a direct covariate, down for an inverse one). The
future holds the property when every reach lies strictly beyond the range. ``beyond`` says how
far: ``reach / largest`` for a covariate pushed up, ``smallest / reach`` for one pushed down
(both > 1 when the property holds; 2 means a reach of twice the history's largest factor, or
of half its smallest).

Why it holds for every pool in ``[MIN_POOL_FACTOR, MAX_POOL_FACTOR]`` = [0.01, 1000] and every
allowed window (prediction ``H >= 32``, ``l <= 512``). Let ``w_h <= 1`` be the largest weight of
a history event's shape (1 for a step, the bell's peak sample otherwise) and ``w_n`` the
largest weight of the Novel event inside the window. For ``l <= 2 H`` the Novel event is the
history's own shape with its peak sample inside the window, so ``w_n = w_h``; for ``l > 2 H``
it is a bell of ``2 H`` steps whose window ends at its peak, ``w_n = exp(-1.125 / H^2)``
(``>= 0.99890`` for ``H >= 32``), and ``w_h - w_n < 1 - w_n <= 0.0011``. The history's range is
``[1 - (1 - lo) w_h, 1 + (hi - 1) w_h]`` with ``lo = min(1, smallest factor)`` and
``hi = max(1, largest factor)``.

- Pushed up: the Novel factor is ``hi + u``, ``u >= 5``, and its reach ``1 + (hi - 1 + u) w_n``
  exceeds ``1 + (hi - 1) w_h`` when ``u w_n > (hi - 1)(w_h - w_n)``: ``5 x 0.9989 > 999 x 0.0011``.
- Pushed down: the Novel factor is ``lo s``, ``s <= 0.5``; its reach ``1 - (1 - lo s) w_n`` lies
  below ``1 - (1 - lo) w_h`` when ``(1 - lo s) w_n > (1 - lo) w_h``, which holds when
  ``lo (w_h - w_n / 2) > w_h - w_n``, i.e. for ``lo > 0.0022`` (``lo >= 0.01``).

The tests check the property on every shipped target and axis and on pools at both bounds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from whatif_bench.corpus import Recipe
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
