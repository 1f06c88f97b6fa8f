"""A warm ``whatif`` (and ``python -c``) for the tests that run command lines and code as a
user types them: the code blocks of the README and docs/, the authoring walk-throughs, and
evaluations whose point is what happens in their worker processes.

Every ``whatif`` process spends 0.7-1.1 CPU s importing numpy, pandas, h5py, numba and the
package before its command starts, and 0.2-0.5 s more while numba sets up its compiler for the
first kernel it loads; the suite runs well over a hundred such processes. Here one server
process per test worker does that once and forks a child for each command; the child takes the
caller's standard input, output and error (passed over a Unix socket), working folder,
environment and arguments, runs the console script's own ``cli.entry`` (or the ``-c`` code in
a new ``__main__``), and its exit status, or the signal that ended it, becomes the caller's. A
command started through ``shim`` is a new process either way: its own process id and process
group, its own worker processes, and nothing it changes reaches the server or the next command.
A signal the caller receives is sent on to the command's process group; a caller that is
killed takes its command with it.

The child is not a new interpreter, so a command runs for real (``os.execv``) when the
difference could show:

- an environment variable read when a preloaded module is imported (numba's ``NUMBA_*``,
  HDF5's, the BLAS libraries' thread counts, the locale, ...) differs from the server's;
- ``python -c`` of another environment's Python;
- the server is not there (not started, gone) or cannot be given a standard stream.

Tests whose point is the console script's own process (its start, the processes a signal or
a kill reaches) run the real ``whatif`` (``tests/conftest.py``'s ``run_whatif``).

Only the standard library is imported at the top: the shim runs as ``python -I -S`` (tens of
milliseconds), and the server imports the heavy modules itself.
"""

from __future__ import annotations

import io
import json
import os
import select
import signal
import socket
import sys
import types
from collections.abc import Mapping
from typing import Any

# Variables read at import time by the modules the server preloads (or by Python's start-up):
# a command whose environment differs from the server's in one of them runs the real script.
IMPORT_TIME_PREFIXES = (
    "NUMBA_",  # numba.core.config, read once at import
    "PYTHON",  # the interpreter's own start-up
    "HDF5_",  # the HDF5 library, initialised when h5py is imported
    "OMP_",
    "OPENBLAS_",
    "MKL_",
    "KMP_",
    "NPY_",
    "NUMEXPR_",
    "ARROW_",
    "TQDM_",  # tqdm reads its defaults when its class is defined
    "LD_",
    "LC_",
)
IMPORT_TIME_NAMES = ("LANG", "LANGUAGE", "TZ")
# ... and those read by a module only if the server has imported it
IMPORT_TIME_BY_MODULE = {"matplotlib": ("MPLBACKEND", "MPLCONFIGDIR"), "huggingface_hub": ("HF_",)}

# What the server imports before its first fork: the modules every command needs, and those of
# the commands the tests run most. None may start a Python thread (checked before serving); the
# native pools some start (OpenBLAS's workers, pyarrow's jemalloc thread) are made fork-safe by
# their libraries, as for any ``multiprocessing`` fork.
PRELOAD = (
    "numpy",
    "pandas",
    "pyarrow",
    "h5py",
    "scipy.linalg",
    "numba",
    "whatif_bench.cli",
    "whatif_bench.corpus.reader",
    "whatif_bench.corpus.recipe",
    "whatif_bench.generator.cli",
    "whatif_bench.generator.checking",
    "whatif_bench.generator.sweep",
    "whatif_bench.generator.kernels",
    "whatif_bench.evaluation.cli",
    "whatif_bench.evaluation.runner",
    "whatif_bench.export.cli",
)

SOCKET_ENV = "WHATIF_TEST_WARM_SOCKET"  # the server's socket, for the shim
REAL_ENV = "WHATIF_TEST_REAL_WHATIF"  # the real console script, the shim's fallback
MESSAGE_BYTES = 1 << 20  # a request: arguments, folder and environment, as JSON


# ---- the shim: what the caller runs as ``whatif`` --------------------------------------------


def shim(argv: list[str]) -> None:
    """Have the server run ``argv`` (``whatif ARGS``, or ``python -c CODE ARGS`` in this
    environment's Python) with this process's standard streams, folder and environment, and end
    as it ended; or run it for real (``whatif`` is ``REAL_ENV``'s script)."""
    options = argv[1:2] if argv[1:2] == ["-P"] else []  # python's options: -P alone
    code_at = 2 + len(options)  # where python's -c CODE puts the code
    if argv[:1] == ["whatif"] and REAL_ENV not in os.environ:
        raise SystemExit(f"warm whatif: error: {REAL_ENV} does not name the real script")
    if argv[:1] == ["whatif"]:
        real = [os.environ[REAL_ENV], *argv[1:]]
    elif argv[:1] == ["python"] and argv[code_at - 1 : code_at] == ["-c"] and len(argv) > code_at:
        real = [sys.executable, *argv[1:]]
    else:
        raise SystemExit(
            "usage: warm_cli.py whatif ARGS... | python [-P] -c CODE ARGS... | serve SOCKET"
        )
    # a command started with SIGINT ignored (a shell's background job) keeps it ignored
    sigint_ignored = signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    try:
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        connection.connect(os.environ[SOCKET_ENV])
        request = {
            "program": argv[0],
            "argv": real,
            "cwd": os.getcwd(),
            "env": dict(os.environ),
            "sigint_ignored": sigint_ignored,
        }
        socket.send_fds(connection, [json.dumps(request).encode()], [0, 1, 2])
    except (OSError, KeyError):
        os.execv(real[0], real)

    def forward(signum: int, _frame: object) -> None:
        connection.send(f"kill {signum}".encode())

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        if not (signum == signal.SIGINT and sigint_ignored):
            signal.signal(signum, forward)
    reply = connection.recv(64).decode()
    if reply in ("", "fallback"):  # not started: "" only if the server died
        connection.close()
        os.execv(real[0], real)
    reply = connection.recv(64).decode()  # after "started": how the command ended
    if not reply:
        print("warm whatif: error: the server ended while the command ran", file=sys.stderr)
        os._exit(1)
    kind, number = reply.split()
    if kind == "signal":
        signal.signal(int(number), signal.SIG_DFL)
        os.kill(os.getpid(), int(number))
    os._exit(int(number))


# ---- the server ------------------------------------------------------------------------------


def import_time_variables(env: Mapping[str, str], every_module: bool = False) -> dict[str, str]:
    """The variables of ``env`` read when this process's modules were imported (with
    ``every_module``, those of every module of ``IMPORT_TIME_BY_MODULE``, imported or not)."""
    prefixes: tuple[str, ...] = IMPORT_TIME_PREFIXES + IMPORT_TIME_NAMES
    for module, names in IMPORT_TIME_BY_MODULE.items():
        if every_module or module in sys.modules:
            prefixes += names
    return {key: value for key, value in env.items() if key.startswith(prefixes)}


def _preload() -> None:
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    # numba's compiler set-up, which the first kernel loaded from the cache would pay
    from numba.core.registry import cpu_target

    cpu_target.target_context.refresh()
    import threading

    if threading.active_count() != 1:
        raise SystemExit("error: a preloaded module started a thread; the server cannot fork")


def _exit_code(exc: SystemExit) -> int:
    """The exit status Python gives a ``SystemExit`` (a message goes to stderr, status 1)."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    print(exc.code, file=sys.stderr)
    return 1


def _run_command(request: dict, fds: list[int]) -> None:
    """In the forked child: become the caller's command, run it, and end with its status."""
    os.setpgid(0, 0)
    sigint = signal.SIG_IGN if request["sigint_ignored"] else signal.default_int_handler
    signal.signal(signal.SIGINT, sigint)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    if isinstance(sys.stdout, io.TextIOWrapper):  # line-buffered at a terminal, as at start-up
        sys.stdout.reconfigure(line_buffering=os.isatty(1))
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    # a new ``__main__``: the console script's (worker processes started by multiprocessing or
    # loky load the parent's main module from its path), or ``python -c``'s (no file)
    main = types.ModuleType("__main__")
    sys.modules["__main__"] = main
    argv = request["argv"]
    code, ended_by = 0, 0  # exit status; or the signal the command ends by
    try:
        if request["program"] == "whatif":
            sys.argv = argv
            main.__file__ = argv[0]
            from whatif_bench.cli import entry

            entry()
        else:  # python [-P] -c CODE ARGS: without -P the current folder first on the path
            at = argv.index("-c")
            sys.argv = ["-c", *argv[at + 2 :]]
            if "-P" not in argv[1:at]:
                sys.path.insert(0, "")
            exec(compile(argv[at + 1], "<string>", "exec"), main.__dict__)
    except SystemExit as exc:
        code = _exit_code(exc)
    except BaseException as exc:  # as Python reports it: its traceback without this file's frames
        trace = exc.__traceback__
        while trace is not None and trace.tb_frame.f_code.co_filename == __file__:
            trace = trace.tb_next
        sys.excepthook(type(exc), exc.with_traceback(trace), trace)  # it prints exc's own
        # an uncaught Ctrl-C ends Python by SIGINT, anything else with status 1
        code, ended_by = 1, signal.SIGINT if isinstance(exc, KeyboardInterrupt) else 0
    # what the interpreter does on its way out: wait for threads, run atexit, flush
    try:
        import atexit
        import threading

        threading._shutdown()  # type: ignore[attr-defined]
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                code = code or 120
        if ended_by:
            signal.signal(ended_by, signal.SIG_DFL)
            os.kill(os.getpid(), ended_by)
        os._exit(code)


def _signal_command(pid: int, signum: int) -> None:
    """Send ``signum`` to a command's process group (its worker processes too), or to the
    command alone if it has not made its group yet; nothing if it has ended."""
    try:
        os.killpg(pid, signum)
    except ProcessLookupError:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass


def serve(path: str) -> None:
    """Preload, then fork one child per request on the Unix socket ``path``, until the process
    that started the server ends, or after SIGTERM once the commands running have ended."""
    _preload()
    own = import_time_variables(os.environ)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(64)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    stopping: list[bool] = []  # SIGTERM: take no more commands, end when those running have

    def stop(*_: object) -> None:
        stopping.append(True)

    signal.signal(signal.SIGTERM, stop)
    parent = os.getppid()
    callers: dict[int, socket.socket] = {}  # a running command's pid -> its caller's connection
    listening: dict[socket.socket, int] = {}  # the connections of callers still there -> pid
    print("ready", flush=True)
    while os.getppid() == parent and not (stopping and not callers):
        if stopping and listener.fileno() != -1:  # callers that find no socket run for real
            listener.close()
            os.unlink(path)
        watched: list[Any] = [wake_read, *listening, *([] if stopping else [listener])]
        ready, _, _ = select.select(watched, [], [], 1.0)
        if wake_read in ready:
            os.read(wake_read, 4096)
        for connection in ready:
            if connection in listening:
                message = connection.recv(64).decode()
                if not message:  # the caller is gone (killed): so is its command
                    _signal_command(listening.pop(connection), signal.SIGKILL)
                else:  # "kill N": a signal the caller received
                    _signal_command(listening[connection], int(message.split()[1]))
        while callers:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            connection = callers.pop(pid)
            listening.pop(connection, None)
            if os.WIFSIGNALED(status):
                reply = f"signal {os.WTERMSIG(status)}"
            else:
                reply = f"exit {os.WEXITSTATUS(status)}"
            try:
                connection.send(reply.encode())
            except OSError:
                pass
            connection.close()
        if listener in ready:
            _start_command(listener, own, callers, listening, (wake_read, wake_write))
    for pid in callers:
        _signal_command(pid, signal.SIGKILL)


def _start_command(
    listener: socket.socket,
    own: dict[str, str],
    callers: dict[int, socket.socket],
    listening: dict[socket.socket, int],
    wake: tuple[int, int],
) -> None:
    """Accept one request and fork its command, or tell the caller to fall back."""
    connection, _ = listener.accept()
    message, fds, _, _ = socket.recv_fds(connection, MESSAGE_BYTES, 3)
    request = json.loads(message)
    theirs = import_time_variables(request["env"])
    # python -c in another environment's Python cannot run here
    other_python = request["program"] == "python" and request["argv"][0] != sys.executable
    if len(fds) != 3 or theirs != own or other_python:
        differing = sorted(key for key in {*own, *theirs} if own.get(key) != theirs.get(key))
        print(f"warm whatif: {request['argv'][:2]} runs for real: {differing}", file=sys.stderr)
        for fd in fds:
            os.close(fd)
        connection.send(b"fallback")
        connection.close()
        return
    pid = os.fork()
    if pid == 0:
        try:
            listener.close()
            for other in (*listening, connection):
                other.close()
            for fd in wake:
                os.close(fd)
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            _run_command(request, fds)
        finally:
            os._exit(70)
    for fd in fds:
        os.close(fd)
    connection.send(b"started")
    callers[pid] = connection
    listening[connection] = pid


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"] and len(sys.argv) == 3:
        serve(sys.argv[2])
    else:
        shim(sys.argv[1:])
