"""The gluonts export read back by GluonTS 0.17 itself (tests marked ``gluonts``, which run in
.venv-export under pandas 2), and the files' own promises, which need no GluonTS and so run in
the main environment too: exact values, deterministic bytes, refused outputs."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pandas as pd
import pytest

from tests.conftest import run_whatif, small_corpus
from whatif_bench.evaluation import evaluate
from whatif_bench.evaluation.forecasters import frequency_alias
from whatif_bench.evaluation.metrics import QUANTILE_LEVELS
from whatif_bench.export import export_corpus
from whatif_bench.export import gluonts as gluonts_export
from whatif_bench.generator import Corpus

# the reports draw one skill plot, not five (tests/conftest.py): not what these tests check
pytestmark = pytest.mark.usefixtures("one_skill_plot_in_module")

# a 300 s simulator and a 60 s one: two frequencies, GluonTS wants "5min" and "1min"
TARGETS = ("epanet/pressure_10", "gridlabd/air_temperature")
SUBSET = 0.3  # every stratum holds one task per target: ceil(0.3) keeps each, so all tasks


@pytest.fixture(scope="module")
def corpus_path(tmp_path_factory):
    return small_corpus(tmp_path_factory.mktemp("corpus"), TARGETS)


@pytest.fixture(scope="module")
def exported(corpus_path, tmp_path_factory):
    out = tmp_path_factory.mktemp("exp") / "gluonts"
    return export_corpus(corpus_path, "gluonts", out, futures=["novel"], progress=False)


@pytest.fixture(scope="module")
def metadata(exported):
    return json.loads((exported / gluonts_export.METADATA).read_text())


@pytest.fixture(scope="module")
def naive_scores(corpus_path, tmp_path_factory):
    """whatif evaluate's own per-task wql of the naive baseline."""
    result = evaluate(corpus_path, ["naive"], tmp_path_factory.mktemp("eval"), progress=False)
    return result.per_task.set_index("task_id")["wql"]


def _bits(values) -> np.ndarray:
    return np.asarray(values, dtype=np.float32).view(np.uint32)


def _lines(folder, group) -> list[dict]:
    with gzip.open(folder / group["file"], "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


def _tasks(corpus_path, ids):
    with Corpus(corpus_path) as corpus:
        return [corpus[i] for i in ids]


# ---- the files (no GluonTS needed) -------------------------------------------------------
@pytest.mark.slow  # about 6 s
def test_one_file_per_frequency_horizon_and_k_holding_every_task_once(
    exported, metadata, corpus_path
):
    with Corpus(corpus_path) as corpus:
        expected = sorted(corpus.filter(future="novel").task_ids())
    seen = []
    for group in metadata["groups"]:
        meta = json.loads((exported / group["metadata"]).read_text())
        assert (
            group["file"]
            == f"data/{gluonts_export.group_name(group['freq'], group['prediction_length'], group['num_feat_dynamic_real'])}.jsonl.gz"
        )
        lines = _lines(exported, group)
        assert len(lines) == group["items"] == meta["items"]
        for task, entry in zip(
            _tasks(corpus_path, [e["item_id"] for e in lines]), lines, strict=True
        ):
            assert frequency_alias(task.interval_s) == group["freq"] == meta["freq"]
            assert task.prediction_length == group["prediction_length"]
            assert task.k == group["num_feat_dynamic_real"] == len(entry["feat_dynamic_real"])
            seen.append(task.task_id)
    assert sorted(seen) == expected
    assert {g["freq"] for g in metadata["groups"]} == {"5min", "1min"}


@pytest.mark.slow  # about 2 s
def test_json_values_read_back_as_the_corpus_float32_bit_for_bit(exported, metadata, corpus_path):
    codes = metadata["feat_static_cat"]["codes"]
    for group in metadata["groups"]:
        lines = _lines(exported, group)
        for task, entry in zip(
            _tasks(corpus_path, [e["item_id"] for e in lines]), lines, strict=True
        ):
            target = np.concatenate([task.history_target, task.future_target])
            assert np.array_equal(_bits(entry["target"]), _bits(target)), task.task_id
            covariates = np.concatenate([task.history_covariates, task.future_covariates], axis=1)
            got = np.asarray(entry["feat_dynamic_real"], dtype=np.float32)
            assert got.shape == (task.k, task.context_length + task.prediction_length)
            assert np.array_equal(_bits(got), _bits(covariates)), task.task_id
            first = task.timestamps()[0]
            assert pd.Period(entry["start"], freq=group["freq"]).to_timestamp() == first
            simulator, target_code = entry["feat_static_cat"]
            assert codes["simulator"][simulator] == task.simulator
            assert codes["target"][target_code] == f"{task.simulator}/{task.target}"


@pytest.mark.slow  # its fixture exports the corpus: about 5 s
def test_metadata_names_units_codes_and_provenance(exported, metadata, corpus_path):
    with Corpus(corpus_path) as corpus:
        attrs = corpus.attrs
    assert metadata["provenance"]["baselines_hash"] == attrs["baselines_hash"]
    assert metadata["provenance"]["registry_hash"] == attrs["registry_hash"]
    assert metadata["provenance"]["master_seed"] == attrs["master_seed"]
    assert metadata["quantile_levels"] == list(QUANTILE_LEVELS)
    assert metadata["feat_static_cat"]["codes"] == {
        "simulator": ["epanet", "gridlabd"],
        "target": list(TARGETS),
    }
    group = metadata["groups"][0]
    meta = json.loads((exported / group["metadata"]).read_text())
    assert meta["feat_static_cat"] == [
        {"name": "simulator", "cardinality": 2},
        {"name": "target", "cardinality": 2},
    ]
    for name, series in meta["series"].items():
        (task,) = _tasks(corpus_path, [_lines(exported, group)[0]["item_id"]])
        if name == f"{task.simulator}/{task.target}":
            assert series["covariate_names"] == list(task.covariates)
            assert series["target_unit"] == task.units[task.target]
        assert len(series["covariate_units"]) == group["num_feat_dynamic_real"]
        assert all(series["covariate_units"])  # built from the shipped registry


@pytest.mark.slow  # about 4 s
def test_codes_do_not_depend_on_the_selection(corpus_path, metadata, tmp_path):
    out = export_corpus(
        corpus_path, "gluonts", tmp_path / "g", simulators=["gridlabd"], subset=0.1, progress=False
    )
    other = json.loads((out / gluonts_export.METADATA).read_text())
    assert other["feat_static_cat"] == metadata["feat_static_cat"]


@pytest.mark.slow  # about 7 s
def test_same_input_gives_byte_identical_files_and_plain_gzip_headers(corpus_path, tmp_path):
    outs = [
        export_corpus(
            corpus_path, "gluonts", tmp_path / name, simulators=["epanet"], progress=False
        )
        for name in ("a", "b")
    ]
    files = [sorted(p.relative_to(o) for p in o.rglob("*") if p.is_file()) for o in outs]
    assert files[0] == files[1] and len(files[0]) >= 4
    for rel in files[0]:
        assert (outs[0] / rel).read_bytes() == (outs[1] / rel).read_bytes(), rel
        if rel.name.endswith(".gz"):
            header = (outs[0] / rel).read_bytes()[:10]
            assert header[3] & 0x08 == 0  # no file name stored
            assert header[4:8] == b"\0\0\0\0"  # mtime 0


@pytest.mark.slow  # about 1 s
def test_existing_out_is_one_clear_error(corpus_path, exported, tmp_path):
    out = tmp_path / "g"
    out.mkdir()
    (out / "mine.txt").write_text("keep")
    result = run_whatif("export", str(corpus_path), "--format", "gluonts", "--out", str(out))
    assert result.returncode == 1
    assert result.stderr.strip() == f"error: {out}: already exists; pass --overwrite to replace it"
    result = run_whatif(
        "export", str(corpus_path), "--format", "gluonts", "--out", str(out), "--overwrite"
    )
    assert result.returncode == 1
    assert (
        "not a folder whatif export wrote" in result.stderr
        and (out / "mine.txt").read_text() == "keep"
    )


# ---- GluonTS itself (pandas < 3) -----------------------------------------------------------
@pytest.mark.gluonts
def test_gluonts_file_dataset_reads_the_tasks_exactly(exported, metadata, corpus_path):
    pytest.importorskip("gluonts")
    for group in metadata["groups"]:
        dataset = gluonts_export.load(exported, group)
        entries = list(dataset)
        tasks = _tasks(corpus_path, [e["item_id"] for e in entries])
        assert len(entries) == group["items"]
        for task, entry in zip(tasks, entries, strict=True):
            assert entry["target"].dtype == np.float32
            target = np.concatenate([task.history_target, task.future_target])
            assert np.array_equal(_bits(entry["target"]), _bits(target))
            covariates = np.concatenate([task.history_covariates, task.future_covariates], axis=1)
            assert entry["feat_dynamic_real"].shape == covariates.shape
            assert np.array_equal(_bits(entry["feat_dynamic_real"]), _bits(covariates))
            assert entry["start"] == pd.Period(task.timestamps()[0], freq=group["freq"])
            assert entry["start"].freq == pd.tseries.frequencies.to_offset(group["freq"])
            # the description passes through GluonTS as the JSON text the exporter wrote
            described = json.loads(entry["description"])
            assert described["task_id"] == task.task_id


@pytest.mark.gluonts
def test_split_at_minus_h_gives_what_evaluate_shows_and_scores(exported, metadata, corpus_path):
    pytest.importorskip("gluonts")
    from gluonts.dataset.split import split

    for group in metadata["groups"][:: max(1, len(metadata["groups"]) // 6)]:
        horizon = group["prediction_length"]
        _, template = split(gluonts_export.load(exported, group), offset=-horizon)
        pairs = list(template.generate_instances(prediction_length=horizon))
        tasks = _tasks(corpus_path, [i["item_id"] for i, _ in pairs])
        for task, (seen, label) in zip(tasks, pairs, strict=True):
            assert np.array_equal(_bits(seen["target"]), _bits(task.history_target))
            assert np.array_equal(_bits(label["target"]), _bits(task.future_target))
            full = np.concatenate([task.history_covariates, task.future_covariates], axis=1)
            assert np.array_equal(_bits(seen["feat_dynamic_real"]), _bits(full))


@pytest.mark.gluonts
@pytest.mark.slow  # about 4 s; quick: test_from_gluonts_seasonal_naive_scores_like_the_toolkit_naive
def test_seasonal_naive_and_gluonts_evaluator_agree_with_whatif_evaluate(
    exported, metadata, naive_scores
):
    pytest.importorskip("gluonts")
    from gluonts.dataset.split import split
    from gluonts.evaluation import Evaluator
    from gluonts.model.seasonal_naive import SeasonalNaivePredictor

    levels = list(QUANTILE_LEVELS)
    compared = 0
    for group in metadata["groups"]:
        horizon = group["prediction_length"]
        _, template = split(gluonts_export.load(exported, group), offset=-horizon)
        pairs = list(template.generate_instances(prediction_length=horizon))
        predictor = SeasonalNaivePredictor(prediction_length=horizon, season_length=1)
        forecasts = list(predictor.predict([i for i, _ in pairs]))
        truths = [
            pd.DataFrame(
                np.concatenate([i["target"], label["target"]]),
                index=pd.period_range(i["start"], periods=len(i["target"]) + horizon),
            )
            for i, label in pairs
        ]
        evaluator = Evaluator(quantiles=levels, num_workers=None)
        _, items = evaluator(truths, forecasts, num_series=len(pairs))
        losses = items[[f"QuantileLoss[{q}]" for q in levels]].to_numpy()
        wql = losses.mean(axis=1) / items["abs_target_sum"].to_numpy()
        ours = naive_scores.loc[[i["item_id"] for i, _ in pairs]].to_numpy()
        np.testing.assert_allclose(wql, ours, rtol=1e-5)
        compared += len(pairs)
    assert compared == metadata["tasks"]


@pytest.mark.gluonts
def test_from_gluonts_seasonal_naive_scores_like_the_toolkit_naive(corpus_path, tmp_path):
    pytest.importorskip("gluonts")
    from gluonts.model.seasonal_naive import SeasonalNaivePredictor

    from whatif_bench.evaluation.adapters import from_gluonts

    model = from_gluonts(
        lambda h, freq: SeasonalNaivePredictor(prediction_length=h, season_length=1),
        name="gluonts-snaive",
    )
    result = evaluate(
        corpus_path, ["naive", model], tmp_path / "out", subset=SUBSET, progress=False
    )
    assert (result.per_task["failed"] == "").all()
    table = result.per_task.pivot(index="task_id", columns="model", values=["wql", "wape"])
    for metric in ("wql", "wape"):
        np.testing.assert_allclose(
            table[metric, "gluonts-snaive"], table[metric, "naive"], rtol=1e-12
        )


@pytest.mark.gluonts
@pytest.mark.slow  # about 5 s; quick: test_from_gluonts_seasonal_naive_scores_like_the_toolkit_naive
def test_from_gluonts_with_one_fixed_predictor_fails_only_other_horizons(corpus_path, tmp_path):
    pytest.importorskip("gluonts")
    from gluonts.model.seasonal_naive import SeasonalNaivePredictor

    from whatif_bench.evaluation.adapters import from_gluonts

    model = from_gluonts(
        SeasonalNaivePredictor(prediction_length=128, season_length=1), name="snaive-128"
    )
    result = evaluate(
        corpus_path, ["naive", model], tmp_path / "out", subset=SUBSET, progress=False
    )
    rows = result.per_task[result.per_task["model"] == "snaive-128"]
    short = rows["prediction"] == 128
    assert short.any() and (~short).any()
    assert (rows.loc[short, "failed"] == "").all()
    assert (rows.loc[~short, "failed"] == "forecast is None").all()


@pytest.mark.gluonts
def test_from_gluonts_factory_gets_the_number_and_names_of_the_covariates(corpus_path):
    pytest.importorskip("gluonts")
    from gluonts.model.seasonal_naive import SeasonalNaivePredictor

    from whatif_bench.evaluation.adapters import from_gluonts

    calls: list[tuple] = []

    def factory(prediction_length, freq, *, num_feat_dynamic_real, covariate_names):
        calls.append((prediction_length, freq, num_feat_dynamic_real, covariate_names))
        return SeasonalNaivePredictor(prediction_length=prediction_length, season_length=1)

    old: list[tuple] = []

    def old_factory(prediction_length, freq):
        old.append((prediction_length, freq))
        return SeasonalNaivePredictor(prediction_length=prediction_length, season_length=1)

    anything: list[dict] = []

    def kwargs_factory(prediction_length, freq, **options):
        anything.append(options)
        return SeasonalNaivePredictor(prediction_length=prediction_length, season_length=1)

    with Corpus(corpus_path) as corpus:
        ids = corpus.task_ids()
        inputs = corpus.task_inputs(ids)
        expected = {
            (t.prediction_length, frequency_alias(t.interval_s), corpus[i].k, corpus[i].covariates)
            for i, t in zip(ids, inputs, strict=True)
        }
    model = from_gluonts(factory, name="by-schema")
    forecasts = model.predict(inputs)
    assert len(calls) == len(set(calls)) == len(expected)  # one predictor per (H, freq, K, names)
    assert set(calls) == expected and len({k for _, _, k, _ in calls}) > 1
    for task, forecast in zip(inputs, forecasts, strict=True):
        np.testing.assert_allclose(forecast.quantiles, task.history_target[-1], rtol=1e-6)
    model.predict(inputs)
    assert len(calls) == len(expected)  # kept: not built again for the next batch

    from_gluonts(old_factory, name="old").predict(inputs)  # an old factory: (H, freq) only
    assert sorted(old) == sorted({(h, f) for h, f, _, _ in expected})
    from_gluonts(kwargs_factory, name="kw").predict(inputs[:3])
    assert all(set(o) == {"num_feat_dynamic_real", "covariate_names"} for o in anything)
    assert anything[0]["covariate_names"] == tuple(inputs[0].covariate_names)
