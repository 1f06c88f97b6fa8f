"""The stream's kernels make the reference path's tasks to the bit, and their draws are NumPy's.

The reference twins: NumPy's own ``SeedSequence``/``PCG64``/``Generator`` (and a plain
big-integer PCG64 below) for ``corpus.random_twin``; ``np.sum`` and ``verification.effect_ratio`` for
the 10 % statistic; ``TaskStream._reference_task`` (``draw_recipe_from`` + ``build_pair``) for
whole slots, fallbacks and errors included.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from dataclasses import fields, replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from whatif_bench.corpus import random_twin as rand
from whatif_bench.corpus.reader import Task
from whatif_bench.errors import RelationshipError
from whatif_bench.generator import kernels as gen_kernels
from whatif_bench.generator.sweep import GenerationError
from whatif_bench.relationships.verification import effect_ratio
from whatif_bench.stream import AxisDistribution, StreamError, StreamStats, TaskStream
from whatif_bench.stream import _kernels as kern
from whatif_bench.stream.plan import make_batch
from whatif_bench.stream.seeding import STREAM_DOMAIN, slot_rng
from whatif_bench.stream.sources import benchmark_sources

PCG_MULTIPLIER = 0x2360ED051FC65DA44385DF649FCCF645
MASK64, MASK128 = 2**64 - 1, 2**128 - 1


@pytest.fixture(scope="module")
def sources():
    return benchmark_sources(None)


def fingerprint(task: Task) -> tuple:
    """Every field of a task: arrays by dtype, shape and bytes, the recipe as JSON."""
    parts = []
    for field in fields(task):
        value = getattr(task, field.name)
        if isinstance(value, np.ndarray):
            parts.append((field.name, value.dtype.str, value.shape, value.tobytes()))
        elif isinstance(value, dict):
            parts.append((field.name, json.dumps(value)))
        else:
            parts.append((field.name, type(value).__name__, value))
    return tuple(parts)


# ---- the draws ----------------------------------------------------------------------------
def big_int_pcg64(seed: int, slot: int):
    """A readable PCG64 (XSL-RR 128/64) seeded from NumPy's SeedSequence words: 64-bit outputs."""
    words = np.random.SeedSequence(seed, spawn_key=(STREAM_DOMAIN, slot)).generate_state(
        4, np.uint64
    )
    initstate = (int(words[0]) << 64) | int(words[1])
    increment = (((int(words[2]) << 64) | int(words[3])) << 1 | 1) & MASK128
    state = ((increment + initstate) * PCG_MULTIPLIER + increment) & MASK128  # step, add, step
    while True:
        state = (state * PCG_MULTIPLIER + increment) & MASK128
        value = ((state >> 64) ^ state) & MASK64
        rotation = state >> 122
        yield ((value >> rotation) | (value << (64 - rotation))) & MASK64


@settings(max_examples=40, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**63 - 1), slot=st.integers(0, 2**40))
def test_slot_generators_are_numpys_seed_sequence_and_pcg64(seed, slot):
    state = rand.slot_generator(seed, (STREAM_DOMAIN, slot))
    numpy_state = slot_rng(seed, slot).bit_generator.state["state"]
    assert (int(state[0]) << 64 | int(state[1])) == numpy_state["state"]
    assert (int(state[2]) << 64 | int(state[3])) == numpy_state["inc"]
    twin = big_int_pcg64(seed, slot)
    for _ in range(5):
        assert float(next(twin) >> 11) * 2.0**-53 == rand.draw_random(state)


@settings(max_examples=25, deadline=None, derandomize=True)
@given(
    seed=st.integers(0, 2**63 - 1),
    slot=st.integers(0, 2**33),
    calls=st.lists(
        st.one_of(
            st.tuples(st.just("integers"), st.sampled_from([1, 2, 3, 5, 7, 100, 2**31 + 3])),
            st.tuples(st.just("random"), st.none()),
            st.tuples(
                st.just("choice"),
                st.lists(st.floats(0.01, 10.0), min_size=1, max_size=5),
            ),
            st.tuples(st.just("uniform"), st.sampled_from([(0.1, 0.5), (0.5, 0.9), (2.0, 3.5)])),
        ),
        min_size=1,
        max_size=60,
    ),
)
def test_every_draw_equals_numpys_generator_in_any_order(seed, slot, calls):
    numpy_rng = slot_rng(seed, slot)
    state = rand.slot_generator(seed, (STREAM_DOMAIN, slot))
    for name, argument in calls:
        if name == "integers":
            assert rand.draw_integers(state, argument) == numpy_rng.integers(argument)
        elif name == "random":
            assert rand.draw_random(state) == numpy_rng.random()
        elif name == "choice":
            p = np.asarray(argument, dtype=float)
            expected = numpy_rng.choice(len(argument), p=p / p.sum())
            assert rand.draw_choice(state, rand.choice_cdf(argument)) == expected
        else:
            low, high = argument
            assert rand.next_uniform(state, low, high - low) == numpy_rng.uniform(low, high)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda s: rand.draw_integers(s, 0), "n must be an integer in 1"),
        (lambda s: rand.draw_integers(s, 2**32), "n must be an integer in 1"),
        (lambda s: rand.draw_integers(s, 2.0), "n must be an integer in 1"),
        (lambda s: rand.draw_random(s.astype(np.int64)), "uint64 array"),
        (lambda s: rand.draw_random(s[:4]), "uint64 array"),
        (lambda s: rand.draw_choice(s, np.array([])), "non-empty one-dimensional"),
        (lambda s: rand.choice_cdf([0.0, 0.0]), "finite values >= 0"),
        (lambda s: rand.choice_cdf([1.0, -1.0]), "finite values >= 0"),
        (lambda s: rand.slot_entropy(-1, ()), "non-negative integer"),
        (lambda s: rand.slot_entropy(1, (True,)), "spawn-key entries"),
    ],
)
def test_bad_arguments_to_the_draws_are_refused(call, message):
    with pytest.raises(ValueError, match=message):
        call(rand.slot_generator(0, (1,)))


# ---- the 10 % statistic ---------------------------------------------------------------------
@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 127, 128, 129, 255, 263, 511, 512, 1000, 9000])
def test_pairwise_sum_is_numpys_sum_to_the_bit(n):
    rng = np.random.default_rng(n)
    values = np.abs(rng.standard_normal(n + 3)) * 10.0 ** rng.uniform(-6, 6, n + 3)
    assert gen_kernels.pairwise_sum(values, 3, n) == np.sum(values[3:])


@pytest.mark.parametrize("scale", [0.0, 1e-300, 1.0, 1e6])
def test_effect_ratio_is_the_verification_statistic(scale):
    rng = np.random.default_rng(7)
    baseline = rng.standard_normal(300) * scale
    actual = baseline * rng.uniform(0.5, 1.5, 300)
    work = np.empty(300)
    for first, n in ((0, 300), (17, 32), (40, 129)):
        got = gen_kernels.effect_ratio_kernel(actual, baseline, first, n, work)
        assert got == effect_ratio(actual[first : first + n], baseline[first : first + n])
    # a zero baseline has no relative effect, however far the target moved
    assert gen_kernels.effect_ratio_kernel(baseline + 1.0, np.zeros(300), 0, 64, work) == 0.0


# ---- whole slots ------------------------------------------------------------------------------
DISTRIBUTIONS = {
    "default": AxisDistribution(),
    "C1": AxisDistribution(contexts={"C1": 1}),
    "C4": AxisDistribution(contexts={"C4": 1}),
    "narrow": AxisDistribution(
        contexts={"C2": 1, "C3": 2},
        k={2: 1, 5: 3},
        window_start=(0.2, 0.7),
        history_pool=(0.5, 0.8, 1.3, 2.0),
        futures={"novel": 1},
    ),
}


@pytest.mark.parametrize("name", sorted(DISTRIBUTIONS))
def test_kernel_tasks_and_counts_equal_the_reference_path(sources, name):
    dist = DISTRIBUTIONS[name]
    fast = TaskStream(21, count=40, sources=sources, distribution=dist)
    reference = TaskStream(21, count=40, sources=sources, distribution=dist)
    made = [fingerprint(t) for t in fast]
    expected = [fingerprint(reference._reference_task(slot)) for slot in range(40)]
    assert made == expected
    assert fast.stats.as_dict() == reference.stats.as_dict()


def test_a_batch_is_the_same_as_slots_one_by_one(sources):
    stream = TaskStream(5, sources=sources)
    slots = [3, 2**32 + 1, 0, 17, 3]
    together = [fingerprint(t) for t in stream.tasks(slots)]
    assert together == [fingerprint(stream.task(slot)) for slot in slots]


def test_the_fast_path_is_the_default_and_fast_false_is_the_reference(sources):
    fast = TaskStream(8, count=12, sources=sources)
    slow = TaskStream(8, count=12, sources=sources, fast=False)
    assert fast.plan() is not None and slow.plan() is None
    assert [fingerprint(t) for t in fast] == [fingerprint(t) for t in slow]
    assert fast.stats.as_dict() == slow.stats.as_dict()
    assert slow.sharded(1, 2).plan() is None


def test_a_plan_serves_any_seed_so_a_reseeded_copy_draws_its_own_tasks(sources):
    stream = TaskStream(1, sources=sources)
    first = fingerprint(stream.task(0))
    stream.seed = 2  # as ForecastEnv reseeds a copy of its template stream
    assert fingerprint(stream.task(0)) == fingerprint(stream._reference_task(0)) != first


def test_unverified_batches_keep_each_slots_first_draw_as_the_reference_does(sources):
    stream = TaskStream(2, sources=sources, distribution=DISTRIBUTIONS["C1"])
    batch = make_batch(stream.plan(), stream.seed, range(60), 1000, verify=False)
    assert all(batch.status(i) == kern.KEPT and not batch.rejected(i) for i in range(60))
    made = [fingerprint(batch.task(i)) for i in range(60)]
    assert made == [fingerprint(stream._reference_task(i, verify=False)) for i in range(60)]
    redrawn = []  # the slots whose first draw failed the rule: their verified task differs
    for i in range(60):
        stream.stats = StreamStats()
        differs = fingerprint(stream._reference_task(i)) != made[i]
        redrawn.append(bool(stream.stats.rejected))
        assert differs == redrawn[-1]
    assert 0 < sum(redrawn) < 60


def epanet_stream(sources, scale: float = 1.0, nan: bool = False) -> TaskStream:
    """A C1 stream of EPANET scaled by ``scale``; ``nan`` puts NaN in every baseline the stream
    holds (``Baselines`` refuses NaN, so it goes into the stream's entries directly)."""
    source = next(s for s in sources if s.simulator == "epanet")
    series = {target: values * scale for target, values in source.baselines.series.items()}
    source = replace(source, baselines=replace(source.baselines, series=series))
    stream = TaskStream(0, sources=[source], distribution=DISTRIBUTIONS["C1"])
    if nan:
        stream._entries = [
            replace(entry, baseline=np.full_like(entry.baseline, np.nan))
            for entry in stream.entries()
        ]
    return stream


@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")
@pytest.mark.parametrize(
    ("world", "error", "message"),
    [
        ({"nan": True}, RelationshipError, "non-finite value"),
        ({"scale": 3e38}, GenerationError, "beyond float32"),
    ],
)
def test_slots_the_kernels_cannot_make_raise_the_reference_error(sources, world, error, message):
    with pytest.raises(error, match=message) as fast:
        epanet_stream(sources, **world).task(0)
    with pytest.raises(error) as reference:
        epanet_stream(sources, **world)._reference_task(0)
    assert str(fast.value) == str(reference.value)
    stream = epanet_stream(sources, **world)
    assert stream.plan().kernel.entry_ints[:, kern.ALL_FINITE].all() != world.get("nan", False)


def test_an_exhausted_slot_counts_its_rejections_like_the_reference(sources):
    faint = AxisDistribution(history_pool=(0.999, 1.001), k={1: 1})
    fast = TaskStream(0, sources=sources, distribution=faint, max_attempts=7)
    reference = TaskStream(0, sources=sources, distribution=faint, max_attempts=7)
    with pytest.raises(StreamError, match="7 draws in a row") as made:
        fast.task(4)
    with pytest.raises(StreamError) as expected:
        reference._reference_task(4)
    assert str(made.value) == str(expected.value)
    assert fast.stats.as_dict() == reference.stats.as_dict()
    assert fast.stats.drawn == 7


def test_bad_plans_and_slots_are_refused(sources):
    plan = TaskStream(0, sources=sources).plan()
    prefix = rand.slot_entropy(0, (STREAM_DOMAIN,))
    with pytest.raises(TypeError, match="plan.layouts must be a int64 array"):
        kern.check_plan(plan.kernel._replace(layouts=plan.kernel.layouts.astype(np.int32)))
    with pytest.raises(ValueError, match="plan.l_table has shape"):
        kern.check_plan(plan.kernel._replace(l_table=plan.kernel.l_table[:, :2].copy()))
    with pytest.raises(ValueError, match="slots >= 0"):
        kern.draw_slots(plan.kernel, prefix, np.array([-1]), 10, True)
    with pytest.raises(ValueError, match="max_attempts"):
        kern.draw_slots(plan.kernel, prefix, np.array([1]), 0, True)
    with pytest.raises(StreamError, match="slot must be a non-negative integer"):
        next(TaskStream(0, sources=sources).tasks([1, -2]))


NO_JIT_SCRIPT = """
import hashlib, json, sys
from whatif_bench.stream import AxisDistribution, TaskStream
from whatif_bench.stream.sources import benchmark_sources
stream = TaskStream(13, sources=benchmark_sources(["epanet"]),
                    distribution=AxisDistribution(contexts={"C1": 1}, event_lengths={32: 1}))
made = list(stream.tasks(range(4)))
print(json.dumps([t.task_id for t in made]))
print(json.dumps([hashlib.sha256(t.history_covariates.tobytes() + t.future_target.tobytes())
                  .hexdigest() for t in made]))
"""


@pytest.mark.slow  # about 1 s
def test_the_kernels_run_as_plain_python_without_numba():
    env = {**os.environ, "NUMBA_DISABLE_JIT": "1"}
    done = subprocess.run(
        [sys.executable, "-W", "error::RuntimeWarning", "-c", NO_JIT_SCRIPT],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    ids, hashes = (json.loads(line) for line in done.stdout.splitlines()[-2:])
    stream = TaskStream(
        13,
        sources=benchmark_sources(["epanet"]),
        distribution=AxisDistribution(contexts={"C1": 1}, event_lengths={32: 1}),
    )
    expected = [stream._reference_task(slot) for slot in range(4)]
    assert ids == [t.task_id for t in expected]
    assert hashes == [
        hashlib.sha256(t.history_covariates.tobytes() + t.future_target.tobytes()).hexdigest()
        for t in expected
    ]
