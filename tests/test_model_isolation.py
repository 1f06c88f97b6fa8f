"""Models cannot harm each other or the run, and forms modules cannot end a command
(docs/RELIABILITY.md, "Models cannot harm each other or the run").

Every case goes through the real command line (``run_whatif``) on a one-target corpus: a model
that writes into its inputs, never returns, calls ``exit()`` or ``os._exit``, segfaults or
raises fails its own tasks, with the reason in per_task.parquet and a ``warning:`` line, and
the baseline next to it scores exactly what it scores alone. A forms module that exits or
crashes at import is an ``error:`` naming it, never a pass.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.conftest import run_whatif, small_corpus, whatif_executable

MODELS = """\
import ctypes
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from whatif_bench.evaluation import Forecast


def last(batch):
    return [Forecast(point=np.full(t.prediction_length, float(t.history_target[-1])))
            for t in batch]


class Mutator:
    name = "mutator"

    def predict(self, batch):
        for t in batch:
            t.history_target[:] = 0.0
            t.future_covariates *= 2.0
        return last(batch)


class Hang:
    name = "hang"

    def predict(self, batch):
        while True:
            time.sleep(0.05)


class Exits:
    name = "exits"

    def predict(self, batch):
        raise SystemExit(3)


class HardExit:
    name = "hard-exit"

    def predict(self, batch):
        os._exit(7)


class Segfault:
    name = "segfault"

    def predict(self, batch):
        ctypes.string_at(0)


class Raises:
    name = "raises"

    def predict(self, batch):
        raise RuntimeError("boom")
"""

TIMEOUT = "2"

# (class, model name, extra options, reason in the failed column)
MISBEHAVING = [
    ("Mutator", "mutator", (), "predict raised ValueError: assignment destination is read-only"),
    (
        "Mutator",
        "mutator",
        ("--model-timeout", "0"),  # in this process: read-only arrays still protect naive
        "predict raised ValueError: assignment destination is read-only",
    ),
    ("Hang", "hang", (), f"predict took longer than {TIMEOUT} s"),
    ("Exits", "exits", (), "predict called exit(3)"),
    ("HardExit", "hard-exit", (), "predict ended the model's process (exit status 7"),
    ("Segfault", "segfault", (), "the model's process died during predict (SIGSEGV, signal 11)"),
    ("Raises", "raises", (), "predict raised RuntimeError: boom"),
]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return small_corpus(tmp_path_factory.mktemp("isolation"), ("epanet/pressure_10",))


@pytest.fixture(scope="module")
def models_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("models") / "models.py"
    path.write_text(MODELS)
    return path


@pytest.fixture(scope="module")
def naive_alone(corpus, tmp_path_factory):
    """naive's per-task errors in a run of its own."""
    out = tmp_path_factory.mktemp("alone") / "o"
    result = run_whatif("evaluate", str(corpus), "--models", "naive", "--out", str(out))
    assert result.returncode == 0, result.stderr
    return pd.read_parquet(out / "per_task.parquet").set_index("task_id")


def assert_no_crash_output(stderr: str) -> None:
    for text in ("Traceback", "Fatal Python error", "unexpected"):
        assert text not in stderr, stderr


def assert_naive_unchanged(per_task: pd.DataFrame, alone: pd.DataFrame) -> None:
    naive = per_task[per_task["model"] == "naive"].set_index("task_id").loc[alone.index]
    assert (naive["failed"] == "").all()
    for column in ("wql", "wape"):  # exactly, not approximately
        assert np.array_equal(naive[column].to_numpy(), alone[column].to_numpy()), column


@pytest.mark.parametrize(
    ("cls", "name", "options", "reason"),
    MISBEHAVING,
    ids=["mutator", "mutator-in-process", "hang", "system-exit", "os-exit", "segfault", "raises"],
)
def test_a_misbehaving_model_fails_only_its_own_tasks(
    tmp_path, corpus, models_file, naive_alone, cls, name, options, reason
):
    out = tmp_path / "o"
    started = time.monotonic()
    result = run_whatif(
        "evaluate",
        str(corpus),
        "--models",
        f"{models_file}:{cls},naive",
        "--model-timeout",
        TIMEOUT,
        *options,
        "--out",
        str(out),
    )
    elapsed = time.monotonic() - started
    assert result.returncode == 1, result.stderr
    assert_no_crash_output(result.stderr)
    total = len(naive_alone)
    assert f"warning: model '{name}' failed on {total:,} of {total:,} tasks (first: " in (
        result.stderr
    )
    assert reason in result.stderr, result.stderr
    assert "error: 1 model(s) failed on some tasks" in result.stderr
    assert result.stderr.count("warning:") == 1, result.stderr
    per_task = pd.read_parquet(out / "per_task.parquet")
    failed = per_task.loc[per_task["model"] == name, "failed"]
    assert len(failed) == total and failed.str.contains(reason, regex=False).all()
    assert per_task.loc[per_task["model"] == name, "wql"].isna().all()
    assert_naive_unchanged(per_task, naive_alone)
    if name == "hang":  # one batch waits out the limit; the next is not run at all
        assert failed.str.contains("not called again").any()
        assert elapsed < 60


def test_dying_models_in_worker_processes_fail_their_tasks_only(
    tmp_path, corpus, models_file, naive_alone
):
    out = tmp_path / "o"
    result = run_whatif(
        "evaluate",
        str(corpus),
        "--models",
        f"{models_file}:HardExit,{models_file}:Segfault,naive",
        "--jobs",
        "2",
        "--out",
        str(out),
    )
    assert result.returncode == 1, result.stderr
    assert_no_crash_output(result.stderr)
    assert "TerminatedWorkerError" not in result.stderr
    assert "warning: model 'hard-exit' failed on" in result.stderr
    assert "warning: model 'segfault' failed on" in result.stderr
    assert "error: 2 model(s) failed on some tasks" in result.stderr
    assert_naive_unchanged(pd.read_parquet(out / "per_task.parquet"), naive_alone)


@pytest.mark.parametrize("value", ["-1", "soon", "inf", "nan", "86401", "1e400"])
def test_a_bad_model_timeout_is_a_usage_error(tmp_path, corpus, value):
    result = run_whatif(
        "evaluate", str(corpus), "--model-timeout", value, "--out", str(tmp_path / "o")
    )
    assert result.returncode == 2
    assert "--model-timeout: must be a number of seconds > 0 and at most 86,400" in result.stderr
    assert not (tmp_path / "o").exists()


def test_the_model_timeout_default_is_one_number_shown_in_the_help():
    from whatif_bench.evaluation import cli, runner

    assert cli.DEFAULT_MODEL_TIMEOUT_S == runner.DEFAULT_MODEL_TIMEOUT_S
    assert cli.model_timeout("none") is None and cli.model_timeout("0") is None
    assert cli.model_timeout("2.5") == 2.5
    result = run_whatif("evaluate", "--help")
    assert "--model-timeout SECONDS" in result.stdout
    assert "(default: 600.0)" in " ".join(result.stdout.split())


def test_evaluate_refuses_a_bad_model_timeout(tmp_path, corpus):
    from whatif_bench.evaluation import evaluate
    from whatif_bench.evaluation.runner import EvaluationError

    for bad in (0, -1.0, float("inf"), True, "10"):
        with pytest.raises(EvaluationError, match="model_timeout must be a finite number"):
            evaluate(corpus, ["naive"], tmp_path / "o", model_timeout=bad, progress=False)


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_ctrl_c_during_a_model_s_predict_stops_the_run_and_its_child(tmp_path, corpus, models_file):
    out = tmp_path / "o"
    command = [*whatif_executable(), "evaluate", str(corpus), "--models"]
    command += [f"{models_file}:Hang,naive", "--out", str(out)]  # the default limit: 600 s
    run = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        children: list[int] = []
        while time.monotonic() < deadline and not children:
            time.sleep(0.2)
            children = _children(run.pid)  # the forked child running Hang.predict
        assert children, "predict never started in a child process"
        run.send_signal(signal.SIGINT)
        _, err = run.communicate(timeout=30)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert run.returncode == 130, err
    assert "interrupted; finished chunks were kept in" in err
    assert "Traceback" not in err
    time.sleep(0.5)
    assert not [pid for pid in children if Path(f"/proc/{pid}").exists()]


# Forms modules that end or crash the process at import.

FORMS_MODULES = [
    ("import os\nos._exit(0)\n", "it ended the process (exit status 0)"),
    ("import sys\nsys.exit(0)\n", "it called exit(0)"),
    ("import ctypes\nctypes.string_at(0)\n", "it crashed the process (SIGSEGV, signal 11)"),
]
COMMANDS = [
    ("relationships", "list"),
    ("relationships", "check"),
    ("generate", "--out", "{tmp}/g.h5"),
]


@pytest.mark.parametrize(("source", "message"), FORMS_MODULES, ids=["os-exit", "exit", "segfault"])
@pytest.mark.parametrize("command", COMMANDS, ids=["list", "check", "generate"])
def test_a_forms_module_that_ends_the_process_is_an_error(tmp_path, source, message, command):
    forms = tmp_path / "bad_forms.py"
    forms.write_text(source)
    argv = [part.format(tmp=tmp_path) for part in command]
    result = run_whatif(*argv, "--forms", str(forms))
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    assert result.stdout == ""
    assert_no_crash_output(result.stderr)
    assert result.stderr.startswith(f"error: form module: importing {forms} failed: {message}"), (
        result.stderr
    )
    assert not (tmp_path / "g.h5").exists()
