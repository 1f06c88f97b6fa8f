"""Event shapes follow docs/METHOD.md (section 3) exactly, and the trajectory kernel matches the numpy reference."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from whatif_bench.relationships import bell_factors, factor_trajectory, step_factors
from whatif_bench.relationships.shapes import bell_profile


def test_step_holds_the_factor_for_the_whole_window():
    assert np.array_equal(step_factors(4.0, 5), np.full(5, 4.0))


def test_bell_matches_the_spec_formula_pointwise():
    length, factor = 64, 6.0
    expected = [
        1 + (factor - 1) * math.exp(-0.5 * ((t - (length - 1) / 2) / (length / 6)) ** 2)
        for t in range(length)
    ]
    np.testing.assert_allclose(bell_factors(factor, length), expected, rtol=1e-14)


def test_bell_peaks_at_the_centre_and_is_symmetric():
    trajectory = bell_factors(0.25, 33)
    assert trajectory[16] == pytest.approx(0.25)
    np.testing.assert_array_equal(trajectory, trajectory[::-1])
    assert trajectory[0] == pytest.approx(
        1 + (0.25 - 1) * math.exp(-0.5 * (16 / 5.5) ** 2), rel=1e-12
    )


def test_bell_profile_rejects_empty_events():
    with pytest.raises(ValueError, match="length"):
        bell_profile(0)


def test_factor_is_one_outside_events():
    trajectory = factor_trajectory(
        100, np.array([10, 60]), np.array([20, 5]), np.array([2.0, 0.5]), "step"
    )
    outside = np.ones(100, dtype=bool)
    outside[10:30] = outside[60:65] = False
    assert np.all(trajectory[outside] == 1.0)
    assert np.all(trajectory[10:30] == 2.0) and np.all(trajectory[60:65] == 0.5)


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 80), min_size=1, max_size=6),
    gap=st.integers(0, 40),
    factors=st.lists(st.floats(0.01, 20.0), min_size=6, max_size=6),
    shape=st.sampled_from(["step", "bell"]),
)
def test_trajectory_kernel_equals_numpy_reference(registry, lengths, gap, factors, shape):
    relationship = next(r for r in registry if r.covariates[0].shape == shape)
    starts = np.cumsum([0] + [length + gap for length in lengths[:-1]]) + gap
    n_steps = int(starts[-1] + lengths[-1] + gap)
    event_factors = np.array(factors[: len(lengths)])
    from whatif_bench.relationships import EventSchedule

    schedule = EventSchedule(starts, np.array(lengths), event_factors[:, None])
    kernel = relationship.factor_trajectories(n_steps, schedule)[0]
    expected = factor_trajectory(n_steps, starts, np.array(lengths), event_factors, shape)
    np.testing.assert_allclose(kernel, expected, rtol=1e-12, atol=0)
