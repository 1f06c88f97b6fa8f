"""``whatif evaluate`` end to end on a real (small) corpus: errors, tables, plots, resuming."""

from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import pytest

from tests.conftest import run_whatif
from whatif_bench.evaluation import Forecast, evaluate
from whatif_bench.evaluation.runner import STRATA, EvaluationError, select_tasks
from whatif_bench.generator import Corpus, GenerationConfig, generate
from whatif_bench.simulators import shipped_baselines_path


@pytest.fixture(scope="module")
def corpus_path(tmp_path_factory):
    folder = tmp_path_factory.mktemp("eval-corpus")
    config = GenerationConfig(
        baselines=str(shipped_baselines_path()),
        out=str(folder / "c.h5"),
        targets=("sumo/flow_loop_e_0_near", "epanet/pressure_10"),
        jobs=1,
    )
    return generate(config, progress=False)


class MeanOfHistory:
    """A user model: the history mean, as a point forecast."""

    name = "history-mean"

    def predict(self, batch):
        return [
            Forecast(point=np.full(t.prediction_length, float(t.history_target.mean())))
            for t in batch
        ]


def test_evaluate_scores_every_task_and_writes_reports(tmp_path, corpus_path):
    out = tmp_path / "eval"
    result = evaluate(
        corpus_path, ["naive", "linear", "ridge", MeanOfHistory()], out, subset=0.1, progress=False
    )
    per_task = pd.read_parquet(out / "per_task.parquet")
    n_tasks = per_task["task_id"].nunique()
    assert len(per_task) == 4 * n_tasks
    assert set(per_task["model"]) == {"naive", "linear", "ridge", "history-mean"}
    board = result.leaderboard.set_index("model")
    assert board.loc["naive", "skill_score"] == 0.0
    assert board.loc["linear", "skill_score"] > 0.0  # covariates carry the what-if effect
    for axis in ("simulator", "future", "K", "E", "ell", "C"):
        table = pd.read_csv(out / "slices" / f"{axis}.csv")
        assert {"model", "skill_score", "win_rate"} <= set(table.columns)
        assert (
            (out / "slices" / f"{axis}.md").read_text().startswith("# Skill score and win rate by")
        )
    for axis in ("simulator", "K", "E", "ell", "C"):
        assert (out / "plots" / f"skill_by_{axis}.png").read_bytes().startswith(b"\x89PNG")
    assert "| model |" in (out / "leaderboard.md").read_text()


def test_the_naive_error_is_its_wql_at_the_median(tmp_path, corpus_path):
    said: list[str] = []
    result = evaluate(
        corpus_path, ["naive"], tmp_path / "n", subset=0.05, progress=False, log=said.append
    )
    with Corpus(corpus_path) as corpus:
        total = len(corpus.tasks_frame())
    # the subset's size is said (rounded up per stratum, so above 5 %), and is not a problem
    assert said == [
        f"--subset 0.05 selects {len(result.per_task):,} of {total:,} tasks "
        f"({len(result.per_task) / total:.1%}): ceil(0.05 x size) of each stratum"
    ]
    assert result.notes == [] and len(result.per_task) > 0.05 * total  # 1 task per stratum here
    row = result.per_task.iloc[0]
    with Corpus(corpus_path) as corpus:
        task = corpus[row["task_id"]]
    truth = task.future_target.astype(np.float64)
    expected = np.mean(np.abs(truth - task.history_target[-1])) / np.mean(np.abs(truth))
    assert row["wql"] == pytest.approx(expected, rel=1e-6) and row["wape"] == pytest.approx(
        expected, rel=1e-6
    )


def test_an_interrupted_evaluation_resumes_without_recomputing(tmp_path, corpus_path):
    out = tmp_path / "resume"
    evaluate(corpus_path, ["naive", "ridge"], out, subset=0.5, progress=False)
    chunks = sorted((out / "per_task" / "ridge").glob("chunk-*.parquet"))
    assert len(chunks) >= 2
    kept_time = chunks[0].stat().st_mtime_ns
    before = pd.read_parquet(out / "per_task.parquet")
    os.remove(chunks[-1])  # as if the run had stopped before the last chunk
    evaluate(corpus_path, ["naive", "ridge"], out, subset=0.5, progress=False)
    assert chunks[0].stat().st_mtime_ns == kept_time and chunks[-1].exists()
    pd.testing.assert_frame_equal(pd.read_parquet(out / "per_task.parquet"), before)


def test_a_folder_of_another_evaluation_is_refused(tmp_path, corpus_path):
    out = tmp_path / "mixed"
    evaluate(corpus_path, ["naive"], out, subset=0.05, progress=False)
    with pytest.raises(EvaluationError, match="holds results of another evaluation"):
        evaluate(corpus_path, ["naive"], out, subset=0.2, progress=False)


def test_bad_arguments(tmp_path, corpus_path):
    with pytest.raises(EvaluationError, match="reference model 'ridge' must be one of"):
        evaluate(corpus_path, ["naive"], tmp_path / "a", reference="ridge", progress=False)
    with pytest.raises(ValueError, match="unknown model 'prophet'"):
        evaluate(corpus_path, ["naive", "prophet"], tmp_path / "b", progress=False)
    with pytest.raises(EvaluationError, match="fraction"):
        select_tasks(pd.DataFrame({c: [] for c in STRATA}), 1.5)


def test_stratified_subset_keeps_every_axis_combination():
    strata = [
        dict(zip(STRATA, values, strict=True))
        for values in [
            ("sumo", "novel", 1, "C1", 32, "Efew"),
            ("sumo", "replay", 1, "C1", 32, "Efew"),
            ("epanet", "novel", 3, "C4", 512, "Emax"),
        ]
    ]
    frame = pd.DataFrame(
        [{**s, "task_id": f"{i}-{j}"} for i, s in enumerate(strata) for j in range(10)]
    )
    frame = frame.sample(frac=1.0, random_state=1).reset_index(drop=True)
    subset = select_tasks(frame, 0.2)
    assert subset.groupby(STRATA).size().tolist() == [2, 2, 2]
    assert subset.equals(select_tasks(frame, 0.2))  # the same draw every time
    assert len(select_tasks(frame, 0.01)) == 3  # at least one task of every combination


def test_cli_with_reference_and_a_user_model(tmp_path, corpus_path):
    model_file = tmp_path / "my_model.py"
    model_file.write_text(
        "import numpy as np\n"
        "from whatif_bench.evaluation import Forecast\n"
        "class Last:\n"
        "    name = 'my-last'\n"
        "    def predict(self, batch):\n"
        "        return [Forecast(point=np.full(t.prediction_length, t.history_target[-1])) for t in batch]\n"
    )
    out = tmp_path / "cli"
    result = run_whatif(
        "evaluate",
        str(corpus_path),
        "--models",
        f"naive,xgboost,{model_file}:Last",
        "--reference",
        "my-last",
        "--subset",
        "0.03",
        "--out",
        str(out),
        "--jobs",
        "2",
    )
    assert result.returncode == 0, result.stderr
    board = pd.read_csv(out / "leaderboard.csv").set_index("model")
    assert board.loc["my-last", "skill_score"] == 0.0
    assert board.loc["naive", "skill_score"] == pytest.approx(
        0.0
    )  # the same forecast as the reference
    assert json.loads((out / "manifest.json").read_text())["subset"] == 0.03
    bad = run_whatif(
        "evaluate", str(corpus_path), "--models", "naive,prophet", "--out", str(tmp_path / "x")
    )
    assert bad.returncode != 0 and "unknown model 'prophet'" in bad.stderr


class Recorder:
    """A naive model that keeps every TaskInput it is shown."""

    name = "recorder"

    def __init__(self):
        self.seen = []

    def predict(self, batch):
        self.seen.extend(batch)
        return [
            Forecast(point=np.full(t.prediction_length, float(t.history_target[-1]))) for t in batch
        ]


def test_evaluate_describes_each_task_to_the_model(tmp_path, corpus_path):
    from whatif_bench.evaluation.forecasters import frequency_alias

    model = Recorder()
    # model_timeout=None: predict runs in this process, so the model keeps what it saw (with a
    # time limit it runs in a forked child per batch; docs/RELIABILITY.md, section 8)
    evaluate(
        corpus_path, ["naive", model], tmp_path / "out", subset=0.05, progress=False,
        model_timeout=None,
    )  # fmt: skip
    assert model.seen
    with Corpus(corpus_path) as corpus:
        for seen in model.seen:
            task = corpus[seen.task_id]
            assert seen.start == task.timestamps()[0]
            assert seen.freq == frequency_alias(task.interval_s) and seen.freq in ("5min", "1min")
            assert seen.interval_s == task.interval_s
            assert seen.covariate_names == task.covariates and len(seen.covariate_units) == task.k
            assert all(seen.covariate_units)  # the corpus was built from the shipped registry
            assert seen.target_name == task.target
            assert seen.target_unit == task.units[task.target]
            np.testing.assert_array_equal(seen.future_covariates, task.future_covariates)


def test_a_dict_model_is_scored_through_evaluate(tmp_path, corpus_path):
    from whatif_bench.evaluation.adapters import from_dict_model

    def last_value(inputs):  # Chronos-2-style inputs; the naive forecast as (H, 9) quantiles
        out = []
        for entry in inputs:
            horizon = len(next(iter(entry["future_covariates"].values())))
            out.append(np.full((horizon, 9), float(entry["target"][-1])))
        return out

    model = from_dict_model(last_value, name="dict-naive")
    result = evaluate(corpus_path, ["naive", model], tmp_path / "out", subset=0.05, progress=False)
    table = result.per_task.pivot(index="task_id", columns="model", values="wql")
    assert (result.per_task["failed"] == "").all()
    np.testing.assert_allclose(table["dict-naive"], table["naive"], rtol=1e-12)
