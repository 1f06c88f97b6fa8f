"""The Chronos-2 adapter with the real ``chronos-forecasting`` library, on tiny random models
built here (nothing is downloaded), and the corpus's own tasks (mixed covariate schemas,
histories longer than the tiny model's context)."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.conftest import run_main
from tests.lazy_modules import importorskip_lazily

chronos2 = importorskip_lazily("chronos.chronos2")
torch = importorskip_lazily("torch")

from whatif_bench.evaluation.adapters import dict_entry, from_dict_model  # noqa: E402
from whatif_bench.evaluation.forecasters import ModelError, TaskInput  # noqa: E402
from whatif_bench.evaluation.foundation import foundation_model  # noqa: E402
from whatif_bench.evaluation.foundation.chronos2 import Chronos2Forecaster  # noqa: E402
from whatif_bench.evaluation.foundation.common import covariate_names  # noqa: E402
from whatif_bench.generator import Corpus  # noqa: E402

# the reports draw one skill plot, not five (tests/conftest.py): not what these tests check
pytestmark = pytest.mark.usefixtures("one_skill_plot_in_module")

TINY_CONTEXT = 512  # the tiny model's context_length: every corpus history is longer
MODEL_LEVELS = [0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99]


def tiny_pipeline(seed: int = 0):
    """A random Chronos-2 of 37,664 parameters (its real classes), in evaluation mode."""
    torch.manual_seed(seed)
    config = chronos2.Chronos2CoreConfig(
        d_model=32,
        d_kv=8,
        d_ff=64,
        num_layers=1,
        num_heads=2,
        chronos_config={
            "context_length": TINY_CONTEXT,
            "input_patch_size": 16,
            "input_patch_stride": 16,
            "output_patch_size": 16,
            "max_output_patches": 64,
            "use_reg_token": True,
            "use_arcsinh": True,
            "quantiles": MODEL_LEVELS,
        },
    )
    return chronos2.Chronos2Pipeline(chronos2.Chronos2Model(config).eval())


@pytest.fixture(scope="module")
def pipeline():
    return tiny_pipeline()


@pytest.fixture(scope="module")
def tasks(one_target_corpus) -> list[TaskInput]:
    """Twelve corpus tasks: two of each K (1 … 5) at the shortest horizon, and two at a
    second horizon, in an order that mixes the schemas."""
    with Corpus(one_target_corpus) as corpus:
        frame = corpus.tasks_frame()
        short = frame[frame["prediction"] == frame["prediction"].min()]
        chosen = short.groupby("k").head(2).sort_values("task_id")["task_id"].tolist()
        other = frame[frame["prediction"] == sorted(frame["prediction"].unique())[1]]
        chosen += other["task_id"].head(2).tolist()
        return corpus.task_inputs(chosen)


@pytest.fixture(scope="module")
def saved(pipeline, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("tiny-chronos2") / "model"
    pipeline.save_pretrained(folder)
    return folder


def quantiles(forecasts) -> list[np.ndarray]:
    return [forecast.quantiles for forecast in forecasts]


def test_every_task_of_a_mixed_schema_batch_is_forecast_one_schema_per_call(pipeline, tasks):
    assert len({len(covariate_names(t)) for t in tasks}) == 5  # K from 1 to 5 in one batch
    assert len({t.prediction_length for t in tasks}) == 2
    with pytest.raises(ValueError, match="Heterogeneous lists are not supported"):
        shortest = min(t.prediction_length for t in tasks)  # the library itself refuses a mix
        mixed = [dict_entry(t) for t in tasks if t.prediction_length == shortest]
        pipeline.predict(mixed, prediction_length=shortest)
    calls = []
    real = pipeline.predict

    def spy(inputs, **options):
        calls.append(
            {(tuple(e["past_covariates"]), len(next(iter(e["future_covariates"].values()))))}
            for e in inputs
        )
        return real(inputs, **options)

    model = Chronos2Forecaster(pipeline)
    pipeline.predict = spy
    try:
        forecasts = model.predict(tasks)
    finally:
        del pipeline.predict
    assert len(forecasts) == len(tasks)
    for task, forecast in zip(tasks, forecasts, strict=True):
        assert forecast.point is None and forecast.quantiles.shape == (task.prediction_length, 9)
        assert np.all(np.isfinite(forecast.quantiles))
        assert np.all(np.diff(forecast.quantiles, axis=1) >= 0)  # monotone in the level
    schemas = [set().union(*call) for call in calls]
    assert all(len(schema) == 1 for schema in schemas)  # one schema and horizon per call
    assert len(schemas) == len({(covariate_names(t), t.prediction_length) for t in tasks})


def test_the_nine_levels_are_the_models_own_at_those_levels(pipeline, tasks):
    group = [t for t in tasks if t.history_covariates.shape[0] == 2]
    ours = quantiles(Chronos2Forecaster(pipeline).predict(group))
    raw = pipeline.predict(
        [dict_entry(t) for t in group], prediction_length=group[0].prediction_length
    )
    picked = [MODEL_LEVELS.index(level) for level in (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)]
    for mine, theirs in zip(ours, raw, strict=True):
        # all the model's levels sorted (a random model crosses them everywhere), then the nine
        expected = np.sort(theirs[0].numpy().astype(np.float64), axis=0)[picked].T
        np.testing.assert_array_equal(mine, expected)
        assert not np.array_equal(mine, theirs[0].numpy()[picked].T)  # the sorting mattered


def test_a_future_covariate_reaches_the_model(pipeline, tasks):
    task = next(t for t in tasks if t.history_covariates.shape[0] == 3)
    future = task.future_covariates.copy()
    future[1, 0] += 10.0 * (np.abs(future[1]).max() + 1.0)  # one value of one covariate
    moved = dataclasses.replace(task, future_covariates=future)
    same = dataclasses.replace(task, future_covariates=task.future_covariates.copy())
    model = Chronos2Forecaster(pipeline)
    (before,), (again,), (after,) = (model.predict([t]) for t in (task, same, moved))
    np.testing.assert_array_equal(before.quantiles, again.quantiles)
    # far beyond float32 rounding (about 1e-8 of the scale, see the chunking test)
    assert np.abs(after.quantiles - before.quantiles).max() > 1e-5 * np.abs(before.quantiles).max()


def test_same_seed_same_forecasts_and_the_chunking_changes_only_float32_rounding(pipeline, tasks):
    first = quantiles(Chronos2Forecaster(pipeline, seed=3).predict(tasks))
    second = quantiles(Chronos2Forecaster(pipeline, seed=3).predict(tasks))
    for a, b in zip(first, second, strict=True):
        np.testing.assert_array_equal(a, b)
    half = len(tasks) // 2
    split = quantiles(Chronos2Forecaster(pipeline, seed=3).predict(tasks[half:]))
    split = quantiles(Chronos2Forecaster(pipeline, seed=3).predict(tasks[:half])) + split
    small = quantiles(Chronos2Forecaster(pipeline, seed=3, batch_size=1).predict(tasks[::-1]))
    for whole, parts, one in zip(first, split, small[::-1], strict=True):
        scale = np.abs(whole).max()
        np.testing.assert_allclose(parts, whole, rtol=1e-5, atol=1e-6 * scale)
        np.testing.assert_allclose(one, whole, rtol=1e-5, atol=1e-6 * scale)


def test_a_history_longer_than_the_context_is_cut_to_its_last_steps(pipeline, tasks):
    task = tasks[0]
    assert task.context_length > TINY_CONTEXT
    cut = dataclasses.replace(
        task,
        history_target=task.history_target[-TINY_CONTEXT:],
        history_covariates=task.history_covariates[:, -TINY_CONTEXT:],
    )
    model = Chronos2Forecaster(pipeline)
    (whole,), (last,) = model.predict([task]), model.predict([cut])
    np.testing.assert_array_equal(whole.quantiles, last.quantiles)


def test_the_adapter_matches_the_pipelines_predict_through_from_dict_model(pipeline, tasks):
    ours = quantiles(Chronos2Forecaster(pipeline).predict(tasks))
    model = from_dict_model(pipeline.predict, name="c2", quantile_levels=pipeline.quantiles)
    for a, b in zip(ours, quantiles(model.predict(tasks)), strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_saved_tiny_model_loads_by_folder_path(pipeline, saved, tasks):
    model = foundation_model("chronos2", str(saved), batch_size=8, name="tiny")
    assert isinstance(model, Chronos2Forecaster) and model.name == "tiny"
    loaded = quantiles(model.predict(tasks))
    direct = quantiles(Chronos2Forecaster(pipeline, batch_size=8).predict(tasks))
    for a, b in zip(loaded, direct, strict=True):
        np.testing.assert_array_equal(a, b)
    params = model.params()
    assert params["model"] == str(saved) and params["adapter"] == "chronos2"
    assert params["library"] == "chronos-forecasting"
    assert params["library_version"] == importlib.metadata.version("chronos-forecasting")
    assert params["batch_size"] == 8 and len(params["checkpoint_sha256"]) == 64
    json.dumps(params)  # the fingerprint is JSON


def test_model_objects_are_told_apart_by_their_weights(pipeline):
    other = tiny_pipeline(seed=1)
    label, same, changed = (
        Chronos2Forecaster(p).params()["model"] for p in (pipeline, pipeline, other)
    )
    assert label == same and label != changed
    assert "@config-sha256:" in label and "@weights-sha256:" in label
    bare = Chronos2Forecaster(pipeline.model).params()["model"]  # a Chronos2Model, wrapped
    assert bare.startswith("chronos.chronos2.model.Chronos2Model@")
    assert len(Chronos2Forecaster(pipeline.model).predict([_ramp_task()])) == 1


def _ramp_task() -> TaskInput:
    steps = np.arange(200, dtype=np.float64)
    return TaskInput(steps, np.stack([np.sin(steps / 7)]), np.sin(np.arange(200, 216) / 7)[None])


@pytest.mark.parametrize(
    ("model", "options", "message"),
    [
        (42, {}, "model must be a Hugging Face id, a local folder"),
        ("", {}, "model must be a Hugging Face id or a local folder"),
        ("amazon/chronos-2", {"device": "gpu"}, "device must be one of cpu, cuda, mps"),
        ("amazon/chronos-2", {"batch_size": 0}, "batch_size must be a whole number >= 1"),
        ("amazon/chronos-2", {"seed": -1}, "seed must be a whole number >= 0"),
    ],
)
def test_bad_arguments_are_model_errors(model, options, message):
    with pytest.raises(ModelError, match=message):
        Chronos2Forecaster(model, **options)


def test_a_missing_or_foreign_folder_is_a_model_error_when_it_loads(tmp_path):
    missing = foundation_model("chronos2", str(tmp_path / "nowhere"))
    with pytest.raises(ModelError, match="is not a folder"):
        missing.predict([_ramp_task()])
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "config.json").write_text(json.dumps({"model_type": "t5", "d_model": 8}))
    with pytest.raises(ModelError, match="cannot load .*foreign.* with Chronos2Pipeline"):
        foundation_model("chronos2", str(foreign)).predict([_ramp_task()])


@pytest.mark.slow  # about 6 s
def test_whatif_evaluate_scores_every_task_with_a_saved_chronos2(
    capsys, one_target_corpus, saved, tmp_path
):
    # --jobs 1 scores in this process, which has run torch already (the tests above): the
    # children it forks to run the batches must not hang in torch's thread pool
    # (FoundationForecaster._fork_safe_threads). (Two worker processes would each import torch
    # and the library first: about 20 s more here.)
    out = tmp_path / "out"
    code, stdout, _ = run_main(
        capsys,
        "evaluate",
        str(one_target_corpus),
        "--models",
        f"naive,chronos2:{saved}",
        "--jobs",
        "1",
        "--model-timeout",
        "120",
        "--out",
        str(out),
    )
    assert code == 0, stdout
    frame = pd.read_parquet(out / "per_task.parquet")
    rows = frame[frame["model"] == "chronos2"]
    with Corpus(one_target_corpus) as corpus:
        assert sorted(rows["task_id"]) == sorted(corpus.task_ids())  # all 360, each once
    assert (rows["failed"] == "").all() and rows["wql"].notna().all()
    assert set(rows["k"]) == {1, 2, 3, 4, 5}


class CountingChronos2(Chronos2Forecaster):
    """The adapter, counting how often this process loads its checkpoint."""

    loads = 0

    def _load(self):
        type(self).loads += 1
        return super()._load()


@pytest.mark.slow  # about 1 s
def test_evaluate_loads_the_checkpoint_once_not_once_per_batch(one_target_corpus, saved, tmp_path):
    from whatif_bench.evaluation import evaluate

    model = CountingChronos2(str(saved), name="chronos2")
    result = evaluate(one_target_corpus, ["naive", model], tmp_path / "out", model_timeout=120)
    rows = result.per_task[result.per_task["model"] == "chronos2"]
    assert len(rows) == 360 and (rows["failed"] == "").all()  # two batches of the runner
    assert CountingChronos2.loads == 1  # in this process, before the first batch was forked


def test_a_checkpoint_that_does_not_load_fails_only_that_models_tasks(one_target_corpus, tmp_path):
    from whatif_bench.evaluation import evaluate

    model = foundation_model("chronos2", str(tmp_path / "no-such-model"))
    result = evaluate(one_target_corpus, ["naive", model], tmp_path / "out", model_timeout=120)
    frame = result.per_task
    assert (frame.loc[frame["model"] == "naive", "failed"] == "").all()
    reasons = frame.loc[frame["model"] == "chronos2", "failed"]
    assert len(reasons) == 360
    assert reasons.str.startswith("loading the model raised ModelError").all()
    assert reasons.str.contains("no-such-model").all()
