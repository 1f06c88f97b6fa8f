"""The relationship engine: kernels equal the numpy reference; events touch only their windows."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from whatif_bench.errors import RelationshipError
from whatif_bench.relationships import EventSchedule


def _random_factors(rng, k, n):
    return np.exp(rng.uniform(np.log(0.01), np.log(20.0), (k, n)))


def test_evaluate_equals_numpy_reference_for_every_relationship(registry, rng):
    for relationship in registry:
        low, high = relationship.typical_range
        y = rng.uniform(low, high, 500)
        for k in range(1, relationship.max_k + 1):
            factors = _random_factors(rng, k, y.size)
            if relationship.only_increase:
                factors = np.maximum(factors, 1.0)
            np.testing.assert_allclose(
                relationship.evaluate(y, factors),
                relationship.evaluate_reference(y, factors),
                rtol=1e-12,
                atol=1e-12 * max(abs(low), abs(high)),
                err_msg=f"{relationship.simulator}/{relationship.target} K={k}",
            )


def _schedule(rng, k, n_events=6, length=40, gap=32, start=100):
    starts = start + np.arange(n_events) * (length + gap)
    factors = rng.choice([0.1, 0.25, 0.5, 2.0, 4.0, 6.0, 8.0], size=(n_events, k))
    return EventSchedule(starts, np.full(n_events, length), factors)


def test_apply_events_is_bit_identical_to_evaluate_on_the_trajectories(registry, rng):
    for relationship in registry:
        low, high = relationship.typical_range
        y = rng.uniform(low, high, 700)
        k = relationship.max_k
        schedule = _schedule(rng, k)
        if relationship.only_increase:
            schedule = EventSchedule(
                schedule.starts, schedule.lengths, np.maximum(schedule.factors, 2.0)
            )
        trajectories = relationship.factor_trajectories(y.size, schedule)
        np.testing.assert_array_equal(
            relationship.apply_events(y, schedule), relationship.evaluate(y, trajectories)
        )


def test_steps_outside_events_equal_the_baseline_exactly(registry, rng):
    relationship = registry.get("sumo", "meanTimeLoss_e2_e_0")
    y = rng.uniform(0, 100, 1000)
    schedule = _schedule(rng, 5)
    out = relationship.apply_events(y, schedule)
    touched = np.zeros(y.size, dtype=bool)
    for start, length in zip(schedule.starts, schedule.lengths, strict=True):
        touched[start : start + length] = True
    assert np.array_equal(out[~touched], y[~touched])
    assert not np.array_equal(out[touched], y[touched])


def test_covariates_are_base_value_times_factor(registry):
    relationship = registry.get("opendc", "cpu_usage_host-0")
    schedule = EventSchedule([10], [61], [[2.0, 1.0, 4.0]])
    values = relationship.covariate_values(100, schedule)
    assert values[0, 40] == pytest.approx(
        6000.0
    )  # coreSpeed bell peaks at the centre: 3000 MHz x 2
    assert values[0, 9] == 3000.0 and values[0, 71] == 3000.0
    assert relationship.covariate_names[1:3] == ("coreCount_host-0", "memorySize_host-0")
    assert np.all(values[1, 10:71] == 16.0)  # coreCount_host-0 at factor 1: its 16 cores
    assert np.all(values[2, 10:71] == 256.0)  # memorySize_host-0 is third: 64 GiB x 4, a step


def test_constant_factor_dictionary_defaults_k_to_the_last_named_covariate(registry):
    relationship = registry.get("gridlabd", "actual_power")
    y = np.array([10.0])
    only_primary = relationship.evaluate(y, {"base_power": 2.0})
    third_named = relationship.evaluate(y, {"base_power": 2.0, "power_pf": 1.0})
    # with K=3 the dampening changes nothing while the extra covariates sit at 1
    assert only_primary[0] == third_named[0] == pytest.approx(10.0 * (1 + 0.95))


def test_evaluate_grid_reads_factor_lists_in_step(registry):
    relationship = registry.get("epanet", "pressure_10")
    y = np.array([100.0, 120.0])
    grid = relationship.evaluate_grid(y, {"reservoir_9_base_head": [1.0, 2.0, 4.0]}, 3)
    assert grid.shape == (3, 2)
    np.testing.assert_array_equal(grid[0], y)
    assert grid[2, 0] == pytest.approx(100.0 + 0.3 * 105.0 * np.log(4.0))


@pytest.mark.parametrize(
    ("starts", "lengths", "factors", "match"),
    [
        ([0, 10], [20, 5], [[2.0], [2.0]], "overlap"),
        ([0], [0], [[2.0]], "length"),
        ([0], [5], [[0.0]], "> 0"),
        ([0], [5], [[np.nan]], "finite"),
        ([0, 5], [5], [[2.0]], "must match"),
    ],
)
def test_bad_event_schedules_are_rejected(starts, lengths, factors, match):
    with pytest.raises(RelationshipError, match=match):
        EventSchedule(starts, lengths, factors)


def test_schedule_beyond_the_series_is_rejected(registry):
    relationship = registry.get("sumo", "CO2_abs_edge_e2c")
    with pytest.raises(RelationshipError, match="reaches step 120 but the series has 100"):
        relationship.apply_events(np.ones(100), EventSchedule([60], [60], [[2.0]]))


def test_nan_baseline_is_rejected_with_its_position(registry):
    relationship = registry.get("sumo", "CO2_abs_edge_e2c")
    y = np.ones(50)
    y[17] = np.nan
    with pytest.raises(RelationshipError, match="non-finite value at step 17"):
        relationship.evaluate(y, {"accel": 2.0})


def test_unknown_covariate_lists_the_valid_ones(registry):
    relationship = registry.get("sumo", "CO2_abs_edge_e2c")
    with pytest.raises(RelationshipError, match=r"does not act on sumo/CO2_abs_edge_e2c.*'minGap'"):
        relationship.evaluate(np.ones(3), {"lcStrategic": 2.0})


def test_k_outside_range_is_rejected(registry):
    relationship = registry.get("sumo", "CO2_abs_edge_e2c")
    with pytest.raises(RelationshipError, match="K must be in 1..5"):
        relationship.evaluate(np.ones(3), {"accel": 2.0}, k_covariates=6)


def test_multiplicative_combination_raises_negative_targets_towards_zero(registry):
    relationship = registry.get("epanet", "demand_9")  # reservoir outflow is negative (supply)
    y = np.array([-1500.0])
    raised = relationship.evaluate(
        y, {"reservoir_9_base_head": 1.0, "junction_11_base_demand": 4.0}
    )
    assert y[0] < raised[0] < 0


def test_evaluate_coalitions_is_bit_identical_to_evaluating_each_coalition(registry, rng):
    """The one-kernel coalitions (describe's attribution) equal ``evaluate`` of each coalition's
    factor rows to the bit, for every relationship and K, factors above and below 1 and at 1."""
    for relationship in registry:
        low, high = relationship.typical_range
        y = rng.uniform(low, high, 60)
        for k in range(1, relationship.max_k + 1):
            factors = _random_factors(rng, k, y.size)
            factors[:, ::7] = 1.0  # some steps the event leaves alone
            if relationship.only_increase:
                factors = np.maximum(factors, 1.0)
            got = relationship.evaluate_coalitions(y, factors)
            assert got.shape == (2**k, y.size)
            np.testing.assert_array_equal(
                got,
                relationship.evaluate_coalitions_reference(y, factors),
                err_msg=f"{relationship.simulator}/{relationship.target} K={k}",
            )


@settings(max_examples=150, deadline=None)
@given(
    which=st.integers(0, 10**6),
    k=st.integers(1, 5),
    n=st.integers(1, 300),
    length=st.integers(1, 400),
    seed=st.integers(0, 2**32 - 1),
    ones=st.integers(0, 5),
)
def test_coalition_worths_equal_summing_every_coalition_evaluated_everywhere(
    registry, which, k, n, length, seed, ones
):
    """One kernel call gives, to the bit, the NumPy sums of every coalition's effect evaluated
    at every step (the plain way), for every relationship, K, window and event length (shorter
    than the window, cut by it), with some factors exactly 1 (coalitions that move nothing)."""
    relationships = list(registry)
    relationship = relationships[which % len(relationships)]
    k = min(k, relationship.max_k)
    rng = np.random.default_rng(seed)
    low, high = relationship.typical_range
    y = rng.uniform(low, high, n)
    factors = _random_factors(rng, k, 1)[:, 0]
    factors[: min(ones, k - 1)] = 1.0  # never all: the all-ones event is its own case below
    if relationship.only_increase:
        factors = np.maximum(factors, 1.0)
    got = relationship.coalition_worths(y, length, factors)
    assert got.shape == (2**k,) and got.dtype == np.float64
    reference = relationship.coalition_worths_reference(y, length, factors)
    # the bytes: a -0.0 where NumPy gives +0.0 would change a description's JSON
    assert got.tobytes() == reference.tobytes(), f"{relationship.target} K={k}"
    everywhere = relationship.coalition_worths(y, length, np.ones(k))
    assert everywhere.tobytes() == (
        relationship.coalition_worths_reference(y, length, np.ones(k)).tobytes()
    )


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 127, 128, 129, 263, 1000, 9000])
def test_pairwise_sum_is_numpys_sum_to_the_bit_signed_zeros_included(n):
    """Values of both signs, and rows of signed zeros: NumPy adds its sum to +0.0, so eight or
    more -0.0 sum to +0.0, not -0.0."""
    from whatif_bench.relationships.kernels import pairwise_sum

    rng = np.random.default_rng(n)
    signed = rng.standard_normal(n + 3) * 10.0 ** rng.uniform(-6, 6, n + 3)
    zeros = np.full(n + 3, -0.0)
    mixed = np.where(rng.random(n + 3) < 0.5, -0.0, 0.0)
    for values in (signed, zeros, mixed):
        assert np.float64(pairwise_sum(values, 3, n)).tobytes() == np.sum(values[3:]).tobytes()


@pytest.mark.parametrize(
    ("y", "length", "factors", "match"),
    [
        (np.ones(10), 4, np.ones((2, 3)), r"factors are \(K,\), got shape \(2, 3\)"),
        (np.ones(10), 4, np.ones(6), "K must be in 1..5"),
        (np.ones(10), 4, np.ones(0), "K must be in 1..5"),
        (np.ones(10), 4, np.array([1.0, np.nan]), "finite and > 0"),
        (np.ones(10), 4, np.array([1.0, 0.0]), "finite and > 0"),
        (np.ones(10), 4, np.array([np.inf]), "finite and > 0"),
        (np.ones(10), 0, np.ones(2), "whole number of steps >= 1, got 0"),
        (np.ones(10), -3, np.ones(2), "whole number of steps >= 1, got -3"),
        (np.ones(10), 2.5, np.ones(2), "whole number of steps >= 1, got 2.5"),
        (np.ones(10), True, np.ones(2), "whole number of steps >= 1, got True"),
        (np.ones(10), np.True_, np.ones(2), "whole number of steps >= 1, got np.True_"),
        (np.ones(10), 3.0, np.ones(2), "whole number of steps >= 1, got 3.0"),
        (np.ones(10), float("nan"), np.ones(2), "whole number of steps >= 1, got nan"),
        (np.ones(10), None, np.ones(2), "whole number of steps >= 1, got None"),
        (np.ones(10), np.int64(0), np.ones(2), "whole number of steps >= 1, got np.int64"),
        (np.array([1.0, np.nan, 2.0]), 2, np.ones(2), "non-finite value at step 1"),
        (np.ones((2, 5)), 2, np.ones(2), "one-dimensional"),
    ],
)
def test_coalition_worths_refuse_what_does_not_fit(registry, y, length, factors, match):
    relationship = registry.get("epanet", "pressure_10")
    with pytest.raises(RelationshipError, match=match):
        relationship.coalition_worths(y, length, factors)


@pytest.mark.parametrize(
    ("factors", "match"),
    [
        (np.ones((2, 9)), r"factor array must be \(K, 10\)"),
        (np.ones(10), r"factor array must be \(K, 10\)"),
        (np.ones((6, 10)), "K must be in 1..5"),
    ],
)
def test_evaluate_coalitions_refuses_factors_that_do_not_fit(registry, factors, match):
    relationship = registry.get("epanet", "pressure_10")
    with pytest.raises(RelationshipError, match=match):
        relationship.evaluate_coalitions(np.ones(10), factors)
