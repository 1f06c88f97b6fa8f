"""numba kernels of the training stream: draw, verify and materialise many slots in one call.

A slot's task is defined by ``TaskStream._reference_task`` (``draw_recipe_from`` then
``build_pair``, one Python call per draw). These kernels make the same tasks bit for bit: the
draws come from the numba twins of NumPy's generator (``corpus.random_twin``), in the reference's
order; pairs are materialised by the relationship engine's own kernels; the 10 % statistic sums
with NumPy's pairwise summation (``generator.kernels``, shared with the sweep), so every ratio
is NumPy's to the last bit.

``draw_slots`` makes a batch of slots in one call: per slot it draws a pair and builds its
targets, checking the 10 % rule part by part (history, Replay, Novel: the first failing part is
the reason the reference reports) until a pair passes, then rounds the kept pair's arrays, with
its covariates, into one float32 array per slot. A slot the kernels cannot make exactly as the
reference would -- a non-finite baseline window, a factor pool without values on the side a
covariate needs, a stored value beyond float32 -- is marked ``FALLBACK``, and the caller makes
it with the reference, which then raises the reference's error.

Everything the kernels read about the stream's worlds, relationships and distribution is in a
``KernelPlan`` (built by ``stream.plan``); ``check_plan`` validates one.
"""

from __future__ import annotations

from typing import NamedTuple

import numba
import numpy as np

from whatif_bench.corpus.axes import NOVEL_REACH
from whatif_bench.corpus.random_twin import (
    STATE_WORDS,
    next_choice,
    next_integer,
    seed_state,
)
from whatif_bench.generator.kernels import (
    INNER_OPTIONS,
    NOGIL_OPTIONS,
    draw_recipe_kernel,
    effect_ratio_kernel,
    store_covariates,
    store_rounded,
)
from whatif_bench.relationships.kernels import (
    RelationshipConstants,
    apply_events_kernel,
)

MAX_K = 5  # most covariates of a task (axes.K_VALUES)
MAX_EVENTS = 64  # most events of a history (axes.MAX_EVENTS)

# columns of the per-slot integer results (``picks``)
(
    ENTRY,
    K,
    CONTEXT,
    LENGTH,
    SETTING,
    FUTURE,
    WINDOW_START,
    REPLAY_SOURCE,
    STATUS,
    REJECTED_HISTORY,
    REJECTED_REPLAY,
    REJECTED_NOVEL,
) = range(12)
N_PICKS = 12
# slot status, and the verification outcomes (0 kept, else the reason's offset from REJECTED_*)
KEPT, EXHAUSTED, FALLBACK = 0, 1, 2
PASSED, FAILED_HISTORY, FAILED_REPLAY, FAILED_NOVEL, UNUSABLE = 0, 1, 2, 3, 4
# columns of ``entry_ints``, ``entry_floats`` and ``layouts``
(
    BASELINE_OFFSET,
    ONLY_INCREASE,
    COMBINATION,
    PRIMARY_CODE,
    N_ABOVE,
    N_BELOW,
    ALL_FINITE,
) = range(7)
LEVEL, LOWER, UPPER = range(3)
L_CONTEXT, L_PREDICTION, L_EVENTS, L_STARTS, L_LOWEST, L_HIGHEST = range(6)


class KernelPlan(NamedTuple):
    """What the kernels draw from, as contiguous arrays (see ``stream.plan.build_plan``).

    Choice tables: row ``i`` draws one of ``choice_values[i, :choice_count[i]]`` with the
    cumulative weights ``choice_cdf[i]`` (``random_twin.choice_cdf``). Entry ``e`` (a world and
    target) draws K from table ``k_table[e]``, C from ``c_table[e]``, the event length from
    ``l_table[e, c]``, E from ``e_table[e, c, l]`` and the future from ``future_table[0]``.
    Values are K itself and indices into ``CONTEXT_LABELS``, ``EVENT_LENGTHS``, ``E_SETTINGS``
    and ``FUTURES``.
    """

    choice_cdf: np.ndarray  # (n_tables, 5) float64
    choice_values: np.ndarray  # (n_tables, 5) int64
    choice_count: np.ndarray  # (n_tables,) int64
    k_table: np.ndarray  # (n_entries,) int64
    c_table: np.ndarray  # (n_entries,) int64
    l_table: np.ndarray  # (n_entries, 4) int64
    e_table: np.ndarray  # (n_entries, 4, 5) int64
    future_table: np.ndarray  # (1,) int64
    event_lengths: np.ndarray  # (5,) int64, steps
    layouts: np.ndarray  # (n_entries, 4, 5, 2, 6) int64: context, prediction, n events,
    # offset into event_starts, lowest and highest window start (steps)
    event_starts: np.ndarray  # (n,) int64, steps from the window start
    baselines: np.ndarray  # (n,) float64: every entry's baseline, concatenated
    entry_ints: np.ndarray  # (n_entries, 7) int64: BASELINE_OFFSET .. ALL_FINITE
    entry_floats: np.ndarray  # (n_entries, 3) float64: level, lower and upper clip
    primary_params: np.ndarray  # (n_entries, MAX_PARAMS) float64
    signs: np.ndarray  # (n_entries, 5) float64: +1 the target rises with the factor, -1 falls
    bases: np.ndarray  # (n_entries, 5) float64: covariate base values
    shapes: np.ndarray  # (n_entries, 5) int64: covariate shape codes
    effect_codes: np.ndarray  # (n_entries, 5, 5) int64, [entry, K - 1, covariate]
    effect_params: np.ndarray  # (n_entries, 5, 5, MAX_PARAMS) float64
    weights: np.ndarray  # (n_entries, 5, 5) float64: signed, dampened secondary weights
    above: np.ndarray  # (n_entries, P) float64: history factors above 1, pool order
    below: np.ndarray  # (n_entries, P) float64: history factors below 1, pool order
    novel: np.ndarray  # (4,) float64: Novel offset low and span, Novel scale low and span
    threshold: np.ndarray  # (1,) float64: the 10 % rule


class SlotBlocks(NamedTuple):
    """A batch's kept slots' float32 blocks in one array: slot ``i``'s is
    ``flat[offsets[i]:offsets[i + 1]]`` (empty where no draw passed; a slot turned FALLBACK for a
    value beyond float32 keeps its block, which nothing reads)."""

    flat: np.ndarray  # (sum of the blocks' sizes,) float32
    offsets: np.ndarray  # (n + 1,) int64

    def block(self, i: int) -> np.ndarray:
        return self.flat[self.offsets[i] : self.offsets[i + 1]]


# ---- one attempt ---------------------------------------------------------------------------
@numba.njit(**INNER_OPTIONS)
def _pick(plan: KernelPlan, state: np.ndarray, table: int) -> int:
    index = next_choice(state, plan.choice_cdf[table], plan.choice_count[table])
    return plan.choice_values[table, index]


@numba.njit(**INNER_OPTIONS)
def _draw_attempt(
    plan: KernelPlan,
    state: np.ndarray,
    picks: np.ndarray,
    directions: np.ndarray,
    factors: np.ndarray,
    novel: np.ndarray,
) -> bool:
    """Draw one pair into one slot's rows, in the reference's order; False if unusable.

    Order: entry, K, C, l, E, future (``draw``), then the recipe (``draw_recipe_from``):
    window start, per event a direction and one factor per covariate, the Replay source,
    then per covariate the Novel factor.
    """
    entry = next_integer(state, plan.k_table.shape[0])
    k = _pick(plan, state, plan.k_table[entry])
    c = _pick(plan, state, plan.c_table[entry])
    length = _pick(plan, state, plan.l_table[entry, c])
    setting = _pick(plan, state, plan.e_table[entry, c, length])
    future = _pick(plan, state, plan.future_table[0])
    layout = plan.layouts[entry, c, length, setting]
    ints = plan.entry_ints[entry]
    window_start, replay_source, usable = draw_recipe_kernel(
        state,
        layout[L_LOWEST],
        layout[L_HIGHEST],
        layout[L_EVENTS],
        k,
        ints[ONLY_INCREASE] != 0,
        plan.signs[entry],
        plan.above[entry, : ints[N_ABOVE]],
        plan.below[entry, : ints[N_BELOW]],
        plan.novel,
        directions,
        factors,
        novel,
    )
    if not usable:
        return False
    picks[ENTRY], picks[K], picks[CONTEXT], picks[LENGTH] = entry, k, c, length
    picks[SETTING], picks[FUTURE] = setting, future
    picks[WINDOW_START], picks[REPLAY_SOURCE] = window_start, replay_source
    return True


@numba.njit(**INNER_OPTIONS)
def _window(plan: KernelPlan, picks: np.ndarray) -> np.ndarray:
    """The slot's baseline window (C + H,) float64, a view."""
    layout = plan.layouts[picks[ENTRY], picks[CONTEXT], picks[LENGTH], picks[SETTING]]
    first = plan.entry_ints[picks[ENTRY], BASELINE_OFFSET] + picks[WINDOW_START]
    return plan.baselines[first : first + layout[L_CONTEXT] + layout[L_PREDICTION]]


@numba.njit(**INNER_OPTIONS)
def _build(
    plan: KernelPlan,
    picks: np.ndarray,
    factors: np.ndarray,
    novel: np.ndarray,
    verify: bool,
    scratch: tuple,
) -> int:
    """Materialise the targets of the slot's drawn pair into ``scratch`` and apply the 10 % rule.

    Three parts, in the reference's order: the history (the events at their starts), then the
    Replay and the Novel future (one event at the first forecast step, on the prediction window
    padded with zeros to the event's length, as ``materialise._future``). Each is the engine's
    ``apply_events`` (one call site: numba compiles the engine's kernel once here). Returns the
    first failing part (``PairResult.drop_reason``), PASSED (always when not ``verify``), or
    UNUSABLE for a window with a non-finite value. The history target goes to ``history``, the
    futures' targets to ``futures[0]`` and ``futures[1]``; parts after a failing one are not
    built.
    """
    history, padded, futures, work, lengths, one = scratch[:6]
    entry, k = picks[ENTRY], picks[K]
    layout = plan.layouts[entry, picks[CONTEXT], picks[LENGTH], picks[SETTING]]
    context, horizon, n_events = layout[L_CONTEXT], layout[L_PREDICTION], layout[L_EVENTS]
    length = plan.event_lengths[picks[LENGTH]]
    ints, floats = plan.entry_ints[entry], plan.entry_floats[entry]
    window = _window(plan, picks)
    if not ints[ALL_FINITE]:
        for value in window:
            if not np.isfinite(value):
                return UNUSABLE
    starts = plan.event_starts[layout[L_STARTS] : layout[L_STARTS] + n_events]
    lengths[:n_events] = length
    events = factors[: n_events * k].reshape((n_events, k))
    replay = events[picks[REPLAY_SOURCE] : picks[REPLAY_SOURCE] + 1]
    novel_length = min(length, NOVEL_REACH * horizon)  # HistoryLayout.future_event_length
    one[0] = 0
    constants = RelationshipConstants(
        ints[PRIMARY_CODE],
        plan.primary_params[entry],
        plan.effect_codes[entry, k - 1, :k],
        plan.effect_params[entry, k - 1, :k],
        plan.weights[entry, k - 1, :k],
        ints[COMBINATION],
        floats[LEVEL],
        floats[LOWER],
        floats[UPPER],
    )
    for part in range(3):
        if part == 0:
            y, part_starts, part_lengths, out = (
                window[:context],
                starts,
                lengths[:n_events],
                history[:context],
            )
            part_factors = events
        else:
            one[1] = length if part == 1 else novel_length
            steps = max(one[1], horizon)
            padded[:steps] = 0.0
            padded[:horizon] = window[context:]
            y, part_starts, part_lengths, out = (
                padded[:steps],
                one[:1],
                one[1:],
                futures[part - 1, :steps],
            )
            part_factors = replay if part == 1 else novel[:k].reshape((1, k))
        apply_events_kernel(
            y,
            part_starts,
            part_lengths,
            part_factors,
            plan.shapes[entry, :k],
            constants,
            out,
        )
        if not verify:
            continue
        for start in part_starts:  # each history event; the future's one event, cut at H
            span = min(length, y.shape[0] - start) if part == 0 else min(length, horizon)
            if effect_ratio_kernel(out, y, start, span, work) < plan.threshold[0]:
                return FAILED_HISTORY + part
    return PASSED


@numba.njit(**INNER_OPTIONS)
def _scratch(plan: KernelPlan) -> tuple:
    """Work arrays big enough for every slot of ``plan``: history (C), padded future (T),
    both futures (2, T), ratio work (also a bell profile), event lengths, a one-event schedule
    and the other future's float32 arrays."""
    layouts = plan.layouts.reshape((-1, plan.layouts.shape[-1]))
    longest = max(layouts[:, L_CONTEXT].max(), 1)
    padded = max(layouts[:, L_PREDICTION].max(), plan.event_lengths.max())
    return (
        np.empty(longest),
        np.empty(padded),
        np.empty((2, padded)),
        np.empty(max(longest, padded)),
        np.empty(MAX_EVENTS, dtype=np.int64),
        np.empty(2, dtype=np.int64),
        np.empty((MAX_K + 1) * padded, dtype=np.float32),
    )


@numba.njit(**INNER_OPTIONS)
def _slot_entropy(prefix: np.ndarray, slot: int, entropy: np.ndarray) -> int:
    """The seed words of ``slot``: ``prefix`` then the slot's 32-bit words; returns their
    number."""
    n = prefix.shape[0]
    entropy[:n] = prefix
    value = np.uint64(slot)
    entropy[n] = value & np.uint64(0xFFFFFFFF)
    high = value >> np.uint64(32)
    if high == np.uint64(0):
        return n + 1
    entropy[n + 1] = high
    return n + 2


# ---- the kept pairs' arrays ------------------------------------------------------------------
@numba.njit(**INNER_OPTIONS)
def _store_covariates(
    plan: KernelPlan,
    picks: np.ndarray,
    starts: np.ndarray,
    length: int,
    factors: np.ndarray,
    steps: int,
    out: np.ndarray,
    first: int,
    profile: np.ndarray,
) -> bool:
    """The slot's covariates (``generator.kernels.store_covariates`` with its entry's bases and
    shapes)."""
    entry = picks[ENTRY]
    return store_covariates(
        plan.bases[entry], plan.shapes[entry], starts, length, factors, steps, out, first, profile
    )


@numba.njit(**INNER_OPTIONS)
def _slot_size(plan: KernelPlan, picks: np.ndarray) -> int:
    """float32 values of a kept slot: history target and covariates, the chosen future's
    covariates and target, and the window (the counterfactual)."""
    layout = plan.layouts[picks[ENTRY], picks[CONTEXT], picks[LENGTH], picks[SETTING]]
    k, context, horizon = picks[K], layout[L_CONTEXT], layout[L_PREDICTION]
    return (k + 2) * (context + horizon)


@numba.njit(**INNER_OPTIONS)
def _store_slot(
    plan: KernelPlan,
    picks: np.ndarray,
    factors: np.ndarray,
    novel: np.ndarray,
    scratch: tuple,
    out: np.ndarray,
) -> bool:
    """Write the kept slot's float32 values, from the targets ``_build`` left in ``scratch``,
    into ``out`` (``_slot_size``,); False if a stored value is beyond float32.

    The block holds the history target (C), history covariates (K, C), the chosen future's
    covariates (K, H) and target (H), then the window (C + H) (``stream.slot_blocks``). The
    other future's arrays are rounded too: the reference refuses a pair if any of its stored
    arrays is not finite.
    """
    history, _, futures, profile, _, one, spare = scratch
    k = picks[K]
    layout = plan.layouts[picks[ENTRY], picks[CONTEXT], picks[LENGTH], picks[SETTING]]
    context, horizon, n_events = layout[L_CONTEXT], layout[L_PREDICTION], layout[L_EVENTS]
    starts = plan.event_starts[layout[L_STARTS] : layout[L_STARTS] + n_events]
    events = factors[: n_events * k].reshape((n_events, k))
    finite = store_rounded(history[:context], out, 0)
    length = plan.event_lengths[picks[LENGTH]]
    finite &= _store_covariates(plan, picks, starts, length, events, context, out, context, profile)
    at = (k + 1) * context
    replay = events[picks[REPLAY_SOURCE] : picks[REPLAY_SOURCE] + 1]
    for index, chosen in enumerate((replay, novel[:k].reshape((1, k)))):
        mine = index == picks[FUTURE]
        target, first = (out, at) if mine else (spare, 0)
        future_length = length if index == 0 else min(length, NOVEL_REACH * horizon)
        finite &= _store_covariates(
            plan, picks, one[:1], future_length, chosen, horizon, target, first, profile
        )
        finite &= store_rounded(futures[index, :horizon], target, first + k * horizon)
    store_rounded(_window(plan, picks), out, at + (k + 1) * horizon)
    return finite


@numba.njit(**INNER_OPTIONS)
def _largest_slot(plan: KernelPlan) -> int:
    """The most float32 values a kept slot of ``plan`` can have (``_slot_size`` at K = MAX_K)."""
    layouts = plan.layouts.reshape((-1, plan.layouts.shape[-1]))
    return (MAX_K + 2) * (layouts[:, L_CONTEXT] + layouts[:, L_PREDICTION]).max()


@numba.njit(**NOGIL_OPTIONS)  # StreamDataset draws ahead in a thread
def _draw_slots(
    plan: KernelPlan,
    prefix: np.ndarray,
    slots: np.ndarray,
    max_attempts: int,
    verify: bool,
    picks: np.ndarray,
    directions: np.ndarray,
    factors: np.ndarray,
    novel: np.ndarray,
    packed: bool,
) -> tuple:
    """Fill each slot's row of ``picks`` (N_PICKS), ``directions``, ``factors`` and ``novel``
    with the first drawn pair that passes (every first pair when not ``verify``).

    Returns ``(arrays, flat, offsets)``: one float32 array per slot (``_store_slot``'s block,
    empty where no draw passed, unread for a slot turned FALLBACK), or, when ``packed``, no
    arrays and the blocks one after another in ``flat``, slot ``i``'s at
    ``flat[offsets[i]:offsets[i + 1]]`` (``offsets`` (n + 1,) int64; ``flat`` and ``offsets``
    are empty when not ``packed``).
    """
    scratch = _scratch(plan)
    state = np.zeros(STATE_WORDS, dtype=np.uint64)
    entropy = np.zeros(prefix.shape[0] + 2, dtype=np.uint64)
    arrays = [np.empty(0, dtype=np.float32) for _ in range(0)]  # typed for numba, empty
    n = slots.shape[0]
    # untouched pages of the bound cost no memory
    flat = np.empty(n * _largest_slot(plan) if packed else 0, dtype=np.float32)
    offsets = np.zeros(n + 1 if packed else 0, dtype=np.int64)
    used = 0
    for row in range(slots.shape[0]):
        n_words = _slot_entropy(prefix, slots[row], entropy)
        seed_state(entropy[:n_words], state)
        pick = picks[row]
        pick[:] = 0
        pick[STATUS] = EXHAUSTED
        for _ in range(max_attempts):
            if not _draw_attempt(plan, state, pick, directions[row], factors[row], novel[row]):
                pick[STATUS] = FALLBACK
                break
            outcome = _build(plan, pick, factors[row], novel[row], verify, scratch)
            if outcome == PASSED:
                pick[STATUS] = KEPT
                break
            if outcome == UNUSABLE:
                pick[STATUS] = FALLBACK
                break
            pick[REJECTED_HISTORY + outcome - FAILED_HISTORY] += 1
        size = _slot_size(plan, pick) if pick[STATUS] == KEPT else 0
        out = flat[used : used + size] if packed else np.empty(size, dtype=np.float32)
        if size and not _store_slot(plan, pick, factors[row], novel[row], scratch, out):
            pick[STATUS] = FALLBACK
        if packed:
            used += size
            offsets[row + 1] = used
        else:
            arrays.append(out)
    return arrays, flat[:used], offsets


# ---- public, validating wrappers -------------------------------------------------------------
def check_plan(plan: KernelPlan) -> None:
    """Refuse a plan whose arrays do not have the dtypes and shapes the kernels assume."""
    if not isinstance(plan, KernelPlan):
        raise TypeError("plan must be a KernelPlan (see stream.plan.build_plan)")
    n = plan.k_table.shape[0]
    expected = {
        "choice_cdf": (np.float64, None),
        "choice_values": (np.int64, None),
        "choice_count": (np.int64, None),
        "k_table": (np.int64, (n,)),
        "c_table": (np.int64, (n,)),
        "l_table": (np.int64, (n, 4)),
        "e_table": (np.int64, (n, 4, 5)),
        "future_table": (np.int64, (1,)),
        "event_lengths": (np.int64, (5,)),
        "layouts": (np.int64, (n, 4, 5, 2, 6)),
        "event_starts": (np.int64, None),
        "baselines": (np.float64, None),
        "entry_ints": (np.int64, (n, 7)),
        "entry_floats": (np.float64, (n, 3)),
        "primary_params": (np.float64, None),
        "signs": (np.float64, (n, MAX_K)),
        "bases": (np.float64, (n, MAX_K)),
        "shapes": (np.int64, (n, MAX_K)),
        "effect_codes": (np.int64, (n, MAX_K, MAX_K)),
        "effect_params": (np.float64, None),
        "weights": (np.float64, (n, MAX_K, MAX_K)),
        "above": (np.float64, None),
        "below": (np.float64, None),
        "novel": (np.float64, (4,)),
        "threshold": (np.float64, (1,)),
    }
    for name, (dtype, shape) in expected.items():
        array = getattr(plan, name)
        if not isinstance(array, np.ndarray) or array.dtype != dtype:
            raise TypeError(f"plan.{name} must be a {np.dtype(dtype).name} array")
        if not array.flags.c_contiguous:
            raise ValueError(f"plan.{name} must be C-contiguous")
        if shape is not None and array.shape != shape:
            raise ValueError(f"plan.{name} has shape {array.shape}, expected {shape}")
    if n == 0:
        raise ValueError("the plan has no entry to draw from")


def draw_slots(
    plan: KernelPlan,
    prefix: np.ndarray,
    slots: np.ndarray,
    max_attempts: int,
    verify: bool,
    packed: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[np.ndarray] | SlotBlocks]:
    """Draw, check (if ``verify``) and materialise every slot of ``slots`` (``_draw_slots``).

    ``prefix`` is the stream's seed words (``random_twin.slot_entropy(seed, (STREAM_DOMAIN,))``).
    Returns ``picks`` (n, N_PICKS) int64, ``directions`` (n, MAX_EVENTS) int8, ``factors``
    (n, MAX_EVENTS * MAX_K) float64 (row-major (events, K)), ``novel`` (n, MAX_K) float64 and
    the slots' float32 blocks (``stream.slot_blocks``' layout; read for KEPT slots only):
    one array per slot, or with ``packed`` a ``SlotBlocks``, all of them in one array.
    """
    check_plan(plan)
    prefix = np.ascontiguousarray(prefix, dtype=np.uint64)
    slots = np.ascontiguousarray(slots, dtype=np.int64)
    if prefix.ndim != 1 or slots.ndim != 1 or np.any(slots < 0):
        raise ValueError("prefix and slots must be one-dimensional; slots >= 0")
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
        raise ValueError(f"max_attempts must be a positive integer, got {max_attempts!r}")
    n = slots.shape[0]
    picks = np.zeros((n, N_PICKS), dtype=np.int64)
    directions = np.zeros((n, MAX_EVENTS), dtype=np.int8)
    factors = np.zeros((n, MAX_EVENTS * MAX_K))
    novel = np.zeros((n, MAX_K))
    arrays, flat, offsets = _draw_slots(
        plan, prefix, slots, max_attempts, bool(verify), picks, directions, factors, novel, packed
    )
    blocks = SlotBlocks(flat, offsets) if packed else arrays
    return picks, directions, factors, novel, blocks
