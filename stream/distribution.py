"""What the training stream draws: weights over every axis, the window start and the factors.

The defaults are the benchmark's: every value of every axis equally likely (the benchmark sweeps
their full product), window starts uniform over the baseline, factors from each relationship's
own history pool. Weights are relative; a value with weight 0 is never drawn.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from whatif_bench.corpus import axes
from whatif_bench.errors import WhatIfError
from whatif_bench.relationships.ranges import MAX_POOL_FACTOR, MIN_POOL_FACTOR


class DistributionError(WhatIfError, ValueError):
    """An axis distribution is malformed or impossible."""


CONTEXT_LABELS = axes.CONTEXT_LABELS
# Every weighted axis's values in their canonical order (the order draws are made in), keyed by
# its field below (the axis table's ``weights``). The stream's kernels size their tables by
# these at import, so they are fixed once imported.
CANONICAL = {a.weights: a.values for a in axes.table() if a.weights is not None}


def _uniform(values) -> dict:
    return {value: 1.0 for value in values}


@dataclass(frozen=True)
class AxisDistribution:
    """Relative weights per axis value, a window-start range and an optional factor pool.

    ``window_start`` is a ``(low, high)`` pair of fractions of the feasible starts, e.g.
    ``(0.5, 1.0)`` draws windows from the later half of each baseline. ``history_pool``, when
    given, replaces every relationship's pool of history factors (values between 0.01 and 1000,
    as in a spec file; a pool needs values above and below 1 for targets that can move both
    ways).
    """

    futures: Mapping[str, float] = field(default_factory=lambda: _uniform(axes.FUTURES))
    k: Mapping[int, float] = field(default_factory=lambda: _uniform(axes.K_VALUES))
    contexts: Mapping[str, float] = field(default_factory=lambda: _uniform(CONTEXT_LABELS))
    event_lengths: Mapping[int, float] = field(default_factory=lambda: _uniform(axes.EVENT_LENGTHS))
    e_settings: Mapping[str, float] = field(default_factory=lambda: _uniform(axes.E_SETTINGS))
    window_start: tuple[float, float] = (0.0, 1.0)
    history_pool: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        for name, values in CANONICAL.items():
            weights = getattr(self, name)
            if not isinstance(weights, Mapping) or not weights:
                raise DistributionError(f"{name}: expected a non-empty mapping of value -> weight")
            unknown = sorted(str(v) for v in weights if v not in values)
            if unknown:
                raise DistributionError(f"{name}: unknown values {unknown}; known: {list(values)}")
            for value, weight in weights.items():
                if isinstance(weight, bool) or not isinstance(weight, int | float):
                    raise DistributionError(f"{name}[{value!r}]: weight {weight!r} is not a number")
                if not math.isfinite(weight) or weight < 0:
                    raise DistributionError(
                        f"{name}[{value!r}]: weight must be finite and >= 0, got {weight}"
                    )
            if not any(w > 0 for w in weights.values()):
                raise DistributionError(f"{name}: every weight is 0; nothing could be drawn")
        low, high = self.window_start
        if not (0.0 <= low <= high <= 1.0):
            raise DistributionError(
                f"window_start must be (low, high) with 0 <= low <= high <= 1, got {self.window_start}"
            )
        if self.history_pool is not None:
            pool = np.asarray(self.history_pool, dtype=float)
            if (
                pool.ndim != 1
                or pool.size == 0
                or not np.all(np.isfinite(pool))
                or np.any(pool < MIN_POOL_FACTOR)
                or np.any(pool > MAX_POOL_FACTOR)
            ):
                raise DistributionError(
                    f"history_pool must be positive finite factors between "
                    f"{MIN_POOL_FACTOR:g} and {MAX_POOL_FACTOR:g}, got {self.history_pool}"
                )
            if not (np.any(pool > 1.0) and np.any(pool < 1.0)):
                raise DistributionError("history_pool needs factors both above and below 1")

    def as_dict(self) -> dict:
        """The distribution as JSON-able values (recorded in shard manifests)."""
        record: dict = {
            name: {
                str(value): float(getattr(self, name)[value])
                for value in CANONICAL[name]
                if value in getattr(self, name)
            }
            for name in CANONICAL
        }
        record["window_start"] = list(self.window_start)
        record["history_pool"] = None if self.history_pool is None else list(self.history_pool)
        return record

    def positive(self, name: str) -> list:
        """The values of one axis that can be drawn, in the axis's canonical order."""
        weights = getattr(self, name)
        return [value for value in CANONICAL[name] if weights.get(value, 0) > 0]


def draw(rng: np.random.Generator, weights: Mapping, canonical, allowed=None):
    """One value drawn with the given relative weights, restricted to ``allowed`` if given.

    Values are taken in the axis's ``canonical`` order (never the mapping's), so the same
    weights give the same draws however the user ordered them.
    """
    values = [v for v in canonical if weights.get(v, 0) > 0 and (allowed is None or v in allowed)]
    if not values:
        raise DistributionError("no value of this axis is allowed here")
    p = np.asarray([weights[v] for v in values], dtype=float)
    return values[int(rng.choice(len(values), p=p / p.sum()))]
