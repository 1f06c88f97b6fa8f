"""A pair's recipe: every number needed to rematerialise its history and both futures exactly.

``draw_recipe`` makes the random choices of docs/METHOD.md (section 5) from the pair's own stream, in a fixed
order: window start, then per event a direction and one factor per covariate, then the Replay
source event, then the Novel factors (beyond the history's range, the base value included).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from whatif_bench.corpus import axes
from whatif_bench.corpus.axes import HistoryLayout, layout
from whatif_bench.corpus.seeds import pair_rng
from whatif_bench.relationships.engine import Relationship
from whatif_bench.relationships.ranges import NOVEL_OFFSET, NOVEL_SCALE

# (column, type) of every axis that names a history, in the axis table's order: read for each
# task a corpus reader builds
_KEY_FIELDS = tuple((a.column, type(a.values[0])) for a in axes.table() if a.per_pair)


@dataclass(frozen=True)
class PairKey:
    """The axes that name a history (a pair of Replay and Novel tasks)."""

    simulator: str
    target: str
    k: int
    c_label: str
    event_length: int
    e_setting: str

    @classmethod
    def from_values(cls, target: str, values: Mapping[str, Any]) -> PairKey:
        """The key of one of ``target``'s histories from its axis values keyed by column (a row
        of the corpus index will do), read and typed as the axis table says."""
        return cls(
            target=str(target), **{column: kind(values[column]) for column, kind in _KEY_FIELDS}
        )

    def axis_values(self) -> dict[str, Any]:
        """The key's axis values keyed by column, in the axis table's order."""
        return {column: getattr(self, column) for column, _ in _KEY_FIELDS}

    @property
    def pair_id(self) -> str:
        return f"{self.simulator}/{self.target}/K{self.k}-{self.c_label}-L{self.event_length}-{self.e_setting}"


@dataclass(frozen=True)
class Recipe:
    """Everything that fixes one pair's arrays (factors per event and covariate, in order)."""

    key: PairKey
    layout: HistoryLayout
    window_start: int
    directions: np.ndarray  # (E,) +1 the event pushes the target up, -1 down
    factors: np.ndarray  # (E, K)
    replay_source: int
    replay_factors: np.ndarray  # (K,)
    novel_factors: np.ndarray  # (K,)

    @property
    def n_events(self) -> int:
        return len(self.layout.starts)


def _history_factors(
    rng: np.random.Generator,
    relationship: Relationship,
    k: int,
    n_events: int,
    history_pool: tuple[float, ...] | None = None,
):
    pool = np.asarray(relationship.history_pool if history_pool is None else history_pool)
    above, below = pool[pool > 1.0], pool[pool < 1.0]
    signs = [c.sign for c in relationship.covariates[:k]]
    directions = np.empty(n_events, dtype=np.int8)
    factors = np.empty((n_events, k))
    for e in range(n_events):
        up = True if relationship.only_increase else bool(rng.integers(2))
        directions[e] = 1 if up else -1
        for c, sign in enumerate(signs):
            rises = (sign > 0) == up  # this covariate's factor must exceed 1 to push that way
            choices = above if rises else below
            factors[e, c] = choices[rng.integers(choices.size)]
    return directions, factors


def _novel_factors(rng: np.random.Generator, relationship: Relationship, factors: np.ndarray):
    """The Novel factor of each covariate, shape (K,), from the history's factors (E, K).

    A direct covariate goes to the history's largest factor + U[5, 12], an inverse one to its
    smallest x U[0.1, 0.5]. Outside events every covariate sits at its base value (factor 1),
    so 1 counts among the history's factors: after events that lowered a direct covariate (or
    raised an inverse one) the Novel factor still lies beyond the base value.
    """
    novel = np.empty(factors.shape[1])
    for c, info in enumerate(relationship.covariates[: factors.shape[1]]):
        if info.sign > 0:
            novel[c] = max(1.0, factors[:, c].max()) + rng.uniform(*NOVEL_OFFSET)
        else:
            novel[c] = min(1.0, factors[:, c].min()) * rng.uniform(*NOVEL_SCALE)
    return novel


def draw_recipe(
    key: PairKey,
    relationship: Relationship,
    context: int,
    prediction: int,
    baseline_length: int,
    master_seed: int,
) -> Recipe:
    """Draw one pair's recipe from its own random stream (keyed by the pair id)."""
    return draw_recipe_from(
        pair_rng(master_seed, key.pair_id), key, relationship, context, prediction, baseline_length
    )


def draw_recipe_from(
    rng: np.random.Generator,
    key: PairKey,
    relationship: Relationship,
    context: int,
    prediction: int,
    baseline_length: int,
    history_pool: tuple[float, ...] | None = None,
    window_range: tuple[float, float] = (0.0, 1.0),
) -> Recipe:
    """Draw one pair's recipe from ``rng`` (the benchmark's order of draws).

    The training stream's options: ``history_pool`` replaces the relationship's pool of
    history factors (``None`` keeps it); ``window_range`` limits the window start to a
    ``(low, high)`` fraction of the feasible starts (the default, all of them, is the benchmark).
    """
    history = layout(context, prediction, key.event_length, key.e_setting)
    latest_start = baseline_length - history.window
    if latest_start < 0:
        from whatif_bench.corpus.axes import AxisError

        raise AxisError(
            f"{key.pair_id}: a window of {history.window} steps does not fit the "
            f"{baseline_length}-step baseline"
        )
    lowest = math.floor(window_range[0] * latest_start)
    highest = math.floor(window_range[1] * latest_start)
    window_start = lowest + int(rng.integers(highest - lowest + 1))
    directions, factors = _history_factors(
        rng, relationship, key.k, len(history.starts), history_pool
    )
    replay_source = int(rng.integers(len(history.starts)))
    novel = _novel_factors(rng, relationship, factors)
    return Recipe(
        key=key,
        layout=history,
        window_start=window_start,
        directions=directions,
        factors=factors,
        replay_source=replay_source,
        replay_factors=factors[replay_source].copy(),
        novel_factors=novel,
    )
