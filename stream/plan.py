"""The stream's fast path: its worlds, targets and distribution as kernel arrays, and the tasks
built from what the kernels draw.

``build_plan`` turns a stream's entries (world, target, what fits) and ``AxisDistribution`` into
a ``StreamPlan``: the ``KernelPlan`` arrays ``stream._kernels`` read, and what turns a slot's
drawn numbers back into a ``Task`` (names, layouts, units). ``make_batch`` draws a batch of
slots in two kernel calls; ``SlotBatch.task`` builds one slot's ``Task``, the same to the bit as
``TaskStream._reference_task`` makes it (tests/test_stream_kernels.py compares them).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from whatif_bench.corpus import Task, axes, start_text
from whatif_bench.corpus.random_twin import choice_cdf, slot_entropy
from whatif_bench.relationships.forms import MAX_PARAMS
from whatif_bench.relationships.kernels import CUSTOM_CODE_BASE
from whatif_bench.relationships.ranges import NOVEL_OFFSET, NOVEL_SCALE
from whatif_bench.relationships.shapes import shape_code
from whatif_bench.relationships.verification import THRESHOLD
from whatif_bench.stream import _kernels as kern
from whatif_bench.stream.distribution import CANONICAL, CONTEXT_LABELS, AxisDistribution
from whatif_bench.stream.seeding import STREAM_DOMAIN
from whatif_bench.stream.slot_blocks import block_arrays

MAX_K = kern.MAX_K
N_CONTEXTS, N_LENGTHS, N_SETTINGS = len(CONTEXT_LABELS), len(axes.EVENT_LENGTHS), 2
TABLE_WIDTH = 5  # the most values of any axis


@dataclass(frozen=True)
class _EntryInfo:
    """What a task of one entry needs besides its numbers (computed once per entry)."""

    world: str
    simulator: str
    target: str
    units: tuple[str, str]  # (target, unit)
    interval_s: int
    baseline_start: str
    covariates: tuple[str, ...]  # every covariate of the target, in order
    shapes: tuple[str, ...]
    base_values: tuple  # as the registry holds them (int or float)


@dataclass(frozen=True)
class StreamPlan:
    """A stream's kernel arrays and the names and layouts to build its tasks from."""

    kernel: kern.KernelPlan
    infos: tuple[_EntryInfo, ...]
    layouts: dict  # (simulator, C index, l index, E index) -> HistoryLayout


class _Tables:
    """Choice tables, each (values, weights) stored once."""

    def __init__(self) -> None:
        self.rows: dict[tuple, int] = {}

    def add(self, values: list, weights: list) -> int:
        key = (tuple(values), tuple(weights))
        if key not in self.rows:
            self.rows[key] = len(self.rows)
        return self.rows[key]

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        n = max(len(self.rows), 1)
        cdf = np.ones((n, TABLE_WIDTH))
        values = np.zeros((n, TABLE_WIDTH), dtype=np.int64)
        count = np.zeros(n, dtype=np.int64)
        for (row_values, row_weights), row in self.rows.items():
            size = len(row_values)
            cdf[row, :size] = choice_cdf(row_weights)
            values[row, :size] = row_values
            count[row] = size
        return cdf, values, count


def _choices(dist: AxisDistribution, name: str, allowed) -> tuple[list, list]:
    """The values ``stream.distribution.draw`` chooses among, as indices, and their weights."""
    weights, canonical = getattr(dist, name), CANONICAL[name]
    chosen = [v for v in canonical if weights.get(v, 0) > 0 and (allowed is None or v in allowed)]
    index = (lambda v: v) if name == "k" else canonical.index
    return [index(v) for v in chosen], [weights[v] for v in chosen]


def build_plan(entries: Sequence, dist: AxisDistribution) -> StreamPlan | None:
    """The plan of a stream's entries (``task_stream._Entry``) and distribution (not of its
    seed: a plan serves any seed).

    ``None`` when the kernels cannot make these tasks exactly (a target with a user-registered
    form, or a factor pool holding a value that is not a positive finite number): the stream
    then makes every task with its reference path.
    """
    n = len(entries)
    tables = _Tables()
    k_table = np.zeros(n, dtype=np.int64)
    c_table = np.zeros(n, dtype=np.int64)
    l_table = np.zeros((n, N_CONTEXTS), dtype=np.int64)
    e_table = np.zeros((n, N_CONTEXTS, N_LENGTHS), dtype=np.int64)
    layouts = np.zeros((n, N_CONTEXTS, N_LENGTHS, N_SETTINGS, 6), dtype=np.int64)
    entry_ints = np.zeros((n, 7), dtype=np.int64)
    entry_floats = np.zeros((n, 3))
    primary_params = np.zeros((n, MAX_PARAMS))
    signs, bases = np.zeros((n, MAX_K)), np.zeros((n, MAX_K))
    shapes = np.zeros((n, MAX_K), dtype=np.int64)
    effect_codes = np.zeros((n, MAX_K, MAX_K), dtype=np.int64)
    effect_params = np.zeros((n, MAX_K, MAX_K, MAX_PARAMS))
    weights = np.zeros((n, MAX_K, MAX_K))
    pools, starts, baselines, infos, named_layouts = [], [], [], [], {}
    offset = n_starts = 0
    for e, entry in enumerate(entries):
        relationship, source = entry.relationship, entry.source
        max_k = min(relationship.max_k, MAX_K)
        pool = np.asarray(
            relationship.history_pool if dist.history_pool is None else dist.history_pool
        )
        if pool.size == 0 or not np.all(np.isfinite(pool)) or np.any(pool <= 0):
            return None
        for k in range(1, max_k + 1):
            form, params, codes, packed, signed, combination, level, low, high = (
                relationship.kernel_constants(k)
            )
            if form >= CUSTOM_CODE_BASE or np.any(codes >= CUSTOM_CODE_BASE):
                return None
            effect_codes[e, k - 1, :k], effect_params[e, k - 1, :k] = codes, packed
            weights[e, k - 1, :k] = signed
        primary_params[e] = params
        entry_floats[e] = level, low, high
        covariates = relationship.covariates[:max_k]
        signs[e, :max_k] = [info.sign for info in covariates]
        bases[e, :max_k] = [info.base_value for info in covariates]
        shapes[e, :max_k] = [shape_code(info.shape) for info in covariates]
        above, below = pool[pool > 1.0], pool[pool < 1.0]
        pools.append((above, below))
        entry_ints[e] = (
            offset,
            relationship.only_increase,
            combination,
            form,
            above.size,
            below.size,
            bool(np.all(np.isfinite(entry.baseline))),
        )
        baselines.append(entry.baseline)
        offset += entry.baseline.size
        k_table[e] = tables.add(*_choices(dist, "k", range(1, relationship.max_k + 1)))
        c_table[e] = tables.add(*_choices(dist, "contexts", {f[0] for f in entry.fits}))
        for c_label in {f[0] for f in entry.fits}:
            c = CONTEXT_LABELS.index(c_label)
            fitting = {f[1] for f in entry.fits if f[0] == c_label}
            l_table[e, c] = tables.add(*_choices(dist, "event_lengths", fitting))
            for length in fitting:
                li = axes.EVENT_LENGTHS.index(length)
                fitting_e = {f[2] for f in entry.fits if f[:2] == (c_label, length)}
                e_table[e, c, li] = tables.add(*_choices(dist, "e_settings", fitting_e))
                for setting in fitting_e:
                    ei = axes.E_SETTINGS.index(setting)
                    key = (source.simulator, c, li, ei)
                    if key not in named_layouts:
                        context, prediction = axes.contexts(relationship.c4)[c_label]
                        named_layouts[key] = axes.layout(context, prediction, length, setting)
                    history = named_layouts[key]
                    latest_start = entry.baseline.size - history.window
                    layouts[e, c, li, ei] = (
                        history.context,
                        history.prediction,
                        len(history.starts),
                        n_starts,
                        math.floor(dist.window_start[0] * latest_start),
                        math.floor(dist.window_start[1] * latest_start),
                    )
                    starts.append(np.asarray(history.starts, dtype=np.int64))
                    n_starts += len(history.starts)
        infos.append(
            _EntryInfo(
                world=source.name,
                simulator=source.simulator,
                target=relationship.target,
                units=(relationship.target, source.baselines.units[relationship.target]),
                interval_s=source.baselines.interval_s,
                baseline_start=source.baselines.start,
                covariates=relationship.covariate_names,
                shapes=tuple(info.shape for info in relationship.covariates),
                base_values=tuple(info.base_value for info in relationship.covariates),
            )
        )
    width = max(max(a.size, b.size) for a, b in pools)
    above_all, below_all = np.zeros((n, width)), np.zeros((n, width))
    for e, (above, below) in enumerate(pools):
        above_all[e, : above.size], below_all[e, : below.size] = above, below
    future_table = np.array([tables.add(*_choices(dist, "futures", None))], dtype=np.int64)
    choice_cdf_, choice_values, choice_count = tables.arrays()
    kernel = kern.KernelPlan(
        choice_cdf=choice_cdf_,
        choice_values=choice_values,
        choice_count=choice_count,
        k_table=k_table,
        c_table=c_table,
        l_table=l_table,
        e_table=e_table,
        future_table=future_table,
        event_lengths=np.asarray(axes.EVENT_LENGTHS, dtype=np.int64),
        layouts=layouts,
        event_starts=np.concatenate(starts),
        baselines=np.concatenate(baselines),
        entry_ints=entry_ints,
        entry_floats=entry_floats,
        primary_params=primary_params,
        signs=signs,
        bases=bases,
        shapes=shapes,
        effect_codes=effect_codes,
        effect_params=effect_params,
        weights=weights,
        above=above_all,
        below=below_all,
        novel=np.array(
            [
                NOVEL_OFFSET[0],
                NOVEL_OFFSET[1] - NOVEL_OFFSET[0],
                NOVEL_SCALE[0],
                NOVEL_SCALE[1] - NOVEL_SCALE[0],
            ]
        ),
        threshold=np.array([THRESHOLD]),
    )
    kern.check_plan(kernel)
    return StreamPlan(kernel, tuple(infos), named_layouts)


@dataclass
class SlotBatch:
    """What the kernels drew for a batch of slots, and the tasks built from it."""

    plan: StreamPlan
    slots: list[int]
    seed: int
    rows: list[list[int]]  # picks, one row per slot (see stream._kernels, ENTRY .. )
    directions: np.ndarray  # (n, MAX_EVENTS) int8
    factors: np.ndarray  # (n, MAX_EVENTS * MAX_K) float64
    novel: np.ndarray  # (n, MAX_K) float64
    # each slot's float32 block (stream.slot_blocks; read for kept slots): one array per slot,
    # or all in one (make_batch's ``packed``)
    blocks: list[np.ndarray] | kern.SlotBlocks

    def status(self, i: int) -> int:
        """``KEPT``, ``EXHAUSTED`` or ``FALLBACK`` (see ``stream._kernels``)."""
        return self.rows[i][kern.STATUS]

    def rejected(self, i: int) -> dict[str, int]:
        """The slot's rejected draws by reason (reasons with none left out)."""
        row = self.rows[i]
        counts = {
            "history": row[kern.REJECTED_HISTORY],
            "replay": row[kern.REJECTED_REPLAY],
            "novel": row[kern.REJECTED_NOVEL],
        }
        return {reason: n for reason, n in counts.items() if n}

    def task(self, i: int) -> Task:
        """The ``Task`` of kept slot ``i``, shaped exactly as ``TaskStream._reference_task``'s."""
        entry, k, c, li, ei, fi, window_start, replay_source = self.rows[i][: kern.STATUS]
        info = self.plan.infos[entry]
        layout = self.plan.layouts[(info.simulator, c, li, ei)]
        n_events = len(layout.starts)
        length, future = axes.EVENT_LENGTHS[li], axes.FUTURES[fi]
        factors = self.factors[i, : n_events * k].reshape(n_events, k)
        chosen = factors[replay_source] if future == "replay" else self.novel[i, :k]
        record = {
            "window_start": window_start,
            "event_starts": list(layout.starts),
            "event_length": length,
            "future_event_length": layout.future_event_length(future),
            "directions": self.directions[i, :n_events].tolist(),
            "factors": factors.tolist(),
            "replay_source": replay_source,
            "future_factors": chosen.tolist(),
            "shapes": list(info.shapes[:k]),
            "base_values": list(info.base_values[:k]),
            "world": info.world,
            "slot": self.slots[i],
            "seed": self.seed,
        }
        return Task(
            task_id=self.task_id(i),
            future=future,
            simulator=info.simulator,
            target=info.target,
            k=k,
            c_label=CONTEXT_LABELS[c],
            event_length=length,
            e_setting=axes.E_SETTINGS[ei],
            covariates=info.covariates[:k],
            units=dict((info.units,)),
            interval_s=info.interval_s,
            baseline_start=info.baseline_start,
            start_step=window_start,
            **self.task_arrays(i),
            recipe=record,
            world=info.world,
        )

    def task_id(self, i: int) -> str:
        """Kept slot ``i``'s ``Task.task_id``."""
        entry, k, c, li, ei, fi = self.rows[i][: kern.FUTURE + 1]
        info = self.plan.infos[entry]
        return (
            f"{info.simulator}/{info.target}/K{k}-{CONTEXT_LABELS[c]}-L{axes.EVENT_LENGTHS[li]}-"
            f"{axes.E_SETTINGS[ei]}/{axes.FUTURES[fi]}/{info.world}-{self.slots[i]}"
        )

    def task_arrays(self, i: int) -> dict[str, np.ndarray]:
        """Kept slot ``i``'s arrays by ``Task`` field, float32 views of its one block (no copy):
        ``history_target`` (C,), ``history_covariates`` (K, C), ``future_covariates`` (K, H),
        ``future_target`` (H,), ``counterfactual_history`` (C,), ``counterfactual_future`` (H,)."""
        entry, k, c, li, ei = self.rows[i][: kern.SETTING + 1]
        layout = self.plan.layouts[(self.plan.infos[entry].simulator, c, li, ei)]
        return block_arrays(self.block(i), k, layout.context, layout.prediction)

    def block(self, i: int) -> np.ndarray:
        """Slot ``i``'s float32 block (``stream.slot_blocks``' layout)."""
        if isinstance(self.blocks, kern.SlotBlocks):
            return self.blocks.block(i)
        return self.blocks[i]

    def c_label(self, i: int) -> str:
        """Slot ``i``'s context label (C1..C4)."""
        return CONTEXT_LABELS[self.rows[i][kern.CONTEXT]]

    def task_fields(self, i: int, index: int) -> dict:
        """``stream.items.task_fields(self.task(i), index)``, made from the slot's numbers
        without the ``Task`` (the same values, types and order)."""
        entry, k, c, li, ei, fi, window_start = self.rows[i][: kern.WINDOW_START + 1]
        info = self.plan.infos[entry]
        layout = self.plan.layouts[(info.simulator, c, li, ei)]
        future = axes.FUTURES[fi]
        unit_of, unit = info.units
        return {
            "index": int(index),
            "k": k,
            "context_length": layout.context,
            "prediction_length": layout.prediction,
            "event_length": axes.EVENT_LENGTHS[li],
            "interval_s": int(info.interval_s),
            "start_step": window_start,
            "future_index": axes.future_choices().index(future),
            "c_index": c,
            "e_index": ei,
            "task_id": self.task_id(i),
            "simulator": info.simulator,
            "target": info.target,
            "unit": unit if unit_of == info.target else "",
            "future": future,
            "c_label": CONTEXT_LABELS[c],
            "e_setting": axes.E_SETTINGS[ei],
            "world": info.world,
            "start": start_text(info.baseline_start, window_start * info.interval_s),
            "covariates": info.covariates[:k],
        }


def make_batch(
    plan: StreamPlan,
    seed: int,
    slots: Sequence[int],
    max_attempts: int,
    verify: bool = True,
    *,
    packed: bool = False,
) -> SlotBatch:
    """Draw, verify (unless ``verify`` is False) and materialise ``slots`` in one kernel call.

    ``verify=False`` keeps every first draw, skipping the 10 % rule: only for measuring what
    the rule costs (``benchmarks/bench_stream.py``); such tasks may have invisible events.
    ``packed`` puts every slot's block in one array (``PaddedBatches`` places them into a batch
    in one kernel call); a ``Task`` made from such a batch holds views of that whole array, so
    a stream yielding tasks keeps each slot's block apart.
    """
    slots = list(slots)
    picks, directions, factors, novel, blocks = kern.draw_slots(
        plan.kernel,
        slot_entropy(seed, (STREAM_DOMAIN,)),
        np.asarray(slots, dtype=np.int64),
        max_attempts,
        verify,
        packed,
    )
    return SlotBatch(plan, slots, seed, picks.tolist(), directions, factors, novel, blocks)
