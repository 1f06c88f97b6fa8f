"""The Novel future lies beyond everything its history showed (docs/METHOD.md, section 5), and
a window over a zero baseline has no relative effect (section 6)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import small_corpus
from whatif_bench.corpus import axes, recipe
from whatif_bench.corpus.recipe import PairKey, draw_recipe, draw_recipe_from
from whatif_bench.generator import sweep
from whatif_bench.generator.checking import verify_corpus
from whatif_bench.generator.novel_range import novel_reach, novel_reach_reference
from whatif_bench.relationships import load_registry
from whatif_bench.relationships.ranges import MAX_POOL_FACTOR, MIN_POOL_FACTOR
from whatif_bench.relationships.verification import effect_ratio, future_ratio

REGISTRY = load_registry()
RELATIONSHIPS = list(REGISTRY)


def _recipe(relationship, k, c_label, ell, e, seed):
    context, prediction = axes.contexts(relationship.c4)[c_label]
    key = PairKey(relationship.simulator, relationship.target, k, c_label, ell, e)
    return draw_recipe(key, relationship, context, prediction, 30_000, seed)


@st.composite
def recipes(draw):
    """A shipped relationship and a recipe drawn for it at any axis values and seed."""
    relationship = draw(st.sampled_from(RELATIONSHIPS))
    recipe = _recipe(
        relationship,
        draw(st.integers(1, 5)),
        draw(st.sampled_from(axes.CONTEXT_LABELS)),
        draw(st.sampled_from(axes.EVENT_LENGTHS)),
        draw(st.sampled_from(axes.E_SETTINGS)),
        draw(st.integers(0, 2**32)),
    )
    return relationship, recipe


@settings(max_examples=400, deadline=None)
@given(drawn=recipes())
def test_every_novel_covariate_leaves_the_range_its_history_showed(drawn):
    relationship, recipe = drawn
    reach = novel_reach(recipe, relationship)
    assert reach.holds, reach
    assert np.all(reach.history_low <= 1.0) and np.all(reach.history_high >= 1.0)  # base value


@settings(max_examples=300, deadline=None)
@given(drawn=recipes())
def test_the_one_pass_reach_is_the_one_the_trajectories_give(drawn):
    relationship, recipe = drawn
    fast, reference = novel_reach(recipe, relationship), novel_reach_reference(recipe, relationship)
    for name in ("history_low", "history_high", "reach", "rises"):
        mine, theirs = getattr(fast, name), getattr(reference, name)
        assert mine.dtype == theirs.dtype and mine.shape == theirs.shape
        assert np.array_equal(mine, theirs), name


@settings(max_examples=300, deadline=None)
@given(
    pool=st.lists(
        st.one_of(
            st.floats(MIN_POOL_FACTOR, MAX_POOL_FACTOR),
            st.sampled_from([MIN_POOL_FACTOR, MAX_POOL_FACTOR]),  # the bounds themselves
        ).filter(lambda f: abs(f - 1.0) > 1e-9),
        min_size=2,
        max_size=6,
    ).filter(lambda p: min(p) < 1 < max(p)),
    prediction=st.integers(32, 900),
    ell=st.sampled_from(axes.EVENT_LENGTHS),
    e=st.sampled_from(axes.E_SETTINGS),
    k=st.integers(1, 5),
    seed=st.integers(0, 2**32),
)
def test_any_allowed_pool_and_window_give_a_novel_future_beyond_the_range(
    pool, prediction, ell, e, k, seed
):
    relationship = REGISTRY.get("opendc", "cpu_usage_host-0")  # bell primary, step others
    key = PairKey("opendc", relationship.target, k, "C4", ell, e)
    drawn = draw_recipe_from(
        np.random.default_rng(seed),
        key,
        relationship,
        max(1024, prediction),
        prediction,
        40_000,
        history_pool=tuple(pool),
    )
    assert novel_reach(drawn, relationship).holds


@pytest.mark.parametrize("seed", range(40))
def test_the_pool_bounds_at_the_shortest_window_and_the_longest_bell(seed):
    """The worst case of the proof in generator/novel_range.py: H = 32, a 512-step bell
    shortened to 64 for the Novel future, factors at both bounds of the pool."""
    relationship = REGISTRY.get("opendc", "cpu_usage_host-0")  # coreSpeed: a bell, direct
    key = PairKey("opendc", relationship.target, 3, "C4", 512, "Emax")
    drawn = draw_recipe_from(
        np.random.default_rng(seed),
        key,
        relationship,
        4096,
        32,
        40_000,
        history_pool=(MIN_POOL_FACTOR, MAX_POOL_FACTOR),
    )
    assert drawn.layout.future_event_length("novel") == 64
    assert novel_reach(drawn, relationship).holds


def test_a_single_down_event_of_an_inverse_covariate_still_gives_a_novel_factor_below_one():
    """The issue's example: after an event that raised an inverse covariate (factors 2 to 8),
    the old rule put the Novel factor at that factor x U[0.1, 0.5], between 0.2 and 4, which can
    be inside the history's range [1, factor]."""
    relationship = REGISTRY.get("gridlabd", "hvac_load")
    found = 0
    for seed in range(200):
        drawn = _recipe(relationship, 3, "C3", 256, "Efew", seed)
        inverse = [c for c, info in enumerate(relationship.covariates[:3]) if info.sign < 0]
        for c in inverse:
            if drawn.factors[0, c] > 1:  # the event raised it: its history's smallest factor is 1
                found += 1
                assert drawn.novel_factors[c] <= 0.5
    assert found > 0


def test_a_novel_bell_longer_than_two_windows_peaks_inside_the_window():
    relationship = REGISTRY.get("opendc", "cpu_usage_host-0")  # coreSpeed: a bell
    assert relationship.covariates[0].shape == "bell"
    drawn = _recipe(relationship, 1, "C1", 512, "Emax", 3)
    reach = novel_reach(drawn, relationship)
    # the window's furthest factor is (nearly) the event's own factor, not 32 % of its deviation
    factor = drawn.novel_factors[0]
    assert abs(reach.reach[0] - factor) < 1e-3 * abs(factor - 1)
    assert reach.holds


def test_the_reach_names_a_covariate_left_inside_the_range():
    relationship = REGISTRY.get("sumo", "flow_loop_e_0_near")
    drawn = _recipe(relationship, 3, "C2", 64, "Emax", 0)
    inside = dataclasses.replace(drawn, novel_factors=np.ones(3))
    reach = novel_reach(inside, relationship)
    assert not reach.holds
    assert reach.inside(relationship.covariate_names[:3]) == list(relationship.covariate_names[:3])
    assert np.all(reach.beyond <= 1.0)


def test_verify_reports_a_corpus_whose_novel_futures_stay_inside_the_range(tmp_path, monkeypatch):
    """A corpus drawn with the old rule (the base value not counted) is caught."""

    def old_rule(rng, relationship, factors):
        novel = np.empty(factors.shape[1])
        for c, info in enumerate(relationship.covariates[: factors.shape[1]]):
            if info.sign > 0:
                novel[c] = factors[:, c].max() + rng.uniform(5, 12)
            else:
                novel[c] = factors[:, c].min() * rng.uniform(0.1, 0.5)
        return novel

    monkeypatch.setattr(recipe, "_novel_factors", old_rule)
    # the reference functions draw the recipes (the kernels hold the rule in numba), in
    # generation and in verification
    monkeypatch.setattr(sweep, "target_plan", lambda relationship, baseline: None)
    path = small_corpus(tmp_path, ("gridlabd/hvac_load",))
    report = verify_corpus(path, progress=False, limit_problems=1000, reference=True)
    novel = [p for p in report.problems if "does not leave the history's range" in p]
    assert novel, report.problems[:5]
    assert all("gridlabd/hvac_load/" in p for p in novel)


@pytest.mark.parametrize(
    ("actual", "baseline", "expected"),
    [
        ([0.0, 5.0, 0.0], [0.0, 0.0, 0.0], 0.0),  # moved, but relative to 0: no relative effect
        ([0.0, 0.0], [0.0, 0.0], 0.0),
        ([1.2, 1.1], [1.0, 1.0], 0.15),
        ([0.0, 2.0], [0.0, 1.0], 1.0),  # a baseline 0 on part of the window is relative as usual
    ],
)
def test_the_effect_ratio_is_relative_to_the_baseline(actual, baseline, expected):
    assert effect_ratio(np.array(actual), np.array(baseline)) == pytest.approx(expected)


def test_a_future_event_over_a_zero_baseline_fails_the_rule():
    assert future_ratio(np.full(8, 3.0), np.zeros(8), 4) == 0.0


def test_a_tasks_recipe_records_its_future_events_length():
    from whatif_bench.corpus.reader import recipe_record

    relationship = REGISTRY.get("opendc", "cpu_usage_host-0")
    drawn = _recipe(relationship, 2, "C1", 512, "Efew", 1)
    shapes = [c.shape for c in relationship.covariates[:2]]
    bases = [c.base_value for c in relationship.covariates[:2]]
    lengths = {
        future: recipe_record(drawn, future, shapes, bases)["future_event_length"]
        for future in ("replay", "novel")
    }
    assert lengths == {"replay": 512, "novel": 256}
