"""wQL and WAPE equal fev's own implementations; hand-computed cases."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.lazy_modules import importorskip_lazily
from whatif_bench.evaluation.metrics import QUANTILE_LEVELS, score, wape, wql

fev_metrics = importorskip_lazily("fev.metrics")


def fev_compute(metric, y_true, point, quantiles, levels):
    horizon = y_true.size
    return metric.compute(
        y_true=y_true.reshape(1, horizon, 1),
        y_pred=point.reshape(1, horizon, 1),
        y_past=np.ones((1, 4, 1)),
        y_past_lengths=np.array([4]),
        q_pred=quantiles.reshape(1, horizon, 1, len(levels)),
        seasonality=1,
        quantile_levels=list(levels),
    )


def test_hand_computed_values():
    y = np.array([10.0, 20.0])
    assert wape(y, np.array([12.0, 17.0])) == pytest.approx((2 + 3) / 2 / 15)
    # one level q = 0.9: 2 * |(y - q)((y <= q) - 0.9)| = 2 * [(12-10)*0.1, (20-17)*0.9] = [0.4, 5.4]
    assert wql(y, np.array([[12.0], [17.0]]), levels=(0.9,)) == pytest.approx(2.9 / 15)


def test_point_forecasts_are_scored_by_wql_at_the_median_which_equals_wape():
    rng = np.random.default_rng(0)
    y, p = rng.uniform(1, 10, 30), rng.uniform(1, 10, 30)
    metrics = score(y, p, None)
    assert metrics["wql"] == pytest.approx(metrics["wape"], rel=1e-12)


@settings(max_examples=200, deadline=None)
@given(horizon=st.integers(1, 50), seed=st.integers(0, 2**32), offset=st.floats(-50, 50))
def test_equal_to_fev(horizon, seed, offset):
    rng = np.random.default_rng(seed)
    y = rng.normal(offset, 5.0, horizon)
    quantiles = np.sort(rng.normal(offset, 5.0, (horizon, len(QUANTILE_LEVELS))), axis=1)
    point = quantiles[:, 4]
    assert wql(y, quantiles) == pytest.approx(
        fev_compute(fev_metrics.WQL(), y, point, quantiles, QUANTILE_LEVELS), rel=1e-12
    )
    assert wape(y, point) == pytest.approx(
        fev_compute(fev_metrics.WAPE(), y, point, quantiles, QUANTILE_LEVELS), rel=1e-12
    )
    assert score(y, point, None)["wql"] == pytest.approx(
        fev_compute(fev_metrics.WQL(), y, point, point[:, None], (0.5,)), rel=1e-12
    )


def test_float32_truth_is_scored_in_float64(rng):
    truth = rng.uniform(1, 100, 48).astype(np.float32)
    forecast = rng.uniform(1, 100, (48, 9))
    assert wql(truth, forecast) == wql(truth.astype(np.float64), forecast)
    assert wape(truth, forecast[:, 4]) == wape(truth.astype(np.float64), forecast[:, 4])
