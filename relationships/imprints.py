"""Separable imprints (docs/METHOD.md, "Separable imprints"): how far each secondary covariate
moves its target on its own, and what share of an event's effect is its own.

The paper keeps a covariate only if it "moves the target by a measurable amount" and wants each
covariate to leave "a clear, separable imprint". For a relationship, every ``K`` it supports
(2 .. ``max_k``) and every secondary covariate ``c`` of the first ``K``, on baseline windows:

- *own effect*: the 10 % statistic of ``relationships/verification.py``,
  ``mean |y'_c - y| / mean |y|`` over the event, where ``y'_c`` is the target with ``c`` alone
  at its factor and every other covariate at 1 (``K`` unchanged, so the dampening ``s(K)`` is the
  task's), for every factor ``c`` can draw: the history pool's values on the side it takes when
  the event pushes the target up, and down where the simulator allows both;
- *reach*: the largest over those factors of the median own effect over the windows (the pool's
  extreme factor on a typical window);
- *share*: ``phi_c / total``, the covariate's exact (Shapley) attribution of an event's effect
  (``v(S) = sum_t (y'_S(t) - y(t))``, as ``corpus/describe.py`` computes it) over the event's
  total effect, for events whose factors are drawn as the generator draws them (per direction,
  every covariate uniformly from its side of the pool: all combinations when there are at most
  ``FULL_EVENTS``, else a seeded sample of ``SAMPLED_EVENTS``; the median is over these), plus
  for each secondary the corner where it is at its weakest and the others at their strongest
  (the effects being monotone, where its share is normally smallest; the smallest is over all).

[design] A secondary leaves a *measurable* imprint at ``K`` when its reach meets the 10 % rule's
``THRESHOLD``: pushed as hard as the pool allows, on a typical window, it alone would move the
target as much as the benchmark requires of any event before it counts as visible. One below
is reported (``relationships check`` warns, ``diagnose`` lists it), never removed: which
covariates a task holds is the K axis of the paper.

The event is one of the shortest axis length (32 steps) starting at the window's first step;
the bell's window mean barely depends on its length (its width scales with it). Windows whose
baseline is 0 throughout are left out: every event fails the 10 % rule there (the statistic is
0 by definition), so they say nothing about one covariate.
``constant_windows`` makes the rule checks' baselines (constant values over the target's
typical range) into windows, keeping the event's first half only, which is exact: the event is
symmetric in time and so is a constant window (for step-shaped covariates one step is, and is
used). Cost: one engine call per ``K`` for the shares (``2^K`` coalitions of every event on every
window) and two for the own effects; the shipped registry takes well under a second.
"""

from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass

import numpy as np

from whatif_bench.relationships.engine import Relationship
from whatif_bench.relationships.shapes import bell_profile
from whatif_bench.relationships.verification import THRESHOLD
from whatif_bench.seeding import rng as seeded_rng

# 32 steps, the shortest event of the axes (min of corpus.axes.EVENT_LENGTHS; written here
# because relationships sits below the corpus room, and pinned to it by tests/test_imprints.py)
EVENT_LENGTH = 32
FULL_EVENTS = 16  # at most this many factor combinations per direction: all of them
SAMPLED_EVENTS = 8  # else a seeded sample of this many
COLUMNS = (
    "simulator",
    "target",
    "k",
    "covariate",
    "weight",
    "share_min",
    "share_median",
    "own_min",
    "own_median",
    "reach",
    "reach_factor",
    "measurable",
)


@dataclass(frozen=True)
class Imprint:
    """One secondary covariate's imprint on one target at one ``K`` (see the module doc).

    ``weight`` is the covariate's dampened weight ``s(K) w_c``; the figures are ratios (0.05 is
    5 %) and NaN when no window or event gave one; ``measurable`` is ``reach >= THRESHOLD``
    (``None`` without a reach)."""

    simulator: str
    target: str
    k: int
    covariate: str
    weight: float
    share_min: float
    share_median: float
    own_min: float
    own_median: float
    reach: float
    reach_factor: float
    measurable: bool | None

    def as_dict(self) -> dict:
        return asdict(self)


def constant_windows(relationship: Relationship, count: int = 5) -> np.ndarray:
    """(count, EVENT_LENGTH / 2) windows at the rule checks' baselines (``sample_baselines``)."""
    from whatif_bench.relationships.ranges import sample_baselines

    values = sample_baselines(relationship, count)
    return np.repeat(values[:, None], EVENT_LENGTH // 2, axis=1)


def series_windows(series: np.ndarray, count: int = 16) -> np.ndarray:
    """(count, EVENT_LENGTH) windows of a real baseline series at evenly spaced starts (every
    start that fits, from the first to the last; fewer windows if the series is short)."""
    series = np.asarray(series, dtype=np.float64)
    if series.size < EVENT_LENGTH:
        return np.empty((0, EVENT_LENGTH))
    starts = np.unique(np.linspace(0, series.size - EVENT_LENGTH, count).round().astype(int))
    return np.stack([series[s : s + EVENT_LENGTH] for s in starts])


def directions(relationship: Relationship) -> list[int]:
    """The ways an event can push the target: up (+1), and down (-1) unless ``only_increase``."""
    return [1] if relationship.only_increase else [1, -1]


def side(relationship: Relationship, index: int, direction: int) -> np.ndarray:
    """The pool values covariate ``index`` draws from when an event pushes the target
    ``direction``, ordered from the weakest (nearest 1) to the strongest."""
    pool = np.asarray(relationship.history_pool, dtype=np.float64)
    rises = (relationship.covariates[index].sign > 0) == (direction > 0)
    values = np.sort(pool[pool > 1.0]) if rises else np.sort(pool[pool < 1.0])[::-1]
    return values


def drawable_factors(relationship: Relationship, index: int) -> np.ndarray:
    """Every history factor covariate ``index`` can draw (both directions where allowed)."""
    values = [side(relationship, index, d) for d in directions(relationship)]
    return np.unique(np.concatenate(values)) if values else np.empty(0)


def event_rows(relationship: Relationship, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Factor rows (R, k) of the events the shares are measured on, and a mask (R,) of the rows
    drawn as the generator draws them (the others are the corners; see the module doc)."""
    rows, drawn = [], []
    rng = seeded_rng("imprints", None, relationship.simulator, relationship.target, k)
    for direction in directions(relationship):
        sides = [side(relationship, c, direction) for c in range(k)]
        if any(s.size == 0 for s in sides):  # the generator cannot draw such an event
            continue
        if math.prod(s.size for s in sides) <= FULL_EVENTS:
            grid = np.meshgrid(*sides, indexing="ij")
            sample = np.stack([g.reshape(-1) for g in grid], axis=1)
        else:
            sample = np.stack([s[rng.integers(s.size, size=SAMPLED_EVENTS)] for s in sides], axis=1)
        weakest = np.array([s[0] for s in sides])
        strongest = np.array([s[-1] for s in sides])
        corners = []
        for c in range(1, k):  # c at its weakest, the others at their strongest
            corner = strongest.copy()
            corner[c] = weakest[c]
            corners.append(corner)
        rows += [sample, np.array(corners).reshape(-1, k)]
        drawn += [np.ones(len(sample), bool), np.zeros(len(corners), bool)]
    if not rows:
        return np.empty((0, k)), np.empty(0, bool)
    return np.concatenate(rows), np.concatenate(drawn)


def _trajectories(relationship: Relationship, rows: np.ndarray, n_steps: int) -> np.ndarray:
    """(K, R, n_steps): each row's event (EVENT_LENGTH steps from step 0), cut at n_steps, in
    the shapes of ``relationships/shapes.py``."""
    k = rows.shape[1]
    bell = np.array([c.shape == "bell" for c in relationship.covariates[:k]])
    factors = rows.T[:, :, None]  # (K, R, 1)
    shaped = 1.0 + (factors - 1.0) * bell_profile(EVENT_LENGTH)[None, None, :n_steps]
    return np.where(bell[:, None, None], shaped, np.broadcast_to(factors, shaped.shape))


@functools.cache
def shapley_matrix(k: int) -> np.ndarray:
    """(k, 2^k): ``phi = matrix @ worths`` gives the Shapley values of a game whose worths are
    indexed by coalition bit masks (bit ``c``: covariate ``c`` in), as ``describe.shapley``."""
    matrix = np.zeros((k, 2**k))
    whole = math.factorial(k)
    for mask in range(2**k):
        size = bin(mask).count("1")
        for c in range(k):
            if mask >> c & 1:  # v(S) with S = mask, c in S: weight of v(S + c) - v(S) for S - c
                matrix[c, mask] += math.factorial(size - 1) * math.factorial(k - size) / whole
            else:
                matrix[c, mask] -= math.factorial(size) * math.factorial(k - size - 1) / whole
    matrix.setflags(write=False)
    return matrix


def coalition_paths(paths: np.ndarray) -> np.ndarray:
    """(K, 2^K * R, n) from the (K, R, n) factor trajectories of R events: column block ``m``
    is every event with the covariates outside coalition ``m`` (bit ``c`` set: covariate ``c``
    in) at factor 1."""
    k = paths.shape[0]
    present = ((np.arange(2**k)[None, :] >> np.arange(k)[:, None]) & 1).astype(bool)
    coalitions = np.where(present[:, :, None, None], paths[:, None, :, :], 1.0)
    return coalitions.reshape(k, -1, paths.shape[2])


def responses(relationship: Relationship, paths: np.ndarray, windows: np.ndarray) -> np.ndarray:
    """(R, W, n): ``y'(t) - y(t)`` under each of R factor trajectories ((K, R, n)) on each
    window ((W, n))."""
    k, count, n_steps = paths.shape
    n_windows = windows.shape[0]
    matrix = np.broadcast_to(paths[:, :, None, :], (k, count, n_windows, n_steps))
    baseline = np.broadcast_to(windows, (count, n_windows, n_steps))
    values = relationship.evaluate(
        np.ascontiguousarray(baseline).reshape(-1), np.ascontiguousarray(matrix).reshape(k, -1)
    )
    return values.reshape(baseline.shape) - baseline


def attributions(
    relationship: Relationship, windows: np.ndarray, rows: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Exact attribution of each event (row of ``rows``, (R, K): one event of EVENT_LENGTH
    steps from the window's first step, cut at the window's end) on each window ((W, n)):
    ``phi`` (K, R, W) per covariate, ``total`` (R, W) = ``v(N)`` and ``unattributed`` (R, W) =
    ``v({})``, so that ``phi.sum(0) + unattributed == total`` up to rounding."""
    count, k = rows.shape
    paths = coalition_paths(_trajectories(relationship, rows, windows.shape[1]))
    worths = responses(relationship, paths, windows).sum(axis=2)
    worths = worths.reshape(2**k, count, windows.shape[0])  # (2^K, R, W)
    phi = np.einsum("cm,mrw->crw", shapley_matrix(k), worths)
    return phi, worths[-1], worths[0]


def own_effects(
    relationship: Relationship, k: int, windows: np.ndarray, rows: np.ndarray
) -> np.ndarray:
    """(R, W): the 10 % statistic of each event of ``rows`` ((R, k) factors) on each window;
    with one covariate away from 1 per row, that covariate's own effect."""
    paths = _trajectories(relationship, rows, windows.shape[1])
    change = np.abs(responses(relationship, paths, windows)).mean(axis=2)
    return change / np.abs(windows).mean(axis=1)[None, :]


def _median(values: np.ndarray) -> float:
    """The median of the values that are not NaN (NaN when there is none)."""
    ordered = np.sort(values[~np.isnan(values)], axis=None)
    n = ordered.size
    return 0.5 * float(ordered[(n - 1) // 2] + ordered[n // 2]) if n else math.nan


def _minimum(values: np.ndarray) -> float:
    values = values[~np.isnan(values)]
    return float(values.min()) if values.size else math.nan


def measure(relationship: Relationship, windows: np.ndarray | None = None) -> list[Imprint]:
    """Every secondary covariate's imprint at every ``K`` from 2 to ``max_k``, on ``windows``
    ((W, n) baseline windows of at most EVENT_LENGTH steps, the event starting at the first;
    default ``constant_windows``), in (K, covariate) order."""
    if windows is None:
        windows = constant_windows(relationship)
    windows = np.asarray(windows, dtype=np.float64).reshape(-1, np.shape(windows)[-1])
    if windows.shape[1] > EVENT_LENGTH:
        raise ValueError(
            f"imprint windows hold at most {EVENT_LENGTH} steps, got {windows.shape[1]}"
        )
    windows = windows[np.abs(windows).mean(axis=1) > 0.0]
    # on constant windows an event of step-shaped covariates is the same at every step: one
    # step gives the same ratios (the time dimension only matters for a bell)
    steady = windows[:, :1] if np.all(windows == windows[:, :1]) else None

    def enough(covariates) -> np.ndarray:
        step = all(c.shape == "step" for c in covariates)
        return steady if steady is not None and step else windows

    out: list[Imprint] = []
    for k in range(2, relationship.max_k + 1):
        rows, drawn = event_rows(relationship, k)
        if len(windows) and len(rows):
            with np.errstate(divide="ignore", invalid="ignore"):
                phi, total, _ = attributions(
                    relationship, enough(relationship.covariates[:k]), rows
                )
                shares = phi / np.where(total == 0.0, np.nan, total)[None]
        else:
            shares = np.full((k, len(rows), 0), np.nan)
        s = relationship.dampening_factor(k)
        factors = {i: drawable_factors(relationship, i) for i in range(1, k)}
        own_of: dict[int, np.ndarray] = {}
        for step in (True, False):  # step-shaped covariates may need fewer steps
            group = [
                i
                for i, f in factors.items()
                if f.size and (relationship.covariates[i].shape == "step") == step
            ]
            if not group or not len(windows):
                continue
            blocks = []
            for i in group:
                block = np.ones((factors[i].size, k))
                block[:, i] = factors[i]
                blocks.append(block)
            chosen = enough([relationship.covariates[i] for i in group])
            ratios = own_effects(relationship, k, chosen, np.concatenate(blocks))
            bounds = np.cumsum([0, *(len(b) for b in blocks)])
            own_of.update({i: ratios[bounds[j] : bounds[j + 1]] for j, i in enumerate(group)})
        for index in range(1, k):
            info = relationship.covariates[index]
            own = own_of.get(index, np.empty((0, 0)))
            if own.size:
                typical = np.sort(own, axis=1)
                middle = 0.5 * (typical[:, (own.shape[1] - 1) // 2] + typical[:, own.shape[1] // 2])
                best = int(np.argmax(middle))
                reach, reach_factor = float(middle[best]), float(factors[index][best])
            else:
                reach, reach_factor = math.nan, math.nan
            out.append(
                Imprint(
                    simulator=relationship.simulator,
                    target=relationship.target,
                    k=k,
                    covariate=info.name,
                    weight=s * info.weight,
                    share_min=_minimum(shares[index]),
                    share_median=_median(shares[index][drawn]),
                    own_min=_minimum(own),
                    own_median=_median(own),
                    reach=reach,
                    reach_factor=reach_factor,
                    measurable=None if math.isnan(reach) else bool(reach >= THRESHOLD),
                )
            )
    return out


def below(imprints: list[Imprint]) -> list[Imprint]:
    """The imprints that are not measurable (``measurable is False``)."""
    return [i for i in imprints if i.measurable is False]
