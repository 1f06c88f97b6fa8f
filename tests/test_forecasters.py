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


def sklearn_linear(task: TaskInput) -> np.ndarray:
    from sklearn.linear_model import LinearRegression as SklearnLinearRegression

    model = SklearnLinearRegression().fit(task.history_covariates.T, task.history_target)
    return model.predict(task.future_covariates.T)


def ill_conditioned_task(rng, dtype, kind: str, k: int = 3, context: int = 500, horizon: int = 48):
    """Covariates (k, C + H) that are collinear in the history, then move apart in the future."""
    base = rng.uniform(0.5, 8.0, context + horizon)
    z = np.stack([base * (1.0 + 0.3 * i) + 2.0 * i for i in range(k)])
    if kind == "nearly collinear":
        z[1:, :context] += 1e-6 * rng.normal(size=(k - 1, context))
    elif kind == "constant covariate":
        z[1, :context] = 4.0
    z[1:, context:] += rng.uniform(
        0.5, 3.0, (k - 1, horizon)
    )  # the future leaves the history's span
    y = 10.0 + 1.5 * base + 0.01 * rng.normal(size=context + horizon)
    z, y = z.astype(dtype), y.astype(dtype)
    return TaskInput(y[:context], z[:, :context], z[:, context:])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kind", ["exactly collinear", "nearly collinear", "constant covariate"])
def test_linear_equals_scikit_learn_on_rank_deficient_and_ill_conditioned_histories(
    rng, dtype, kind
):
    task = ill_conditioned_task(rng, dtype, kind)
    (forecast,) = LinearRegression().predict([task])
    expected = sklearn_linear(task)
    assert forecast.point.dtype == np.float64 and np.all(np.isfinite(forecast.point))
    np.testing.assert_allclose(forecast.point, expected, rtol=1e-4 if dtype == np.float32 else 1e-9)


def test_linear_equals_scikit_learn_on_well_posed_histories(rng):
    for _ in range(5):
        task, _ = linear_task(rng, noise=0.3, context=int(rng.integers(50, 500)))
        (forecast,) = LinearRegression().predict([task])
        np.testing.assert_allclose(forecast.point, sklearn_linear(task), rtol=1e-9)


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


@pytest.mark.parametrize("regressor", ["ridge", "xgboost"])
def test_tuned_forecasts_do_not_depend_on_batch_position(rng, regressor):
    from dataclasses import replace

    tasks = [
        replace(linear_task(rng, noise=0.5, context=300, horizon=20)[0], task_id=f"t{i}")
        for i in range(3)
    ]
    model = TunedPairs(regressor=regressor, max_rows=400)
    together = [f.point for f in model.predict(tasks)]
    alone = [model.predict([t])[0].point for t in reversed(tasks)][::-1]
    for a, b in zip(together, alone, strict=True):
        np.testing.assert_array_equal(a, b)
    # the same arrays under another id draw other (origin, horizon) pairs
    renamed = replace(tasks[0], task_id="other")
    assert not np.array_equal(model.predict([renamed])[0].point, together[0])


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


def test_task_input_dates_a_task_and_converts_a_zoned_start_to_utc():
    from types import SimpleNamespace

    import pandas as pd

    arrays = {
        "history_target": np.zeros(4),
        "history_covariates": np.zeros((1, 4)),
        "future_covariates": np.zeros((1, 2)),
    }
    task = SimpleNamespace(
        **arrays,
        task_id="opendc/x/K1-C1-L32-Efew/novel",
        start=pd.Timestamp("2013-08-12T15:35:46+02:00"),
        interval_s=300,
        covariates=("c",),
        target="x",
        units={"x": "W"},
    )
    model_view = TaskInput.from_task(task)
    assert model_view.start == pd.Timestamp("2013-08-12T13:35:46")
    assert model_view.freq == "5min" and model_view.target_unit == "W"
    stamps = model_view.timestamps()
    assert stamps.shape == (6,) and stamps[-1] == pd.Timestamp("2013-08-12T14:00:46")
    with pytest.raises(ValueError, match="no start"):
        TaskInput(**arrays).timestamps()


def test_frequency_alias_always_has_a_count():
    from whatif_bench.evaluation.forecasters import frequency_alias

    assert [frequency_alias(s) for s in (300, 60, 3600, 86400, 90, 1)] == [
        "5min",
        "1min",
        "1h",
        "1D",
        "90s",
        "1s",
    ]
    for bad in (0, -60, 1.5, True):
        with pytest.raises(ValueError, match="positive whole number of seconds"):
            frequency_alias(bad)


def test_a_task_input_of_arrays_alone_keeps_working(rng):
    task, _ = linear_task(rng)
    assert task.task_id == "" and task.start is None and task.freq == ""
    assert task.covariate_names == () and task.prediction_length == 40
    assert task.context_length == 400


def _last_plus_covariate_change(inputs):
    """A tiny Chronos-2-style model: last value + 2 x (first covariate's change since the end
    of the history); a point forecast for even-length histories, quantiles for odd ones."""
    out = []
    for entry in inputs:
        (name, past), *_ = entry["past_covariates"].items()
        future = entry["future_covariates"][name]
        point = float(entry["target"][-1]) + 2.0 * (future - float(past[-1]))
        if entry["target"].size % 2:
            out.append(np.repeat(point[:, None], 9, axis=1) + np.linspace(-1, 1, 9))
        else:
            out.append(point)
    return out


def test_dict_model_gets_chronos_style_inputs_and_returns_its_forecasts(rng):
    from whatif_bench.evaluation.adapters import dict_entry, from_dict_model

    even, _ = linear_task(rng, context=400)
    odd, _ = linear_task(rng, context=401)
    model = from_dict_model(_last_plus_covariate_change, name="last-plus-cov")
    assert model.name == "last-plus-cov"
    point, quantiles = model.predict([even, odd])
    expected = even.history_target[-1] + 2.0 * (
        even.future_covariates[0] - even.history_covariates[0, -1]
    )
    np.testing.assert_array_equal(point.point, expected)
    assert point.quantiles is None
    assert quantiles.point is None and quantiles.quantiles.shape == (40, 9)
    entry = dict_entry(even)  # no names in the task: generic ones
    assert list(entry["past_covariates"]) == ["covariate_1", "covariate_2"]
    assert entry["target"] is even.history_target
    np.testing.assert_array_equal(
        entry["future_covariates"]["covariate_2"], even.future_covariates[1]
    )


def test_dict_model_gets_the_horizon_when_it_asks_for_it(rng):
    from whatif_bench.evaluation.adapters import from_dict_model

    calls = []

    def model(inputs, prediction_length):
        calls.append((len(inputs), prediction_length))
        return [np.ones((1, prediction_length, 9)) for _ in inputs]  # one variate, as Chronos-2

    short, _ = linear_task(rng, horizon=10)
    long_, _ = linear_task(rng, horizon=20)
    forecasts = from_dict_model(model, name="ones").predict([short, long_, short])
    assert calls == [(2, 10), (1, 20)]
    assert [f.quantiles.shape for f in forecasts] == [(10, 9), (20, 9), (10, 9)]


def test_dict_model_bad_output_and_bad_arguments_are_clear(rng):
    from whatif_bench.evaluation.adapters import from_dict_model
    from whatif_bench.evaluation.forecasters import ModelError

    task, _ = linear_task(rng)
    with pytest.raises(ValueError, match=r"returned shape \(3,\); expected quantiles \(40, 9\)"):
        from_dict_model(lambda inputs: [np.zeros(3)], name="bad").predict([task])
    with pytest.raises(ValueError, match="returned 0 forecasts for 1 tasks"):
        from_dict_model(lambda inputs: [], name="bad").predict([task])
    with pytest.raises(ModelError, match="needs a name"):
        from_dict_model(_last_plus_covariate_change, name="")
    with pytest.raises(ModelError, match="needs a callable"):
        from_dict_model("chronos", name="x")
