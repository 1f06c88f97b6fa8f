"""The baseline forecasters do what docs/METHOD.md (section 9) says, on inputs where the answer is known."""

from __future__ import annotations

import numpy as np
import pytest

from whatif_bench.evaluation.forecasters import (
    BASELINES,
    Forecast,
    LinearRegression,
    Naive,
    RidgeRegression,
    TaskInput,
    TunedPairs,
    XGBoost,
    make_forecaster,
)


def linear_task(rng, noise=0.0, context=400, horizon=40):
    z = rng.uniform(0.5, 8.0, (2, context + horizon))
    y = 3.0 + 2.0 * z[0] - 1.0 * z[1] + noise * rng.normal(size=context + horizon)
    return TaskInput(y[:context], z[:, :context], z[:, context:]), y[context:]


def test_naive_repeats_the_last_value(rng):
    task, _ = linear_task(rng)
    (forecast,) = Naive().predict([task])
    assert np.all(forecast.point == task.history_target[-1]) and forecast.point.shape == (40,)


def test_linear_regression_recovers_an_exact_linear_relation(rng):
    task, truth = linear_task(rng)
    (forecast,) = LinearRegression().predict([task])
    np.testing.assert_allclose(forecast.point, truth, rtol=1e-9)


def test_ridge_matches_a_plain_closed_form_with_alpha_10_on_standardised_covariates(rng):
    task, _ = linear_task(rng, noise=0.5)
    z, z_new, y = task.history_covariates, task.future_covariates, task.history_target
    mean, std = z.mean(axis=1, keepdims=True), z.std(axis=1, keepdims=True)
    x, x_new = ((z - mean) / std).T, ((z_new - mean) / std).T
    xc, yc = x - x.mean(axis=0), y - y.mean()
    coef = np.linalg.inv(xc.T @ xc + 10.0 * np.eye(2)) @ xc.T @ yc
    expected = y.mean() + (x_new - x.mean(axis=0)) @ coef
    (forecast,) = RidgeRegression().predict([task])
    np.testing.assert_allclose(forecast.point, expected, rtol=1e-10)
    (ols,) = LinearRegression().predict([task])
    assert not np.allclose(forecast.point, ols.point)  # the penalty shrinks the fit


def test_xgboost_learns_a_step_response_and_is_deterministic(rng):
    context, horizon = 600, 60
    z = np.ones((1, context + horizon))
    z[0, 200:260] = 4.0
    z[0, context + 10 : context + 30] = 4.0
    y = 10.0 + 5.0 * (z[0] > 1)
    task = TaskInput(y[:context], z[:, :context], z[:, context:])
    first, second = XGBoost().predict([task])[0].point, XGBoost().predict([task])[0].point
    assert np.array_equal(first, second)
    np.testing.assert_allclose(first, y[context:], atol=0.5)


def test_tuned_pairs_use_future_covariates(rng):
    task, truth = linear_task(rng, context=600, horizon=50)
    (forecast,) = TunedPairs(regressor="ridge").predict([task])
    naive_error = np.mean(np.abs(truth - task.history_target[-1]))
    assert np.mean(np.abs(truth - forecast.point)) < 0.2 * naive_error
    (only_horizon,) = TunedPairs(features=("horizon",)).predict([task])
    assert only_horizon.point.shape == (50,)
    with pytest.raises(ValueError, match="unknown feature"):
        TunedPairs(features=("z_tomorrow",))
    with pytest.raises(ValueError, match="regressor must be"):
        TunedPairs(regressor="lasso")


def test_forecasts_are_validated():
    with pytest.raises(ValueError, match="needs a point forecast or quantiles"):
        Forecast()
    with pytest.raises(ValueError, match="non-finite"):
        Forecast(point=np.array([1.0, np.nan]))
    with pytest.raises(ValueError, match="9 columns"):
        Forecast(quantiles=np.zeros((3, 2)))


def test_every_baseline_is_constructible_by_name():
    assert set(BASELINES) == {"naive", "linear", "ridge", "xgboost", "tuned-ridge", "tuned-xgboost"}
    for name in BASELINES:
        assert make_forecaster(name).name == name
    with pytest.raises(ValueError, match="unknown model 'prophet'"):
        make_forecaster("prophet")
