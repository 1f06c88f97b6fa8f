"""``generate``, ``evaluate`` and ``stream`` on a dask.distributed cluster: the same bytes and
results as a local run, results in submission order, and a clear error before any work when the
cluster cannot be used. One real ``LocalCluster`` (two worker processes) serves the module."""

from __future__ import annotations

import logging
import os
import sys
import time

import pandas as pd
import pytest

from tests.conftest import evaluating_only, every_tenth_task_id
from whatif_bench import cluster as cluster_module
from whatif_bench.cli import main
from whatif_bench.cluster import ClusterError, DaskCluster, WorkPool, open_pool
from whatif_bench.evaluation import evaluate, report
from whatif_bench.evaluation.runner import without_timings
from whatif_bench.generator import GenerationConfig, generate

distributed = pytest.importorskip("distributed")
dask = pytest.importorskip("dask")
# a cluster's HTTP server moves off a port another cluster holds, and says so
pytestmark = pytest.mark.filterwarnings("ignore:Port .* is already in use")

TARGETS = ("sumo/flow_loop_e_0_near", "epanet/pressure_10")
MODELS = "naive,ridge"
STREAM = ("--seed", "3", "--count", "30", "--shard-size", "12", "--simulators", "epanet")
HISTORY_MEAN = (
    "import numpy as np\n"
    "from whatif_bench.evaluation import Forecast\n"
    "class HistoryMean:\n"
    "    name = 'history-mean'\n"
    "    def predict(self, batch):\n"
    "        return [Forecast(point=np.full(t.prediction_length, t.history_target.mean()))\n"
    "                for t in batch]\n"
)
UNREACHABLE = "tcp://127.0.0.1:1"  # port 1: nothing listens there


@pytest.fixture(scope="module")
def cluster():
    with distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        dashboard_address=None,
        silence_logs=logging.ERROR,
    ) as local:
        yield local


@pytest.fixture(scope="module")
def address(cluster) -> str:
    return cluster.scheduler_address


@pytest.fixture(scope="module")
def corpus_path(two_target_corpus):
    """``TARGETS`` generated in one process: the session's two-target corpus (no test here
    changes it)."""
    return two_target_corpus


def whatif(capsys, *args: str) -> tuple[int, str, str]:
    """Run the command line in this process: (exit code, stdout, stderr)."""
    try:
        code = main(list(args))
    except SystemExit as exc:  # argparse's usage errors
        code = exc.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def error_lines(err: str) -> list[str]:
    """The lines of stderr that are not progress-bar redraws."""
    return [line for line in err.replace("\r", "\n").splitlines() if line.startswith("error")]


# 1. The same outputs as a local run.
@pytest.mark.slow  # about 2 s
def test_generate_on_the_cluster_writes_the_local_corpus_byte_for_byte(
    tmp_path, address, corpus_path, capsys
):
    out = tmp_path / "c.h5"
    code, stdout, err = whatif(
        capsys, "generate", "--targets", *TARGETS, "--out", str(out), "--dask-scheduler", address
    )
    assert code == 0, err
    assert out.read_bytes() == corpus_path.read_bytes()
    assert address not in out.read_bytes().decode("latin-1")
    assert "generating" in err  # the progress bar still runs


@pytest.mark.slow  # about 4 s
def test_evaluate_on_the_cluster_gives_the_local_per_task_results(
    tmp_path, address, one_target_corpus, capsys, monkeypatch
):
    # the plots take two thirds of an evaluation this small and do not depend on the cluster
    monkeypatch.setattr(report, "_plots", lambda per_task, reference, folder: None)
    model_file = tmp_path / "history_mean.py"  # a model the workers cannot import
    model_file.write_text(HISTORY_MEAN)
    models = f"{MODELS},{model_file}:HistoryMean"
    common = (str(one_target_corpus), "--models", models, "--relational")
    # every tenth task of the one-target corpus, still several chunks: a --subset keeps all its
    # 360 tasks, and the model file runs in a child process for each chunk of about ten
    with evaluating_only(every_tenth_task_id(one_target_corpus)):
        # the local run in this process: no worker processes to start (jobs give the same
        # results)
        code, _, err = whatif(
            capsys, "evaluate", *common, "--jobs", "1", "--out", str(tmp_path / "local")
        )
        assert code == 0, err
        code, _, err = whatif(
            capsys,
            "evaluate",
            *common,
            "--out",
            str(tmp_path / "dask"),
            "--dask-scheduler",
            address,
        )
        assert code == 0, err
    local = pd.read_parquet(tmp_path / "local" / "per_task.parquet")
    remote = pd.read_parquet(tmp_path / "dask" / "per_task.parquet")
    assert len(local) == 3 * local["task_id"].nunique() > 100
    assert (local["failed"] == "").all()
    # equal but for the measured seconds (runner.TIMING_COLUMNS)
    pd.testing.assert_frame_equal(without_timings(remote), without_timings(local), check_exact=True)
    relational = [
        pd.read_parquet(tmp_path / where / "relational.parquet") for where in ("local", "dask")
    ]
    assert (relational[0]["failed"] == "").all() and len(relational[0]) > 50
    pd.testing.assert_frame_equal(relational[1], relational[0], check_exact=True)
    boards = [pd.read_csv(tmp_path / where / "leaderboard.csv") for where in ("local", "dask")]
    pd.testing.assert_frame_equal(
        without_timings(boards[1]), without_timings(boards[0]), check_exact=True
    )
    for name in ("slices/simulator.csv", "slices/K.csv"):  # no timings: the same bytes
        assert (tmp_path / "dask" / name).read_bytes() == (tmp_path / "local" / name).read_bytes()


@pytest.mark.slow  # about 2 s
def test_stream_shards_on_the_cluster_are_the_local_bytes(tmp_path, address, capsys):
    # the training worlds come from the default cache ($WHATIF_WORLDS), built on first use
    code, _, err = whatif(capsys, "stream", *STREAM, "--out", str(tmp_path / "l"), "--jobs", "1")
    assert code == 0, err
    code, _, err = whatif(
        capsys, "stream", *STREAM, "--out", str(tmp_path / "d"), "--dask-scheduler", address
    )
    assert code == 0, err
    names = sorted(p.relative_to(tmp_path / "l") for p in (tmp_path / "l").rglob("*.*"))
    assert len(names) == 5  # three shards, the manifest and the identity record
    for name in names:
        assert (tmp_path / "d" / name).read_bytes() == (tmp_path / "l" / name).read_bytes(), name


# 2. Results in submission order, with a bounded number of calls in flight.
def _slow_echo(value: int, seconds: float) -> int:
    time.sleep(seconds)
    return value


def test_results_come_in_submission_order_whichever_worker_finishes_first(cluster):
    with distributed.Client(cluster, set_as_default=False) as client:
        pool = WorkPool(client=client, where="the test cluster")
        calls = [(0, 0.6), (1, 0.0), (2, 0.3), (3, 0.0), (4, 0.0)]
        assert list(pool.ordered(_slow_echo, calls)) == [0, 1, 2, 3, 4]


def test_only_a_few_calls_are_in_flight_ahead_of_the_results(cluster):
    drawn = []

    def calls():
        for value in range(100):
            drawn.append(value)
            yield value, 0.0

    with distributed.Client(cluster, set_as_default=False) as client:
        results = WorkPool(client=client, where="the test cluster").ordered(_slow_echo, calls())
        assert next(results) == 0
        window = cluster_module.IN_FLIGHT_PER_THREAD * 2  # two workers, one thread each
        assert len(drawn) == window
        assert list(results) == list(range(1, 100))


def _die(value: int) -> int:
    os._exit(1)  # as the OOM killer would end the worker


@pytest.mark.slow  # about 1 s
def test_a_worker_that_dies_is_one_clear_error(tmp_path):
    with (
        dask.config.set({"distributed.scheduler.allowed-failures": 0}),
        distributed.LocalCluster(
            n_workers=1, processes=True, dashboard_address=None, silence_logs=logging.CRITICAL
        ) as doomed,
        distributed.Client(doomed, set_as_default=False) as client,
    ):
        pool = WorkPool(client=client, where="the doomed cluster")
        with pytest.raises(
            ClusterError, match="^dask workers of the doomed cluster died running _die"
        ):
            list(pool.ordered(_die, [(1,), (2,)]))


# 3. A cluster that cannot be used: one error line before any work, nothing written.
def _command(name: str, corpus_path, out) -> list[str]:
    if name == "generate":
        return ["generate", "--targets", TARGETS[1], "--out", str(out)]
    if name == "evaluate":
        return ["evaluate", str(corpus_path), "--models", MODELS, "--out", str(out)]
    return [
        "stream",
        "--seed",
        "1",
        "--count",
        "3",
        "--cache",
        str(out) + "-worlds",
        "--out",
        str(out),
    ]


@pytest.mark.parametrize("command", ["generate", "evaluate", "stream"])
@pytest.mark.one_quick  # about 3 s over all its cases
def test_an_unreachable_scheduler_is_one_error_before_any_work(
    tmp_path, corpus_path, capsys, command
):
    out = tmp_path / "o"
    started = time.perf_counter()
    code, stdout, err = whatif(
        capsys,
        *_command(command, corpus_path, out),
        "--dask-scheduler",
        UNREACHABLE,
        "--dask-timeout",
        "1",
    )
    assert code == 1
    assert err.splitlines() == [
        f"error: cannot reach the dask scheduler at {UNREACHABLE}: no answer; is 'dask "
        "scheduler' running there? (waited up to 1 s; --dask-timeout sets the wait)"
    ]
    assert time.perf_counter() - started < 10
    assert sorted(tmp_path.iterdir()) == []  # no output, no lock, no world cache


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--dask-scheduler", "tcp://127.0.0.1:1", "--dask-local", "2"), "not allowed with"),
        (
            ("--jobs", "2", "--dask-local", "2"),
            "argument --dask-local: not allowed with argument --jobs",
        ),
        (("--dask-scheduler", "tcp://127.0.0.1:1", "--jobs", "1"), "not allowed with"),
        (("--dask-local", "0"), "argument --dask-local: must be a positive integer (>= 1), got 0"),
        (
            ("--dask-local", "-3"),
            "argument --dask-local: must be a positive integer (>= 1), got -3",
        ),
        (("--dask-local", "two"), "argument --dask-local: expected an integer, got 'two'"),
        (
            ("--dask-scheduler", "x", "--dask-timeout", "0"),
            "argument --dask-timeout: expected a finite number > 0",
        ),
    ],
)
@pytest.mark.parametrize("command", ["generate", "evaluate", "stream"])
def test_contradicting_or_bad_cluster_options_are_usage_errors(
    tmp_path, corpus_path, capsys, command, args, message
):
    out = tmp_path / "o"
    code, _, err = whatif(capsys, *_command(command, corpus_path, out), *args)
    assert code == 2 and message in err and "Traceback" not in err
    assert sorted(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("address", "message"),
    [
        ("nonsense", "error: 'nonsense' is not a dask scheduler address (missing port number"),
        (
            "foo://host:1",
            "error: 'foo://host:1' is not a dask scheduler address (unknown address scheme 'foo'",
        ),
        ("", "error: the scheduler address must be a non-empty string, got ''"),
    ],
)
def test_a_malformed_scheduler_address_is_named(tmp_path, capsys, address, message):
    out = tmp_path / "c.h5"
    code, _, err = whatif(capsys, "generate", "--out", str(out), "--dask-scheduler", address)
    assert code == 1 and len(err.splitlines()) == 1 and err.startswith(message), err
    assert sorted(tmp_path.iterdir()) == []


def test_workers_of_another_toolkit_version_are_refused(tmp_path, address, capsys, monkeypatch):
    monkeypatch.setattr(cluster_module, "__version__", "0.0.0-other")
    out = tmp_path / "c.h5"
    code, _, err = whatif(
        capsys, "generate", "--targets", TARGETS[1], "--out", str(out), "--dask-scheduler", address
    )
    assert code == 1
    [line] = error_lines(err)
    assert line.startswith(
        f"error: 2 of 2 dask workers of the dask scheduler at {address} do not run whatif-bench "
        "0.0.0-other as this process does (tcp://"
    )
    assert "whatif-bench 0.1.0" in line and line.endswith(
        "install the same version on every worker"
    )
    assert sorted(tmp_path.iterdir()) == []


def test_a_scheduler_without_workers_is_refused(tmp_path, capsys):
    with distributed.LocalCluster(
        n_workers=0, processes=False, dashboard_address=None, silence_logs=logging.ERROR
    ) as empty:
        out = tmp_path / "c.h5"
        code, _, err = whatif(
            capsys, "generate", "--out", str(out), "--dask-scheduler", empty.scheduler_address,
            "--dask-timeout", "0.5",
        )  # fmt: skip
    assert code == 1
    assert err.splitlines() == [
        f"error: the dask scheduler at {empty.scheduler_address} has no worker (none joined "
        f"within 0.5 s); start 'dask worker {empty.scheduler_address}' on each machine"
    ]
    assert sorted(tmp_path.iterdir()) == []


def test_without_dask_installed_the_error_says_which_extra(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed fails
    code, _, err = whatif(capsys, "generate", "--out", str(tmp_path / "c.h5"), "--dask-local", "2")
    assert code == 1
    assert err.splitlines() == [
        "error: running on a dask cluster needs dask.distributed: install whatif-bench[dask] "
        "(pip install 'whatif-bench[dask]')"
    ]


# 4. The Python API.
@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({}, "give either a scheduler address or a number of local workers"),
        ({"scheduler": "tcp://a:1", "local_workers": 2}, "give either a scheduler address"),
        ({"local_workers": 0}, "the number of local workers must be a positive integer, got 0"),
        ({"local_workers": True}, "the number of local workers must be a positive integer"),
        ({"scheduler": 8786}, "the scheduler address must be a non-empty string, got 8786"),
        ({"scheduler": "tcp://a:1", "timeout_s": float("nan")}, "the connect timeout must be"),
        ({"scheduler": "tcp://a:1", "timeout_s": 0}, "the connect timeout must be"),
    ],
)
def test_a_bad_cluster_description_is_refused(fields, message):
    with pytest.raises(ClusterError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        DaskCluster(**fields)


def test_the_api_takes_a_connected_client_leaves_it_open_and_refuses_jobs_with_it(
    tmp_path, cluster, corpus_path
):
    with distributed.Client(cluster, set_as_default=False) as client:
        with pytest.raises(Exception, match=r"give jobs \(2 local processes\) or a cluster"):
            evaluate(corpus_path, ["naive"], tmp_path / "o", jobs=2, cluster=client)
        config = GenerationConfig(baselines="b.h5", out=str(tmp_path / "c.h5"), jobs=2)
        with pytest.raises(Exception, match=r"give jobs \(2 local threads\) or a cluster"):
            generate(config, cluster=client)
        with open_pool(cluster=client) as pool:
            assert pool.distributed
            assert list(pool.ordered(_slow_echo, [(7, 0.0)])) == [7]
        assert client.status == "running"  # a client we were given stays open
    assert sorted(tmp_path.iterdir()) == []


def _log_an_error_on_the_worker() -> str:
    logging.getLogger("distributed.worker").error("Failed to communicate: a test's log line")
    return "logged"


def test_a_local_clusters_worker_logs_do_not_reach_the_terminal(capfd):
    # At shutdown a worker may log a heartbeat failure with a traceback (a race inside
    # distributed); the terminal of a --dask-local run shows only the toolkit's own lines.
    with open_pool(cluster=DaskCluster(local_workers=1)) as pool:
        assert list(pool.ordered(_log_an_error_on_the_worker, [()])) == ["logged"]
    captured = capfd.readouterr()
    assert "a test's log line" not in captured.err + captured.out
    assert "Traceback" not in captured.err
