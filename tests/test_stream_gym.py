"""``ForecastEnv``: Gymnasium's checker, seeded determinism, the reward as the evaluation's wQL,
the padded observation, registration and bad input.

The stream draws from the shipped EPANET and GridLAB-D baselines given as explicit sources.
"""

# ruff: noqa: E402  (the train extra is checked for before the imports that need it)
from __future__ import annotations

import sys
import warnings

import numpy as np
import pytest

# the train extra (in .venv); .venv-export only collects this module (its tests are not gluonts)
gymnasium = pytest.importorskip("gymnasium", reason="needs the train extra (gymnasium)")
from gymnasium.utils.env_checker import check_env

from whatif_bench.evaluation import metrics
from whatif_bench.stream import (
    ENV_ID,
    AxisDistribution,
    EnvError,
    ForecastEnv,
    SeedError,
    TaskStream,
    register_envs,
)
from whatif_bench.stream import gym_env as gym_env_module
from whatif_bench.stream.sources import benchmark_sources

# what check_env says of any unbounded Box; every other warning fails the check test
UNBOUNDED = ("is -infinity", "is infinity", "symmetric and normalized")


@pytest.fixture(scope="module")
def sources():
    return benchmark_sources(["epanet", "gridlabd"])


@pytest.fixture(scope="module")
def env(sources):
    return ForecastEnv(sources=sources)


def observation_bytes(observation: dict) -> dict:
    return {name: (value.dtype.str, value.tobytes()) for name, value in observation.items()}


def test_the_registered_env_passes_gymnasiums_checker(sources):
    register_envs()
    register_envs()  # a second call does nothing
    made = gymnasium.make(ENV_ID, sources=sources)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(made.unwrapped)
    unexpected = [str(w.message) for w in caught if not any(s in str(w.message) for s in UNBOUNDED)]
    assert unexpected == []
    assert made.spec.id == "whatif/Forecast-v0"
    made.close()


def test_an_unknown_version_lists_the_registered_one():
    register_envs()
    with pytest.raises(gymnasium.error.Error, match=r"whatif/Forecast.*v0"):
        gymnasium.make("whatif/Forecast-v9")


def test_the_same_seed_gives_the_same_episodes_and_records_them(env, sources):
    other = ForecastEnv(sources=sources)
    runs = []
    for each in (env, other):
        episodes = [each.reset(seed=41)]
        episodes += [each.reset() for _ in range(3)]
        runs.append([(observation_bytes(obs), info) for obs, info in episodes])
    assert runs[0] == runs[1]
    assert [info["slot"] for _, info in runs[0]] == [0, 1, 2, 3]
    assert {info["seed"] for _, info in runs[0]} == {41} == {env.stream.seed}
    stream = TaskStream(41, sources=sources)
    assert [info["task_id"] for _, info in runs[0]] == [stream.task(s).task_id for s in range(4)]
    _, info = env.reset(seed=42)
    assert info["task_id"] != runs[0][0][1]["task_id"]


def test_a_first_reset_without_seed_draws_fresh_entropy_and_records_it(sources):
    fresh = ForecastEnv(sources=sources)
    obs, info = fresh.reset()
    assert info["seed"] == fresh.stream.seed == fresh.np_random_seed
    replayed, _ = ForecastEnv(sources=sources).reset(seed=info["seed"])
    assert observation_bytes(obs) == observation_bytes(replayed)


def test_the_observation_is_the_task_padded_and_masked(env, sources):
    obs, info = env.reset(seed=3)
    task = TaskStream(3, sources=sources).task(0)
    c, h, k = task.context_length, task.prediction_length, task.k
    assert obs in env.observation_space
    assert obs["history_mask"].dtype == np.int8
    assert obs["history_mask"].sum() == c and obs["history_mask"][-c:].all()
    assert obs["future_mask"].sum() == h and obs["future_mask"][:h].all()
    assert obs["covariate_mask"].tolist() == [1] * k + [0] * (5 - k)
    assert np.array_equal(obs["history_target"][-c:], task.history_target)
    assert not obs["history_target"][:-c].any()
    assert np.array_equal(obs["history_covariates"][:k, -c:], task.history_covariates)
    assert np.array_equal(obs["future_covariates"][:k, :h], task.future_covariates)
    assert not obs["future_covariates"][k:].any() and not obs["future_covariates"][:, h:].any()
    assert (info["k"], info["context_length"], info["prediction_length"]) == (k, c, h)


def test_the_reward_is_minus_the_evaluations_wql_of_the_scored_steps(env):
    env.reset(seed=9)
    task = env.task
    h = task.prediction_length
    action = np.full(env.action_space.shape, 1e6, dtype=np.float32)  # padding: never scored
    action[:h] = float(task.history_target.mean()) * np.linspace(0.9, 1.1, h)
    obs, reward, terminated, truncated, info = env.step(action)
    expected = metrics.wql(task.future_target, action[:h, None], levels=(0.5,))
    assert reward == -expected == -info["wql"]
    assert info["wape"] == pytest.approx(expected, rel=1e-12)  # wQL at 0.5 is the WAPE
    assert reward < 0 and (terminated, truncated) == (True, False)
    assert np.array_equal(info["future_target"], task.future_target)
    env.reset(seed=9)
    perfect = np.zeros(env.action_space.shape, dtype=np.float32)
    perfect[:h] = task.future_target
    assert env.step(perfect)[1] == 0.0


def test_quantile_forecasts_are_scored_at_the_nine_levels(sources, rng):
    env = ForecastEnv(sources=sources, quantiles=True)
    assert env.action_space.shape == (env.horizon_max, 9)
    env.reset(seed=9)
    task = env.task
    h = task.prediction_length
    spread = np.asarray(metrics.QUANTILE_LEVELS) - 0.5
    action = (task.future_target[:, None] * (1 + spread) + rng.normal(size=(h, 9))).astype(
        np.float32
    )
    padded = np.zeros(env.action_space.shape, dtype=np.float32)
    padded[:h] = action
    reward = env.step(padded)[1]
    assert reward == -metrics.wql(task.future_target, action)


def test_a_short_context_max_keeps_the_latest_history(sources):
    narrow = AxisDistribution(contexts={"C2": 1})
    env = ForecastEnv(sources=sources, distribution=narrow, context_max=500)
    assert env.horizon_max == 256  # C2's prediction length
    obs, _ = env.reset(seed=1)
    assert obs["history_mask"].all()
    assert np.array_equal(obs["history_target"], env.task.history_target[-500:])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"horizon_max": 100}, r"horizon_max 100 is below the longest prediction .* \(864 steps\)"),
        ({"context_max": 0}, "context_max must be a positive integer"),
        ({"horizon_max": 2.5}, "horizon_max must be a positive integer"),
    ],
)
def test_bad_env_arguments_are_refused(sources, kwargs, message):
    with pytest.raises(EnvError, match=message):
        ForecastEnv(sources=sources, **kwargs)


def test_bad_resets_and_steps_are_refused(sources):
    env = ForecastEnv(sources=sources)
    for seed, message in ((1.5, "non-negative integer"), (-1, "between 0 and 2"), ("3", "integer")):
        with pytest.raises(SeedError, match=message):
            env.reset(seed=seed)
    with pytest.raises(EnvError, match="call reset"):
        env.step(np.zeros(env.action_space.shape, dtype=np.float32))
    with pytest.raises(EnvError, match="takes no options"):
        env.reset(seed=0, options={"slot": 3})
    env.reset(seed=0)
    with pytest.raises(EnvError, match="must have shape"):
        env.step(np.zeros(7, dtype=np.float32))
    action = np.zeros(env.action_space.shape, dtype=np.float32)
    action[0] = np.nan
    with pytest.raises(EnvError, match="must be finite"):
        env.step(action)
    action[0] = 1.0
    assert env.step(action)[2]  # a refused action leaves the episode open
    with pytest.raises(EnvError, match="call reset"):  # one step per episode
        env.step(np.ones(env.action_space.shape, dtype=np.float32))


def test_without_gymnasium_the_env_says_which_extra_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "gymnasium", None)
    monkeypatch.delitem(sys.modules, gym_env_module.__name__)
    with pytest.raises(ImportError, match=r"pip install 'whatif-bench\[train\]'"):
        __import__(gym_env_module.__name__)
