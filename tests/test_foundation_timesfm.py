"""The TimesFM adapter on the library's real TimesFM 2.5 classes, built from a tiny random
definition (seeded weights, nothing downloaded), on tasks of the one-target corpus."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tests.lazy_modules import importorskip_lazily
from whatif_bench.evaluation.forecasters import ModelError
from whatif_bench.evaluation.foundation import ADAPTERS, foundation_model
from whatif_bench.evaluation.foundation.timesfm import TimesFMForecaster
from whatif_bench.evaluation.metrics import QUANTILE_LEVELS, score
from whatif_bench.generator import Corpus

configs = importorskip_lazily("timesfm.configs")
timesfm_2p5_base = importorskip_lazily("timesfm.timesfm_2p5.timesfm_2p5_base")
timesfm_2p5_torch = importorskip_lazily("timesfm.timesfm_2p5.timesfm_2p5_torch")
importorskip_lazily("jax")
torch = importorskip_lazily("torch")  # timesfm brings torch


def tiny_timesfm(seed: int = 0, width: int = 16) -> timesfm_2p5_torch.TimesFM_2p5_200M_torch:
    """TimesFM 2.5's torch classes with two thin layers and seeded normal weights (the
    library's own initialisation leaves its norm scales at zero)."""
    definition = dataclasses.replace(
        timesfm_2p5_base.TimesFM_2p5_200M_Definition(),
        tokenizer=configs.ResidualBlockConfig(64, width, width, True, "swish"),
        stacked_transformers=configs.StackedTransformersConfig(
            2,
            configs.TransformerConfig(
                width, width, 2, "rms", "rms", "rms", False, True, "swish", True
            ),
        ),
        output_projection_point=configs.ResidualBlockConfig(width, width, 1280, False, "swish"),
        output_projection_quantiles=configs.ResidualBlockConfig(
            width, width, 10240, False, "swish"
        ),
    )
    module_class = type(
        "TinyModule", (timesfm_2p5_torch.TimesFM_2p5_200M_torch_module,), {"config": definition}
    )
    generator = torch.Generator().manual_seed(seed)
    module = module_class()
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.1)
    # the wrapper's constructor would build the 200M module first; the tiny one stands in
    wrapper = timesfm_2p5_torch.TimesFM_2p5_200M_torch.__new__(
        timesfm_2p5_torch.TimesFM_2p5_200M_torch
    )
    wrapper.model, wrapper.torch_compile = module, False
    return wrapper


@pytest.fixture(scope="module")
def tasks(one_target_corpus):
    """Short tasks of the corpus (history 1,024 or 2,048 steps) with one to five covariates,
    and their ground truths."""
    with Corpus(one_target_corpus) as corpus:
        ids = corpus.task_ids()
        inputs = corpus.task_inputs(ids)
        chosen, seen = [], set()
        for task_id, task in zip(ids, inputs, strict=True):
            key = (task.context_length, task.history_covariates.shape[0])
            if task.context_length <= 2048 and key not in seen:
                seen.add(key)
                chosen.append(task_id)
        chosen = chosen[:6]
        return corpus.task_inputs(chosen), corpus.ground_truths(chosen)


@pytest.fixture(scope="module")
def model():
    return tiny_timesfm()


def without_covariates(task):
    return dataclasses.replace(
        task,
        history_covariates=np.zeros((0, task.context_length), dtype=np.float32),
        future_covariates=np.zeros((0, task.prediction_length), dtype=np.float32),
        covariate_names=(),
        covariate_units=(),
    )


@pytest.mark.slow  # about 2 s
def test_each_task_gets_a_point_and_nine_monotone_quantiles_that_score(tasks, model):
    inputs, truths = tasks
    assert len({t.history_covariates.shape[0] for t in inputs}) >= 3  # a mixed-K batch
    forecasts = TimesFMForecaster(model, batch_size=4).predict(inputs)
    assert len(forecasts) == len(inputs)
    for task, truth, forecast in zip(inputs, truths, forecasts, strict=True):
        assert forecast.point.shape == (task.prediction_length,)
        assert forecast.quantiles.shape == (task.prediction_length, len(QUANTILE_LEVELS))
        assert np.all(np.diff(forecast.quantiles, axis=1) >= 0)
        np.testing.assert_allclose(forecast.point, forecast.quantiles[:, 4], rtol=1e-12)
        assert np.isfinite(list(score(truth, forecast.point, forecast.quantiles).values())).all()


def test_changing_a_future_covariate_changes_the_forecast(tasks, model):
    task = tasks[0][0]
    changed = task.future_covariates.copy()
    changed[0] += 10 * (np.std(task.history_covariates[0]) + 1)
    other = dataclasses.replace(task, future_covariates=changed)
    forecaster = TimesFMForecaster(model)
    before, after = forecaster.predict([task, other])
    assert not np.allclose(before.point, after.point)
    # and the history alone does not decide it: the same task again is the same forecast
    (again,) = forecaster.predict([task])
    np.testing.assert_array_equal(again.quantiles, before.quantiles)


@pytest.mark.slow  # about 2 s
def test_forecasts_do_not_depend_on_batch_split_order_or_neighbours(tasks, model):
    inputs = list(tasks[0]) + [without_covariates(t) for t in tasks[0][:3]]
    whole = TimesFMForecaster(model, batch_size=64, seed=3).predict(inputs)
    one_by_one = TimesFMForecaster(model, batch_size=1, seed=3).predict(inputs)
    reversed_ = TimesFMForecaster(model, batch_size=2, seed=3).predict(inputs[::-1])[::-1]
    for a, b, c in zip(whole, one_by_one, reversed_, strict=True):
        np.testing.assert_allclose(a.quantiles, b.quantiles, rtol=1e-5, atol=1e-4)
        np.testing.assert_allclose(a.quantiles, c.quantiles, rtol=1e-5, atol=1e-4)


def test_the_same_seeded_model_gives_the_same_forecasts(tasks):
    first = TimesFMForecaster(tiny_timesfm(seed=1), seed=5).predict(tasks[0][:2])
    second = TimesFMForecaster(tiny_timesfm(seed=1), seed=5).predict(tasks[0][:2])
    other = TimesFMForecaster(tiny_timesfm(seed=2), seed=5).predict(tasks[0][:2])
    for a, b, c in zip(first, second, other, strict=True):
        np.testing.assert_array_equal(a.quantiles, b.quantiles)
        assert not np.allclose(a.quantiles, c.quantiles)


def test_max_context_cuts_the_history_to_its_latest_steps(tasks, model):
    task = without_covariates(tasks[0][0])
    cut = dataclasses.replace(
        task,
        history_target=task.history_target[-64:],
        history_covariates=task.history_covariates[:, -64:],
    )
    (limited,) = TimesFMForecaster(model, max_context=64).predict([task])
    (short,) = TimesFMForecaster(model).predict([cut])
    (full,) = TimesFMForecaster(model).predict([task])
    np.testing.assert_allclose(limited.quantiles, short.quantiles, rtol=1e-6)
    assert not np.allclose(limited.quantiles, full.quantiles)


def test_params_name_the_model_the_library_version_and_the_options(model):
    import importlib.metadata

    params = TimesFMForecaster(model, batch_size=8, seed=2, ridge=0.5).params()
    assert params["library"] == "timesfm"
    assert params["library_version"] == importlib.metadata.version("timesfm")
    assert params["model"].startswith("timesfm.timesfm_2p5.timesfm_2p5_torch.")
    assert (params["batch_size"], params["seed"], params["ridge"]) == (8, 2, 0.5)
    assert params != TimesFMForecaster(tiny_timesfm(seed=9)).params()
    named = foundation_model("timesfm")
    assert named.params()["model"] == ADAPTERS["timesfm"].default_model
    assert named._model is None  # nothing loaded before it predicts


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"device": "gpu"}, "device must be one of cpu, cuda, mps"),
        ({"batch_size": 0}, "batch_size must be a whole number >= 1"),
        ({"seed": -1}, "seed must be a whole number >= 0"),
        ({"max_context": 0}, "max_context must be a whole number >= 1"),
        ({"xreg_mode": "xreg"}, "xreg_mode must be one of"),
        ({"ridge": -1.0}, "ridge must be a finite number >= 0"),
        ({"ridge": float("nan")}, "ridge must be a finite number >= 0"),
    ],
)
def test_bad_options_are_model_errors(model, options, message):
    with pytest.raises(ModelError, match=message):
        TimesFMForecaster(model, **options)


def test_a_folder_without_weights_is_a_model_error_naming_it(tmp_path, tasks):
    forecaster = TimesFMForecaster(str(tmp_path))
    with pytest.raises(ModelError, match=r"cannot load .*model\.safetensors not found"):
        forecaster.predict(tasks[0][:1])


def test_an_object_of_another_library_is_a_model_error(tasks):
    with pytest.raises(ModelError, match="must be a timesfm TimesFM 2.5 torch model"):
        TimesFMForecaster(torch.nn.Linear(2, 2)).predict(tasks[0][:1])


@pytest.mark.skipif("torch.cuda.is_available()", reason="needs a machine without CUDA")
def test_a_cuda_device_without_cuda_is_a_model_error(tasks):
    with pytest.raises(ModelError, match="cannot use device 'cuda'"):
        TimesFMForecaster(tiny_timesfm(), device="cuda").predict(tasks[0][:1])


def test_a_horizon_beyond_the_models_limit_fails_that_task_with_the_reason(model):
    from whatif_bench.evaluation.forecasters import NoForecast, TaskInput

    task = TaskInput(np.ones(64), np.ones((1, 64)), np.ones((1, 16_384)))
    (forecast,) = TimesFMForecaster(model).predict([task])
    assert isinstance(forecast, NoForecast)  # the call fails, not the batch (common.predict)
    assert "ModelError: " in forecast.reason
    assert "horizon of 16384 steps is beyond TimesFM 2.5" in forecast.reason
