"""``TaskStream``: an endless (or counted), seeded stream of fresh, verified tasks.

Slot ``i`` of a stream is one task, drawn from the ``i``-th child of the stream's seed sequence:
a world and target, then K, C, l, E and the future type from the ``AxisDistribution``, then the
recipe (window start, events, factors) in the benchmark's order of draws. A drawn pair that fails
the benchmark's 10 % rule is rejected (counted in ``stats``, never returned) and the slot draws
again from its own generator. So a slot's task depends only on the seed, the selection of worlds
and the distribution: sharding over workers or ranks (``shard``/``num_shards``) changes who makes
it, never what it is.
"""

from __future__ import annotations

import copy
import itertools
import os
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np

from whatif_bench.corpus import PairKey, Task, axes, draw_recipe_from, recipe_record
from whatif_bench.errors import WhatIfError
from whatif_bench.generator.materialise import STORE_DTYPE, materialise
from whatif_bench.generator.sweep import PairResult, build_pair, check_finite, stored_arrays
from whatif_bench.relationships.engine import Relationship
from whatif_bench.relationships.verification import RULE
from whatif_bench.stream._kernels import EXHAUSTED, FALLBACK
from whatif_bench.stream.distribution import (
    CANONICAL,
    AxisDistribution,
    DistributionError,
    draw,
)
from whatif_bench.stream.plan import SlotBatch, StreamPlan, build_plan, make_batch
from whatif_bench.stream.seeding import resolve_seed, slot_rng
from whatif_bench.stream.sources import SourceError, WorldSource

DEFAULT_MAX_ATTEMPTS = 1000
BATCH_SLOTS = 64  # slots an iterator makes per kernel call


class StreamError(WhatIfError):
    """The stream cannot start (bad selection or distribution) or a slot cannot be filled."""


@dataclass
class StreamStats:
    """What this process's iteration drew: kept tasks and rejections by reason."""

    kept: int = 0
    rejected: Counter = field(default_factory=Counter)

    @property
    def drawn(self) -> int:
        return self.kept + sum(self.rejected.values())

    def as_dict(self) -> dict:
        return {
            "drawn": self.drawn,
            "kept": self.kept,
            "rejected": dict(sorted(self.rejected.items())),
        }


@dataclass(frozen=True)
class _Entry:
    """One (world, target) the stream can cut windows from, with what fits its length."""

    source: WorldSource
    relationship: Relationship
    baseline: np.ndarray  # (n_steps,) float64
    fits: frozenset  # (c_label, event_length, e_setting) whose window fits the baseline


class TaskStream:
    """Fresh tasks, each a ``Task`` like the corpus's, verified by the benchmark's 10 % rule.

    Parameters
    ----------
    seed : non-negative int or None
        ``None`` draws fresh entropy; ``self.seed`` records the seed used either way.
    count : int or None
        The number of slots (tasks, over all shards); ``None`` streams forever.
    simulators : names or None
        Restrict to these simulators (default: every simulator with a world).
    holdout : bool
        ``True`` (default) draws only from training worlds, never from a benchmark baseline;
        ``False`` adds the benchmark's shipped baselines to the worlds.
    worlds : training world names or None
        Restrict the training worlds (default: all of the selected simulators).
    cache : folder or None
        Where training worlds are cached (default: ``WorldCache``'s).
    distribution : AxisDistribution or None
        Weights over the axes (default: the benchmark's).
    shard, num_shards : int
        This iterator makes slots ``shard, shard + num_shards, ...`` (workers and ranks).
    sources : list of WorldSource or None
        Explicit worlds, replacing ``simulators``/``holdout``/``worlds``/``cache``.
    max_attempts : int
        Draws a slot may make before it is an error (a distribution that hardly ever passes).
    fast : bool
        ``True`` (default) makes tasks in batches with numba kernels (``stream._kernels``);
        ``False`` makes each with ``_reference_task``, the benchmark's own functions one draw at
        a time. The tasks are the same to the bit either way; the fast path hands a slot it
        cannot make exactly (a non-finite window, a value beyond float32) to the reference,
        which raises its error, and ``plan()`` says whether the fast path is in use.
    """

    def __init__(
        self,
        seed: int | None = None,
        *,
        count: int | None = None,
        simulators: tuple[str, ...] | list[str] | None = None,
        holdout: bool = True,
        worlds: tuple[str, ...] | list[str] | None = None,
        cache: str | os.PathLike | None = None,
        distribution: AxisDistribution | None = None,
        shard: int = 0,
        num_shards: int = 1,
        sources: list[WorldSource] | None = None,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        fast: bool = True,
    ) -> None:
        self.seed = resolve_seed(seed)
        if count is not None and (
            isinstance(count, bool) or not isinstance(count, int) or count < 0
        ):
            raise StreamError(f"count must be a non-negative integer or None, got {count!r}")
        if not isinstance(num_shards, int) or num_shards < 1:
            raise StreamError(f"num_shards must be a positive integer, got {num_shards!r}")
        if not isinstance(shard, int) or not 0 <= shard < num_shards:
            raise StreamError(f"shard must be in 0..{num_shards - 1}, got {shard!r}")
        if not isinstance(max_attempts, int) or max_attempts < 1:
            raise StreamError(f"max_attempts must be a positive integer, got {max_attempts!r}")
        if distribution is not None and not isinstance(distribution, AxisDistribution):
            raise StreamError("distribution must be an AxisDistribution")
        self.count = count
        self.simulators = None if simulators is None else tuple(simulators)
        self.holdout = bool(holdout)
        self.worlds = None if worlds is None else tuple(worlds)
        self.cache = cache
        self.distribution = distribution or AxisDistribution()
        self.shard = shard
        self.num_shards = num_shards
        self.max_attempts = max_attempts
        self.stats = StreamStats()
        self._sources = sources
        self._entries: list[_Entry] | None = None
        self.fast = bool(fast)
        self._plan: StreamPlan | None = None
        self._planned = False  # whether _plan is built (None then means: no fast path)

    # ---- set-up ---------------------------------------------------------------------------
    def sharded(self, shard: int, num_shards: int) -> TaskStream:
        """The same stream, restricted to one shard of its slots."""
        other = copy.copy(self)
        TaskStream.__init__(
            other,
            self.seed,
            count=self.count,
            simulators=self.simulators,
            holdout=self.holdout,
            worlds=self.worlds,
            cache=self.cache,
            distribution=self.distribution,
            shard=shard,
            num_shards=num_shards,
            sources=self._sources,
            max_attempts=self.max_attempts,
            fast=self.fast,
        )
        self._share_built(other)
        return other

    def counted_apart(self) -> TaskStream:
        """The same stream with counts (``stats``) of its own, sharing what this one has built
        (its entries and kernel plan; ``copy.copy`` would drop them, as ``__getstate__`` does)."""
        other = copy.copy(self)
        self._share_built(other)
        other.stats = StreamStats()
        return other

    def _share_built(self, other: TaskStream) -> None:
        """Give ``other`` (a copy of this stream) the entries and kernel plan built here."""
        other._entries, other._plan, other._planned = self._entries, self._plan, self._planned

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_entries"] = None  # rebuilt in the receiving process (e.g. a DataLoader worker)
        state["_plan"], state["_planned"] = None, False
        return state

    def with_sources(self) -> TaskStream:
        """The same stream with its worlds read into it: it makes the same tasks, and a process
        without the world cache (a dask worker on another machine) can make them too."""
        other = copy.copy(self)
        other._sources = self.world_sources()
        other._entries = None
        return other

    def world_sources(self) -> list[WorldSource]:
        """The worlds this stream draws from (training worlds unless ``holdout=False``)."""
        if self._sources is not None:
            return list(self._sources)
        from whatif_bench.stream.sources import benchmark_sources, training_sources

        found = training_sources(self.simulators, self.cache, self.worlds)
        if not self.holdout:
            found += benchmark_sources(self.simulators)
        return found

    def entries(self) -> list[_Entry]:
        """Every (world, target) the stream draws from, checked against the distribution."""
        if self._entries is None:
            self._entries = _build_entries(self.world_sources(), self.distribution)
        return self._entries

    def plan(self) -> StreamPlan | None:
        """The kernels' arrays for this stream (built once), or None when every task is made by
        the reference path: ``fast=False``, or worlds the kernels cannot serve exactly (a
        user-registered form, an unusable factor pool; see ``stream.plan.build_plan``)."""
        if not self.fast:
            return None
        if not self._planned:
            self._plan = build_plan(self.entries(), self.distribution)
            self._planned = True
        return self._plan

    # ---- drawing --------------------------------------------------------------------------
    def slots(self) -> Iterator[int]:
        """The slot numbers this iterator makes, in order."""
        if self.count is None:
            return itertools.count(self.shard, self.num_shards)
        return iter(range(self.shard, self.count, self.num_shards))

    def __len__(self) -> int:
        if self.count is None:
            raise TypeError("an endless TaskStream has no length")
        return len(range(self.shard, self.count, self.num_shards))

    def __iter__(self) -> Iterator[Task]:
        slots = self.slots()
        while batch := list(itertools.islice(slots, BATCH_SLOTS)):
            yield from self.tasks(batch)

    def task(self, slot: int) -> Task:
        """The task of one slot (the same for every shard layout)."""
        return next(self.tasks([slot]))

    def tasks(self, slots: Iterable[int]) -> Iterator[Task]:
        """The tasks of ``slots``, in order, the same as one by one: the fast path makes them
        ``BATCH_SLOTS`` per kernel call (small batches stay in the CPU's cache).

        ``stats`` counts each slot's draws as its task is yielded.
        """
        for made in self.drawn(slots):
            yield made if isinstance(made, Task) else made[0].task(made[1])

    def drawn(
        self, slots: Iterable[int], *, packed: bool = False
    ) -> Iterator[Task | tuple[SlotBatch, int]]:
        """What ``tasks`` builds its tasks of, slot by slot: ``(batch, i)``, whose
        ``batch.task(i)`` is the slot's task (``SlotBatch`` also gives its arrays and item
        fields without the ``Task``), or the ``Task`` itself where the reference made it.
        ``packed`` is ``make_batch``'s (each kernel call's blocks in one array). ``stats`` counts
        each slot's draws as it is yielded."""
        slots = list(slots)
        _check_slots(slots)
        for first in range(0, len(slots), BATCH_SLOTS):
            part = slots[first : first + BATCH_SLOTS]
            yield from self.drawn_from(part, self._draw_batch(part, packed))

    def draw_batch(self, slots: list[int], *, packed: bool = False) -> SlotBatch | None:
        """The kernels' batch of ``slots`` (at most ``BATCH_SLOTS`` non-negative ints), or
        ``None`` for a stream without them (``plan()`` is ``None``). Once ``plan()`` has been
        built this may run in another thread (the kernel lets go of the GIL): ``StreamDataset``
        draws the next slots while the current ones are made into items."""
        _check_slots(slots)
        return self._draw_batch(slots, packed)

    def _draw_batch(self, slots: list[int], packed: bool) -> SlotBatch | None:
        """``draw_batch`` of slots already checked."""
        plan = self.plan()
        if plan is None:
            return None
        return make_batch(plan, self.seed, slots, self.max_attempts, packed=packed)

    def drawn_from(
        self, slots: list[int], batch: SlotBatch | None
    ) -> Iterator[Task | tuple[SlotBatch, int]]:
        """``drawn``'s yield for ``slots`` from their ``draw_batch``: a kept slot's ``(batch,
        i)``, the reference's ``Task`` for a slot the kernels left to it (all of them without
        a batch); ``stats`` counted as each is yielded, ``StreamError`` for an exhausted slot."""
        if batch is None:
            yield from map(self._reference_task, slots)
            return
        for i, slot in enumerate(slots):
            status = batch.status(i)
            if status == FALLBACK:  # the reference makes it, or raises its error
                yield self._reference_task(slot)
                continue
            self.stats.rejected.update(batch.rejected(i))
            if status == EXHAUSTED:
                raise _exhausted(slot, self.max_attempts)
            self.stats.kept += 1
            yield batch, i

    def _reference_task(self, slot: int, verify: bool = True) -> Task:
        """The task of one slot, made by the benchmark's own functions, one draw at a time.

        This defines the stream: ``tasks`` makes the same tasks to the bit in numba kernels
        (tests/test_stream_kernels.py), and falls back to this for a slot they cannot make.
        ``verify=False`` keeps the first draw without the 10 % rule, the twin of
        ``stream.plan.make_batch(..., verify=False)``: only for measuring what the rule costs.
        """
        entries = self.entries()
        rng = slot_rng(self.seed, slot)
        dist = self.distribution
        for _ in range(self.max_attempts):
            entry = entries[int(rng.integers(len(entries)))]
            relationship = entry.relationship
            k = draw(rng, dist.k, CANONICAL["k"], range(1, relationship.max_k + 1))
            c_label = draw(rng, dist.contexts, CANONICAL["contexts"], {f[0] for f in entry.fits})
            fitting = {f[1] for f in entry.fits if f[0] == c_label}
            event_length = draw(rng, dist.event_lengths, CANONICAL["event_lengths"], fitting)
            fitting = {f[2] for f in entry.fits if f[:2] == (c_label, event_length)}
            e_setting = draw(rng, dist.e_settings, CANONICAL["e_settings"], fitting)
            future = draw(rng, dist.futures, CANONICAL["futures"])
            key = PairKey(
                entry.source.simulator, relationship.target, k, c_label, event_length, e_setting
            )
            context, prediction = axes.contexts(relationship.c4)[c_label]
            recipe = draw_recipe_from(
                rng,
                key,
                relationship,
                context,
                prediction,
                entry.baseline.size,
                history_pool=dist.history_pool,
                window_range=dist.window_start,
            )
            if verify:
                result = build_pair(recipe, relationship, entry.baseline)
            else:
                arrays = materialise(recipe, relationship, entry.baseline)
                result = PairResult(recipe, np.empty(0), np.inf, np.inf, stored_arrays(arrays))
            if not result.kept:
                self.stats.rejected[result.drop_reason] += 1
                continue
            check_finite(result)
            self.stats.kept += 1
            return _task(entry, result, future, slot, self.seed)
        raise _exhausted(slot, self.max_attempts)


def _check_slots(slots: list) -> None:
    """A ``StreamError`` for the first slot that is not a non-negative integer."""
    for slot in slots:
        if isinstance(slot, bool) or not isinstance(slot, int) or slot < 0:
            raise StreamError(f"slot must be a non-negative integer, got {slot!r}")


def _exhausted(slot: int, max_attempts: int) -> StreamError:
    return StreamError(
        f"slot {slot}: {max_attempts} draws in a row failed the {RULE}; "
        "the distribution hardly ever makes a visible event (raise max_attempts or widen it)"
    )


def _build_entries(sources: list[WorldSource], dist: AxisDistribution) -> list[_Entry]:
    from whatif_bench.relationships.registry import load_registry

    if not sources:
        raise SourceError("no world to draw from (no training world for this selection?)")
    registry = load_registry()
    combos = [
        (c, length, e)
        for c in dist.positive("contexts")
        for length in dist.positive("event_lengths")
        for e in dist.positive("e_settings")
    ]
    entries, longest, unfit = [], {}, set(dist.positive("contexts"))
    for source in sources:
        if source.simulator not in registry.simulators:
            raise SourceError(
                f"world {source.name!r}: no spec declares simulator {source.simulator!r}"
            )
        c4 = registry.simulators[source.simulator].c4
        windows = {
            (c, length, e): axes.layout(*axes.contexts(c4)[c], length, e).window
            for c, length, e in combos
        }
        fits = frozenset(
            combo for combo, window in windows.items() if window <= source.baselines.n_steps
        )
        unfit -= {combo[0] for combo in fits}
        longest[source.name] = source.baselines.n_steps
        if not fits:
            continue
        for relationship in registry:
            if relationship.simulator != source.simulator:
                continue
            if relationship.target not in source.baselines.series:
                continue
            if not any(k <= relationship.max_k for k in dist.positive("k")):
                continue
            baseline = np.ascontiguousarray(
                source.baselines.series[relationship.target], dtype=np.float64
            )
            entries.append(_Entry(source, relationship, baseline, fits))
    if unfit:
        raise DistributionError(
            f"context settings {sorted(unfit)} fit no selected world with the drawable event "
            f"lengths and E settings (world lengths in steps: {longest})"
        )
    if not entries:
        raise SourceError("no target of the selected worlds can be drawn with this distribution")
    return entries


def _task(entry: _Entry, result, future: str, slot: int, seed: int) -> Task:
    """A ``Task`` from one kept pair, shaped exactly like ``Corpus``'s."""
    recipe, arrays = result.recipe, result.arrays
    key, layout = recipe.key, recipe.layout
    relationship, baselines = entry.relationship, entry.source.baselines
    index = axes.FUTURES.index(future)
    horizon = layout.prediction
    covariates = relationship.covariate_names[: key.k]
    infos = [relationship.covariate(name) for name in covariates]
    window = entry.baseline[recipe.window_start : recipe.window_start + layout.window]
    window = window.astype(STORE_DTYPE)
    record = recipe_record(
        recipe, future, [info.shape for info in infos], [info.base_value for info in infos]
    )
    record.update(world=entry.source.name, slot=slot, seed=seed)
    return Task(
        task_id=f"{key.pair_id}/{future}/{entry.source.name}-{slot}",
        future=future,
        simulator=key.simulator,
        target=key.target,
        k=key.k,
        c_label=key.c_label,
        event_length=key.event_length,
        e_setting=key.e_setting,
        covariates=tuple(covariates),
        units={key.target: baselines.units[key.target]},
        interval_s=baselines.interval_s,
        baseline_start=baselines.start,
        start_step=recipe.window_start,
        history_target=arrays["history_target"],
        history_covariates=arrays["history_covariates"],
        future_covariates=arrays["future_covariates"][index],
        future_target=arrays["future_target"][index * horizon : (index + 1) * horizon],
        counterfactual_history=window[: layout.context],
        counterfactual_future=window[layout.context :],
        recipe=record,
        world=entry.source.name,
    )
