"""The sweep's kernels make the reference path's pairs to the bit, fallbacks and errors included.

The reference twin is ``sweep.reference_pair`` (``draw_recipe``, ``build_pair``,
``check_finite``: one pair at a time in Python and NumPy). ``generate_target`` (the kernel path,
``generator/kernels.py``) must give the same ``PairResult`` for every pair: recipe, ratios,
verdict and float32 arrays, dtype and shape included, and raise the reference's error where the
reference raises one.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from whatif_bench.corpus import pair_entropy, pair_rng, random_twin
from whatif_bench.generator import kernels
from whatif_bench.generator.sweep import (
    PairResult,
    _kernel_pairs,
    generate_target,
    pair_keys,
    reference_pair,
)
from whatif_bench.simulators import read_baselines, shipped_baselines_path


@pytest.fixture(scope="module")
def baselines():
    return read_baselines(shipped_baselines_path())


def covering_targets(registry) -> list[tuple[str, str]]:
    """One target per kind of relationship the kernel branches on: combination, primary form,
    a bell-shaped covariate, only-increase pools, a clipping window."""
    seen, chosen = set(), []
    for relationship in registry.relationships():
        kind = (
            relationship.combination,
            relationship.form.code,
            any(c.shape == "bell" for c in relationship.covariates),
            relationship.only_increase,
            relationship.is_state(),
        )
        if kind not in seen:
            seen.add(kind)
            chosen.append((relationship.simulator, relationship.target))
    return chosen


def pair_fingerprint(result: PairResult) -> tuple:
    """Every value of a pair result, arrays by dtype, shape and bytes."""

    def array(value: np.ndarray) -> tuple:
        value = np.asarray(value)
        return (value.dtype.str, value.shape, value.tobytes())

    recipe = result.recipe
    return (
        recipe.key,
        recipe.layout,
        recipe.window_start,
        array(recipe.directions),
        array(recipe.factors),
        recipe.replay_source,
        array(recipe.replay_factors),
        array(recipe.novel_factors),
        array(result.history_ratios),
        (type(result.replay_ratio), result.replay_ratio),
        (type(result.novel_ratio), result.novel_ratio),
        result.drop_reason,
        tuple((name, array(values)) for name, values in sorted(result.arrays.items())),
    )


def assert_same_pairs(relationship, baseline: np.ndarray, seed: int) -> list[PairResult]:
    fast = generate_target(relationship, baseline, seed)
    reference = generate_target(relationship, baseline, seed, fast=False)
    assert [pair_fingerprint(r) for r in fast] == [pair_fingerprint(r) for r in reference]
    return fast


def test_covering_targets_cover_both_combinations_and_bells(registry):
    chosen = [registry.get(*target) for target in covering_targets(registry)]
    assert {r.combination for r in chosen} == {"multiplicative", "additive"}
    assert any(any(c.shape == "bell" for c in r.covariates) for r in chosen)
    assert any(r.only_increase for r in chosen) and any(r.is_state() for r in chosen)


@pytest.mark.parametrize("seed", [0, 7])
@pytest.mark.one_quick  # about 5 s a case: the reference path makes every pair in Python
def test_every_pair_of_every_kind_of_target_is_the_references(registry, baselines, seed):
    verdicts = set()
    for simulator, target in covering_targets(registry):
        relationship = registry.get(simulator, target)
        baseline = baselines[simulator].series[target]
        results = assert_same_pairs(relationship, baseline, seed)
        assert len(results) == len(list(pair_keys(relationship)))
        verdicts |= {r.drop_reason for r in results}
    assert "" in verdicts and "history" in verdicts  # kept and dropped pairs both compared


def test_a_few_pairs_of_each_context_match_the_reference(registry, baselines):
    """The kernel path on a handful of pairs (short enough to run as plain Python under
    ``NUMBA_DISABLE_JIT=1``: tests/test_nojit.py runs this test that way)."""
    relationship = registry.get("sumo", "flow_loop_e_0_near")
    baseline = baselines["sumo"].series["flow_loop_e_0_near"]
    keys = [key for key in pair_keys(relationship) if key[0].k in (1, 3)][::37][:6]
    plan = kernels.target_plan(relationship, baseline)
    fast = _kernel_pairs(relationship, plan, keys, baseline, 3)
    reference = [reference_pair(key, relationship, c, p, baseline, 3) for key, c, p in keys]
    assert [pair_fingerprint(r) for r in fast] == [pair_fingerprint(r) for r in reference]
    assert len({key.c_label for key, _, _ in keys}) > 1


@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")
@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    scale=st.sampled_from([1e-30, 1e-3, 1.0, 1e6, 1e30, 1e38]),
    offset=st.sampled_from([0.0, -5.0, 1e3]),
    zero_span=st.integers(0, 600),
    seed=st.integers(0, 2**40),
)
def test_scaled_shifted_and_zeroed_baselines_give_the_references_pairs(
    registry, baselines, scale, offset, zero_span, seed
):
    """Any finite baseline: tiny, huge (float32 overflow: the reference's error), shifted,
    with a run of exact zeros (ratios of 0)."""
    simulator, target = "epanet", "pressure_10"
    relationship = registry.get(simulator, target)
    baseline = baselines[simulator].series[target] * scale + offset
    baseline[100 : 100 + zero_span] = 0.0
    try:
        expected = generate_target(relationship, baseline, seed, fast=False)
    except Exception as error:  # the kernel path must raise the same error
        with pytest.raises(type(error)) as raised:
            generate_target(relationship, baseline, seed)
        assert str(raised.value) == str(error)
        return
    fast = generate_target(relationship, baseline, seed)
    assert [pair_fingerprint(r) for r in fast] == [pair_fingerprint(r) for r in expected]


def test_a_non_finite_baseline_value_raises_the_references_error(registry, baselines):
    relationship = registry.get("epanet", "pressure_10")
    baseline = baselines["epanet"].series["pressure_10"].copy()
    baseline[len(baseline) // 2] = np.nan
    with pytest.raises(Exception) as reference:
        generate_target(relationship, baseline, 0, fast=False)
    with pytest.raises(type(reference.value)) as fast:
        generate_target(relationship, baseline, 0)
    assert str(fast.value) == str(reference.value)
    assert "non-finite" in str(fast.value)


def test_a_pool_without_factors_below_one_raises_the_references_error(registry, baselines):
    relationship = registry.get("epanet", "pressure_10")
    above_only = tuple(f for f in relationship.history_pool if f > 1.0)
    # events now go both ways, and a direct covariate's factor for a fall must lie below 1
    changed = replace(relationship, history_pool=above_only, only_increase=False)
    baseline = baselines["epanet"].series["pressure_10"]
    with pytest.raises(Exception) as reference:
        generate_target(changed, baseline, 0, fast=False)
    with pytest.raises(type(reference.value)) as fast:
        generate_target(changed, baseline, 0)
    assert str(fast.value) == str(reference.value)


def test_pair_entropy_seeds_the_twin_of_the_pairs_numpy_generator():
    for seed, pair_id in (
        (0, "epanet/pressure_10/K1-C1-L8-Emin"),
        (2**40 + 3, "sumo/x/K5-C4-L512-Emax"),
    ):
        state = np.zeros(random_twin.STATE_WORDS, dtype=np.uint64)
        random_twin.seed_state(pair_entropy(seed, pair_id), state)
        numpy_rng = pair_rng(seed, pair_id)
        for n in (2, 7, 1000, 2**31 + 5):
            assert random_twin.draw_integers(state, n) == numpy_rng.integers(n)
        assert random_twin.draw_random(state) == numpy_rng.random()


def _plan_and_layouts(registry, baselines):
    relationship = registry.get("epanet", "pressure_10")
    plan = kernels.target_plan(relationship, baselines["epanet"].series["pressure_10"])
    layouts = np.zeros((1, kernels.N_LAYOUT), dtype=np.int64)
    layouts[0, [kernels.K, kernels.CONTEXT, kernels.PREDICTION]] = (1, 64, 16)
    layouts[0, [kernels.EVENT_LENGTH, kernels.NOVEL_LENGTH, kernels.N_EVENTS]] = (8, 8, 1)
    return plan, np.zeros((1, 8), dtype=np.uint64), layouts


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda e, lay: (e[:, :4][:0], lay), r"entropy must be \(n, W\)"),
        (lambda e, lay: (e, lay[:, :5]), "layouts must be a non-empty"),
        (lambda e, lay: (e[:0], lay[:0]), "layouts must be a non-empty"),
        (
            lambda e, lay: (e, np.where(np.arange(lay.shape[1]) == kernels.K, 9, lay)),
            "K must be in 1..",
        ),
        (
            lambda e, lay: (e, np.where(np.arange(lay.shape[1]) == kernels.LATEST_START, -1, lay)),
            "every window must fit",
        ),
    ],
)
def test_generate_pairs_refuses_inputs_the_kernel_cannot_read(registry, baselines, change, message):
    plan, entropy, layouts = _plan_and_layouts(registry, baselines)
    entropy, layouts = change(entropy, layouts)
    with pytest.raises(ValueError, match=message):
        kernels.generate_pairs(plan, entropy, layouts, np.array([8]))
