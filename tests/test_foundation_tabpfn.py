"""The TabPFN-TS adapter with the real ``tabpfn-time-series`` and ``tabpfn`` libraries (local
mode), on a tiny random TabPFN v2 regressor built here from TabPFN's own architecture classes
and written in TabPFN's checkpoint layout (nothing is downloaded), and the corpus's own tasks
(mixed covariate schemas, two horizons). Runs in .venv-export (pandas < 3)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytestmark = pytest.mark.gluonts

tabpfn_time_series = pytest.importorskip("tabpfn_time_series")
torch = pytest.importorskip("torch")

from tabpfn.architectures import tabpfn_v2  # noqa: E402
from tabpfn.architectures.shared.bar_distribution import FullSupportBarDistribution  # noqa: E402
from tabpfn.model_loading import load_model  # noqa: E402

from whatif_bench.evaluation.forecasters import ModelError, TaskInput  # noqa: E402
from whatif_bench.evaluation.foundation import ADAPTERS, foundation_model  # noqa: E402
from whatif_bench.evaluation.foundation.common import covariate_names  # noqa: E402
from whatif_bench.evaluation.foundation.tabpfn_ts import (  # noqa: E402
    DEFAULT_CHECKPOINT,
    TabPFNTSForecaster,
)
from whatif_bench.evaluation.metrics import QUANTILE_LEVELS  # noqa: E402
from whatif_bench.generator import Corpus  # noqa: E402

CONTEXT = 256  # max_context_length in these tests: every corpus history is longer
OPTIONS = {"max_context_length": CONTEXT, "n_estimators": 2}


def write_tiny_checkpoint(path: Path, seed: int = 0) -> Path:
    """A random TabPFN v2 regressor (``tabpfn_v2.TabPFNV2``, 16-wide, one layer, 50 output
    bins; every weight drawn from N(0, 0.3²), as the architecture's own initialisation zeroes
    the blocks' output projections and so would make a model blind to its features) saved as TabPFN's loader reads a v2 checkpoint: the architecture's configuration, its
    state and the bar distribution's state under ``criterion.``."""
    torch.manual_seed(seed)
    config, _ = tabpfn_v2.parse_config(
        {"emsize": 16, "nlayers": 1, "nhead": 2, "num_buckets": 50, "max_num_classes": 0}
    )
    model = tabpfn_v2.get_architecture(config)
    with torch.no_grad():  # the architecture zero-initialises each block's output projection
        for parameter in model.parameters():  # (a fresh model ignores the features): redraw all
            parameter.normal_(0.0, 0.3)
    criterion = FullSupportBarDistribution(torch.linspace(-4.0, 4.0, 51), ignore_nan_targets=True)
    state = {**model.state_dict()}
    state.update({f"criterion.{key}": value for key, value in criterion.state_dict().items()})
    checkpoint = {
        "state_dict": state,
        "config": dataclasses.asdict(config),
        "architecture_name": "tabpfn_v2",
    }
    torch.save(checkpoint, path)
    return path


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    return write_tiny_checkpoint(tmp_path_factory.mktemp("tiny-tabpfn") / "tiny-regressor.ckpt")


@pytest.fixture(scope="module")
def model(checkpoint) -> TabPFNTSForecaster:
    return TabPFNTSForecaster(str(checkpoint), **OPTIONS)


def varies_in_kept_history(task: TaskInput) -> bool:
    """Whether every covariate moves within the last ``CONTEXT`` history steps (the rows
    TabPFN sees here: a covariate constant there is a constant column, which TabPFN drops)."""
    return bool((task.history_covariates[:, -CONTEXT:].std(axis=1) > 0).all())


@pytest.fixture(scope="module")
def corpus_inputs(one_target_corpus) -> tuple[pd.DataFrame, dict[str, TaskInput]]:
    with Corpus(one_target_corpus) as corpus:
        frame = corpus.tasks_frame()
        inputs = corpus.task_inputs(frame["task_id"].tolist())
    return frame, {task.task_id: task for task in inputs}


@pytest.fixture(scope="module")
def tasks(corpus_inputs) -> list[TaskInput]:
    """Seven corpus tasks whose covariates move in the kept history: one of each K (1 … 5) at
    the shortest horizon and two at a second horizon, in an order that mixes the schemas."""
    frame, inputs = corpus_inputs
    frame = frame[[varies_in_kept_history(inputs[i]) for i in frame["task_id"]]]
    short = frame[frame["prediction"] == frame["prediction"].min()]
    chosen = short.groupby("k").head(1).sort_values("task_id")["task_id"].tolist()
    other = frame[frame["prediction"] == sorted(frame["prediction"].unique())[1]]
    chosen += other["task_id"].head(2).tolist()
    return [inputs[i] for i in chosen]


@pytest.fixture(scope="module")
def forecasts(model, tasks):
    return model.predict(tasks)


def test_the_tiny_checkpoint_loads_through_tabpfns_own_loader(checkpoint):
    loaded, criterion, config, _ = load_model(path=checkpoint, estimator_type="regressor")
    assert isinstance(loaded, tabpfn_v2.TabPFNV2)
    assert isinstance(criterion, FullSupportBarDistribution)
    assert (config.emsize, config.nlayers, config.num_buckets) == (16, 1, 50)


def test_the_default_model_is_what_the_librarys_local_mode_loads():
    from tabpfn_time_series.defaults import resolve_default_model_path

    loaded_by_default = resolve_default_model_path({}, client=False)["model_path"]
    assert Path(loaded_by_default).name == DEFAULT_CHECKPOINT
    assert ADAPTERS["tabpfn-ts"].default_model == DEFAULT_CHECKPOINT


def test_every_task_of_a_mixed_schema_batch_gets_nine_monotone_quantiles(tasks, forecasts):
    assert len({(t.prediction_length, covariate_names(t)) for t in tasks}) >= 6
    assert len(forecasts) == len(tasks)
    for task, forecast in zip(tasks, forecasts, strict=True):
        assert forecast.point is None
        assert forecast.quantiles.shape == (task.prediction_length, len(QUANTILE_LEVELS))
        assert np.isfinite(forecast.quantiles).all()
        assert (np.diff(forecast.quantiles, axis=1) >= 0).all()


def test_the_frames_carry_target_and_covariates_with_their_times(model, tasks):
    task = tasks[-1]
    context, future = model.frames([task])
    k = task.history_covariates.shape[0]
    columns = [f"covariate_{i}" for i in range(1, k + 1)]
    assert list(context.columns) == ["target", *columns]
    assert list(future.columns) == columns
    history = context.loc["task-0"]
    np.testing.assert_array_equal(history["target"].to_numpy(), task.history_target)
    np.testing.assert_array_equal(history[columns].to_numpy().T, task.history_covariates)
    np.testing.assert_array_equal(future.loc["task-0"].to_numpy().T, task.future_covariates)
    times = task.timestamps()
    assert history.index.equals(times[: task.context_length])
    assert future.loc["task-0"].index.equals(times[task.context_length :])


def test_the_librarys_features_keep_the_future_covariates_beside_the_calendar(model, tasks):
    """Through the library's own featurisation (the pipeline's ``featurize``): the test rows
    hold the future covariates as given, next to the generated time features."""
    task = tasks[-1]
    pipeline = model.loaded()
    train, test = pipeline.featurize(*model.frames([task]))
    k = task.history_covariates.shape[0]
    columns = [f"covariate_{i}" for i in range(1, k + 1)]
    assert {"running_index", "hour_of_day_sin", "day_of_week_cos"} <= set(test.columns)
    assert len(train) == CONTEXT and len(test) == task.prediction_length
    np.testing.assert_array_equal(test[columns].to_numpy().T, task.future_covariates)
    np.testing.assert_array_equal(
        train[columns].to_numpy().T, task.history_covariates[:, -CONTEXT:]
    )


def test_a_future_covariate_reaches_the_model(model, tasks, forecasts):
    task = tasks[0]
    changed = dataclasses.replace(
        task, future_covariates=task.future_covariates + 10 * task.history_covariates.std()
    )
    (moved,) = model.predict([changed])
    assert not np.allclose(moved.quantiles, forecasts[0].quantiles)


def test_a_covariate_constant_over_the_kept_history_does_not_move_the_forecast(
    model, corpus_inputs
):
    """TabPFN drops constant feature columns: a what-if covariate that does not move within
    the rows it sees (here the last ``CONTEXT`` steps) has no effect, however far its future
    goes (docs/MODELS.md: keep the context long)."""
    _, inputs = corpus_inputs
    task = next(t for t in inputs.values() if not varies_in_kept_history(t))
    flat = task.history_covariates[:, -CONTEXT:].std(axis=1) == 0
    future = task.future_covariates.copy()
    future[flat] += 10 * (1 + np.abs(future[flat]).max())
    first, second = model.predict([task, dataclasses.replace(task, future_covariates=future)])
    np.testing.assert_array_equal(first.quantiles, second.quantiles)


def test_a_covariate_named_like_a_time_feature_does_not_replace_it(model, tasks, forecasts):
    task = tasks[0]
    renamed = dataclasses.replace(task, covariate_names=("year",) * len(task.covariate_names))
    (forecast,) = model.predict([renamed])
    np.testing.assert_array_equal(forecast.quantiles, forecasts[0].quantiles)


def test_same_seed_same_forecasts_whatever_the_order_and_chunking(checkpoint, tasks, forecasts):
    again = TabPFNTSForecaster(str(checkpoint), batch_size=2, **OPTIONS)
    reordered = again.predict(tasks[::-1])[::-1]
    for first, second in zip(forecasts, reordered, strict=True):
        np.testing.assert_array_equal(first.quantiles, second.quantiles)


def test_another_seed_changes_the_forecasts(checkpoint, tasks, forecasts):
    other = TabPFNTSForecaster(str(checkpoint), seed=1, **OPTIONS)
    (forecast,) = other.predict(tasks[:1])
    assert not np.array_equal(forecast.quantiles, forecasts[0].quantiles)


def test_the_fingerprint_names_the_checkpoint_by_its_bytes(checkpoint, tmp_path):
    params = foundation_model("tabpfn-ts", str(checkpoint), **OPTIONS).params()
    assert params["adapter"] == "tabpfn-ts" and params["model"] == str(checkpoint)
    assert params["library_version"] == tabpfn_time_series.__version__
    assert params["tabpfn_version"] is not None
    assert (params["max_context_length"], params["n_estimators"]) == (CONTEXT, 2)
    other = write_tiny_checkpoint(tmp_path / "other-regressor.ckpt", seed=1)
    other_params = foundation_model("tabpfn-ts", str(other), **OPTIONS).params()
    assert other_params["checkpoint_sha256"] != params["checkpoint_sha256"]


def test_a_missing_checkpoint_is_a_model_error_and_nothing_is_downloaded(tmp_path, tasks):
    absent = tmp_path / "absent-regressor.ckpt"
    with pytest.raises(ModelError, match="never downloads") as caught:
        foundation_model("tabpfn-ts", str(absent)).predict(tasks[:1])
    assert str(absent) in str(caught.value)
    assert list(tmp_path.iterdir()) == []  # no download lock, no partial file


def test_a_task_without_a_time_axis_fails_with_the_reason(model):
    from whatif_bench.evaluation.forecasters import NoForecast

    bare = TaskInput(np.arange(300.0), np.ones((1, 300)), np.ones((1, 8)))
    (forecast,) = model.predict([bare])
    assert isinstance(forecast, NoForecast)  # the call fails, not the batch (common.predict)
    assert "ModelError: " in forecast.reason and "start time and step" in forecast.reason


def test_telemetry_is_switched_off_unless_the_environment_says_otherwise(checkpoint, monkeypatch):
    monkeypatch.delenv("TABPFN_DISABLE_TELEMETRY", raising=False)
    TabPFNTSForecaster(str(checkpoint), **OPTIONS).loaded()
    assert os.environ["TABPFN_DISABLE_TELEMETRY"] == "1"
    monkeypatch.setenv("TABPFN_DISABLE_TELEMETRY", "0")
    TabPFNTSForecaster(str(checkpoint), **OPTIONS).loaded()
    assert os.environ["TABPFN_DISABLE_TELEMETRY"] == "0"


@pytest.mark.parametrize(
    ("model", "options", "message"),
    [
        (3, {}, "model must be a TabPFN checkpoint"),
        ("", {}, "model must be a TabPFN checkpoint"),
        ("x.ckpt", {"n_estimators": 0}, "n_estimators must be"),
        ("x.ckpt", {"n_estimators": True}, "n_estimators must be"),
        ("x.ckpt", {"max_context_length": -1}, "max_context_length must be"),
        ("x.ckpt", {"max_context_length": 2.5}, "max_context_length must be"),
        ("x.ckpt", {"device": "tpu"}, "device must be"),
        ("x.ckpt", {"batch_size": 0}, "batch_size must be"),
    ],
)
def test_bad_arguments_are_model_errors(model, options, message):
    with pytest.raises(ModelError, match=message):
        TabPFNTSForecaster(model, **options)


def test_the_forecasts_are_the_pipelines_own_quantile_columns(model, tasks, forecasts):
    """The adapter adds nothing to the library's answer: its nine columns, in order."""
    task = tasks[1]
    predicted = model.loaded().predict(*model.frames([task]), quantiles=list(QUANTILE_LEVELS))
    expected = predicted.loc["task-0"][list(QUANTILE_LEVELS)].to_numpy(dtype=np.float64)
    np.testing.assert_array_equal(forecasts[1].quantiles, np.sort(expected, axis=1))
    assert isinstance(predicted, pd.DataFrame)
