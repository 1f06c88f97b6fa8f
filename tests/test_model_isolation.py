"""Models cannot harm each other or the run, and forms modules cannot end a command
(docs/RELIABILITY.md, "Models cannot harm each other or the run").

Every misbehaving model or module goes through the command line in a new process, on a one-target
corpus (``run_whatif``; for an evaluation that runs to its reports,
``run_whatif_drawing_one_skill_plot``: the same ``cli.main``, one skill plot instead of five;
the usage errors run in-process): a model that writes into its inputs, never returns, calls ``exit()`` or ``os._exit``, segfaults or
raises fails its own tasks, with the reason in per_task.parquet and a ``warning:`` line, and
the baseline next to it scores exactly what it scores alone (the two mutator cases run alone
with naive, the other five share one run, each failing only its own tasks there); so does a
model that kills the worker process it runs in (``--jobs 2 --model-timeout 0``), and a worker
death that does not repeat loses nothing. A forms module or a models module that exits, crashes or hangs at
import is an ``error:`` naming it, never a pass. ``usercode.run_in_child``, the one way user
code runs in a child, is tested on its own at the end.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.conftest import (
    drawing_one_skill_plot,
    run_cli,
    run_main,
    run_whatif,
    run_whatif_drawing_one_skill_plot,
    sigint_as_ctrl_c,
    whatif_executable,
)
from whatif_bench.evaluation import runner

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


class KillsWorker:
    name = "kills-worker"

    def predict(self, batch):
        os.kill(os.getpid(), signal.SIGKILL)


class KillsOnRestraint:
    name = "kills-on-restraint"

    def predict(self, batch):
        if any(t.task_id.endswith("/restraint") for t in batch):
            os.kill(os.getpid(), signal.SIGKILL)
        return last(batch)


class OwnForecast:  # a forecast class of this module: it cannot be pickled back by name

    def __init__(self, point, imputed, seconds):
        self.point, self.imputed, self.seconds = point, imputed, seconds


class SlowImputer:  # 0.3 s per batch; Novel forecasts imputed, Replay ones timed 0.125 s

    name = "slow-imputer"

    def predict(self, batch):
        time.sleep(0.3)
        return [
            OwnForecast(
                np.full(t.prediction_length, float(t.history_target[-1])),
                imputed=t.task_id.endswith("/novel"),
                seconds=None if t.task_id.endswith("/novel") else 0.125,
            )
            for t in batch
        ]
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
def corpus(one_target_corpus):
    """epanet/pressure_10 alone (the session's; no test here changes it)."""
    return one_target_corpus


@pytest.fixture(scope="module")
def models_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("models") / "models.py"
    path.write_text(MODELS)
    return path


@pytest.fixture(scope="module")
def naive_alone(corpus, tmp_path_factory):
    """naive's per-task errors in a run of its own (in this process: the numbers are the same)."""
    out = tmp_path_factory.mktemp("alone") / "o"
    with drawing_one_skill_plot():
        result = run_cli("evaluate", str(corpus), "--models", "naive", "--out", str(out))
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


def run_misbehaving(corpus, models_file, out, classes, options=()) -> tuple[object, float]:
    """``whatif evaluate`` of the ``classes`` of ``models_file`` and naive in a new process,
    one process for the models (``--jobs 1``: a hang's next batch in it is not called at all):
    (the finished process, its seconds)."""
    models = [f"{models_file}:{cls}" for cls in classes]
    started = time.monotonic()
    result = run_whatif_drawing_one_skill_plot(
        "evaluate",
        str(corpus),
        "--jobs",
        "1",
        "--models",
        ",".join([*models, "naive"]),
        "--model-timeout",
        TIMEOUT,
        *options,
        "--out",
        str(out),
    )
    return result, time.monotonic() - started


# The cases without options after the first each cost a process of their own (about 5 s):
# they share this one run instead, each model failing its own tasks beside the others and
# naive (the first case, in the quick tier, and the in-process one still run alone).
TOGETHER = [case for case in MISBEHAVING[1:] if not case[2]]


@pytest.fixture(scope="module")
def misbehaving_together(corpus, models_file, tmp_path_factory):
    """The run of every model of ``TOGETHER`` beside naive: (process, seconds, out folder)."""
    out = tmp_path_factory.mktemp("together") / "o"
    classes = [case[0] for case in TOGETHER]
    return (*run_misbehaving(corpus, models_file, out, classes), out)


@pytest.mark.parametrize(
    ("cls", "name", "options", "reason"),
    MISBEHAVING,
    ids=["mutator", "mutator-in-process", "hang", "system-exit", "os-exit", "segfault", "raises"],
)
@pytest.mark.one_quick  # about 13 s over all its cases (3 s the first)
def test_a_misbehaving_model_fails_only_its_own_tasks(
    tmp_path, corpus, models_file, naive_alone, cls, name, options, reason, request
):
    if (cls, name, options, reason) in TOGETHER:
        result, elapsed, out = request.getfixturevalue("misbehaving_together")
        failing = len(TOGETHER)
    else:
        out, failing = tmp_path / "o", 1
        result, elapsed = run_misbehaving(corpus, models_file, out, [cls], options)
    assert result.returncode == 1, result.stderr
    assert_no_crash_output(result.stderr)
    total = len(naive_alone)
    assert f"warning: model '{name}' failed on {total:,} of {total:,} tasks (first: " in (
        result.stderr
    )
    assert reason in result.stderr, result.stderr
    assert f"error: {failing} model(s) failed on some tasks" in result.stderr
    # one warning line per failing model, this model's once
    assert result.stderr.count("warning:") == failing, result.stderr
    assert result.stderr.count(f"warning: model '{name}' failed on") == 1, result.stderr
    per_task = pd.read_parquet(out / "per_task.parquet")
    failed = per_task.loc[per_task["model"] == name, "failed"]
    assert len(failed) == total and failed.str.contains(reason, regex=False).all()
    assert per_task.loc[per_task["model"] == name, "wql"].isna().all()
    assert_naive_unchanged(per_task, naive_alone)
    if name == "hang":  # one batch waits out the limit; the next is not run at all
        assert failed.str.contains("not called again").any()
        assert elapsed < 60


# worker processes that die and are replaced: seconds each, so these four are marked slow
@pytest.mark.slow
def test_dying_models_in_worker_processes_fail_their_tasks_only(
    tmp_path, corpus, models_file, naive_alone
):
    out = tmp_path / "o"
    result = run_whatif_drawing_one_skill_plot(
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


WORKER_KILLED = "the worker process died (killed by signal 9 SIGKILL: out of memory, or killed)"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("cls", "name", "reason"),
    [
        ("KillsWorker", "kills-worker", WORKER_KILLED),
        ("HardExit", "hard-exit", "the worker process died (exit status 7)"),
    ],
    ids=["sigkill", "os-exit"],
)
def test_a_model_that_kills_its_worker_process_fails_only_its_own_tasks(
    tmp_path, corpus, models_file, naive_alone, cls, name, reason
):
    out = tmp_path / "o"
    result = run_whatif_drawing_one_skill_plot(
        "evaluate",
        str(corpus),
        "--models",
        f"{models_file}:{cls},naive",
        "--jobs",
        "2",
        "--model-timeout",
        "0",  # in the worker process itself: its death is the worker's
        "--out",
        str(out),
    )
    assert result.returncode == 1, result.stderr
    assert_no_crash_output(result.stderr)
    assert "TerminatedWorkerError" not in result.stderr
    assert f"note: {reason}; chunk 0 and the ones after it run again" in result.stderr
    assert (
        f"note: model '{name}' killed its worker process again when chunk 0 ran it alone: "
        + (f"{reason}; its tasks there fail and it is not called again")
        in result.stderr
    ), result.stderr
    total = len(naive_alone)
    assert f"warning: model '{name}' failed on {total:,} of {total:,} tasks (first: " in (
        result.stderr
    )
    assert "error: 1 model(s) failed on some tasks" in result.stderr
    per_task = pd.read_parquet(out / "per_task.parquet")
    failed = per_task.loc[per_task["model"] == name, "failed"]
    assert len(failed) == total and failed.str.startswith(reason).all()
    assert failed.str.contains("(on an earlier batch; not called again)", regex=False).any()
    assert_naive_unchanged(per_task, naive_alone)


DIES_ONCE = """\
import os
import signal

import numpy as np

from whatif_bench.evaluation import Forecast

MARKER = {marker!r}


class DiesOnce:
    name = "dies-once"

    def predict(self, batch):
        try:  # the first call of all (in any worker) kills its worker; the others forecast
            os.close(os.open(MARKER, os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            return [Forecast(point=np.full(t.prediction_length, float(t.history_target[-1])))
                    for t in batch]
        os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.slow
def test_a_worker_death_that_does_not_repeat_loses_nothing(tmp_path, corpus, naive_alone):
    marker = tmp_path / "died"
    models = tmp_path / "once.py"
    models.write_text(DIES_ONCE.format(marker=str(marker)))
    out = tmp_path / "o"
    result = run_whatif_drawing_one_skill_plot(
        "evaluate",
        str(corpus),
        "--models",
        f"{models}:DiesOnce,naive",
        "--jobs",
        "2",
        "--model-timeout",
        "0",
        "--out",
        str(out),
    )
    assert result.returncode == 0, result.stderr
    assert marker.exists()  # a worker did die
    assert f"note: {WORKER_KILLED}; chunk 0 and the ones after it run again" in result.stderr
    assert_no_crash_output(result.stderr)
    assert "warning:" not in result.stderr and "error:" not in result.stderr
    per_task = pd.read_parquet(out / "per_task.parquet")
    assert len(per_task) == 2 * len(naive_alone) and (per_task["failed"] == "").all()
    assert_naive_unchanged(per_task, naive_alone)


@pytest.mark.slow
def test_a_model_that_kills_its_worker_in_the_relational_pass_fails_only_those_histories(
    tmp_path, corpus, models_file, naive_alone
):
    out = tmp_path / "o"
    result = run_whatif_drawing_one_skill_plot(
        "evaluate",
        str(corpus),
        "--models",
        f"{models_file}:KillsOnRestraint,naive",
        "--relational",
        "--jobs",
        "2",
        "--model-timeout",
        "0",
        "--out",
        str(out),
    )
    assert result.returncode == 1, result.stderr
    assert_no_crash_output(result.stderr)
    per_task = pd.read_parquet(out / "per_task.parquet")
    assert (per_task["failed"] == "").all()  # the tasks have no restraint future: all scored
    assert_naive_unchanged(per_task, naive_alone)
    relational = pd.read_parquet(out / "relational.parquet")
    killer = relational[relational["model"] == "kills-on-restraint"]
    histories = relational["pair_id"].nunique()
    assert len(killer) == histories and killer["failed"].str.startswith(WORKER_KILLED).all()
    naive = relational[relational["model"] == "naive"]
    assert len(naive) == histories and (naive["failed"] == "").all()
    assert np.isfinite(naive["direction"]).all()
    assert (
        f"warning: model 'kills-on-restraint' failed on {histories:,} of {histories:,} "
        "histories of the relational scores"
    ) in result.stderr
    assert result.stderr.count("warning:") == 1, result.stderr


@pytest.mark.parametrize("value", ["-1", "soon", "inf", "nan", "86401", "1e400"])
def test_a_bad_model_timeout_is_a_usage_error(tmp_path, corpus, value):
    result = run_cli(
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
    result = run_cli("evaluate", "--help")
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


HANGS_IN_WORKER = """\
import time
from pathlib import Path


class HangsHere:
    name = "hangs-here"

    def predict(self, batch):
        Path({marker!r}).touch()
        while True:
            time.sleep(0.05)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.slow  # about 1 s
def test_ctrl_c_during_a_model_s_predict_stops_the_run_and_its_child(tmp_path, corpus):
    # one process (--jobs 1): predict runs in a child forked by the run itself; the marker says
    # predict has started (a child seen before it may be the one that loads the model)
    marker = tmp_path / "started"
    models = tmp_path / "hangs.py"
    models.write_text(HANGS_IN_WORKER.format(marker=str(marker)))
    out = tmp_path / "o"
    command = [*whatif_executable(), "evaluate", str(corpus), "--jobs", "1", "--models"]
    command += [f"{models}:HangsHere,naive", "--out", str(out)]  # the default limit: 600 s
    run = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=sigint_as_ctrl_c,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not marker.exists():
            time.sleep(0.2)
        assert marker.exists(), "predict never started"
        children = _children(run.pid)  # the forked child running HangsHere.predict
        assert children, "predict did not run in a child process"
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


@pytest.mark.slow  # about 2 s
def test_ctrl_c_with_worker_processes_stops_the_whole_run(tmp_path, corpus):
    marker = tmp_path / "started"
    models = tmp_path / "hangs.py"
    models.write_text(HANGS_IN_WORKER.format(marker=str(marker)))
    command = [*whatif_executable(), "evaluate", str(corpus), "--jobs", "2", "--model-timeout"]
    command += ["0", "--models", f"{models}:HangsHere,naive", "--out", str(tmp_path / "o")]
    run = subprocess.Popen(  # a session of its own: Ctrl-C reaches its whole process group
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=sigint_as_ctrl_c,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not marker.exists():
            time.sleep(0.2)
        assert marker.exists(), "predict never started in a worker process"
        os.killpg(run.pid, signal.SIGINT)
        _, err = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert run.returncode == 130, err
    assert "interrupted; finished chunks were kept in" in err
    assert "Traceback" not in err and "error:" not in err


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
@pytest.mark.one_quick  # about 4 s over all its cases
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


# Models modules that end, crash or hang the process at import.

MODEL_MODULES = [
    ("import os\nos._exit(0)\n", "it ended the process (exit status 0)"),
    ("raise SystemExit(0)\n", "it called exit(0)"),
    ("import ctypes\nctypes.string_at(0)\n", "it crashed the process (SIGSEGV, signal 11)"),
    (
        "import time\nwhile True:\n    time.sleep(0.05)\n",
        f"it did not finish within {TIMEOUT} s (an endless loop?)",
    ),
]


@pytest.mark.parametrize(
    ("source", "message"), MODEL_MODULES, ids=["os-exit", "exit", "segfault", "hang"]
)
@pytest.mark.one_quick  # about 4 s over all its cases
def test_a_models_file_that_ends_the_process_at_import_is_an_error(
    tmp_path, corpus, source, message
):
    models = tmp_path / "bad_models.py"
    models.write_text(source)
    out = tmp_path / "o"
    spec = f"{models}:Model"
    options = ["--models", f"{spec},naive", "--model-timeout", TIMEOUT, "--out", str(out)]
    result = run_whatif("evaluate", str(corpus), *options)
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    assert result.stdout == ""
    assert result.stderr == f"error: model {spec!r}: importing {models} failed: {message}\n"
    assert not out.exists()


def test_a_models_module_that_ends_the_process_at_import_is_an_error(tmp_path, corpus):
    (tmp_path / "whatif_test_exits_at_import.py").write_text("import os\nos._exit(0)\n")
    out = tmp_path / "o"
    command = [*whatif_executable(), "evaluate", str(corpus), "--out", str(out), "--models"]
    command.append("whatif_test_exits_at_import:Model,naive")
    environment = {**os.environ, "PYTHONPATH": str(tmp_path)}
    result = subprocess.run(command, capture_output=True, text=True, env=environment, timeout=300)
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    assert result.stderr == (
        "error: model 'whatif_test_exits_at_import:Model': importing "
        "whatif_test_exits_at_import failed: it ended the process (exit status 0)\n"
    )
    assert not out.exists()


# usercode.run_in_child / run_each_in_child: the one way user code runs in a forked child.


def test_run_in_child_sends_back_a_value_larger_than_a_pipe_holds():
    from whatif_bench.usercode import run_in_child

    result = run_in_child(lambda: {"array": np.arange(1_000_000.0), "pid": os.getpid()}, 30)
    assert result.ok and result.status is None and not result.timed_out
    assert np.array_equal(result.value["array"], np.arange(1_000_000.0))
    assert result.value["pid"] != os.getpid()  # it ran in another process


@pytest.mark.parametrize(
    ("function", "check"),
    [
        (lambda: os._exit(3), lambda r: os.waitstatus_to_exitcode(r.status) == 3),
        (lambda: ctypes.string_at(0), lambda r: os.WTERMSIG(r.status) == signal.SIGSEGV),
        (lambda: time.sleep(60), lambda r: r.timed_out),
        (lambda: threading.Lock(), lambda r: r.unsent.startswith("TypeError: cannot pickle")),
    ],
    ids=["exit", "crash", "timeout", "unpicklable"],
)
@pytest.mark.one_quick  # about 1 s over all its cases
def test_run_in_child_says_how_a_call_that_returns_nothing_ended(function, check):
    from whatif_bench.usercode import run_in_child

    started = time.monotonic()
    result = run_in_child(function, 1.0)
    assert not result.ok and check(result), result
    assert time.monotonic() - started < 20


@pytest.mark.slow  # about 1 s
def test_run_each_in_child_runs_items_in_order_in_one_child_and_stops_early():
    from whatif_bench.usercode import run_each_in_child

    results = run_each_in_child(lambda x: (x, os.getpid()), [1, 2, 3], 30)
    assert [r.value[0] for r in results] == [1, 2, 3]
    assert len({r.value[1] for r in results}) == 1  # one child for all
    stopped = run_each_in_child(lambda x: 2 * x, [1, 2, 3, 4], 30, stop=lambda v: v == 4)
    assert [r.value for r in stopped] == [2, 4]
    ended = run_each_in_child(lambda x: os._exit(5) if x == 2 else x, [1, 2, 3], 30)
    assert [r.ok for r in ended] == [True, False]
    assert os.waitstatus_to_exitcode(ended[1].status) == 5
    late = run_each_in_child(lambda x: time.sleep(60) if x == 2 else x, [1, 2, 3], 0.5)
    assert [r.value for r in late] == [1, None] and late[1].timed_out


@pytest.mark.slow  # about 3 s
def test_seconds_and_imputed_come_back_from_the_models_process(
    tmp_path, corpus, models_file, naive_alone, capsys, monkeypatch
):
    """The time of a model's batch is measured in its child process around predict: the
    Novel tasks (no seconds of their own) share the batch's 0.3 s and more, the fork and the
    sending back not counted; ``imputed`` and ``seconds`` of the model's own forecast class
    cross to the evaluation."""
    # chunks of 120 tasks: three predict batches (one of Replay tasks alone, two with Novel
    # ones) instead of 23 of 16, each sleeping its 0.3 s in a child of its own
    monkeypatch.setattr(runner, "MIN_CHUNK", 120)
    out = tmp_path / "o"
    code, _, err = run_main(
        capsys, "evaluate", str(corpus), "--models", f"{models_file}:SlowImputer,naive",
        "--out", str(out),
    )  # fmt: skip
    assert code == 0, err
    per_task = pd.read_parquet(out / "per_task.parquet")
    rows = per_task[per_task["model"] == "slow-imputer"].reset_index(drop=True)
    novel = rows["task_id"].str.endswith("/novel")
    assert (rows["failed"] == "").all() and rows["imputed"].tolist() == novel.tolist()
    assert (rows.loc[~novel, "seconds"] == 0.125).all()
    total = len(naive_alone)
    size = runner.chunk_size(total, runner.CHUNK)  # a chunk is one predict batch
    batches = [rows.iloc[i : i + size] for i in range(0, total, size)]
    with_novel = [b for b in batches if b["task_id"].str.endswith("/novel").any()]
    assert len(with_novel) >= 2
    for batch in with_novel:
        share = batch.loc[batch["task_id"].str.endswith("/novel"), "seconds"]
        assert share.nunique() == 1  # one share per batch
        assert 0.3 <= share.iloc[0] * len(batch) < 2.0  # the predict call's wall time
    assert f"note: model 'slow-imputer' imputed {int(novel.sum()):,} of {total:,} " in err
    assert_naive_unchanged(per_task, naive_alone)
