"""The training stream: seeded slots, sharding, verification, distributions and bad input.

These tests draw from the shipped EPANET and GridLAB-D baselines given as explicit sources (fast
and always available); tests/test_stream_worlds.py covers the training worlds and the holdout.
"""

from __future__ import annotations

import math
import pickle
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from whatif_bench.corpus.axes import contexts, layout
from whatif_bench.relationships import load_registry
from whatif_bench.relationships.verification import THRESHOLD, future_ratio, history_ratios
from whatif_bench.stream import (
    AxisDistribution,
    DistributionError,
    SeedError,
    StreamError,
    TaskStream,
    WorldSource,
)
from whatif_bench.stream.sources import benchmark_sources

REGISTRY = load_registry()

ARRAYS = (
    "history_target",
    "history_covariates",
    "future_covariates",
    "future_target",
    "counterfactual_history",
    "counterfactual_future",
)


@pytest.fixture(scope="module")
def sources() -> list[WorldSource]:
    return benchmark_sources(["epanet", "gridlabd"])


def fingerprint(task) -> tuple:
    return (task.task_id, *(getattr(task, name).tobytes() for name in ARRAYS))


def test_same_seed_gives_byte_identical_tasks_and_other_seeds_differ(sources):
    first = [fingerprint(t) for t in TaskStream(3, count=40, sources=sources)]
    again = [fingerprint(t) for t in TaskStream(3, count=40, sources=sources)]
    other = [fingerprint(t) for t in TaskStream(4, count=40, sources=sources)]
    assert first == again
    assert len({f[0] for f in first}) == 40
    assert sum(a != b for a, b in zip(first, other, strict=True)) > 30


@pytest.mark.parametrize("num_shards", [2, 3, 5])
def test_shards_partition_the_slots_and_make_the_same_tasks(sources, num_shards):
    whole = {f[0]: f for f in map(fingerprint, TaskStream(11, count=30, sources=sources))}
    seen = []
    for shard in range(num_shards):
        stream = TaskStream(11, count=30, sources=sources, shard=shard, num_shards=num_shards)
        assert len(stream) == len(range(shard, 30, num_shards))
        seen += [fingerprint(t) for t in stream]
    assert len(seen) == 30  # no slot twice, none missing
    assert {f[0]: f for f in seen} == whole


@settings(max_examples=12, deadline=None, derandomize=True)
@given(slot=st.integers(0, 40), num_shards=st.integers(1, 16))
@pytest.mark.slow  # about 2 s
def test_a_slot_is_the_same_task_whichever_shard_makes_it(slot, num_shards):
    sources = benchmark_sources(["epanet"])
    alone = TaskStream(5, sources=sources).task(slot)
    shard = slot % num_shards
    stream = TaskStream(5, count=slot + 1, sources=sources, shard=shard, num_shards=num_shards)
    *_, made = stream  # the shard's last slot is ``slot``
    assert list(stream.slots())[-1] == slot
    assert fingerprint(made) == fingerprint(alone)


def test_no_seed_draws_fresh_entropy_and_records_it(sources):
    stream = TaskStream(None, count=3, sources=sources)
    assert isinstance(stream.seed, int) and 0 <= stream.seed < 2**63
    replayed = TaskStream(stream.seed, count=3, sources=sources)
    assert [fingerprint(t) for t in stream] == [fingerprint(t) for t in replayed]
    assert TaskStream(None, sources=sources).seed != stream.seed


def test_every_task_passes_the_ten_percent_rule_and_rejections_are_counted(sources):
    stream = TaskStream(0, count=60, sources=sources)
    tasks = list(stream)
    assert stream.stats.kept == 60
    assert stream.stats.drawn == 60 + sum(stream.stats.rejected.values())
    assert set(stream.stats.rejected) <= {"history", "replay", "novel"}
    for task in tasks:
        starts, length = task.recipe["event_starts"], task.recipe["event_length"]
        ratios = history_ratios(
            task.history_target.astype(float),
            task.counterfactual_history.astype(float),
            starts,
            length,
        )
        assert np.all(ratios >= THRESHOLD - 1e-6), task.task_id
        ratio = future_ratio(
            task.future_target.astype(float), task.counterfactual_future.astype(float), length
        )
        assert ratio >= THRESHOLD - 1e-6, task.task_id


def test_tasks_are_shaped_like_corpus_tasks_and_cut_from_their_world(sources):
    by_name = {s.name: s for s in sources}
    for task in TaskStream(1, count=25, sources=sources):
        k, context, horizon = task.k, task.context_length, task.prediction_length
        assert task.history_covariates.shape == (k, context)
        assert task.future_covariates.shape == (k, horizon)
        assert task.history_target.dtype == np.float32
        assert len(task.covariates) == k and task.target in task.units
        expected_context = layout(
            *contexts(REGISTRY.simulators[task.simulator].c4)[task.c_label],
            task.event_length,
            task.e_setting,
        ).context
        assert context == expected_context
        series = by_name[task.world].baselines.series[task.target]
        window = series[task.start_step : task.start_step + context + horizon].astype(np.float32)
        assert np.array_equal(window[:context], task.counterfactual_history)
        assert np.array_equal(window[context:], task.counterfactual_future)
        assert task.recipe["world"] == task.world and task.task_id.endswith(
            f"{task.world}-{task.recipe['slot']}"
        )
        assert (
            task.timestamps()[0]
            == task.start
            == pd.Timestamp(task.baseline_start)
            + pd.Timedelta(seconds=task.start_step * task.interval_s)
        )


def test_a_stream_survives_pickling_as_a_dataloader_worker_receives_it(sources):
    stream = TaskStream(9, count=6, sources=sources)
    stream.entries()  # loaded state must not travel
    clone = pickle.loads(pickle.dumps(stream))
    assert clone._entries is None
    assert [fingerprint(t) for t in clone] == [fingerprint(t) for t in stream]


def test_the_distribution_narrows_every_axis(sources):
    dist = AxisDistribution(
        futures={"novel": 1},
        k={2: 1},
        contexts={"C1": 1},
        event_lengths={64: 1, 32: 3},
        e_settings={"Efew": 1},
        window_start=(0.5, 1.0),
    )
    tasks = list(TaskStream(2, count=40, sources=sources, distribution=dist))
    assert {t.future for t in tasks} == {"novel"}
    assert {t.k for t in tasks} == {2}
    assert {t.c_label for t in tasks} == {"C1"}
    assert {t.e_setting for t in tasks} == {"Efew"}
    lengths = [t.event_length for t in tasks]
    assert set(lengths) <= {32, 64} and lengths.count(32) > lengths.count(64)
    by_name = {s.name: s for s in sources}
    for t in tasks:
        latest = by_name[t.world].baselines.n_steps - (t.context_length + t.prediction_length)
        assert t.start_step >= math.floor(0.5 * latest)


def test_the_order_of_weights_does_not_change_the_stream(sources):
    one = AxisDistribution(event_lengths={32: 1, 512: 2})
    two = AxisDistribution(event_lengths={512: 2, 32: 1})
    a = [fingerprint(t) for t in TaskStream(8, count=10, sources=sources, distribution=one)]
    b = [fingerprint(t) for t in TaskStream(8, count=10, sources=sources, distribution=two)]
    assert a == b


def test_a_history_pool_replaces_the_relationships_factors(sources):
    dist = AxisDistribution(history_pool=(0.25, 4.0), k={1: 1})
    for task in TaskStream(4, count=15, sources=sources, distribution=dist):
        assert set(np.ravel(task.recipe["factors"])) <= {0.25, 4.0}


def short_world(sources, steps: int) -> WorldSource:
    source = sources[0]
    series = {name: values[:steps].copy() for name, values in source.baselines.series.items()}
    return replace(source, name="short", baselines=replace(source.baselines, series=series))


def test_a_context_no_world_is_long_enough_for_is_refused_before_any_work(sources):
    short = short_world(sources, 3000)
    with pytest.raises(DistributionError, match=r"\['C3', 'C4'\] fit no selected world"):
        TaskStream(0, count=1, sources=[short]).entries()
    only_c1 = AxisDistribution(contexts={"C1": 1})
    task = TaskStream(0, count=1, sources=[short], distribution=only_c1).task(0)
    assert task.c_label == "C1"


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"seed": -1}, SeedError, "between 0 and 2\\*\\*63 - 1"),
        ({"seed": 2**63}, SeedError, "between 0 and 2\\*\\*63 - 1"),
        ({"seed": 1.5}, SeedError, "non-negative integer"),
        ({"seed": True}, SeedError, "non-negative integer"),
        ({"seed": "7"}, SeedError, "non-negative integer"),
        ({"count": -1}, StreamError, "count must be"),
        ({"count": 2.0}, StreamError, "count must be"),
        ({"shard": 3, "num_shards": 3}, StreamError, "shard must be in 0..2"),
        ({"num_shards": 0}, StreamError, "num_shards must be"),
        ({"max_attempts": 0}, StreamError, "max_attempts"),
        ({"distribution": {"k": {1: 1}}}, StreamError, "AxisDistribution"),
    ],
)
def test_bad_stream_arguments_are_refused(sources, kwargs, error, message):
    arguments = {"seed": 0, "sources": sources, **kwargs}
    with pytest.raises(error, match=message):
        TaskStream(arguments.pop("seed"), **arguments)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"k": {6: 1}}, "k: unknown values"),
        ({"contexts": {"C9": 1}}, "contexts: unknown values"),
        ({"futures": {}}, "futures: expected a non-empty mapping"),
        ({"futures": {"replay": 0, "novel": 0}}, "every weight is 0"),
        ({"event_lengths": {32: -1}}, "finite and >= 0"),
        ({"event_lengths": {32: float("nan")}}, "finite and >= 0"),
        ({"e_settings": {"Efew": "1"}}, "not a number"),
        ({"window_start": (0.8, 0.2)}, "0 <= low <= high <= 1"),
        ({"window_start": (-0.1, 1.0)}, "0 <= low <= high <= 1"),
        ({"history_pool": (1.5, 2.0)}, "both above and below 1"),
        ({"history_pool": (0.5, float("inf"))}, "positive finite"),
        ({"history_pool": (0.001, 2.0)}, "between 0.01 and 1000"),
        ({"history_pool": (0.5, 2000.0)}, "between 0.01 and 1000"),
        ({"history_pool": (0.0, 2.0)}, "positive finite"),
    ],
)
def test_bad_distributions_are_refused(kwargs, message):
    with pytest.raises(DistributionError, match=message):
        AxisDistribution(**kwargs)


def test_a_slot_that_never_passes_the_rule_is_a_clear_error(sources):
    # factors hugging 1 make events too faint for the 10 % rule
    faint = AxisDistribution(history_pool=(0.999, 1.001), k={1: 1})
    stream = TaskStream(0, sources=sources, distribution=faint, max_attempts=5)
    with pytest.raises(StreamError, match="5 draws in a row failed the 10 % rule"):
        stream.task(0)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    start=st.sampled_from(
        [
            "2024-01-08T00:00:00",
            "1988-01-01T00:00:00",
            "2000-12-01T06:30:00+02:00",
            "2024-02-29",
            "2021-03-27T12:00:00.000000001",  # nanoseconds: a datetime cannot hold them
            "2021-03-27T12:00:00Z",
        ]
    ),
    steps=st.integers(0, 10**6),
    interval_s=st.sampled_from([1, 60, 300, 3600]),
)
@pytest.mark.slow  # about 2 s
def test_an_items_start_text_is_the_tasks_start_in_iso_format(sources, start, steps, interval_s):
    from whatif_bench.corpus import start_text

    made = TaskStream(0, sources=sources).task(0)
    task = replace(made, baseline_start=start, start_step=steps, interval_s=interval_s)
    assert start_text(start, steps * interval_s) == task.start.isoformat()
