"""Factors, directions and futures are drawn as docs/METHOD.md (sections 3 and 5) says, from a stream private to each pair."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from whatif_bench.corpus.axes import E_SETTINGS, EVENT_LENGTHS
from whatif_bench.corpus.recipe import PairKey, draw_recipe
from whatif_bench.corpus.seeds import pair_rng, pair_seed_sequence
from whatif_bench.relationships import load_registry

REGISTRY = load_registry()
RELATIONSHIPS = list(REGISTRY)


def recipe_for(relationship, k=5, c=(2048, 256), ell=64, e="Emax", seed=0, length=9000):
    key = PairKey(relationship.simulator, relationship.target, k, "C2", ell, e)
    return draw_recipe(key, relationship, c[0], c[1], length, seed)


@settings(max_examples=200, deadline=None)
@given(
    relationship=st.sampled_from(RELATIONSHIPS),
    k=st.integers(1, 5),
    ell=st.sampled_from(EVENT_LENGTHS),
    e=st.sampled_from(E_SETTINGS),
    seed=st.integers(0, 2**32),
)
def test_every_event_pushes_the_target_one_way(relationship, k, ell, e, seed):
    recipe = recipe_for(relationship, k, ell=ell, e=e, seed=seed)
    pool = set(relationship.history_pool)
    signs = np.array([c.sign for c in relationship.covariates[:k]])
    for direction, factors in zip(recipe.directions, recipe.factors, strict=True):
        assert set(factors.tolist()) <= pool
        if relationship.only_increase:
            assert direction == 1
        # direct covariates rise and inverse ones fall in an "up" event, and the reverse in a "down" one
        assert np.all((factors > 1) == ((signs > 0) == (direction > 0)))
    assert np.array_equal(recipe.replay_factors, recipe.factors[recipe.replay_source])


@settings(max_examples=200, deadline=None)
@given(relationship=st.sampled_from(RELATIONSHIPS), seed=st.integers(0, 2**32))
def test_novel_factors_leave_the_history_range(relationship, seed):
    recipe = recipe_for(relationship, seed=seed)
    for c, info in enumerate(relationship.covariates[:5]):
        column = np.append(recipe.factors[:, c], 1.0)  # the base value outside events counts
        if info.sign > 0:
            assert column.max() + 5 <= recipe.novel_factors[c] <= column.max() + 12
        else:
            assert column.min() * 0.1 <= recipe.novel_factors[c] <= column.min() * 0.5


def test_same_seed_same_recipe_and_different_pairs_differ():
    rel = REGISTRY.get("sumo", "CO2_abs_edge_e2c")
    a, b = recipe_for(rel, seed=7), recipe_for(rel, seed=7)
    assert a.window_start == b.window_start and np.array_equal(a.factors, b.factors)
    c = recipe_for(rel, seed=8)
    assert not (a.window_start == c.window_start and np.array_equal(a.factors, c.factors))


def test_pair_streams_do_not_depend_on_other_pairs():
    first = pair_rng(0, "sumo/x/K1-C1-L32-Efew").random(5)
    pair_rng(0, "sumo/y/K1-C1-L32-Efew").random(100)  # drawing elsewhere changes nothing
    assert np.array_equal(pair_rng(0, "sumo/x/K1-C1-L32-Efew").random(5), first)
    assert pair_seed_sequence(0, "a").spawn_key != pair_seed_sequence(0, "b").spawn_key
    with pytest.raises(ValueError, match="master seed"):
        pair_seed_sequence(-1, "a")


def test_a_window_that_cannot_fit_is_an_error():
    from whatif_bench.corpus.axes import AxisError

    rel = REGISTRY.get("sumo", "CO2_abs_edge_e2c")
    with pytest.raises(AxisError, match="does not fit the 1000-step baseline"):
        recipe_for(rel, length=1000)
