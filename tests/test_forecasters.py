"""The baseline forecasters do what docs/METHOD.md (section 9) says, on inputs where the answer is known."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from whatif_bench.evaluation.forecasters import (
    BASELINES,
    Forecast,
    LinearRegression,
    ModelError,
    Naive,
    RidgeRegression,
    TaskInput,
    TunedPairs,
    XGBoost,
    draw_pairs,
    feasible_pairs,
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


def standardised_on_history(task: TaskInput) -> tuple[np.ndarray, np.ndarray]:
    """The covariates (rows: time, float64) scaled by their history mean and standard deviation,
    a constant covariate by 1: what `linear` and `ridge` are documented to fit on."""
    z = task.history_covariates.astype(np.float64)
    z_new = task.future_covariates.astype(np.float64)
    mean, std = z.mean(axis=1, keepdims=True), z.std(axis=1, keepdims=True)
    std = np.where(std == 0, 1.0, std)
    return ((z - mean) / std).T, ((z_new - mean) / std).T


def sklearn_linear(task: TaskInput, standardise: bool = True) -> np.ndarray:
    from sklearn.linear_model import LinearRegression as SklearnLinearRegression

    if standardise:
        x, x_new = standardised_on_history(task)
    else:
        x, x_new = task.history_covariates.T, task.future_covariates.T
    return SklearnLinearRegression().fit(x, task.history_target).predict(x_new)


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


def steps_together_task(rng, context: int = 400, horizon: int = 40) -> TaskInput:
    """Three step covariates that switch at the same steps in the history (two of them at the
    same levels, so identical columns; the third at other levels), and each on its own in the
    future; the target follows the first and the third."""
    levels = np.array([[1.0, 4.0], [1.0, 4.0], [100.0, 250.0]])
    on = np.zeros((3, context + horizon), dtype=bool)
    for start in (60, 170, 300):
        on[:, start : start + 40] = True
    on[:, context:] = False
    on[0, context + 5 : context + 15] = True
    on[1, context + 10 : context + 30] = True
    on[2, context + 20 : context + 35] = True
    z = np.where(on, levels[:, 1:], levels[:, :1])
    y = 5.0 + 2.0 * z[0] + 0.02 * z[2] + 0.1 * rng.normal(size=context + horizon)
    return TaskInput(y[:context], z[:, :context], z[:, context:])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kind", ["exactly collinear", "nearly collinear", "constant covariate"])
def test_linear_equals_scikit_learn_on_standardised_rank_deficient_and_ill_conditioned_histories(
    rng, dtype, kind
):
    task = ill_conditioned_task(rng, dtype, kind)
    (forecast,) = LinearRegression().predict([task])
    assert forecast.point.dtype == np.float64 and np.all(np.isfinite(forecast.point))
    np.testing.assert_allclose(forecast.point, sklearn_linear(task), rtol=1e-9)


def test_linear_equals_scikit_learn_on_standardised_well_posed_histories(rng):
    for _ in range(5):
        task, _ = linear_task(rng, noise=0.3, context=int(rng.integers(50, 500)))
        scale = np.array([[0.1], [10.0]])  # covariates on different scales
        task = TaskInput(
            task.history_target, task.history_covariates * scale, task.future_covariates * scale
        )
        (forecast,) = LinearRegression().predict([task])
        np.testing.assert_allclose(forecast.point, sklearn_linear(task), rtol=1e-9)
        # full rank: the scaling changes nothing but rounding
        np.testing.assert_allclose(forecast.point, sklearn_linear(task, False), rtol=1e-7)


def test_linear_keeps_an_informative_covariate_of_small_spread(rng):
    """On raw covariates a spread 10^6 times smaller than another's falls under the relative
    singular-value cutoff and the covariate is dropped; standardised, it is kept."""
    task, truth = linear_task(rng)
    scale = np.array([[1e-3], [1e3]])
    task = TaskInput(
        task.history_target, task.history_covariates * scale, task.future_covariates * scale
    )
    (forecast,) = LinearRegression().predict([task])
    np.testing.assert_allclose(forecast.point, truth, rtol=1e-9)
    raw = LinearRegression(standardise=False).predict([task])[0].point
    np.testing.assert_allclose(raw, sklearn_linear(task, standardise=False), rtol=1e-6)
    assert np.max(np.abs(raw - truth)) > 1.0


def test_linear_on_step_covariates_that_move_together_is_scikit_learn_on_standardised_inputs(rng):
    task = steps_together_task(rng)
    x, _ = standardised_on_history(task)
    assert np.array_equal(x[:, 0], x[:, 1]) and np.allclose(x[:, 0], x[:, 2])  # rank 1
    (forecast,) = LinearRegression().predict([task])
    np.testing.assert_allclose(forecast.point, sklearn_linear(task), rtol=1e-9)
    # the minimum-norm fit differs with the scaling: the raw fit gives the large-valued third
    # covariate nearly all of the effect, the standardised one splits it in three
    raw = LinearRegression(standardise=False).predict([task])[0].point
    np.testing.assert_allclose(raw, sklearn_linear(task, standardise=False), rtol=1e-9)
    assert np.max(np.abs(raw - forecast.point)) > 0.5
    # each covariate alone "on" moves the standardised forecast by a third of the history's
    # jump (6 + 3 = 9 between the levels); the raw fit puts the effect on the third covariate
    jump = 9.0
    off = forecast.point[:5].mean()
    only_first = forecast.point[5:10].mean() - off
    np.testing.assert_allclose(only_first, jump / 3, rtol=0.05)
    assert abs(raw[5:10].mean() - raw[:5].mean()) < 0.05 * jump


def test_linear_forecast_does_not_depend_on_the_covariates_units(rng):
    """Rescaling a covariate (W to kW) changes the raw minimum-norm fit of a rank-deficient
    history, never the standardised one."""
    task = steps_together_task(rng)
    scale = np.array([[1.0], [1.0], [1e-3]])
    rescaled = TaskInput(
        task.history_target, task.history_covariates * scale, task.future_covariates * scale
    )
    for model, same in ((LinearRegression(), True), (LinearRegression(standardise=False), False)):
        a, b = (model.predict([t])[0].point for t in (task, rescaled))
        assert np.allclose(a, b, rtol=1e-9) == same


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
    for bad in ({"max_rows": 0}, {"target_lags": -1}, {"target_lags": True}, {"max_rows": 1.5}):
        with pytest.raises(ValueError, match="must be a whole number"):
            TunedPairs(**bad)


def test_tuned_linear_is_exact_on_an_exact_linear_relation(rng):
    """Least squares on the (collinear: z_delta = z_future - z_origin) standardised features
    recovers y = 3 + 2 z0 - z1 exactly; the ridge penalty does not."""
    task, truth = linear_task(rng, context=600, horizon=50)
    (forecast,) = TunedPairs(regressor="linear").predict([task])
    np.testing.assert_allclose(forecast.point, truth, rtol=1e-9)
    (ridge,) = TunedPairs(regressor="ridge").predict([task])
    assert not np.allclose(ridge.point, truth, rtol=1e-6)


def brute_force_pairs(context: int, horizon: int, first: int) -> set[tuple[int, int]]:
    """Every (tau, h) with y_{tau+h} in the history, tau >= first and 1 <= h <= horizon."""
    return {
        (tau, h)
        for h in range(1, horizon + 1)
        for tau in range(first, context)
        if tau + h < context
    }


def feasible_count(context: int, horizon: int, first: int) -> int:
    """``len(brute_force_pairs(context, horizon, first))`` without building the set (millions
    of pairs for a long task): for each h, the origins first, ..., context - h - 1."""
    return sum(max(0, context - h - first) for h in range(1, horizon + 1))


def as_pairs(origins: np.ndarray, horizons: np.ndarray) -> list[tuple[int, int]]:
    return list(zip(origins.tolist(), horizons.tolist(), strict=True))


def test_tuned_pairs_draw_the_horizon_first_then_the_origin():
    """A horizon nearly as long as the history: drawing tau first would favour short horizons
    (late origins allow only short ones) and, given h, late origins; h first gives every
    horizon the same share and, given h, every feasible origin the same share."""
    context, horizon, first, rows = 400, 300, 31, 3000
    origins, horizons = draw_pairs(context, horizon, rows, np.random.default_rng(7), first)
    assert origins.size == rows
    per_band = np.bincount((horizons - 1) // 30, minlength=10)  # 10 bands of 30 horizons
    expected = rows / 10
    assert np.all(np.abs(per_band - expected) < 4 * np.sqrt(expected)), per_band
    # tau given h: its place k in the n_h feasible origins, standardised for a uniform draw
    n = context - first - horizons
    k = origins - first
    score = (k - (n - 1) / 2) / np.sqrt((n**2 - 1) / 12)
    assert abs(score.mean()) < 4 / np.sqrt(rows) and abs(score.var() - 1) < 0.1
    # in the last band (h 271 … 300, 69 … 98 origins) too
    last = horizons > 270
    assert abs(score[last].mean()) < 4 / np.sqrt(last.sum())


def tau_first_pairs(context: int, horizon: int, rows: int, first: int):
    """The former draw (tau first, then h), to show the test above tells them apart."""
    rng = np.random.default_rng(7)
    origins = rng.integers(first, context - 1, rows)
    horizons = rng.integers(1, np.minimum(horizon, context - 1 - origins) + 1)
    return origins, horizons


def test_the_horizon_first_statistics_would_catch_an_origin_first_sampler():
    """The power of the test above: its statistics reject the old sampler (tau first)."""
    origins, horizons = tau_first_pairs(400, 300, 3000, 31)
    per_band = np.bincount((horizons - 1) // 30, minlength=10)
    assert per_band[0] > 3 * per_band[-1]
    n, k = 400 - 31 - horizons, origins - 31
    score = (k - (n - 1) / 2) / np.sqrt((n**2 - 1) / 12)
    assert abs(score.mean()) > 0.2


@pytest.mark.parametrize(
    ("context", "horizon", "rows"),
    [(60, 24, 8000), (60, 24, 396), (40, 24, 8000), (33, 5, 8000)],
)
def test_a_history_with_fewer_pairs_than_max_rows_gives_every_pair_once(context, horizon, rows):
    expected = brute_force_pairs(context, horizon, 31)
    assert context != 60 or len(expected) == 396
    pairs = as_pairs(*draw_pairs(context, horizon, rows, np.random.default_rng(0), 31))
    assert len(pairs) == len(set(pairs)) == len(expected) and set(pairs) == expected
    assert pairs == as_pairs(*feasible_pairs(context, horizon, 31))


def test_a_history_with_more_pairs_than_max_rows_gives_max_rows_distinct_pairs(rng):
    pairs = as_pairs(*draw_pairs(60, 24, 395, np.random.default_rng(0), 31))
    assert len(set(pairs)) == len(pairs) == 395 and set(pairs) < brute_force_pairs(60, 24, 31)
    # the default model on a long history: 8,000 distinct pairs, all feasible
    task, _ = linear_task(rng, context=600, horizon=50)
    model = TunedPairs()
    origins, horizons = model.pairs(task)
    pairs = as_pairs(origins, horizons)
    assert len(set(pairs)) == len(pairs) == 8000 and set(pairs) <= brute_force_pairs(600, 50, 31)
    assert as_pairs(*model.pairs(task)) == pairs  # the same task draws the same pairs
    # and a short one: every pair
    short, _ = linear_task(rng, context=100, horizon=20)
    assert set(as_pairs(*model.pairs(short))) == brute_force_pairs(100, 20, 31)
    assert model.pairs(short)[0].size == 1170


def test_a_history_too_short_for_any_pair_is_a_clear_error(rng):
    task, _ = linear_task(rng, context=32, horizon=5)
    with pytest.raises(ValueError, match="too short .* at least 33 steps"):
        TunedPairs().predict([task])


@settings(max_examples=150, deadline=None)
@given(
    context=st.integers(1, 260),
    horizon=st.integers(1, 120),
    rows=st.integers(1, 2500),
    first=st.sampled_from([0, 31, 47]),
    seed=st.integers(0, 2**32 - 1),
)
def test_drawn_pairs_are_distinct_feasible_and_as_many_as_possible(
    context, horizon, rows, first, seed
):
    expected = brute_force_pairs(context, horizon, first)
    assert feasible_count(context, horizon, first) == len(expected)
    if not expected:
        with pytest.raises(ValueError, match="too short"):
            draw_pairs(context, horizon, rows, np.random.default_rng(seed), first)
        return
    origins, horizons = draw_pairs(context, horizon, rows, np.random.default_rng(seed), first)
    pairs = as_pairs(origins, horizons)
    assert origins.dtype == horizons.dtype == np.int64
    assert len(pairs) == len(set(pairs)) == min(rows, len(expected))
    assert set(pairs) <= expected
    again = draw_pairs(context, horizon, rows, np.random.default_rng(seed), first)
    assert pairs == as_pairs(*again)


def test_target_lags_add_the_last_targets_at_the_origin_as_columns(rng):
    task, _ = linear_task(rng, noise=0.5, context=300, horizon=20)
    y = task.history_target
    z = np.concatenate([task.history_covariates, task.future_covariates], axis=1).T
    origins, horizons = np.array([31, 50, 99, 299]), np.array([1, 5, 3, 20])
    base = TunedPairs().feature_matrix(z, y, origins, horizons)
    assert base.shape == (4, 4 * 2 + 3 + 1)
    for lags in (1, 2, 5, 32):
        model = TunedPairs(target_lags=lags)
        matrix = model.feature_matrix(z, y, origins, horizons)
        assert matrix.shape == (4, base.shape[1] + lags)
        np.testing.assert_array_equal(matrix[:, : base.shape[1]], base)
        expected = [[y[o - j] for j in range(lags)] for o in origins]  # y_t, y_{t-1}, …
        np.testing.assert_array_equal(matrix[:, base.shape[1] :], expected)
    assert TunedPairs(features=(), target_lags=3).feature_matrix(z, y, origins, horizons)[
        1
    ].tolist() == [y[50], y[49], y[48]]
    # lags longer than the target window move the first origin
    model = TunedPairs(target_lags=40, max_rows=10**6)
    assert model.first_origin == 39 and TunedPairs(target_lags=32).first_origin == 31
    origins, _ = model.pairs(task)
    assert origins.min() == 39


@pytest.mark.parametrize("regressor", ["linear", "ridge", "xgboost"])
def test_target_lags_reach_the_forecast_and_the_fingerprint(rng, regressor):
    from whatif_bench.evaluation.forecasters import fingerprint

    task, _ = linear_task(rng, noise=0.5, context=300, horizon=20)
    plain = TunedPairs(regressor=regressor, max_rows=500)
    lagged = TunedPairs(regressor=regressor, max_rows=500, target_lags=3)
    a, b = plain.predict([task])[0].point, lagged.predict([task])[0].point
    assert np.all(np.isfinite(b)) and not np.array_equal(a, b)
    assert fingerprint(lagged)["params"]["target_lags"] == 3
    assert fingerprint(plain)["params"]["target_lags"] == 0
    assert fingerprint(lagged)["id"] != fingerprint(plain)["id"]
    assert fingerprint(f"tuned-{regressor}")["params"]["target_lags"] == 0


@pytest.mark.parametrize("regressor", ["linear", "ridge", "xgboost"])
@pytest.mark.one_quick  # about 1 s over all its cases
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


@pytest.fixture(scope="module")
def corpus_batch(one_target_corpus):
    """A batch of real tasks, as the evaluation reads them, from the session's one-target corpus
    (read only)."""
    from whatif_bench.generator import Corpus

    path = one_target_corpus
    with Corpus(path) as corpus:
        ids = corpus.task_ids()
        chosen = ids[:: max(1, len(ids) // 6)][:6]
        return path, corpus.task_inputs(chosen), [corpus[i].ground_truth() for i in chosen]


@pytest.mark.slow  # about 2 s
def test_tuned_linear_forecasts_a_real_task_batch(corpus_batch):
    _, batch, truths = corpus_batch
    model = make_forecaster("tuned-linear")
    assert model.name == "tuned-linear" and model.regressor == "linear"
    forecasts = model.predict(batch)
    assert len(forecasts) == len(batch)
    for task, forecast, truth in zip(batch, forecasts, truths, strict=True):
        assert forecast.point.shape == (task.prediction_length,) == truth.shape
        assert np.all(np.isfinite(forecast.point))
        assert model.pairs(task)[0].size == min(
            8000, feasible_count(task.context_length, task.prediction_length, 31)
        )
    again = make_forecaster("tuned-linear").predict(batch[::-1])[::-1]
    for a, b in zip(forecasts, again, strict=True):
        np.testing.assert_array_equal(a.point, b.point)
    # the covariates carry the what-if effect: it beats repeating the last value
    naive = make_forecaster("naive").predict(batch)
    errors = [
        [np.mean(np.abs(f.point - truth)) for f, truth in zip(fs, truths, strict=True)]
        for fs in (forecasts, naive)
    ]
    assert np.mean(errors[0]) < 0.8 * np.mean(errors[1])


@pytest.mark.slow  # about 3 s
def test_whatif_evaluate_accepts_tuned_linear(corpus_batch, tmp_path, one_skill_plot):
    from tests.conftest import evaluating_only, every_tenth_task_id, run_cli

    path, _, _ = corpus_batch
    out = tmp_path / "eval"
    # what is checked is that the command takes the name: every tenth task will do (a --subset
    # keeps all 360 tasks of this corpus, with 8,000 pairs fitted for each), one skill plot
    with evaluating_only(every_tenth_task_id(path)):
        done = run_cli("evaluate", str(path), "--models", "naive,tuned-linear", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert "tuned-linear" in done.stdout and (out / "leaderboard.md").is_file()
    help_text = run_cli("evaluate", "--help").stdout
    assert "tuned-linear" in "".join(help_text.split())  # argparse may wrap at the hyphen


def test_forecasts_are_validated():
    with pytest.raises(ValueError, match="needs a point forecast or quantiles"):
        Forecast()
    with pytest.raises(ValueError, match="non-finite"):
        Forecast(point=np.array([1.0, np.nan]))
    with pytest.raises(ValueError, match="9 columns"):
        Forecast(quantiles=np.zeros((3, 2)))


def test_every_baseline_is_constructible_by_name():
    from whatif_bench.evaluation.cli import BASELINE_NAMES, load_model

    assert BASELINE_NAMES == tuple(BASELINES)  # what `whatif evaluate --help` lists
    assert {"linear", "tuned-linear", "tuned-ridge", "tuned-xgboost"} <= set(BASELINES)
    for name in BASELINES:
        assert make_forecaster(name).name == name
        assert load_model(name) == name
    with pytest.raises(ValueError, match="unknown model 'prophet'"):
        make_forecaster("prophet")


def test_the_help_lists_every_foundation_adapter():
    from whatif_bench.evaluation.cli import ADAPTER_NAMES
    from whatif_bench.evaluation.foundation import ADAPTERS

    assert ADAPTER_NAMES == tuple(ADAPTERS)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("prophet", r"unknown model 'prophet'.*chronos2\[:MODEL\], timesfm\[:MODEL\]"),
        ("chronos2:", "give chronos2:MODEL or just chronos2"),
        ("timesfm:", "give timesfm:MODEL or just timesfm"),
        ("llm:", "give llm:RESPONSES_DIR"),
        ("chronos3:x", "model 'chronos3:x'"),  # read as module:Class, which is not there
    ],
)
def test_a_bad_model_name_says_what_is_valid(spec, message):
    from whatif_bench.evaluation.cli import load_model

    with pytest.raises(ModelError, match=message):
        load_model(spec, timeout=None)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"device": "gpu"}, "device must be one of cpu, cuda, mps"),
        ({"batch_size": 0}, "batch_size must be a whole number >= 1"),
        ({"batch_size": True}, "batch_size must be a whole number >= 1"),
        ({"seed": -1}, "seed must be a whole number >= 0"),
    ],
)
def test_foundation_model_options_are_checked_before_anything_loads(options, message):
    from whatif_bench.evaluation.foundation.common import FoundationForecaster

    with pytest.raises(ModelError, match=message):
        FoundationForecaster("some/model", **options)


def test_an_unknown_foundation_model_lists_the_adapters():
    from whatif_bench.evaluation.foundation import foundation_model

    with pytest.raises(ModelError, match=r"adapters: \['chronos2', 'timesfm', 'tabpfn-ts'\]"):
        foundation_model("moirai")


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


def _named(task: TaskInput, *names: str) -> TaskInput:
    """``task`` with its covariates named ``names``."""
    import dataclasses

    return dataclasses.replace(task, covariate_names=names)


def test_dict_model_calls_once_per_horizon_and_covariate_schema(rng):
    from whatif_bench.evaluation.adapters import from_dict_model

    calls = []

    def model(inputs):  # refuses a call of two schemas, as Chronos-2 does
        schemas = {(tuple(e["past_covariates"]), e["target"].size) for e in inputs}
        horizons = {len(v) for e in inputs for v in e["future_covariates"].values()}
        assert len({s for s, _ in schemas}) == 1 and len(horizons) == 1, (schemas, horizons)
        calls.append((next(iter(schemas))[0], horizons.pop(), len(inputs)))
        return [np.zeros(len(next(iter(e["future_covariates"].values())))) for e in inputs]

    a, _ = linear_task(rng, horizon=10)
    b, _ = linear_task(rng, horizon=20)
    one = TaskInput(a.history_target, a.history_covariates[:1], a.future_covariates[:1])
    batch = [a, _named(a, "x", "y"), one, b, a, _named(a, "y", "x")]
    forecasts = from_dict_model(model, name="schemas").predict(batch)
    assert [f.point.shape for f in forecasts] == [(10,), (10,), (10,), (20,), (10,), (10,)]
    assert calls == [
        (("covariate_1", "covariate_2"), 10, 2),
        (("x", "y"), 10, 1),
        (("covariate_1",), 10, 1),
        (("covariate_1", "covariate_2"), 20, 1),
        (("y", "x"), 10, 1),
    ]


LEVELS_13 = (0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99)


@pytest.mark.parametrize(
    ("layout", "levels"),
    [
        ("h9", None),  # the toolkit's (H, 9)
        ("1h9", None),  # (1, H, 9)
        ("19h", None),  # Chronos-2 predict's (1, Q, H) with the nine levels
        ("1qh", LEVELS_13),  # Chronos-2 predict's (1, Q, H) at the model's 13 levels
        ("hq", LEVELS_13),  # (H, Q)
        ("1hq", LEVELS_13),  # (1, H, Q), as predict_quantiles
    ],
)
def test_dict_model_reads_every_quantile_layout(rng, layout, levels):
    from whatif_bench.evaluation.adapters import from_dict_model
    from whatif_bench.evaluation.metrics import QUANTILE_LEVELS

    task, _ = linear_task(rng, horizon=12)
    grid = np.asarray(levels or QUANTILE_LEVELS)
    table = 100.0 + np.arange(12)[:, None] + 10.0 * grid[None, :]  # (H, Q): value = f(step, level)
    shaped = {"h9": table, "hq": table, "1h9": table[None], "1hq": table[None]}.get(
        layout, table.T[None]
    )
    (forecast,) = from_dict_model(
        lambda inputs: [shaped], name="layouts", quantile_levels=levels
    ).predict([task])
    expected = 100.0 + np.arange(12)[:, None] + 10.0 * np.asarray(QUANTILE_LEVELS)[None, :]
    np.testing.assert_allclose(forecast.quantiles, expected, rtol=0, atol=1e-12)


def test_dict_model_point_forecasts_and_the_ambiguous_square_output(rng):
    from whatif_bench.evaluation.adapters import from_dict_model

    task, _ = linear_task(rng, horizon=9)
    for point in (np.arange(9.0), np.arange(9.0)[None]):
        (forecast,) = from_dict_model(lambda inputs, p=point: [p], name="p").predict([task])
        np.testing.assert_array_equal(forecast.point, np.arange(9.0))
    square = np.arange(81.0).reshape(1, 9, 9)  # H = Q = 9: both layouts fit
    (plain,) = from_dict_model(lambda inputs: [square], name="s").predict([task])
    np.testing.assert_array_equal(plain.quantiles, square[0])  # (1, H, 9), as before
    levels = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
    (declared,) = from_dict_model(
        lambda inputs: [square], name="s", quantile_levels=levels
    ).predict([task])
    np.testing.assert_array_equal(declared.quantiles, square[0].T)  # (1, Q, H), as predict


@pytest.mark.parametrize(
    ("output", "levels", "message"),
    [
        (np.zeros((1, 13, 12)), None, r"\(1, 13, 12\).*pass quantile_levels="),
        (np.zeros((12, 13)), None, r"\(12, 13\).*pass quantile_levels="),
        (np.zeros((1, 13, 12)), (0.1, 0.5, 0.9), r"expected quantiles \(12, 3\) or \(1, 3, 12\)"),
        (np.zeros((2, 9, 12)), None, r"returned shape \(2, 9, 12\)"),
        (np.zeros(11), None, r"returned shape \(11,\)"),
    ],
)
def test_dict_model_outputs_that_do_not_fit_are_clear(rng, output, levels, message):
    from whatif_bench.evaluation.adapters import from_dict_model

    task, _ = linear_task(rng, horizon=12)
    model = from_dict_model(lambda inputs: [output], name="bad", quantile_levels=levels)
    with pytest.raises(ValueError, match=message):
        model.predict([task])


@pytest.mark.parametrize(
    "levels", [(), (0.5, 0.1), (0.0, 0.5), (0.5, 1.0), (0.2, 0.2), ("a",), 0.5, (float("nan"),)]
)
def test_dict_model_bad_quantile_levels_are_model_errors(levels):
    from whatif_bench.evaluation.adapters import from_dict_model
    from whatif_bench.evaluation.forecasters import ModelError

    with pytest.raises(ModelError, match="quantile_levels must be strictly increasing"):
        from_dict_model(lambda inputs: [], name="bad", quantile_levels=levels)


def test_dict_model_runs_the_real_chronos2_predict_on_a_mixed_schema_batch(rng):
    pytest.importorskip("chronos")
    from tests.test_foundation_chronos2 import tiny_pipeline
    from whatif_bench.evaluation.adapters import dict_entry, from_dict_model

    pipeline = tiny_pipeline()
    a, _ = linear_task(rng, context=300, horizon=24)
    b, _ = linear_task(rng, context=280, horizon=24)
    one = TaskInput(b.history_target, b.history_covariates[:1], b.future_covariates[:1])
    batch = [a, one, b, _named(a, "flow", "head")]
    with pytest.raises(ValueError, match="Heterogeneous lists are not supported"):
        pipeline.predict([dict_entry(t) for t in batch], prediction_length=24)
    model = from_dict_model(pipeline.predict, name="chronos2", quantile_levels=pipeline.quantiles)
    forecasts = model.predict(batch)
    assert model.params()["quantile_levels"] == list(pipeline.quantiles)
    assert [f.quantiles.shape for f in forecasts] == [(24, 9)] * 4
    for task, forecast in zip(batch, forecasts, strict=True):
        (alone,) = pipeline.predict([dict_entry(task)], prediction_length=24)  # (1, 13, 24)
        expected = np.sort(alone[0].numpy().astype(np.float64), axis=0)[2:11].T
        scale = np.abs(expected).max()
        np.testing.assert_allclose(forecast.quantiles, expected, rtol=1e-5, atol=1e-6 * scale)


def test_a_missing_library_says_which_extra_to_install():
    from whatif_bench.evaluation.foundation.common import FoundationForecaster

    class Absent(FoundationForecaster):
        adapter, package, extra = "absent", "no-such-distribution-anywhere", "absent"
        install_note = "a note"

    with pytest.raises(
        ModelError,
        match=r"absent needs no-such-distribution-anywhere, which is not installed; install it "
        r"with: pip install 'whatif-bench\[absent\]' \(a note\)",
    ):
        Absent("some/model")


def test_the_cli_names_the_extra_of_a_foundation_model_not_installed_here():
    import importlib.util

    from whatif_bench.evaluation.cli import load_model

    if importlib.util.find_spec("tabpfn_time_series") is not None:
        pytest.skip("tabpfn-time-series is installed in this environment")
    with pytest.raises(ModelError, match=r"pip install 'whatif-bench\[tabpfn\]'.*pandas < 3"):
        load_model("tabpfn-ts", timeout=None)
