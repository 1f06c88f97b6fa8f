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

import numba
import numpy as np

from whatif_bench.corpus import Recipe
from whatif_bench.relationships.engine import EventSchedule, Relationship
from whatif_bench.relationships.kernels import BELL, JIT_OPTIONS, fill_bell_profile


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
    """The Novel future of ``recipe`` against its history (``NovelReach``): the smallest and
    largest factor of each covariate over the history's context and over the Novel future's
    prediction window (its event of ``future_event_length("novel")`` steps at the first
    forecast step, cut by the window end), found in one pass over the events' steps
    (``_extremes``). The same values as ``novel_reach_reference``, which builds the engine's
    factor trajectories (tests/test_novel_range.py compares them); a recipe whose factors are
    not finite and positive goes there, and gets the engine's error."""
    factors, novel = recipe.factors, recipe.novel_factors
    if not (np.isfinite(factors).all() and (factors > 0).all() and np.isfinite(novel).all()):
        return novel_reach_reference(recipe, relationship)
    if not (novel > 0).all():
        return novel_reach_reference(recipe, relationship)
    layout = recipe.layout
    k = factors.shape[1]
    shapes = relationship.kernel_arguments(k).shape_codes
    history = np.empty((2, k))
    future = np.empty((2, k))
    length = layout.future_event_length("novel")
    profile = np.empty(max(layout.event_length, length, 1))
    starts = np.asarray(layout.starts, dtype=np.int64)
    _extremes(starts, layout.event_length, layout.context, factors, shapes, history, profile)
    _extremes(
        np.zeros(1, dtype=np.int64),
        length,
        layout.prediction,
        novel.reshape(1, k),
        shapes,
        future,
        profile,
    )
    rises = np.array([c.sign > 0 for c in relationship.covariates[:k]])
    return NovelReach(
        history_low=history[0],
        history_high=history[1],
        reach=np.where(rises, future[1], future[0]),
        rises=rises,
    )


@numba.njit(**JIT_OPTIONS)
def _extremes(
    starts: np.ndarray,
    length: int,
    steps: int,
    factors: np.ndarray,
    shapes: np.ndarray,
    out: np.ndarray,
    profile: np.ndarray,
) -> None:
    """Smallest (``out[0]``) and largest (``out[1]``) value of each covariate's factor
    trajectory over ``steps`` steps, (K,) each, with events of ``length`` steps at ``starts``
    (E,) and ``factors`` (E, K), cut at ``steps``: the values the engine's trajectories hold
    (1 outside events, the factor in a step event, ``1 + (f - 1) * bell(t)`` in a bell one),
    without building them."""
    covered = 0
    for e in range(starts.shape[0]):
        covered += max(0, min(length, steps - starts[e]))
    fill_bell_profile(length, profile)
    for c in range(factors.shape[1]):
        low, high = (1.0, 1.0) if covered < steps else (np.inf, -np.inf)
        for e in range(starts.shape[0]):
            factor = factors[e, c]
            for t in range(min(length, steps - starts[e])):
                value = 1.0 + (factor - 1.0) * profile[t] if shapes[c] == BELL else factor
                low = min(low, value)
                high = max(high, value)
        out[0, c] = low
        out[1, c] = high


def novel_reach_reference(recipe: Recipe, relationship: Relationship) -> NovelReach:
    """``novel_reach`` from the factor trajectories the engine builds the pair with: the
    history's (K, C) and the Novel future's (K, H)."""
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
