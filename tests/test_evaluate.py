"""``whatif evaluate`` end to end on a real (small) corpus: errors, tables, plots, resuming."""

from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import pytest

from tests.conftest import drawing_one_skill_plot, every_tenth_task_id, run_cli, run_main
from whatif_bench.corpus import CorpusError
from whatif_bench.evaluation import Forecast, evaluate, runner
from whatif_bench.evaluation.runner import (
    STRATA,
    EvaluationError,
    select_tasks,
    without_timings,
)
from whatif_bench.generator import Corpus


@pytest.fixture(scope="module")
def corpus_path(two_target_corpus):
    """sumo/flow_loop_e_0_near and epanet/pressure_10 (the session's; no test here changes it)."""
    return two_target_corpus


@pytest.fixture(scope="module")
def a_tenth_of_the_ids(corpus_path) -> list[str]:
    """76 of the corpus's 760 tasks (``every_tenth_task_id``), for the tests whose behaviour does
    not depend on their number."""
    return every_tenth_task_id(corpus_path)


class MeanOfHistory:
    """A user model: the history mean, as a point forecast."""

    name = "history-mean"

    def predict(self, batch):
        return [
            Forecast(point=np.full(t.prediction_length, float(t.history_target.mean())))
            for t in batch
        ]


@pytest.mark.slow  # about 3 s
def test_evaluate_scores_every_task_and_writes_reports(tmp_path, corpus_path, a_tenth_of_the_ids):
    out = tmp_path / "eval"
    models = ["naive", "linear", "ridge", MeanOfHistory()]
    result = evaluate(corpus_path, models, out, task_ids=a_tenth_of_the_ids, progress=False)
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


@pytest.mark.parametrize(("selected", "total", "warns"), [(1_608, 35_762, True), (760, 760, False)])
def test_a_subset_that_is_not_every_task_says_its_leaderboard_is_its_own(selected, total, warns):
    from whatif_bench.evaluation.runner import subset_words

    words = subset_words(0.02, selected, total)
    assert words.startswith(f"--subset 0.02 selects {selected:,} of {total:,} tasks (")
    assert ("not with the whole corpus's" in words) is warns


@pytest.fixture(scope="module")
def naive_on_a_subset(corpus_path, tmp_path_factory):
    """naive on ``subset=0.05`` (one skill plot): its result and what it said (``log``), read by
    the two tests after this; its folder is not changed."""
    said: list[str] = []
    out = tmp_path_factory.mktemp("naive-subset") / "n"
    with drawing_one_skill_plot():
        result = evaluate(corpus_path, ["naive"], out, subset=0.05, progress=False, log=said.append)
    return result, said


def test_the_naive_error_is_its_wql_at_the_median(corpus_path, naive_on_a_subset):
    result, said = naive_on_a_subset
    with Corpus(corpus_path) as corpus:
        total = len(corpus.tasks_frame())
    # the subset's size is said (rounded up per stratum, so above 5 %), and is not a problem
    assert said == [
        f"--subset 0.05 selects {len(result.per_task):,} of {total:,} tasks "
        f"({len(result.per_task) / total:.1%}): ceil(0.05 x size) of each stratum"
    ]  # every task: one per stratum here, so nothing to warn of
    # the tasks' rows describe the tasks, not where the corpus stores them
    from whatif_bench.corpus.fileformat import STORAGE_COLUMNS

    assert not set(STORAGE_COLUMNS) & set(result.per_task.columns)
    assert {"task_id", "simulator", "target", "future", "k", "c_label"} <= set(
        result.per_task.columns
    )
    assert result.notes == [] and len(result.per_task) > 0.05 * total  # 1 task per stratum here
    row = result.per_task.iloc[0]
    with Corpus(corpus_path) as corpus:
        task = corpus[row["task_id"]]
    truth = task.future_target.astype(np.float64)
    expected = np.mean(np.abs(truth - task.history_target[-1])) / np.mean(np.abs(truth))
    assert row["wql"] == pytest.approx(expected, rel=1e-6) and row["wape"] == pytest.approx(
        expected, rel=1e-6
    )


@pytest.mark.usefixtures("one_skill_plot")  # one skill plot, not five (conftest)
@pytest.mark.slow  # about 1 s
def test_an_interrupted_evaluation_resumes_without_recomputing(
    tmp_path, corpus_path, a_tenth_of_the_ids
):
    out = tmp_path / "resume"
    tasks = a_tenth_of_the_ids  # 76 tasks: five chunks of each model
    evaluate(corpus_path, ["naive", "ridge"], out, task_ids=tasks, progress=False)
    chunks = sorted((out / "per_task" / "ridge").glob("chunk-*.parquet"))
    assert len(chunks) >= 2
    kept_time = chunks[0].stat().st_mtime_ns
    before = pd.read_parquet(out / "per_task.parquet")
    os.remove(chunks[-1])  # as if the run had stopped before the last chunk
    evaluate(corpus_path, ["naive", "ridge"], out, task_ids=tasks, progress=False)
    assert chunks[0].stat().st_mtime_ns == kept_time and chunks[-1].exists()
    after = pd.read_parquet(out / "per_task.parquet")
    # all but the measured seconds bit for bit; the kept chunk's seconds are read back as saved
    pd.testing.assert_frame_equal(without_timings(after), without_timings(before))
    kept = pd.read_parquet(chunks[0])
    assert after.loc[after["model"] == "ridge", "seconds"].iloc[: len(kept)].tolist() == (
        kept["seconds"].tolist()
    )


def test_a_folder_of_another_evaluation_is_refused(corpus_path, naive_on_a_subset):
    out = naive_on_a_subset[0].out  # naive on subset=0.05
    with pytest.raises(EvaluationError, match="holds results of another evaluation"):
        evaluate(corpus_path, ["naive"], out, subset=0.2, progress=False)


def test_bad_arguments(tmp_path, corpus_path):
    with pytest.raises(EvaluationError, match="reference model 'ridge' must be one of"):
        evaluate(corpus_path, ["naive"], tmp_path / "a", reference="ridge", progress=False)
    with pytest.raises(ValueError, match="unknown model 'prophet'"):
        evaluate(corpus_path, ["naive", "prophet"], tmp_path / "b", progress=False)
    empty = pd.DataFrame({c: [] for c in STRATA})
    # the corpus room's one rule, shared with export (which refused True where evaluate did not)
    for bad in (1.5, 0, True, float("nan")):
        with pytest.raises(CorpusError, match="fraction"):
            select_tasks(empty, bad)


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


@pytest.mark.slow  # a user model in two worker processes: about 3 s
@pytest.mark.usefixtures("one_skill_plot")  # one skill plot, not five (conftest)
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
    result = run_cli(
        "evaluate",
        str(corpus_path),
        "--models",
        f"naive,{model_file}:Last",
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
    bad = run_cli(
        "evaluate",
        str(corpus_path),
        "--models",
        "naive,prophet",
        "--out",
        str(tmp_path / "x"),
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


@pytest.mark.usefixtures("one_skill_plot")  # one skill plot, not five (conftest)
@pytest.mark.slow  # about 1 s
def test_evaluate_describes_each_task_to_the_model(tmp_path, corpus_path, a_tenth_of_the_ids):
    from whatif_bench.evaluation.forecasters import frequency_alias

    model = Recorder()
    # model_timeout=None: predict runs in this process, so the model keeps what it saw (with a
    # time limit it runs in a forked child per batch; docs/RELIABILITY.md, section 8)
    evaluate(
        corpus_path, ["naive", model], tmp_path / "out", task_ids=a_tenth_of_the_ids,
        progress=False, model_timeout=None,
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


@pytest.mark.usefixtures("one_skill_plot")  # one skill plot, not five (conftest)
@pytest.mark.slow  # about 1 s
def test_a_dict_model_is_scored_through_evaluate(tmp_path, corpus_path, a_tenth_of_the_ids):
    from whatif_bench.evaluation.adapters import from_dict_model

    def last_value(inputs):  # Chronos-2-style inputs; the naive forecast as (H, 9) quantiles
        out = []
        for entry in inputs:
            horizon = len(next(iter(entry["future_covariates"].values())))
            out.append(np.full((horizon, 9), float(entry["target"][-1])))
        return out

    model = from_dict_model(last_value, name="dict-naive")
    out = tmp_path / "out"
    result = evaluate(
        corpus_path, ["naive", model], out, task_ids=a_tenth_of_the_ids, progress=False
    )
    table = result.per_task.pivot(index="task_id", columns="model", values="wql")
    assert (result.per_task["failed"] == "").all()
    np.testing.assert_allclose(table["dict-naive"], table["naive"], rtol=1e-12)


# Per-task seconds and imputed forecasts; the leaderboard's latency and counts (issue 24).

OWN_MODELS = """\
import numpy as np
from whatif_bench.evaluation import Forecast


class OwnSeconds:
    name = "own-seconds"

    def predict(self, batch):
        return [Forecast(point=np.full(t.prediction_length, float(t.history_target[-1])),
                         seconds=2.5) for t in batch]


class ImputesNovel:
    '''The naive forecast, marked imputed on the Novel tasks (as an LLM wrapper marks the
    tasks whose answers all failed).'''

    name = "imputes-novel"

    def predict(self, batch):
        return [Forecast(point=np.full(t.prediction_length, float(t.history_target[-1])),
                         imputed=t.task_id.endswith("/novel")) for t in batch]
"""

LATENCY_COLUMNS = ["num_tasks", "num_failed", "num_imputed", "seconds_per_task"]


@pytest.mark.usefixtures("one_skill_plot")  # one skill plot, not five (conftest)
@pytest.mark.slow  # about 2 s
def test_seconds_and_imputed_reach_per_task_the_leaderboard_and_the_summary(
    tmp_path, one_target_corpus, capsys
):
    models = tmp_path / "own.py"
    models.write_text(OWN_MODELS)
    out = tmp_path / "o"
    code, stdout, err = run_main(
        capsys,
        "evaluate",
        str(one_target_corpus),  # 360 tasks, not 760: no --subset of these corpora is smaller
        "--models",
        f"naive,ridge,{models}:OwnSeconds,{models}:ImputesNovel",
        "--subset",
        "0.05",
        "--out",
        str(out),
    )
    assert code == 0, err  # imputed forecasts are not failures
    per_task = pd.read_parquet(out / "per_task.parquet")
    assert per_task["imputed"].dtype == bool and per_task["seconds"].dtype == np.float64
    assert (per_task["failed"] == "").all() and np.isfinite(per_task["wql"]).all()
    by_model = dict(tuple(per_task.groupby("model")))
    for baseline in ("naive", "ridge"):  # measured: the predict call's share per task
        seconds = by_model[baseline]["seconds"]
        assert (np.isfinite(seconds) & (seconds > 0)).all()
    assert (by_model["own-seconds"]["seconds"] == 2.5).all()  # the forecast's own, exactly
    imputing = by_model["imputes-novel"]
    novel = imputing["task_id"].str.endswith("/novel")
    assert imputing["imputed"].tolist() == novel.tolist() and novel.any() and not novel.all()
    assert not per_task.loc[per_task["model"] != "imputes-novel", "imputed"].any()
    # an imputed forecast is scored as the model's own: here naive's, so the same errors
    np.testing.assert_array_equal(imputing["wql"], by_model["naive"]["wql"])

    board = pd.read_csv(out / "leaderboard.csv").set_index("model")
    n_tasks = per_task["task_id"].nunique()
    assert list(board.columns[:3]) == ["win_rate", "skill_score", "num_tasks"]
    assert (board["num_tasks"] == n_tasks).all() and (board["num_failed"] == 0).all()
    imputed = int(novel.sum())
    assert board["num_imputed"].to_dict() == {
        "naive": 0, "ridge": 0, "own-seconds": 0, "imputes-novel": imputed
    }  # fmt: skip
    assert board.loc["own-seconds", "seconds_per_task"] == 2.5
    assert board.loc["ridge", "seconds_per_task"] == pytest.approx(
        by_model["ridge"]["seconds"].mean(), rel=1e-12
    )
    markdown = (out / "leaderboard.md").read_text()
    assert "| num_tasks | num_failed | num_imputed | seconds_per_task |" in markdown
    assert f"| {n_tasks} | 0 | 0 | 2.5 |" in markdown  # own-seconds' row
    lines = {line.split()[0]: line for line in stdout.splitlines() if "skill" in line}
    assert lines["own-seconds"].endswith(f"tasks {n_tasks:,}  failed 0  imputed 0  s/task 2.5")
    assert f"failed 0  imputed {imputed:,}  s/task " in lines["imputes-novel"]
    assert (
        f"note: model 'imputes-novel' imputed {imputed:,} of {n_tasks:,} forecasts (first: "
    ) in err
    assert "warning:" not in err and "error:" not in err


@pytest.fixture(scope="module")
def some_ids(corpus_path) -> list[str]:
    """Seven task ids of the corpus, not in its order."""
    with Corpus(corpus_path) as corpus:
        ids = corpus.task_ids()
    return [ids[i] for i in (40, 3, 17, 250, 9, 101, 77)]


@pytest.mark.usefixtures("one_skill_plot")  # one skill plot, not five (conftest)
def test_task_ids_restrict_the_evaluation_to_exactly_those_tasks(tmp_path, corpus_path, some_ids):
    out = tmp_path / "o"
    result = evaluate(corpus_path, ["naive", "ridge"], out, task_ids=some_ids, progress=False)
    with Corpus(corpus_path) as corpus:
        in_corpus_order = [i for i in corpus.task_ids() if i in set(some_ids)]
    for model in ("naive", "ridge"):
        rows = result.per_task[result.per_task["model"] == model]
        assert rows["task_id"].tolist() == in_corpus_order  # exactly these, in corpus order
    assert (result.leaderboard["num_tasks"] == len(some_ids)).all()
    assert json.loads((out / "manifest.json").read_text())["tasks"] == len(some_ids)
    again = evaluate(  # the same ids in another order: the same selection, resumed
        corpus_path, ["naive", "ridge"], out, task_ids=some_ids[::-1], progress=False
    )
    assert again.notes == []
    pd.testing.assert_frame_equal(without_timings(again.per_task), without_timings(result.per_task))
    with pytest.raises(EvaluationError, match="holds results of another evaluation"):
        evaluate(corpus_path, ["naive"], out, task_ids=some_ids[:3], progress=False)


@pytest.mark.parametrize(
    ("task_ids", "subset", "message"),
    [
        ([], None, "task_ids is empty"),
        ("sumo/x/replay", None, "task_ids must be a list of task ids, got a str"),
        (42, None, "task_ids must be a list of task ids, got a int"),
        ([7], None, "task_ids must be strings, got 7"),
        (["no/such/task"], None, "holds no task 'no/such/task'"),
        (["no/such/task", "nor/this/one"], None, "(and 1 more of the 2 given)"),
        ("twice", None, "more than once"),
        ("first", 0.5, "give subset (0.5) or task_ids (1 ids), not both"),
    ],
)
def test_bad_task_ids_are_one_clear_error(
    tmp_path, corpus_path, some_ids, task_ids, subset, message
):
    if task_ids == "twice":
        task_ids = [some_ids[0], some_ids[1], some_ids[0]]
    elif task_ids == "first":
        task_ids = some_ids[:1]
    out = tmp_path / "new" / "o"
    with pytest.raises(EvaluationError) as caught:
        evaluate(corpus_path, ["naive"], out, subset=subset, task_ids=task_ids, progress=False)
    assert message in str(caught.value)
    assert not (tmp_path / "new").exists()  # nothing left behind


@pytest.mark.usefixtures("one_skill_plot")  # one skill plot, not five (conftest)
def test_chunks_written_before_the_timings_resume_without_recomputing(
    tmp_path, corpus_path, some_ids, monkeypatch
):
    monkeypatch.setattr(runner, "CHUNK", 3)
    out = tmp_path / "o"
    first = evaluate(corpus_path, ["naive", "ridge"], out, task_ids=some_ids, progress=False)
    chunks = sorted((out / "per_task").glob("*/chunk-*.parquet"))
    assert len(chunks) == 2 * 3
    for path in chunks:  # as the format before seconds and imputed wrote them
        old = pd.read_parquet(path).drop(columns=["seconds", "imputed"])
        assert list(old.columns) == ["task_id", "model", "wql", "wape", "failed"]
        old.to_parquet(path, index=False)
    written = {path: path.stat().st_mtime_ns for path in chunks}
    os.remove(chunks[-1])  # the last ridge chunk: computed again, with its seconds
    again = evaluate(corpus_path, ["naive", "ridge"], out, task_ids=some_ids, progress=False)
    assert all(path.stat().st_mtime_ns == written[path] for path in chunks[:-1])  # read, kept
    assert sorted(again.notes) == [
        f"model 'naive': 3 saved chunk(s) in {out / 'per_task' / 'naive'} predate per-task "
        "timings; their tasks are kept with seconds NaN (left out of seconds_per_task) and "
        "imputed False",
        f"model 'ridge': 2 saved chunk(s) in {out / 'per_task' / 'ridge'} predate per-task "
        "timings; their tasks are kept with seconds NaN (left out of seconds_per_task) and "
        "imputed False",
    ]
    pd.testing.assert_frame_equal(without_timings(again.per_task), without_timings(first.per_task))
    seconds = again.per_task["seconds"]
    recomputed = again.per_task["task_id"].isin(pd.read_parquet(chunks[-1])["task_id"]) & (
        again.per_task["model"] == "ridge"
    )
    assert seconds[~recomputed].isna().all() and (seconds[recomputed] > 0).all()
    assert not again.per_task["imputed"].any()
    board = again.leaderboard.set_index("model")
    assert np.isnan(board.loc["naive", "seconds_per_task"])  # no task of it measured
    assert board.loc["ridge", "seconds_per_task"] == pytest.approx(seconds[recomputed].mean())
