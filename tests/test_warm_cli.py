"""The warm ``whatif`` (tests/warm_cli.py) that the docs' command lines and walk-throughs run
through: a command ends as the real console script's does (status, output, files), and falls
back to the real script where the server could differ."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import warm_cli
from tests.conftest import ONE_TARGET, run_warm, run_whatif, whatif_executable


@pytest.fixture(scope="module")
def warm(warm_whatif):
    assert warm_whatif.socket(os.environ) is not None, "the warm whatif server did not start"
    return warm_whatif


@pytest.mark.one_quick
@pytest.mark.parametrize(
    "args",
    [
        ["--version"],
        ["info", "{corpus}"],
        ["show", "{task}", "--corpus", "{corpus}", "--describe"],
        ["verify", "{missing}"],  # one error line, status 1
        ["no-such-command"],  # argparse's usage error, status 2
        ["relationships", "list", "--simulator", "epanet", "--json"],
    ],
    ids=["version", "info", "show", "missing-file", "usage-error", "relationships"],
)
def test_a_command_ends_as_the_real_script_does(
    warm, one_target_corpus, one_target_task_id, tmp_path, args
):
    filled = [
        part.format(corpus=one_target_corpus, task=one_target_task_id, missing=tmp_path / "x.h5")
        for part in args
    ]
    real, warmed = run_whatif(*filled), run_warm(warm, *filled)
    assert (warmed.returncode, warmed.stdout, warmed.stderr) == (
        real.returncode,
        real.stdout,
        real.stderr,
    )


PYTHON_CODE = """
import os, sys
import helper  # from the current folder, first on the path unless -P
print(sys.argv, __name__, helper.NAME, os.getcwd() == os.path.realpath("."), flush=True)
print("to stderr", file=sys.stderr)
sys.exit(int(sys.argv[1]))
"""


@pytest.mark.one_quick
@pytest.mark.parametrize(("options", "status"), [((), "0"), ((), "3"), (("-P",), "0")])
def test_python_c_ends_as_a_new_interpreter_does(warm, tmp_path, options, status):
    (tmp_path / "helper.py").write_text("NAME = 'helper in the current folder'\n")
    env = warm.env(dict(os.environ))
    runs = [
        subprocess.run(
            [*argv, status], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
        )
        for argv in (
            [sys.executable, *options, "-c", PYTHON_CODE],
            warm.python(PYTHON_CODE, *options),
        )
    ]
    real, warmed = ((r.returncode, r.stdout, r.stderr) for r in runs)
    assert warmed == real
    if options:  # -P: the current folder is not on the path
        assert "ModuleNotFoundError: No module named 'helper'" in runs[1].stderr
    else:
        assert runs[1].stdout.startswith(
            f"['-c', '{status}'] __main__ helper in the current folder"
        )
        assert runs[1].returncode == int(status)


def test_a_corpus_generated_warm_has_the_bytes_of_one_generated_in_process(
    warm, one_target_corpus, tmp_path
):
    out = tmp_path / "c.h5"
    result = run_warm(warm, "generate", "--targets", ONE_TARGET, "--jobs", "1", "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert out.read_bytes() == Path(one_target_corpus).read_bytes()


def test_bash_finds_the_warm_command_even_after_activating_the_environment(warm, tmp_path):
    activate = Path(sys.prefix) / "bin" / "activate"
    script = f"source {activate}; type -t whatif; cd {tmp_path}; whatif --version"
    env = warm.env({**os.environ, "PATH": "/usr/bin:/bin"})  # no whatif on this PATH
    result = subprocess.run(["bash", "-e", "-c", script], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == "function"
    assert result.stdout.splitlines()[1].startswith("whatif-bench ")


def _ask(path: str, env: dict[str, str]) -> list[bytes]:
    """The replies of the server at ``path`` to a request for ``whatif --version`` with
    ``env``: ``fallback``, or ``started`` and how the command ended."""
    request = {
        "program": "whatif",
        "argv": [whatif_executable()[0], "--version"],
        "cwd": os.getcwd(),
        "env": env,
        "sigint_ignored": False,
    }
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as connection:
        connection.connect(path)
        with open(os.devnull, "rb") as stdin, open(os.devnull, "wb") as out:
            fds = [stdin.fileno(), out.fileno(), out.fileno()]
            socket.send_fds(connection, [json.dumps(request).encode()], fds)
        replies = [connection.recv(64)]
        while replies[-1] not in (b"", b"fallback") and not replies[-1].startswith(b"exit"):
            replies.append(connection.recv(64))
        return replies


@pytest.mark.one_quick
@pytest.mark.parametrize(
    "variable", ["NUMBA_DISABLE_JIT", "OMP_NUM_THREADS", "PYTHONHASHSEED", "HDF5_USE_FILE_LOCKING"]
)
def test_a_variable_read_at_import_that_differs_sends_the_command_to_the_real_script(
    warm, variable
):
    env = warm.env(dict(os.environ))
    server = env[warm_cli.SOCKET_ENV]
    assert _ask(server, env) == [b"started", b"exit 0"]  # the same variables: run warm
    changed = {**env, variable: env.get(variable, "") + "1"}
    assert _ask(server, changed) == [b"fallback"]
    # and the shim then runs the real script, with the variable
    result = subprocess.run(
        [*warm.argv(), "--version"], env=changed, capture_output=True, text=True
    )
    assert result.returncode == 0 and result.stdout.startswith("whatif-bench ")
    # an environment made for the changed variables gets a server of its own
    assert warm.env(changed)[warm_cli.SOCKET_ENV] not in (server, None)


def test_a_server_imports_under_the_variables_of_its_commands(warm):
    """A command whose environment sets a variable read at import runs forked from a server
    started with it: numba's ``NUMBA_DISABLE_JIT``, read when numba is imported, holds."""
    code = "import numba; print(numba.config.DISABLE_JIT)"
    for value in ("0", "1"):
        env = warm.env({**os.environ, "NUMBA_DISABLE_JIT": value})
        result = subprocess.run(warm.python(code), env=env, capture_output=True, text=True)
        assert (result.returncode, result.stdout) == (0, f"{value}\n"), result.stderr


def test_without_a_server_the_shim_runs_the_real_script(warm, tmp_path):
    env = {**warm.env(dict(os.environ)), warm_cli.SOCKET_ENV: str(tmp_path / "no-socket")}
    result = subprocess.run([*warm.argv(), "--version"], env=env, capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.startswith("whatif-bench ")


def _long_stream(warm, out: Path) -> subprocess.Popen:
    """A ``whatif stream`` that runs for longer than the tests wait, started warm."""
    return subprocess.Popen(
        [*warm.argv(), "stream", "--seed", "7", "--count", "100000", "--simulators", "epanet"]
        + ["--jobs", "1", "--out", str(out)],
        env=warm.env(dict(os.environ)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def _server_processes(warm) -> int:
    """How many processes are the server or a command it forked (they share its command line)."""
    needle = b"serve\0" + warm.socket(os.environ).encode()
    count = 0
    for entry in Path("/proc").iterdir():
        try:
            line = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        count += needle in line
    return count


def _wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + 60
    while not condition():
        assert time.monotonic() < deadline, f"waited 60 s for {what}"
        time.sleep(0.05)


@pytest.mark.slow
def test_ctrl_c_reaches_the_warm_command_and_ends_it_as_the_real_one(warm, tmp_path):
    out = tmp_path / "stream"
    idle = _server_processes(warm)
    process = _long_stream(warm, out)
    _wait_for(lambda: _server_processes(warm) > idle, "the command to start")
    time.sleep(1.5)  # into the stream
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    assert "interrupted; no shards were kept; --out is unchanged" in stderr
    assert not out.exists()


@pytest.mark.slow
def test_a_killed_caller_takes_its_warm_command_with_it(warm, tmp_path):
    idle = _server_processes(warm)
    process = _long_stream(warm, tmp_path / "stream")
    _wait_for(lambda: _server_processes(warm) > idle, "the command to start")
    process.kill()
    process.wait()
    _wait_for(lambda: _server_processes(warm) == idle, "the command to end")
