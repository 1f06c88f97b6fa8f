"""The fev export read back by fev 0.10 itself: data equal the corpus, scores equal evaluate's."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile

# datasets caches every parquet it loads: keep that cache out of the user's home, and offline;
# a cache folder made here is removed when the test process ends
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
if "HF_DATASETS_CACHE" not in os.environ:
    os.environ["HF_DATASETS_CACHE"] = tempfile.mkdtemp(prefix="whatif-hf-cache-")
    atexit.register(shutil.rmtree, os.environ["HF_DATASETS_CACHE"], ignore_errors=True)

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from tests.conftest import small_corpus  # noqa: E402
from tests.lazy_modules import importorskip_lazily  # noqa: E402
from whatif_bench.corpus.describe import Describer  # noqa: E402
from whatif_bench.evaluation import evaluate  # noqa: E402
from whatif_bench.evaluation.metrics import QUANTILE_LEVELS, wape, wql  # noqa: E402
from whatif_bench.export import fev as fev_export  # noqa: E402
from whatif_bench.generator import Corpus  # noqa: E402

# the reports draw one skill plot, not five (tests/conftest.py): not what these tests check
pytestmark = pytest.mark.usefixtures("one_skill_plot_in_module")

fev = importorskip_lazily("fev")

TARGETS = ("epanet/pressure_10",)
PER_GROUP = 2  # tasks per (C, K) group in the small selection scored one fev Task at a time
# fev's num_proc when a test loads a Task's data: 0 runs datasets' validation map in this process
# (1 still starts a worker pool, about 0.2 s a file); tasks.yaml's test loads with fev's default
IN_PROCESS = 0


@pytest.fixture(scope="module")
def corpus_path(tmp_path_factory):
    return small_corpus(tmp_path_factory.mktemp("corpus"), TARGETS)


@pytest.fixture(scope="module")
def naive_scores(corpus_path, tmp_path_factory):
    """whatif evaluate's own per-task wql and wape of the naive baseline."""
    result = evaluate(corpus_path, ["naive"], tmp_path_factory.mktemp("eval"), progress=False)
    return result.per_task.set_index("task_id")[["wql", "wape"]]


@pytest.fixture(scope="module")
def selection(corpus_path):
    """All tasks (pooled export), and a few per group (per-task export)."""
    with Corpus(corpus_path) as corpus:
        frame = corpus.tasks_frame()
    few = frame.groupby(["c_label", "k"], sort=False).head(PER_GROUP).reset_index(drop=True)
    return frame, few


@pytest.fixture(scope="module")
def exported(corpus_path, selection, tmp_path_factory):
    frame, few = selection
    pooled_dir = tmp_path_factory.mktemp("fev-pooled")
    single_dir = tmp_path_factory.mktemp("fev-single")
    with Corpus(corpus_path) as corpus:
        pooled = fev_export.write(corpus, frame, pooled_dir, progress=False)
        single = fev_export.write(corpus, few, single_dir, progress=False, per_task=True)
    return pooled_dir, pooled, single_dir, single


@pytest.fixture(scope="module")
def pooled_benchmark(exported):
    """The pooled export read by fev (one Task per file), every file loaded once for the tests."""
    benchmark = fev_export.load_benchmark(exported[0])
    for task in benchmark.tasks:
        task.load_full_dataset(num_proc=IN_PROCESS)  # fev keeps it: windows and scores reuse it
    return benchmark


def naive_predictions(window, levels) -> list[dict]:
    past, _ = window.get_input_data()
    horizon = len(window.get_ground_truth()[0]["target"])
    out = []
    for row in past:
        forecast = [float(row["target"][-1])] * horizon
        out.append({"predictions": forecast, **{str(q): forecast for q in levels}})
    return out


@pytest.mark.slow  # about 1 s
def test_manifest_is_json_and_groups_have_one_horizon(exported, selection, corpus_path):
    _, pooled, _, single = exported
    json.dumps(pooled), json.dumps(single)
    frame, few = selection
    assert pooled["tasks"] == len(frame) and single["tasks"] == len(few)
    assert sum(g["tasks"] for g in pooled["groups"]) == len(frame)
    keys = {(g["simulator"], g["c_label"], g["k"]) for g in pooled["groups"]}
    assert keys == set(frame[["simulator", "c_label", "k"]].itertuples(index=False, name=None))
    with Corpus(corpus_path) as corpus:
        assert corpus[frame["task_id"].iloc[0]].interval_s == 300
    assert {g["freq"] for g in pooled["groups"]} == {"5min"}  # what pandas infers, as fev does


@pytest.mark.slow  # about 1 s, and the 2 s of pooled_benchmark
def test_fev_reads_every_file_and_data_equal_the_corpus(exported, pooled_benchmark, corpus_path):
    _, manifest, _, _ = exported
    benchmark = pooled_benchmark
    assert len(benchmark.tasks) == len(manifest["groups"])
    with Corpus(corpus_path) as corpus:
        for task, group in zip(benchmark.tasks, manifest["groups"], strict=True):
            k = group["k"]
            assert task.horizon == group["horizon"]
            assert task.known_dynamic_columns == [f"covariate_{i}" for i in range(1, k + 1)]
            window = next(iter(task.iter_windows()))
            assert task.freq == group["freq"]
            past, future = window.get_input_data()
            truth = window.get_ground_truth()
            assert len(past) == group["tasks"]
            for index in range(len(past)):
                p, f, t = past[index], future[index], truth[index]
                original = corpus[p["id"]]
                assert f["id"] == t["id"] == p["id"]
                np.testing.assert_array_equal(p["target"], original.history_target)
                np.testing.assert_array_equal(t["target"], original.future_target)
                for i in range(k):
                    name = f"covariate_{i + 1}"
                    np.testing.assert_array_equal(p[name], original.history_covariates[i])
                    np.testing.assert_array_equal(f[name], original.future_covariates[i])
                stamps = original.timestamps()
                assert pd.DatetimeIndex(p["timestamp"]).equals(stamps[: original.context_length])
                assert pd.DatetimeIndex(f["timestamp"]).equals(stamps[original.context_length :])
            full = task.load_full_dataset()
            names = [json.loads(n) for n in full["covariate_names"]]
            assert all(len(n) == k for n in names)


def test_a_series_is_dated_from_the_epanet_start_plus_its_window_offset(exported, corpus_path):
    import pyarrow.parquet as pq

    folder, manifest, _, _ = exported
    table = pq.read_table(folder / manifest["groups"][0]["file"], columns=["id", "timestamp"])
    first = table.slice(0, 1).to_pylist()[0]
    with Corpus(corpus_path) as corpus:
        task = corpus[first["id"]]
    expected = np.datetime64("2024-01-08T00:00:00") + np.timedelta64(300 * task.start_step, "s")
    stamps = np.array(first["timestamp"], dtype="datetime64[s]")
    assert stamps[0] == expected
    assert np.all(np.diff(stamps) == np.timedelta64(300, "s"))


def test_the_files_are_encoded_as_the_write_options_say(exported):
    # what makes the files small and fast to write; fev reads them in the tests around
    import pyarrow.parquet as pq

    folder, manifest, _, _ = exported
    for group in manifest["groups"]:
        metadata = pq.ParquetFile(folder / group["file"]).metadata
        for index in range(metadata.num_row_groups):
            group_meta = metadata.row_group(index)
            chunks = [group_meta.column(i) for i in range(group_meta.num_columns)]
            by_path = {chunk.path_in_schema: chunk for chunk in chunks}
            assert not any(chunk.is_stats_set for chunk in chunks)
            assert "DELTA_BINARY_PACKED" in by_path["timestamp.list.element"].encodings
            for name in ("target", *fev_export.covariate_columns(group["k"])):
                encodings = by_path[f"{name}.list.element"].encodings
                assert not any("DICTIONARY" in e for e in encodings), (name, encodings)
            assert any("DICTIONARY" in e for e in by_path["simulator"].encodings)
            assert by_path["target.list.element"].compression == "ZSTD"


def test_names_and_units_are_kept(exported, corpus_path):
    folder, manifest, _, _ = exported
    table = pd.read_parquet(folder / manifest["groups"][0]["file"])
    with Corpus(corpus_path) as corpus:
        task = corpus[table["id"].iloc[0]]
    assert json.loads(table["covariate_names"].iloc[0]) == list(task.covariates)
    assert table["target_name"].iloc[0] == task.target
    assert table["target_unit"].iloc[0] == task.units[task.target]
    units = json.loads(table["covariate_units"].iloc[0])
    assert len(units) == task.k and all(units)  # the corpus was built from the shipped registry


def test_each_series_carries_its_description(exported, corpus_path):
    folder, manifest, _, _ = exported
    table = pd.read_parquet(folder / manifest["groups"][0]["file"], columns=["id", "description"])
    with Corpus(corpus_path) as corpus:
        describer = Describer(corpus)
        for task_id, text in zip(table["id"], table["description"], strict=True):
            assert json.loads(text) == describer.describe(corpus[task_id])


@pytest.mark.slow  # about 6 s
def test_per_task_fev_scores_equal_whatif_evaluate(exported, naive_scores, selection):
    _, _, folder, manifest = exported
    benchmark = fev_export.load_benchmark(folder, per_task=True)
    _, few = selection
    by_group = few.groupby(["c_label", "k"])["task_id"]
    expected_names = [
        i for g in manifest["groups"] for i in sorted(by_group.get_group((g["c_label"], g["k"])))
    ]
    assert [t.task_name for t in benchmark.tasks] == expected_names
    for task in benchmark.tasks:
        windows = task.iter_windows(num_proc=IN_PROCESS)
        predictions = [naive_predictions(w, task.quantile_levels) for w in windows]
        summary = task.evaluation_summary(predictions, model_name="naive")
        expected = naive_scores.loc[task.task_name]
        assert summary["num_forecasts"] == 1
        assert summary["WQL"] == pytest.approx(expected["wql"], rel=0, abs=1e-9)
        assert summary["WAPE"] == pytest.approx(expected["wape"], rel=0, abs=1e-9)


@pytest.mark.slow  # about 2 s, and the 2 s of pooled_benchmark
def test_pooled_fev_scores_are_the_abs_weighted_mean(pooled_benchmark, corpus_path, naive_scores):
    benchmark = pooled_benchmark
    levels = np.asarray(QUANTILE_LEVELS)
    with Corpus(corpus_path) as corpus:
        for task in benchmark.tasks:
            window = next(iter(task.iter_windows()))
            summary = task.evaluation_summary(
                [naive_predictions(window, task.quantile_levels)], model_name="naive"
            )
            ids = list(window.get_ground_truth()["id"])
            truths = [corpus[i].future_target.astype(np.float64) for i in ids]
            lasts = [float(corpus[i].history_target[-1]) for i in ids]
            # the documented formula: sums over all series and steps of the group
            y = np.concatenate(truths)
            point = np.concatenate([np.full(t.size, v) for t, v in zip(truths, lasts, strict=True)])
            q = np.repeat(point[:, None], levels.size, axis=1)
            loss = 2 * np.abs((y[:, None] - q) * ((y[:, None] <= q) - levels))
            pooled_wql = float(np.mean(loss.sum(axis=0) / np.abs(y).sum()))
            pooled_wape = float(np.abs(y - point).sum() / np.abs(y).sum())
            assert summary["WQL"] == pytest.approx(pooled_wql, rel=1e-12)
            assert summary["WAPE"] == pytest.approx(pooled_wape, rel=1e-12)
            # the same as the |y|-weighted mean of whatif evaluate's per-task scores
            weights = np.array([np.abs(t).sum() for t in truths])
            weights /= weights.sum()
            per_task = naive_scores.loc[ids]
            assert summary["WAPE"] == pytest.approx(float(weights @ per_task["wape"]), rel=1e-9)
            assert summary["WQL"] == pytest.approx(float(weights @ per_task["wql"]), rel=1e-9)
            # and whatif's metrics functions give the per-task numbers evaluate reported
            first = corpus[ids[0]]
            truth = first.future_target.astype(np.float64)  # as the runner passes it
            forecast = np.full(first.prediction_length, float(first.history_target[-1]))
            assert per_task["wape"].iloc[0] == wape(truth, forecast)
            assert per_task["wql"].iloc[0] == wql(truth, forecast[:, None], (0.5,))


def test_same_input_same_bytes(corpus_path, selection, tmp_path):
    _, few = selection
    digests = []
    for name in ("a", "b"):
        out = tmp_path / name
        out.mkdir()
        with Corpus(corpus_path) as corpus:
            fev_export.write(corpus, few, out, progress=False, per_task=True)
        digests.append(
            {p.relative_to(out): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
        )
    assert digests[0] == digests[1]
    parquet = [p for p in digests[0] if p.suffix == ".parquet"]
    import pyarrow.parquet as pq

    meta = pq.ParquetFile(tmp_path / "a" / parquet[0]).metadata
    assert meta.row_group(0).column(0).compression == "ZSTD"


def test_empty_selection_writes_an_empty_benchmark(corpus_path, selection, tmp_path):
    frame, _ = selection
    with Corpus(corpus_path) as corpus:
        manifest = fev_export.write(corpus, frame.iloc[0:0], tmp_path, progress=False)
    assert manifest["tasks"] == 0 and manifest["groups"] == []
    assert fev_export.load_benchmark(tmp_path).tasks == []


def test_fev_benchmark_from_yaml_reads_the_file_as_written(exported, monkeypatch):
    folder, manifest, _, _ = exported
    monkeypatch.chdir(folder)  # the paths in tasks.yaml are relative to the export folder
    benchmark = fev.Benchmark.from_yaml("tasks.yaml")
    assert [t.task_name for t in benchmark.tasks] == [g["task_name"] for g in manifest["groups"]]
    task = benchmark.tasks[0]
    assert task.eval_metric == "WQL" and task.quantile_levels == list(QUANTILE_LEVELS)
    past, future = task.get_window(0).get_input_data()
    assert len(past) == manifest["groups"][0]["tasks"]
    assert "covariate_names" not in past.column_names  # metadata columns stay out of the window
