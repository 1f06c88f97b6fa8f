"""The stream's held-apart promise: with ``holdout`` (the default) no task's window is cut from a
benchmark baseline; real training worlds are run (EPANET, one GridLAB-D) into a temporary cache."""

from __future__ import annotations

import numpy as np
import pytest

from whatif_bench.stream import SourceError, TaskStream
from whatif_bench.stream.sources import benchmark_sources

WORLDS = (
    "epanet-demand-residential",
    "epanet-demand-office-week",
    "epanet-demand-night-irrigation",
    "epanet-demand-summer",
    "gridlabd-greensboro-july",
)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("worlds")


@pytest.fixture(scope="module")
def benchmark() -> dict:
    return {s.simulator: s.baselines for s in benchmark_sources(["epanet", "gridlabd"])}


def cut_from(window: np.ndarray, series: np.ndarray) -> bool:
    """Whether ``window`` (float32) is a contiguous slice of ``series`` rounded to float32."""
    values = series.astype(np.float32)
    for start in np.flatnonzero(values[: values.size - window.size + 1] == window[0]):
        if np.array_equal(values[start : start + window.size], window):
            return True
    return False


def stream_tasks(cache, holdout: bool, count: int = 60):
    stream = TaskStream(
        12,
        count=count,
        simulators=["epanet", "gridlabd"],
        worlds=WORLDS,
        cache=cache,
        holdout=holdout,
    )
    return list(stream)


@pytest.mark.slow  # about 2 s
def test_no_held_out_task_comes_from_a_benchmark_series(cache, benchmark):
    tasks = stream_tasks(cache, holdout=True)
    assert {t.world for t in tasks} <= set(WORLDS)
    assert len({t.world for t in tasks}) >= 3
    for task in tasks:
        window = np.concatenate([task.counterfactual_history, task.counterfactual_future])
        series = benchmark[task.simulator].series[task.target]
        assert not cut_from(window, series), task.task_id


@pytest.mark.slow  # about 2 s
def test_holdout_false_adds_the_benchmark_and_the_check_finds_its_windows(cache, benchmark):
    tasks = stream_tasks(cache, holdout=False, count=80)
    from_benchmark = [t for t in tasks if t.world.endswith("-benchmark")]
    assert from_benchmark and len(from_benchmark) < len(tasks)
    for task in from_benchmark:
        window = np.concatenate([task.counterfactual_history, task.counterfactual_future])
        assert cut_from(window, benchmark[task.simulator].series[task.target])


@pytest.mark.slow  # about 2 s
def test_training_worlds_are_dated_and_shaped_like_the_benchmark(cache, benchmark):
    for task in stream_tasks(cache, holdout=True, count=10):
        assert task.interval_s == benchmark[task.simulator].interval_s
        assert task.units[task.target] == benchmark[task.simulator].units[task.target]
        assert task.recipe["world"] == task.world


def test_an_unknown_training_world_is_refused(cache):
    with pytest.raises(SourceError, match="unknown training worlds \\['nowhere'\\]"):
        TaskStream(0, worlds=["nowhere"], cache=cache).entries()


def test_a_simulator_whose_worlds_cannot_run_is_a_clear_error(cache, monkeypatch):
    """OpenDC without its trace: asked for by name it is an error naming the reason; a default
    stream leaves its worlds out with one warning."""
    monkeypatch.delenv("WHATIF_OPENDC_TRACE", raising=False)
    with pytest.raises(SourceError, match="opendc-vms-1147-1152-1138 cannot run here: .*trace"):
        TaskStream(0, simulators=["opendc"], cache=cache).entries()
    with pytest.raises(SourceError, match="no world to draw from"):
        TaskStream(0, simulators=[], cache=cache).entries()


def test_a_default_stream_leaves_out_worlds_that_cannot_run(cache, monkeypatch, capsys):
    from whatif_bench.simulators import worlds
    from whatif_bench.stream.sources import training_sources

    monkeypatch.delenv("WHATIF_OPENDC_TRACE", raising=False)
    monkeypatch.setattr(
        worlds, "TRAINING_WORLDS", {**worlds.TRAINING_WORLDS, "gridlabd": (), "sumo": ()}
    )
    monkeypatch.setattr(
        worlds,
        "training_worlds",
        lambda sims=None: [w for ws in worlds.TRAINING_WORLDS.values() for w in ws],
    )
    found = training_sources(None, cache)
    assert {s.simulator for s in found} == {"epanet"}
    warning = capsys.readouterr().err
    assert warning.count("warning: the stream leaves out opendc's training worlds") == 1
