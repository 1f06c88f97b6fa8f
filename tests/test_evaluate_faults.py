"""``whatif evaluate`` under bad inputs: unsafe or failing models, changed models, damaged
output folders, bad arguments, interruptions, concurrent runs and killed parents.

Every failure must be one specific message naming the model, task or file: never a traceback,
never the catch-all's "unexpected ...".
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from tests.conftest import every_tenth_task_id, whatif_executable
from whatif_bench.cli import main
from whatif_bench.evaluation import Forecast, evaluate, leaderboard, runner
from whatif_bench.evaluation.forecasters import ModelError, NoForecast, fingerprint
from whatif_bench.outputs import OutputError, output_lock, write_identity

SUBSET = 0.1  # every task of the corpus below: each stratum holds one (the command line's runs)
SLOW_MODEL = "import time\nclass Slow:\n    name = 'slow'\n    def predict(self, batch):\n        time.sleep(120)\n"


# the reports draw one skill plot, not five (tests/conftest.py): these tests check failures
pytestmark = pytest.mark.usefixtures("one_skill_plot_in_module")


@pytest.fixture(scope="module")
def corpus_path(one_target_corpus):
    """epanet/pressure_10 alone (the session's; no test here changes it)."""
    return one_target_corpus


@pytest.fixture(scope="module")
def some_tasks(corpus_path) -> list[str]:
    """36 of the corpus's 360 tasks (``every_tenth_task_id``; three chunks of at most 16): the
    tasks of the evaluations run through the Python API (``SUBSET`` is all 360)."""
    return every_tenth_task_id(corpus_path)


@pytest.fixture(scope="module")
def clean(corpus_path, some_tasks, tmp_path_factory):
    """The leaderboard of naive and ridge alone, to compare runs with a failing model to."""
    out = tmp_path_factory.mktemp("clean")
    return evaluate(corpus_path, ["naive", "ridge"], out, task_ids=some_tasks, progress=False)


def whatif(capsys, *args: str) -> tuple[int, str, str]:
    """Run the command line in this process: (exit code, stdout, stderr)."""
    try:
        code = main(list(args))
    except SystemExit as exc:  # argparse's usage errors
        code = exc.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_clean_error(err: str, *fragments: str) -> None:
    assert "Traceback" not in err and "unexpected" not in err, err
    for fragment in fragments:
        assert fragment in err, err


def point(t, value=None):
    return Forecast(
        point=np.full(t.prediction_length, t.history_target[-1] if value is None else value)
    )


class Bad:
    """A model failing in one of several ways (``mode``)."""

    def __init__(self, mode: str, name: str = "bad") -> None:
        self.mode, self.name = mode, name

    def predict(self, batch):
        n, mode = len(batch), self.mode
        if mode == "raises":
            raise RuntimeError("boom")
        if mode == "none":
            return None
        if mode == "not-a-list":
            return 42
        if mode == "too-few":
            return [point(t) for t in batch[:-1]]
        if mode == "none-items":
            return [None] * n
        if mode == "wrong-length":
            return [Forecast(point=np.zeros(t.prediction_length + 1)) for t in batch]
        if mode == "wrong-quantiles":
            return [Forecast(quantiles=np.zeros((t.prediction_length - 1, 9))) for t in batch]
        if mode in ("nan", "inf"):  # past Forecast's own check, as a duck-typed object
            value = np.nan if mode == "nan" else np.inf
            return [SimpleNamespace(point=np.full(t.prediction_length, value)) for t in batch]
        if mode == "negative-seconds":  # Forecast does not check its seconds: the runner does
            return [Forecast(point=np.zeros(t.prediction_length), seconds=-1.0) for t in batch]
        if mode == "nan-seconds":
            return [Forecast(point=np.zeros(t.prediction_length), seconds=np.nan) for t in batch]
        if mode == "text-seconds":
            return [Forecast(point=np.zeros(t.prediction_length), seconds="1 s") for t in batch]
        if mode == "text-imputed":
            return [Forecast(point=np.zeros(t.prediction_length), imputed="yes") for t in batch]
        if mode == "half-no-forecast":  # the model's own word that it cannot do a task
            return [
                NoForecast(f"no answer for {t.task_id}") if i % 2 else point(t)
                for i, t in enumerate(batch)
            ]
        if mode == "half-nan":
            return [
                SimpleNamespace(point=np.full(t.prediction_length, np.nan)) if i % 2 else point(t)
                for i, t in enumerate(batch)
            ]
        raise AssertionError(mode)


FAILURES = [
    ("raises", "all", "predict raised RuntimeError: boom"),
    ("none", "all", "predict returned None"),
    ("not-a-list", "all", "predict returned a int, not a list of forecasts"),
    ("too-few", "all", "forecasts for"),
    ("none-items", "all", "forecast is None"),
    ("wrong-length", "all", "point forecast has shape"),
    ("wrong-quantiles", "all", "quantiles forecast has shape"),
    ("nan", "all", "point forecast has NaN or infinite values"),
    ("inf", "all", "point forecast has NaN or infinite values"),
    ("half-nan", "half", "point forecast has NaN or infinite values"),
    ("half-no-forecast", "half", "the model gave no forecast: no answer for "),
    ("negative-seconds", "all", "the forecast's seconds must be a finite number >= 0"),
    (
        "nan-seconds",
        "all",
        "the forecast's seconds must be a finite number >= 0 (or None), got nan",
    ),
    ("text-seconds", "all", "the forecast's seconds must be a finite number >= 0"),
    ("text-imputed", "all", "the forecast's imputed must be True or False, got 'yes'"),
]


# 1. Model names are file names: they never leave --out.


@pytest.mark.parametrize(
    "name", ["../escape", "../../escape", "/tmp/escape-abs", "a/b", "", ".hidden", 7, None]
)
def test_an_unsafe_model_name_is_refused_before_any_work(tmp_path, corpus_path, name):
    out = tmp_path / "deep" / "out"
    with pytest.raises((OutputError, ModelError), match="Bad") as info:
        evaluate(corpus_path, ["naive", Bad("raises", name=name)], out, progress=False)
    assert "cannot be used as a file name" in str(info.value) or "must be a string" in str(
        info.value
    )
    assert not (tmp_path / "deep" / "escape").exists() and not (tmp_path / "escape").exists()
    assert not Path("/tmp/escape-abs").exists()
    assert not (out / "per_task").exists()


def test_an_unsafe_model_name_from_the_command_line(tmp_path, corpus_path, capsys):
    model = tmp_path / "evil.py"
    model.write_text(
        "class Evil:\n    name = '../../evil'\n    def predict(self, batch):\n        return []\n"
    )
    out = tmp_path / "a" / "out"
    code, _, err = whatif(
        capsys, "evaluate", str(corpus_path), "--models", f"naive,{model}:Evil", "--out", str(out)
    )
    assert code == 1
    assert_clean_error(err, "evil.Evil", "'../../evil' cannot be used as a file name")
    assert not (tmp_path / "evil").exists() and not (tmp_path / "a" / "evil").exists()


# 2. A failing model fails its own tasks, is reported, and changes nobody else's score.


@pytest.mark.parametrize(("mode", "how_many", "reason"), FAILURES)
@pytest.mark.one_quick  # about 8 s over all its cases
def test_a_failing_model_is_reported_by_task_and_does_not_move_the_others(
    tmp_path, corpus_path, some_tasks, clean, mode, how_many, reason
):
    models = ["naive", "ridge", Bad(mode)]
    result = evaluate(corpus_path, models, tmp_path / "o", task_ids=some_tasks, progress=False)
    n_tasks = result.per_task["task_id"].nunique()
    failures = result.failures
    assert set(failures["model"]) == {"bad"}
    assert failures["failed"].str.contains(reason, regex=False).all(), failures["failed"].iloc[0]
    expected = n_tasks if how_many == "all" else n_tasks // 2
    assert len(failures) == expected
    board = result.leaderboard.set_index("model")
    assert list(board.index)[-1] == "bad" or how_many == "half"  # never vanishes
    assert board.loc["bad", "num_tasks"] == n_tasks - expected
    assert board.loc["bad", "num_failed"] == expected
    assert board.loc["naive", "num_tasks"] == board.loc["ridge", "num_tasks"] == n_tasks
    reference = clean.leaderboard.set_index("model")
    for model in ("naive", "ridge"):
        assert board.loc[model, "skill_score"] == pytest.approx(
            reference.loc[model, "skill_score"], rel=1e-12
        )
    assert (board.loc["ridge", "win_rate"] > 0.5) or how_many == "half"  # beats the failed model
    assert "num_tasks" in (tmp_path / "o" / "leaderboard.md").read_text()
    per_task = pd.read_parquet(tmp_path / "o" / "per_task.parquet")
    assert per_task.loc[per_task["model"] == "bad", "wql"].isna().sum() == expected
    failed = per_task[per_task["failed"] != ""]
    assert failed["seconds"].isna().all() and not failed["imputed"].any()
    assert (per_task.loc[per_task["model"] != "bad", "failed"] == "").all()
    line = result.failure_summary()[0]
    assert line.startswith(f"model 'bad' failed on {expected:,} of {n_tasks:,} tasks (first: ")


@pytest.mark.parametrize("mode", ["negative-seconds", "text-imputed", "half-no-forecast"])
@pytest.mark.one_quick  # about 1 s over all its cases
def test_bad_seconds_or_imputed_fail_the_task_in_this_process_too(
    tmp_path, corpus_path, some_tasks, mode
):
    """model_timeout=None: predict runs in this process, where the runner reads the forecasts
    themselves (not their copies from a child process); the same check applies."""
    result = evaluate(
        corpus_path, ["naive", Bad(mode)], tmp_path / "o", task_ids=some_tasks, progress=False,
        model_timeout=None,
    )  # fmt: skip
    how_many, reason = {m: (h, r) for m, h, r in FAILURES}[mode]
    failures = result.failures
    n_tasks = result.per_task["task_id"].nunique()
    assert len(failures) == (n_tasks if how_many == "all" else n_tasks // 2)
    assert set(failures["model"]) == {"bad"}
    assert failures["failed"].str.contains(reason, regex=False).all()


@pytest.mark.slow  # about 2 s
def test_failures_in_worker_processes_are_reported_the_same(
    tmp_path, corpus_path, some_tasks, clean
):
    result = evaluate(
        corpus_path,
        ["naive", "ridge", Bad("half-nan")],
        tmp_path / "o",
        task_ids=some_tasks,
        jobs=2,
        progress=False,
    )
    assert len(result.failures) == result.per_task["task_id"].nunique() // 2
    board, reference = (r.leaderboard.set_index("model") for r in (result, clean))
    assert board.loc["ridge", "skill_score"] == reference.loc["ridge", "skill_score"]


def test_a_failing_reference_is_reported_and_scores_nobody(tmp_path, corpus_path, some_tasks):
    result = evaluate(
        corpus_path, [Bad("raises"), "naive"], tmp_path / "o", reference="bad", progress=False,
        task_ids=some_tasks,
    )  # fmt: skip
    (line,) = result.failure_summary()
    assert "as the reference, it leaves those tasks out of every skill score" in line
    board = result.leaderboard.set_index("model")
    assert board["skill_score"].isna().all() and board.loc["naive", "num_tasks"] > 0


def test_aggregates_leave_out_failed_tasks_pair_by_pair():
    nan = np.nan
    errors = pd.DataFrame(
        {"ref": [1.0, 1.0, 1.0, 1.0], "a": [0.5, 0.5, nan, nan], "b": [2.0, 2.0, 2.0, 2.0]}
    )
    board = leaderboard(errors, "ref")
    assert board.loc["a", "skill_score"] == pytest.approx(0.5)  # its two tasks
    assert board.loc["b", "skill_score"] == pytest.approx(-1.0)  # all four
    assert board["num_tasks"].to_dict() == {"a": 2, "ref": 4, "b": 4}
    assert board["win_rate"].to_dict() == {"a": 1.0, "ref": 0.5, "b": 0.0}
    errors["a"] = nan  # failed everywhere: listed, without a score, last
    board = leaderboard(errors, "ref")
    assert board.index[-1] == "a" and np.isnan(board.loc["a", "skill_score"])
    assert board.loc["a", "num_tasks"] == 0 and board.loc["ref", "win_rate"] == 1.0


def test_the_command_line_warns_per_failing_model_and_exits_1(tmp_path, corpus_path, capsys):
    model = tmp_path / "flaky.py"
    model.write_text(
        "class Flaky:\n"
        "    name = 'flaky'\n"
        "    def predict(self, batch):\n"
        "        raise RuntimeError('boom')\n"
    )
    out = tmp_path / "o"
    code, stdout, err = whatif(
        capsys,
        "evaluate",
        str(corpus_path),
        "--models",
        f"naive,ridge,{model}:Flaky",
        "--subset",
        str(SUBSET),
        "--out",
        str(out),
    )
    assert code == 1
    assert_clean_error(
        err,
        "warning: model 'flaky' failed on",
        "predict raised RuntimeError: boom",
        "error: 1 model(s) failed",
    )
    assert err.count("warning:") == 1
    board = pd.read_csv(out / "leaderboard.csv").set_index("model")
    assert board.loc["flaky", "num_tasks"] == 0 and board.loc["ridge", "num_failed"] == 0
    assert board.loc["ridge", "num_tasks"] > 0 and "tasks" in stdout
    assert re.search(r"flaky +skill +n/a +win rate +n/a +tasks 0 +failed 360", stdout), stdout
    assert "| num_tasks | num_failed |" in (out / "leaderboard.md").read_text()


@pytest.mark.slow  # about 2 s
def test_failed_chunks_are_retried_and_a_fixed_model_clears_them(tmp_path, corpus_path, capsys):
    model = tmp_path / "flaky.py"
    model.write_text(
        "class M:\n    name = 'm'\n    def predict(self, batch):\n        raise RuntimeError('boom')\n"
    )
    args = (
        "evaluate",
        str(corpus_path),
        "--models",
        f"naive,{model}:M",
        "--subset",
        str(SUBSET),
        "--out",
        str(tmp_path / "o"),
    )
    assert whatif(capsys, *args)[0] == 1
    model.write_text(
        "from whatif_bench.evaluation import Forecast\n"
        "import numpy as np\n"
        "class M:\n    name = 'm'\n    def predict(self, batch):\n"
        "        return [Forecast(point=np.full(t.prediction_length, 1.0)) for t in batch]\n"
    )
    code, _, err = whatif(capsys, *args)
    assert code == 0, err
    assert_clean_error(err, "note: model 'm' changed since its results")
    board = pd.read_csv(tmp_path / "o" / "leaderboard.csv").set_index("model")
    assert board.loc["m", "num_failed"] == 0


# 3. Results are keyed by the model's fingerprint.


class Scaled:
    name = "scaled"

    def __init__(self, factor: float = 1.0) -> None:
        self.factor = factor
        self.helper = object()  # its repr holds an address: not part of the fingerprint

    def predict(self, batch):
        return [point(t, self.factor * t.history_target[-1]) for t in batch]


def test_fingerprints_follow_parameters_class_and_version():
    assert fingerprint(Scaled(2.0))["id"] == fingerprint(Scaled(2.0))["id"]
    assert fingerprint(Scaled(2.0))["id"] != fingerprint(Scaled(3.0))["id"]
    assert fingerprint("ridge")["id"] == fingerprint("ridge")["id"] != fingerprint("linear")["id"]
    assert fingerprint("ridge")["params"]["alpha"] == 10.0 and "version" in fingerprint("ridge")
    user = fingerprint(Scaled())
    assert user["class"].endswith("Scaled") and len(user["source_sha256"]) == 64


@pytest.mark.slow  # about 1 s
def test_a_changed_model_of_the_same_name_is_recomputed(tmp_path, corpus_path, some_tasks):
    out, tasks = tmp_path / "o", some_tasks
    first = evaluate(corpus_path, ["naive", Scaled(1.0)], out, task_ids=tasks, progress=False)
    again = evaluate(corpus_path, ["naive", Scaled(1.0)], out, task_ids=tasks, progress=False)
    assert again.notes == []  # same model: resumed from its chunks
    changed = evaluate(corpus_path, ["naive", Scaled(1.5)], out, task_ids=tasks, progress=False)
    assert any("model 'scaled' changed" in n for n in changed.notes)
    wql = {
        r.model: r
        for r in changed.per_task.groupby("model")["wql"].mean().reset_index().itertuples()
    }
    before = first.per_task.groupby("model")["wql"].mean()
    assert wql["scaled"].wql != pytest.approx(before["scaled"])
    assert wql["naive"].wql == pytest.approx(before["naive"])
    stored = json.loads((out / "per_task" / "scaled" / "model.json").read_text())
    assert stored["id"] == fingerprint(Scaled(1.5))["id"]


def test_a_model_whose_params_raise_is_named():
    class Broken(Scaled):
        def params(self):
            raise KeyError("weights")

    with pytest.raises(ModelError, match="model 'scaled': params\\(\\) raised KeyError"):
        fingerprint(Broken())


# 4. Models that cannot be loaded; bad --models lists.

MODEL_FILES = [
    ("syntax.py", "class M(:\n", "M", "syntax.py failed: syntax error at line 1: "),
    (
        "missing_import.py",
        "import no_such_module_xyz\nclass M: pass\n",
        "M",
        "failed: ModuleNotFoundError: No module named 'no_such_module_xyz'",
    ),
    (
        "raising.py",
        "raise RuntimeError('broken at import')\n",
        "M",
        "raising.py failed: RuntimeError: broken at import",
    ),
    ("no_class.py", "x = 1\n", "M", "has no class 'M'"),
    ("not_class.py", "M = 3\n", "M", "is not a class"),
    (
        "ctor.py",
        "class M:\n    def __init__(self):\n        raise ValueError('no weights')\n",
        "M",
        "creating M() raised ValueError: no weights",
    ),
]


@pytest.mark.parametrize(("file", "text", "cls", "message"), MODEL_FILES)
def test_a_model_module_that_cannot_be_used(
    tmp_path, corpus_path, capsys, file, text, cls, message
):
    path = tmp_path / file
    path.write_text(text)
    spec = f"{path}:{cls}"
    code, _, err = whatif(
        capsys,
        "evaluate",
        str(corpus_path),
        "--models",
        f"naive,{spec}",
        "--out",
        str(tmp_path / "o"),
    )
    assert code == 1
    assert_clean_error(err, f"model '{spec}'", message)


@pytest.mark.parametrize(
    ("models", "message"),
    [
        ("prophet", "unknown model 'prophet'"),
        (
            "naive,no_such_package_xyz.mod:M",
            "model 'no_such_package_xyz.mod:M': importing no_such_package_xyz.mod failed: "
            "ModuleNotFoundError: No module named 'no_such_package_xyz'",
        ),
        ("naive,/no/such/file.py:M", "file /no/such/file.py not found"),
        ("naive,:M", "expected FILE.py:Class"),
        ("naive,naive", "--models lists naive more than once"),
        ("naive,,ridge", "has an empty item"),
        ("naive,", "has an empty item"),
        ("", "--models is empty"),
        ("naive --corpus-missing", "no such corpus file"),
        (" , ", "--models is empty"),
    ],
)
def test_bad_model_lists(tmp_path, corpus_path, capsys, models, message):
    if models.endswith(" --corpus-missing"):
        models, corpus_path = models.split()[0], tmp_path / "missing.h5"
    code, _, err = whatif(
        capsys, "evaluate", str(corpus_path), "--models", models, "--out", str(tmp_path / "o")
    )
    assert code == 1
    assert_clean_error(err, message)


# 5. Damaged output folders.


@pytest.mark.parametrize(
    ("content", "why"), [("", "empty"), ("{not json", "Expecting"), ("[1, 2]", "JSON object")]
)
def test_a_damaged_manifest_is_named(tmp_path, corpus_path, capsys, content, why):
    out = tmp_path / "o"
    out.mkdir()
    write_identity(out, "evaluation")  # an evaluation folder (one whose manifest was damaged)
    (out / "manifest.json").write_text(content)
    code, _, err = whatif(
        capsys, "evaluate", str(corpus_path), "--models", "naive", "--out", str(out)
    )
    assert code == 1
    assert_clean_error(err, f"{out / 'manifest.json'}:", why, "delete it or use a new --out")


@pytest.mark.parametrize("damage", ["half", "empty", "garbage", "other-chunk"])
@pytest.mark.one_quick  # about 3 s over all its cases
def test_a_damaged_chunk_is_recomputed_and_said(
    tmp_path, corpus_path, some_tasks, monkeypatch, damage
):
    monkeypatch.setattr(runner, "CHUNK", 16)
    out = tmp_path / "o"
    first = evaluate(corpus_path, ["naive", "ridge"], out, task_ids=some_tasks, progress=False)
    chunks = sorted((out / "per_task" / "ridge").glob("chunk-*.parquet"))
    target = chunks[1]
    data, kept = target.read_bytes(), pd.read_parquet(target)
    if damage == "half":
        target.write_bytes(data[: len(data) // 2])
    elif damage == "empty":
        target.write_bytes(b"")
    elif damage == "garbage":
        target.write_bytes(b"not parquet at all" * 10)
    else:
        target.write_bytes(chunks[0].read_bytes())
    again = evaluate(corpus_path, ["naive", "ridge"], out, task_ids=some_tasks, progress=False)
    assert (
        len(again.notes) == 1
        and str(target) in again.notes[0]
        and "recomputing it" in again.notes[0]
    )
    # the same results but for the measured seconds (runner.TIMING_COLUMNS)
    pd.testing.assert_frame_equal(
        runner.without_timings(again.per_task), runner.without_timings(first.per_task)
    )
    rewritten = pd.read_parquet(target)  # rewritten whole
    pd.testing.assert_frame_equal(runner.without_timings(rewritten), runner.without_timings(kept))
    assert (rewritten["seconds"] > 0).all()


# 6. Bad --out, --jobs, --subset, --seed.


def test_bad_out_folders_fail_before_any_work(tmp_path, corpus_path, capsys):
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    cases = [
        (str(a_file), "exists and is not a folder"),
        ("", "the output folder (--out) is empty"),
        (str(a_file / "sub"), "is a file, not a folder"),
        (str(a_file / "sub" / "deeper"), "is a file, not a folder"),
        (str(corpus_path), "exists and is not a folder"),
    ]
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('must not be imported')\n")
    for out, message in cases:
        code, _, err = whatif(
            capsys, "evaluate", str(corpus_path), "--models", f"naive,{broken}:M", "--out", out
        )
        assert code == 1, out
        assert_clean_error(err, message)
        assert "must not be imported" not in err
    assert a_file.read_text() == "x"


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--jobs", "0", "must be a positive integer (>= 1), got 0"),
        ("--jobs", "-5", "must be a positive integer (>= 1), got -5"),
        ("--jobs", "two", "expected an integer, got 'two'"),
        ("--subset", "nan", "must be a fraction in (0, 1], got 'nan'"),
        ("--subset", "2", "must be a fraction in (0, 1], got '2'"),
        ("--subset", "0", "must be a fraction in (0, 1], got '0'"),
        ("--subset", "inf", "must be a fraction in (0, 1], got 'inf'"),
        ("--subset", "half", "must be a fraction in (0, 1], got 'half'"),
        ("--seed", "-1", "must be between 0 and 2**63 - 1, got -1"),
        ("--seed", str(2**63), "must be between 0 and 2**63 - 1"),
    ],
)
def test_bad_numbers_are_usage_errors(tmp_path, corpus_path, capsys, option, value, message):
    code, _, err = whatif(
        capsys, "evaluate", str(corpus_path), "--out", str(tmp_path / "o"), option, value
    )
    assert code == 2
    assert_clean_error(err, option, message)
    assert not (tmp_path / "o").exists()


# 7. Ctrl-C keeps finished chunks and says so; two runs never share a folder.


def test_ctrl_c_keeps_finished_chunks_and_says_how_to_resume(
    tmp_path, corpus_path, capsys, monkeypatch
):
    monkeypatch.setattr(runner, "CHUNK", 16)
    real, calls = runner._score_chunk, []

    def interrupted(*args):
        calls.append(args)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(runner, "_score_chunk", interrupted)
    out = tmp_path / "o"
    args = (
        "evaluate",
        str(corpus_path),
        "--jobs",
        "1",  # the chunks are scored in this process, where the patch is
        "--models",
        "naive",
        "--subset",
        str(SUBSET),
        "--out",
        str(out),
    )
    code, _, err = whatif(capsys, *args)
    assert code == 130
    assert (
        "interrupted; finished chunks were kept in" in err
        and "run the same command again to resume" in err
    )
    assert "nothing was written" not in err
    assert [p.name for p in (out / "per_task" / "naive").glob("chunk-*.parquet")] == [
        "chunk-00000.parquet"
    ]
    assert not list(out.rglob("*.partial*")) and not (out / "per_task.parquet").exists()
    monkeypatch.setattr(runner, "_score_chunk", real)
    code, _, err = whatif(capsys, *args)
    assert code == 0, err


def test_a_second_evaluation_into_the_same_folder_fails_at_once(tmp_path, corpus_path, some_tasks):
    out = tmp_path / "o"
    out.mkdir()
    with output_lock(out / "evaluation"):  # what a running evaluation holds
        with pytest.raises(
            OutputError, match="another whatif evaluate is writing into this folder"
        ):
            evaluate(corpus_path, ["naive"], out, task_ids=some_tasks, progress=False)
    evaluate(corpus_path, ["naive"], out, task_ids=some_tasks, progress=False)  # free again


@pytest.mark.slow  # about 2 s
def test_a_second_evaluate_process_fails_at_once_while_the_first_runs(tmp_path, corpus_path):
    model = tmp_path / "slow.py"
    model.write_text(SLOW_MODEL)
    out = tmp_path / "o"
    args = ["evaluate", str(corpus_path), "--out", str(out), "--subset", str(SUBSET)]
    first = subprocess.Popen(
        [*whatif_executable(), *args, "--models", f"naive,{model}:Slow"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while (
            time.monotonic() < deadline and not (out / "per_task" / "slow" / "model.json").exists()
        ):
            time.sleep(0.2)
        assert first.poll() is None
        started = time.monotonic()
        second = subprocess.run(
            [*whatif_executable(), *args, "--models", "naive"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode == 1 and time.monotonic() - started < 30
        assert_clean_error(
            second.stderr, f"{out}: another whatif evaluate is writing into this folder"
        )
    finally:
        first.kill()
        first.wait()


def test_reports_are_written_atomically(tmp_path, corpus_path):
    out = tmp_path / "o"
    evaluate(corpus_path, ["naive"], out, subset=SUBSET, progress=False)
    assert not list(out.rglob("*.partial*"))
    assert json.loads((out / "manifest.json").read_text())["subset"] == SUBSET


# 8. Workers end with their parent.


def _children(pid: int) -> dict[int, str]:
    """Processes whose parent is ``pid``: pid -> start time (to tell a reused pid apart)."""
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found[int(stat.parent.name)] = fields[19]
    return found


def _alive(pid: int, start: str) -> bool:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[19] == start and fields[0] != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc and PR_SET_PDEATHSIG")
@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM])
@pytest.mark.slow  # a real evaluate process killed, twice: about 4 s
def test_workers_die_with_a_killed_parent(tmp_path, corpus_path, how):
    model = tmp_path / "slow.py"
    model.write_text(SLOW_MODEL)
    command = [
        *whatif_executable(),
        "evaluate",
        str(corpus_path),
        "--models",
        f"naive,{model}:Slow",
        "--reference",
        "naive",
        "--jobs",
        "2",
        "--subset",
        "0.5",
        "--out",
        str(tmp_path / "o"),
    ]
    parent = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    children: dict[int, str] = {}
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(children) < 2:
            time.sleep(0.3)
            children = _children(parent.pid)
            assert parent.poll() is None, "the evaluation ended before its workers started"
        assert len(children) >= 2, children
        time.sleep(1.0)  # let the workers run their initializer and pick up tasks
        children = _children(parent.pid)
        os.kill(parent.pid, how)
        parent.wait(timeout=30)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(_alive(p, s) for p, s in children.items()):
            time.sleep(0.2)
        assert not [p for p, s in children.items() if _alive(p, s)]
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        for pid, start in {**children, **_children(parent.pid)}.items():
            if _alive(pid, start):  # only if the test failed: do not leave orphans behind
                os.kill(pid, signal.SIGKILL)
