"""numba kernels of the sweep: all of one target's pairs drawn, built and checked in one call.

A pair is defined by ``sweep.reference_pair`` (``draw_recipe`` then ``build_pair``: Python and
small NumPy calls, one pair at a time). ``generate_pairs`` makes the same pairs to the bit for a
whole target: the recipe's draws come from the numba twin of the pair's NumPy generator
(``corpus.random_twin``, seeded with ``corpus.seeds.pair_entropy``) in ``draw_recipe``'s order;
the targets are the relationship engine's own ``apply_events_kernel``; the 10 % statistic sums
with NumPy's pairwise summation (the engine's ``pairwise_sum``), so every ratio is NumPy's to
the last bit; kept pairs are rounded to float32 straight into one block per corpus dataset, in
pair order.

A pair the kernel cannot make exactly as the reference would (a non-finite baseline window, a
factor pool without values on the side a covariate needs, a factor that is not finite and
positive, a stored value beyond float32) is marked ``FALLBACK``: the caller makes it with the
reference, which raises the reference's error. Targets with user forms never come here (their
kernels are compiled at run time; ``target_plan`` returns None).

The helpers without an underscore (``draw_recipe_kernel``, ``effect_ratio_kernel``,
``store_rounded``, ``store_covariates``) are shared with the training stream's kernels
(``stream/_kernels.py``).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numba
import numpy as np

from whatif_bench.corpus.random_twin import (
    STATE_WORDS,
    next_double,
    next_integer,
    seed_state,
)
from whatif_bench.relationships.engine import Relationship
from whatif_bench.relationships.forms import MAX_PARAMS
from whatif_bench.relationships.kernels import (
    BELL,
    CUSTOM_CODE_BASE,
    JIT_OPTIONS,
    JitFlags,
    RelationshipConstants,
    apply_events_kernel,
    fill_bell_profile,
    pairwise_sum,
)
from whatif_bench.relationships.ranges import NOVEL_OFFSET, NOVEL_SCALE
from whatif_bench.relationships.verification import THRESHOLD

# helpers only kernels call: no wrapper to call them from Python
# (typed as a plain dict: numba's stubs do not list these two wrapper flags)
INNER_OPTIONS: dict[str, Any] = {
    **JIT_OPTIONS,
    "no_cpython_wrapper": True,
    "no_cfunc_wrapper": True,
}

# the target kernel lets go of Python's lock: generate runs targets in threads (cluster.py)
NOGIL_OPTIONS: JitFlags = {**JIT_OPTIONS, "nogil": True}
# columns of a pair's layout row (``generate_pairs``'s ``layouts``); steps, or offsets
(
    K,
    CONTEXT,
    PREDICTION,
    EVENT_LENGTH,
    NOVEL_LENGTH,
    N_EVENTS,
    STARTS_AT,
    LATEST_START,
    EVENTS_AT,
    FACTORS_AT,
    COVARIATES_AT,
) = range(11)
N_LAYOUT = 11
# columns of a pair's results (``picks``)
WINDOW_START, REPLAY_SOURCE, STATUS = range(3)
N_PICKS = 3
# a pair's status: kept, the first part that fails the 10 % rule (PairResult.drop_reason's
# order), or made by the reference
KEPT, DROPPED_HISTORY, DROPPED_REPLAY, DROPPED_NOVEL, FALLBACK = range(5)
# the corpus's data datasets, in DATA_DATASETS' order, as block indices
HISTORY_TARGET, HISTORY_COVARIATES, FUTURE_TARGET, FUTURE_COVARIATES = range(4)
# columns of ``TargetPlan.ints``
ONLY_INCREASE, COMBINATION, PRIMARY_CODE = range(3)


class TargetPlan(NamedTuple):
    """One target's relationship, factor pool and baseline as the kernel reads them.

    Index ``[K - 1, c]`` of the per-K arrays is covariate ``c`` of the relationship cut to its
    first ``K`` covariates (the weights are dampened by K).
    """

    baseline: np.ndarray  # (N,) float64: the simulator's whole series
    above: np.ndarray  # (P,) float64: history factors above 1, in pool order
    below: np.ndarray  # (P,) float64: history factors below 1, in pool order
    signs: np.ndarray  # (max_k,) float64: +1 the target rises with the factor, -1 falls
    bases: np.ndarray  # (max_k,) float64: covariate base values (physical units)
    shapes: np.ndarray  # (max_k,) int64: STEP or BELL
    primary_params: np.ndarray  # (MAX_PARAMS,) float64
    effect_codes: np.ndarray  # (max_k, max_k) int64
    effect_params: np.ndarray  # (max_k, max_k, MAX_PARAMS) float64
    weights: np.ndarray  # (max_k, max_k) float64: signed, dampened secondary weights
    ints: np.ndarray  # (3,) int64: ONLY_INCREASE, COMBINATION, PRIMARY_CODE
    clip: np.ndarray  # (3,) float64: additive level, lower and upper clip (target's unit)
    novel: np.ndarray  # (4,) float64: Novel offset low and span, Novel scale low and span
    threshold: float  # the 10 % rule


# ---- ratios as NumPy computes them (the sums: relationships.kernels.pairwise_sum) ---------
@numba.njit(**JIT_OPTIONS)
def effect_ratio_kernel(
    actual: np.ndarray, baseline: np.ndarray, first: int, n: int, work: np.ndarray
) -> float:
    """``verification.effect_ratio(actual[first:first + n], baseline[first:first + n])``;
    ``work`` holds at least ``n`` float64."""
    for t in range(n):
        work[t] = abs(actual[first + t] - baseline[first + t])
    change = pairwise_sum(work, 0, n) / n
    for t in range(n):
        work[t] = abs(baseline[first + t])
    level = pairwise_sum(work, 0, n) / n
    if level == 0.0:
        return 0.0
    return change / level


# ---- rounding for storage ----------------------------------------------------------------
@numba.njit(**INNER_OPTIONS)
def store_rounded(values: np.ndarray, out: np.ndarray, first: int) -> bool:
    """Round ``values`` to float32 into ``out[first:]``; False if any rounds to inf or NaN."""
    finite = True
    for i in range(values.shape[0]):
        rounded = np.float32(values[i])
        out[first + i] = rounded
        if not np.isfinite(rounded):
            finite = False
    return finite


@numba.njit(**INNER_OPTIONS)
def store_covariates(
    bases: np.ndarray,
    shapes: np.ndarray,
    starts: np.ndarray,
    length: int,
    factors: np.ndarray,
    steps: int,
    out: np.ndarray,
    first: int,
    profile: np.ndarray,
) -> bool:
    """The (K, ``steps``) covariates ``base * factor(t)`` of events of ``length`` steps and
    ``factors`` (E, K) at ``starts`` (cut at ``steps``), as float32 rows from ``out[first]``;
    False if one is beyond float32. ``bases`` and ``shapes`` (at least K) are the covariates'
    base values and shape codes; ``profile`` holds at least ``length`` float64.

    ``Relationship.covariate_values`` to the bit: the factor is 1 outside events, the event's
    factor inside a step event and ``1 + (f - 1) * bell(t)`` inside a bell one, times the base.
    """
    finite, bell_ready = True, False
    for c in range(factors.shape[1]):
        base, row = bases[c], first + c * steps
        outside = np.float32(1.0 * base)
        out[row : row + steps] = outside
        finite &= np.isfinite(outside)
        bell = shapes[c] == BELL
        if bell and not bell_ready:
            fill_bell_profile(length, profile)
            bell_ready = True
        for e in range(starts.shape[0]):
            factor, at = factors[e, c], row + starts[e]
            for t in range(min(length, steps - starts[e])):
                value = np.float32(((1.0 + (factor - 1.0) * profile[t]) if bell else factor) * base)
                out[at + t] = value
                finite &= np.isfinite(value)
    return finite


# ---- one pair --------------------------------------------------------------------------------
@numba.njit(**INNER_OPTIONS)
def draw_recipe_kernel(
    state: np.ndarray,
    lowest: int,
    highest: int,
    n_events: int,
    k: int,
    only_increase: bool,
    signs: np.ndarray,
    above: np.ndarray,
    below: np.ndarray,
    novel_rule: np.ndarray,
    directions: np.ndarray,
    factors: np.ndarray,
    novel: np.ndarray,
) -> tuple[int | np.int64, int | np.int64, bool]:
    """``draw_recipe_from``'s draws, in its order: the window start in ``lowest..highest``, per
    event a direction (+1 / -1 into ``directions``) and one factor per covariate (into
    ``factors``, row-major (E, K)), the Replay source, then per covariate the Novel factor
    (into ``novel``). ``signs`` (K,): +1 a direct covariate, -1 an inverse one; ``above`` and
    ``below``: the pool's factors above and below 1, in pool order; ``novel_rule``: the Novel
    offset's low and span, the Novel scale's low and span. Returns the window start, the Replay
    source, and False where the reference would fail (an empty side of the pool, a factor that
    is not finite and positive). The stream's kernels draw the same way after their axis draws.
    """
    window_start = lowest + next_integer(state, highest - lowest + 1)
    n_above, n_below = above.shape[0], below.shape[0]
    for event in range(n_events):
        up = True if only_increase else next_integer(state, 2) == 1
        directions[event] = 1 if up else -1
        for covariate in range(k):
            if (signs[covariate] > 0) == up:
                if n_above == 0:
                    return window_start, 0, False
                factor = above[next_integer(state, n_above)]
            else:
                if n_below == 0:
                    return window_start, 0, False
                factor = below[next_integer(state, n_below)]
            if not (np.isfinite(factor) and factor > 0.0):
                return window_start, 0, False
            factors[event * k + covariate] = factor
    replay_source = next_integer(state, n_events)
    offset_low, offset_span, scale_low, scale_span = novel_rule
    for covariate in range(k):
        if signs[covariate] > 0:
            highest_factor = 1.0  # the base value outside events
            for event in range(n_events):
                highest_factor = max(highest_factor, factors[event * k + covariate])
            value = highest_factor + (offset_low + offset_span * next_double(state))
        else:
            lowest_factor = 1.0
            for event in range(n_events):
                lowest_factor = min(lowest_factor, factors[event * k + covariate])
            value = lowest_factor * (scale_low + scale_span * next_double(state))
        if not (np.isfinite(value) and value > 0.0):
            return window_start, replay_source, False
        novel[covariate] = value
    return window_start, replay_source, True


@numba.njit(**INNER_OPTIONS)
def _draw(
    plan: TargetPlan,
    state: np.ndarray,
    layout: np.ndarray,
    picks: np.ndarray,
    directions: np.ndarray,
    factors: np.ndarray,
    novel: np.ndarray,
) -> bool:
    """Draw one pair's recipe (``draw_recipe_kernel``) into ``picks`` and the arrays; False
    when the reference would fail."""
    window_start, replay_source, usable = draw_recipe_kernel(
        state,
        0,
        layout[LATEST_START],
        layout[N_EVENTS],
        layout[K],
        plan.ints[ONLY_INCREASE] != 0,
        plan.signs,
        plan.above,
        plan.below,
        plan.novel,
        directions,
        factors,
        novel,
    )
    picks[WINDOW_START], picks[REPLAY_SOURCE] = window_start, replay_source
    return usable


@numba.njit(**INNER_OPTIONS)
def _constants(plan: TargetPlan, k: int) -> RelationshipConstants:
    """The relationship over its first ``k`` covariates (``Relationship.kernel_constants``)."""
    return RelationshipConstants(
        plan.ints[PRIMARY_CODE],
        plan.primary_params,
        plan.effect_codes[k - 1, :k],
        plan.effect_params[k - 1, :k],
        plan.weights[k - 1, :k],
        plan.ints[COMBINATION],
        plan.clip[0],
        plan.clip[1],
        plan.clip[2],
    )


@numba.njit(**INNER_OPTIONS)
def _build(
    plan: TargetPlan,
    layout: np.ndarray,
    starts: np.ndarray,
    window: np.ndarray,
    events: np.ndarray,
    replay: np.ndarray,
    novel: np.ndarray,
    ratios: np.ndarray,
    future_ratios: np.ndarray,
    scratch: tuple,
) -> int:
    """Build the pair's history target and both futures' targets into ``scratch`` and apply
    the 10 % rule to every event; returns the pair's status (KEPT or the first failing part).

    ``materialise`` and ``build_pair`` to the bit: the history is the baseline window's
    context with the events (E, K) at ``starts``; each future is the prediction window padded
    with zeros to its event's length, with one event at its first step (Replay: ``replay``
    (1, K), the source event's factors, ``l`` steps; Novel: ``novel``, ``min(l, 2 H)`` steps).
    Every ratio is computed, also after a failing one: the corpus stores them all.
    """
    history, padded, futures, work, lengths, one = scratch
    k, context, horizon = layout[K], layout[CONTEXT], layout[PREDICTION]
    length, n_events = layout[EVENT_LENGTH], layout[N_EVENTS]
    constants = _constants(plan, k)
    shapes = plan.shapes[:k]
    lengths[:n_events] = length
    past = window[:context]
    apply_events_kernel(
        past, starts, lengths[:n_events], events, shapes, constants, history[:context]
    )
    status = KEPT
    for e in range(n_events):
        span = min(length, context - starts[e])
        ratios[e] = effect_ratio_kernel(history, past, starts[e], span, work)
        if ratios[e] < plan.threshold:
            status = DROPPED_HISTORY
    one[0] = 0
    for part in range(2):
        one[1] = length if part == 0 else layout[NOVEL_LENGTH]
        steps = max(one[1], horizon)
        padded[:steps] = 0.0
        padded[:horizon] = window[context:]
        chosen = replay if part == 0 else novel[:k].reshape((1, k))
        apply_events_kernel(
            padded[:steps], one[:1], one[1:], chosen, shapes, constants, futures[part, :steps]
        )
        future_ratios[part] = effect_ratio_kernel(
            futures[part], padded, 0, min(length, horizon), work
        )
        if status == KEPT and future_ratios[part] < plan.threshold:
            status = DROPPED_REPLAY + part
    return status


@numba.njit(**INNER_OPTIONS)
def _store_pair(
    plan: TargetPlan,
    layout: np.ndarray,
    starts: np.ndarray,
    events: np.ndarray,
    replay: np.ndarray,
    novel: np.ndarray,
    scratch: tuple,
    profile: np.ndarray,
    blocks: tuple,
    used: np.ndarray,
) -> bool:
    """Round a kept pair's arrays to float32 at the ends of ``blocks`` (``used`` values of each
    filled so far), as ``sweep.stored_arrays`` lays them out; False if one is beyond float32
    (``used`` is then left as it was)."""
    history, _, futures = scratch[:3]
    k, context, horizon = layout[K], layout[CONTEXT], layout[PREDICTION]
    length = layout[EVENT_LENGTH]
    one = scratch[5]
    bases, shapes = plan.bases[:k], plan.shapes[:k]
    finite = store_rounded(history[:context], blocks[HISTORY_TARGET], used[HISTORY_TARGET])
    finite &= store_covariates(
        bases,
        shapes,
        starts,
        length,
        events,
        context,
        blocks[HISTORY_COVARIATES],
        used[HISTORY_COVARIATES],
        profile,
    )
    for part in range(2):
        finite &= store_rounded(
            futures[part, :horizon], blocks[FUTURE_TARGET], used[FUTURE_TARGET] + part * horizon
        )
        finite &= store_covariates(
            bases,
            shapes,
            one[:1],
            length if part == 0 else layout[NOVEL_LENGTH],
            replay if part == 0 else novel[:k].reshape((1, k)),
            horizon,
            blocks[FUTURE_COVARIATES],
            used[FUTURE_COVARIATES] + part * k * horizon,
            profile,
        )
    if finite:
        used[HISTORY_TARGET] += context
        used[HISTORY_COVARIATES] += k * context
        used[FUTURE_TARGET] += 2 * horizon
        used[FUTURE_COVARIATES] += 2 * k * horizon
    return finite


# ---- a target's pairs --------------------------------------------------------------------------
@numba.njit(**NOGIL_OPTIONS)  # generate's worker threads run it side by side
def _generate_pairs(
    plan: TargetPlan,
    entropy: np.ndarray,
    layouts: np.ndarray,
    event_starts: np.ndarray,
    all_finite: bool,
    picks: np.ndarray,
    directions: np.ndarray,
    factors: np.ndarray,
    ratios: np.ndarray,
    future_ratios: np.ndarray,
    novel_factors: np.ndarray,
    blocks: tuple,
    offsets: np.ndarray,
    used: np.ndarray,
) -> None:
    """Fill every pair's rows of the outputs (see ``generate_pairs``)."""
    longest = max(layouts[:, CONTEXT].max(), 1)
    padded_steps = max(
        layouts[:, PREDICTION].max(), layouts[:, EVENT_LENGTH].max(), layouts[:, NOVEL_LENGTH].max()
    )
    scratch = (
        np.empty(longest),
        np.empty(padded_steps),
        np.empty((2, padded_steps)),
        np.empty(max(longest, padded_steps)),
        np.empty(max(layouts[:, N_EVENTS].max(), 1), dtype=np.int64),
        np.empty(2, dtype=np.int64),
    )
    profile = np.empty(max(longest, padded_steps))
    state = np.zeros(STATE_WORDS, dtype=np.uint64)
    for pair in range(layouts.shape[0]):
        layout = layouts[pair]
        k, n_events = layout[K], layout[N_EVENTS]
        pick = picks[pair]
        offsets[pair, :] = -1
        seed_state(entropy[pair], state)
        e0, f0, c0 = layout[EVENTS_AT], layout[FACTORS_AT], layout[COVARIATES_AT]
        pair_factors = factors[f0 : f0 + n_events * k]
        novel = novel_factors[c0 : c0 + k]
        if not _draw(
            plan, state, layout, pick, directions[e0 : e0 + n_events], pair_factors, novel
        ):
            pick[STATUS] = FALLBACK
            continue
        window = plan.baseline[
            pick[WINDOW_START] : pick[WINDOW_START] + layout[CONTEXT] + layout[PREDICTION]
        ]
        if not all_finite:
            usable = True
            for value in window:
                if not np.isfinite(value):
                    usable = False
            if not usable:
                pick[STATUS] = FALLBACK
                continue
        starts = event_starts[layout[STARTS_AT] : layout[STARTS_AT] + n_events]
        events = pair_factors.reshape((n_events, k))
        replay = events[pick[REPLAY_SOURCE] : pick[REPLAY_SOURCE] + 1]
        pick[STATUS] = _build(
            plan,
            layout,
            starts,
            window,
            events,
            replay,
            novel,
            ratios[e0 : e0 + n_events],
            future_ratios[pair],
            scratch,
        )
        if pick[STATUS] != KEPT:
            continue
        offsets[pair, :] = used
        if not _store_pair(
            plan, layout, starts, events, replay, novel, scratch, profile, blocks, used
        ):
            offsets[pair, :] = -1
            pick[STATUS] = FALLBACK


# ---- public, validating wrappers -------------------------------------------------------------
def target_plan(relationship: Relationship, baseline: np.ndarray) -> TargetPlan | None:
    """The kernel's view of ``relationship`` over ``baseline`` (N,), or None when a form or
    effect is a user's (compiled at run time, so the reference makes those pairs)."""
    max_k = relationship.max_k
    packed = [relationship.kernel_arguments(k) for k in range(1, max_k + 1)]
    if relationship.form.code >= CUSTOM_CODE_BASE or any(
        np.any(p.effect_codes >= CUSTOM_CODE_BASE) for p in packed
    ):
        return None
    effect_codes = np.zeros((max_k, max_k), dtype=np.int64)
    effect_params = np.zeros((max_k, max_k, MAX_PARAMS))
    weights = np.zeros((max_k, max_k))
    for k, arguments in enumerate(packed, start=1):
        effect_codes[k - 1, :k] = arguments.effect_codes
        effect_params[k - 1, :k] = arguments.effect_params
        weights[k - 1, :k] = arguments.weights
    constants = relationship.kernel_constants(max_k)
    pool = np.asarray(relationship.history_pool, dtype=np.float64)
    return TargetPlan(
        baseline=np.ascontiguousarray(baseline, dtype=np.float64),
        above=np.ascontiguousarray(pool[pool > 1.0]),
        below=np.ascontiguousarray(pool[pool < 1.0]),
        signs=np.array([c.sign for c in relationship.covariates], dtype=np.float64),
        bases=np.array([c.base_value for c in relationship.covariates], dtype=np.float64),
        shapes=packed[-1].shape_codes.astype(np.int64),
        primary_params=np.ascontiguousarray(relationship.primary_params, dtype=np.float64),
        effect_codes=effect_codes,
        effect_params=effect_params,
        weights=weights,
        ints=np.array(
            [int(relationship.only_increase), constants.combination, constants.primary_code],
            dtype=np.int64,
        ),
        clip=np.array([constants.level, constants.lower, constants.upper], dtype=np.float64),
        novel=np.array(
            [
                NOVEL_OFFSET[0],
                NOVEL_OFFSET[1] - NOVEL_OFFSET[0],
                NOVEL_SCALE[0],
                NOVEL_SCALE[1] - NOVEL_SCALE[0],
            ],
            dtype=np.float64,
        ),
        threshold=float(THRESHOLD),
    )


class PairsOutput(NamedTuple):
    """What ``generate_pairs`` returns, per pair in the order given (offsets from the layouts)."""

    picks: np.ndarray  # (n, N_PICKS) int64: WINDOW_START, REPLAY_SOURCE, STATUS
    directions: np.ndarray  # (events,) int8: +1 / -1 per history event
    factors: np.ndarray  # (events x K,) float64: each pair's (E, K) factors, row-major
    ratios: np.ndarray  # (events,) float64: the 10 % statistic of every history event
    future_ratios: np.ndarray  # (n, 2) float64: Replay's and Novel's statistic
    novel_factors: np.ndarray  # (sum K,) float64: each pair's Novel factors
    blocks: tuple[np.ndarray, ...]  # four float32 blocks, DATA_DATASETS' order, kept pairs
    offsets: np.ndarray  # (n, 4) int64: each kept pair's offset in each block, else -1


def generate_pairs(
    plan: TargetPlan, entropy: np.ndarray, layouts: np.ndarray, event_starts: np.ndarray
) -> PairsOutput:
    """Draw, build and check every pair of one target (``_generate_pairs``).

    ``entropy`` (n, W) uint64: each pair's seed words (``corpus.seeds.pair_entropy``);
    ``layouts`` (n, N_LAYOUT) int64: each pair's K, context, prediction, event length, Novel
    event length, event count, offset of its starts in ``event_starts`` (steps from the window
    start), latest window start, and its offsets in the per-event, per-factor and per-covariate
    outputs. A pair whose status is FALLBACK has no meaningful results: make it with the
    reference.
    """
    entropy = np.ascontiguousarray(entropy, dtype=np.uint64)
    layouts = np.ascontiguousarray(layouts, dtype=np.int64)
    event_starts = np.ascontiguousarray(event_starts, dtype=np.int64)
    n = layouts.shape[0]
    if entropy.ndim != 2 or entropy.shape[0] != n or layouts.ndim != 2:
        raise ValueError("entropy must be (n, W) and layouts (n, N_LAYOUT) for the same n pairs")
    if layouts.shape[1] != N_LAYOUT or n == 0:
        raise ValueError(f"layouts must be a non-empty (n, {N_LAYOUT}) array")
    if np.any(layouts[:, K] < 1) or np.any(layouts[:, K] > plan.signs.shape[0]):
        raise ValueError(f"K must be in 1..{plan.signs.shape[0]}")
    if np.any(layouts[:, LATEST_START] < 0) or np.any(layouts[:, LATEST_START] >= 2**32 - 1):
        raise ValueError("every window must fit the baseline (latest start 0 .. 2**32 - 2)")
    k, events = layouts[:, K], layouts[:, N_EVENTS]
    n_events, n_factors, n_covariates = (
        int(events.sum()),
        int((events * k).sum()),
        int(k.sum()),
    )
    context, horizon = layouts[:, CONTEXT], layouts[:, PREDICTION]
    sizes = (context, k * context, 2 * horizon, 2 * k * horizon)
    blocks = tuple(np.empty(int(size.sum()), dtype=np.float32) for size in sizes)
    picks = np.zeros((n, N_PICKS), dtype=np.int64)
    output = PairsOutput(
        picks=picks,
        directions=np.zeros(n_events, dtype=np.int8),
        factors=np.zeros(n_factors),
        ratios=np.zeros(n_events),
        future_ratios=np.zeros((n, 2)),
        novel_factors=np.zeros(n_covariates),
        blocks=blocks,
        offsets=np.full((n, 4), -1, dtype=np.int64),
    )
    used = np.zeros(4, dtype=np.int64)
    _generate_pairs(
        plan,
        entropy,
        layouts,
        event_starts,
        bool(np.all(np.isfinite(plan.baseline))),
        picks,
        output.directions,
        output.factors,
        output.ratios,
        output.future_ratios,
        output.novel_factors,
        blocks,
        output.offsets,
        used,
    )
    return output._replace(blocks=tuple(b[:u] for b, u in zip(blocks, used.tolist(), strict=True)))
