"""Loading a user's Python code: a module of forms (``--forms``) or of forecasters (``--models``).

The one loader both use, with one set of errors. Every failure is one line, ``<label>: <what>``,
raised as the caller's error class (``SpecError`` for forms, ``ModelError`` for models):

- ``file F not found`` / ``F is a folder, not a Python file`` / ``F cannot be loaded as a
  Python module``;
- ``importing F failed: <the cause in one line>``: a syntax error (with its line), an exception
  (its type and message), or a call of ``exit()``; the traceback is left out;
- ``F has no class 'Name'`` / ``F.Name is not a class``: the expected attribute is missing or
  cannot be called.

A path that is a symbolic link loop or a special file (a FIFO, a device, a socket) is refused
before anything opens it (a FIFO would block): ``F: is a FIFO (named pipe), not a Python file``.

``load_file_checked`` (and ``load_attribute(..., checked=True)``) first executes the module in a
forked child process (``import_in_child``), so a module that ends the process (``os._exit``),
crashes it (a segfault) or never finishes importing is an error naming it too, ``importing F
failed: it ended the process (exit status 0)``, instead of taking the command with it (an exit
status 0 looked like a pass).

``run_in_child`` / ``run_each_in_child`` are the one way user code is run in a forked child
with a time limit: the import check here, a model's ``predict`` (``evaluation.runner``) and the
forms probes (``relationships.plugins``) all use them.

A Ctrl-C while the module runs is a ``KeyboardInterrupt`` as usual, never a user-code error.
A module loaded from a file is not entered in ``sys.modules`` (two files of one name never
clash); its classes are then sent to worker processes by value (joblib and dask pickle them with
cloudpickle).
"""

from __future__ import annotations

import contextlib
import faulthandler
import functools
import importlib
import importlib.util
import os
import pickle
import select
import signal
import struct
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn

from whatif_bench.errors import WhatIfError
from whatif_bench.outputs import path_problem
from whatif_bench.workers import end_with_parent

MESSAGE_LIMIT = 300  # characters of an exception's message kept in the one line


class UserCodeError(WhatIfError):
    """A user's module cannot be loaded (the default error class of this module's functions)."""


def describe_exception(exc: BaseException, where: str | os.PathLike | None = None) -> str:
    """What went wrong in user code, in one line: ``syntax error at line 3: ...``,
    ``it called exit(2)``, or ``RuntimeError: message`` (whitespace folded, long text cut).

    A syntax error names its file when that is not ``where`` (an import inside the module)."""
    if isinstance(exc, SyntaxError):
        line = f" at line {exc.lineno}" if exc.lineno else ""
        elsewhere = exc.filename and (
            where is None or os.path.abspath(exc.filename) != os.path.abspath(where)
        )
        file = f" of {exc.filename}" if elsewhere else ""
        return f"syntax error{line}{file}: {exc.msg}"
    if isinstance(exc, SystemExit):
        return f"it called exit({exc.code!r})"
    text = " ".join(str(exc).split())
    if len(text) > MESSAGE_LIMIT:
        text = text[:MESSAGE_LIMIT] + " ..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def check_file(
    path: str | os.PathLike, label: str, error: type[WhatIfError] = UserCodeError
) -> Path:
    """``path`` as a ``Path`` if it is a file that can be read as Python code; else one
    ``error`` starting with ``label``: a symbolic link loop or a special file (FIFO, device,
    socket; never opened: ``outputs.path_problem``), a folder, or nothing there."""
    shown = os.fspath(path)
    problem = path_problem(path)
    if problem is not None:
        raise error(f"{label}: {shown}: is {problem}, not a Python file")
    file = Path(path)
    if file.is_dir():
        raise error(f"{label}: {shown} is a folder, not a Python file")
    if not file.is_file():
        raise error(f"{label}: file {shown} not found")
    return file


def load_file(
    path: str | os.PathLike,
    label: str,
    error: type[WhatIfError] = UserCodeError,
    module_name: str | None = None,
) -> ModuleType:
    """Execute the Python file ``path`` as a new module (named ``module_name``, by default the
    file's stem) and return it; any failure is one ``error`` starting with ``label``."""
    shown = os.fspath(path)
    file = check_file(path, label, error)
    spec = importlib.util.spec_from_file_location(module_name or file.stem, file)
    if spec is None or spec.loader is None:
        raise error(f"{label}: {shown} cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 (user code: SystemExit included)
        cause = describe_exception(exc, file)
        raise error(f"{label}: importing {shown} failed: {cause}") from None
    return module


def load_file_checked(
    path: str | os.PathLike,
    label: str,
    error: type[WhatIfError] = UserCodeError,
    module_name: str | None = None,
    timeout: float | None = None,
) -> ModuleType:
    """``load_file`` once ``import_in_child`` found that the file imports: a module that ends
    or crashes the process at import, or takes more than ``timeout`` seconds (None: no limit),
    is an ``error`` naming it, and this process never runs it."""
    import_in_child(path, label, error, module_name, timeout)
    return load_file(path, label, error, module_name)


def is_file_path(where: str) -> bool:
    """Whether ``where`` names a file (``x.py``, or any path with a separator), not a dotted
    module name."""
    separators = (os.sep, os.altsep) if os.altsep else (os.sep,)
    return where.endswith(".py") or any(s in where for s in separators)


def load_module(
    where: str,
    label: str,
    error: type[WhatIfError] = UserCodeError,
    checked: bool = False,
    timeout: float | None = None,
) -> ModuleType:
    """The module ``where``: a file (``is_file_path``; ``load_file``) or a dotted module name
    imported from ``sys.path``; any failure is one ``error`` starting with ``label``.

    ``checked``: execute it in a forked child process first (``import_in_child``, with
    ``timeout``), so a module that ends, crashes or hangs the process is an error too."""
    if is_file_path(where):
        if checked:
            return load_file_checked(where, label, error, timeout=timeout)
        return load_file(where, label, error)
    if checked and hasattr(os, "fork"):
        load = functools.partial(_import_module, where, label, error)
        _import_checked(load, where, label, error, timeout)
    return _import_module(where, label, error)


def _import_module(where: str, label: str, error: type[WhatIfError]) -> ModuleType:
    """``importlib.import_module(where)``; any failure is one ``error`` starting with ``label``."""
    try:
        return importlib.import_module(where)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 (user code: SystemExit included)
        cause = describe_exception(exc)
        raise error(f"{label}: importing {where} failed: {cause}") from None


def load_attribute(
    where: str,
    name: str,
    label: str,
    error: type[WhatIfError] = UserCodeError,
    kind: str = "class",
    checked: bool = False,
    timeout: float | None = None,
) -> Any:
    """``name`` of the module ``where`` (see ``load_module``, also for ``checked`` and
    ``timeout``), which must be callable (a class or a factory); a missing or uncallable
    attribute is one ``error`` naming it as a ``kind``."""
    module = load_module(where, label, error, checked, timeout)
    missing = object()
    value = getattr(module, name, missing)
    if value is missing:
        raise error(f"{label}: {where} has no {kind} {name!r}")
    if not callable(value):
        raise error(f"{label}: {where}.{name} is not a {kind}")
    return value


def describe_status(status: int) -> str:
    """How a child process that ran user code ended, from its ``os.waitpid`` status, in words:
    ``it ended the process (exit status 0)`` or ``it crashed the process (SIGSEGV, signal 11)``."""
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = "signal"
        return f"it crashed the process ({name}, signal {number})"
    return f"it ended the process (exit status {os.waitstatus_to_exitcode(status)})"


def import_in_child(
    path: str | os.PathLike,
    label: str,
    error: type[WhatIfError] = UserCodeError,
    module_name: str | None = None,
    timeout: float | None = None,
) -> None:
    """Execute the file ``path`` once in a forked child process (``load_file`` there) and raise
    the ``error`` it gives, also when the module ends or crashes that process (``os._exit``,
    a segfault: ``describe_status``) or takes more than ``timeout`` seconds; nothing where
    processes cannot fork. The module's effects stay in the child: the caller loads it again."""
    check_file(path, label, error)  # here, before forking: a FIFO is never opened
    if not hasattr(os, "fork"):
        return
    load = functools.partial(load_file, path, label, error, module_name)
    _import_checked(load, os.fspath(path), label, error, timeout)


def _import_checked(
    load: Callable[[], object],
    shown: str,
    label: str,
    error: type[WhatIfError],
    timeout: float | None,
) -> None:
    """Run ``load`` (which raises ``error`` when the module cannot be imported) in a forked
    child (``run_in_child``) and raise its ``error`` here, or one saying how the module ended
    the child or that it ran out of time."""
    result = run_in_child(functools.partial(_error_of, load, error), timeout)
    if result.ok and result.value is None:
        return
    if result.ok:
        raise error(result.value)
    if result.timed_out:
        assert timeout is not None
        why = f"it did not finish within {timeout:g} s (an endless loop?)"
    elif result.status is not None:
        why = describe_status(result.status)
    else:
        why = f"its error cannot be sent back ({result.unsent})"
    raise error(f"{label}: importing {shown} failed: {why}")


def _error_of(load: Callable[[], object], error: type[WhatIfError]) -> str | None:
    """None if ``load()`` returns, else the message of the ``error`` it raises."""
    try:
        load()
    except error as exc:
        return str(exc)
    return None


# The protocol of run_each_in_child: each value is sent as a frame, the length of its pickle
# (8 bytes, big-endian) followed by the pickle of ("value", value) or ("unsent", reason); a
# frame of length 0 ends the stream.
_LENGTH = struct.Struct("!Q")
_READ_SIZE = 1 << 20


@dataclass(frozen=True)
class ChildResult:
    """How one call of ``run_each_in_child`` (``run_in_child``) ended.

    ``value`` is what the function returned when ``ok``. Otherwise exactly one of:
    ``timed_out``, the call ran longer than the time limit (the child was killed); ``status``,
    the child's ``os.waitpid`` status: it ended or crashed before sending the value
    (``describe_status``); ``unsent``, why the value could not be pickled (one line)."""

    value: Any = None
    timed_out: bool = False
    status: int | None = None
    unsent: str | None = None

    @property
    def ok(self) -> bool:
        """Whether the call returned and its value arrived."""
        return not self.timed_out and self.status is None and self.unsent is None


def run_in_child(function: Callable[[], Any], timeout: float | None) -> ChildResult:
    """``function()`` in a forked child process, stopped after ``timeout`` seconds (None: no
    limit): one call of ``run_each_in_child``, which states the protocol."""
    return run_each_in_child(lambda _: function(), [None], timeout)[0]


def run_each_in_child(
    function: Callable[[Any], Any],
    items: Iterable[Any],
    timeout: float | None,
    stop: Callable[[Any], bool] | None = None,
) -> list[ChildResult]:
    """``function(item)`` for every item, in order, in ONE forked child process: a
    ``ChildResult`` per item run (POSIX only: ``os.fork``).

    The protocol. This process flushes its stdout and stderr (so the child does not write
    their buffers again) and forks. The child has all this process had (the function, the
    items, the modules loaded): it ignores SIGINT (a Ctrl-C reaches the whole process group;
    this process handles it and kills the child), disables faulthandler (a crash is a result
    here, not a dump of threads) and ends with this process (``workers.end_with_parent``).
    It sends each value through a pipe as a frame: the length of its pickle (8 bytes,
    big-endian), then the pickle; a value that cannot be pickled is sent as the reason
    instead (``ChildResult.unsent``). After the last item it flushes stdout and stderr, sends
    an empty frame and ends with ``os._exit(0)`` (never this process's ``atexit`` handlers);
    an exception escaping ``function`` ends it with exit status 1, before its frame.

    This process waits at most ``timeout`` seconds (None: no limit) for each frame, counted
    from when it starts waiting for it. The list ends early with the first result that is not
    ``ok`` (the child ran out of time and is killed; or it ended: its wait status), or after
    a value for which ``stop(value)`` is true (the child is killed, the later items not run).
    The child is killed if need be and always reaped before this returns, also on a Ctrl-C
    here (``KeyboardInterrupt`` goes on to the caller).
    """
    items = list(items)
    if not items:
        return []
    for stream in (sys.stdout, sys.stderr):
        _flush(stream)
    parent = os.getpid()
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into the caller
        os.close(read_fd)
        _serve(function, items, write_fd, parent)
    os.close(write_fd)
    results: list[ChildResult] = []
    status = None  # the child's wait status, once it is reaped
    try:
        buffer = bytearray()
        for _ in range(len(items) + 1):  # the values, then the end of the stream
            deadline = None if timeout is None else time.monotonic() + timeout
            try:
                frame = _receive_frame(read_fd, buffer, deadline)
            except TimeoutError:
                if len(results) < len(items):  # else: the values are in, and they stand
                    results.append(ChildResult(timed_out=True))
                break
            if frame is None:  # the pipe ended before the stream did: the child is gone
                _, status = os.waitpid(pid, 0)
                if len(results) < len(items):
                    results.append(ChildResult(status=status))
                break
            if not frame:  # the end of the stream: the child flushed its output and ends
                _, status = os.waitpid(pid, 0)
                break
            results.append(_decode(frame))
            if not results[-1].ok or (stop is not None and stop(results[-1].value)):
                break
    finally:
        os.close(read_fd)
        if status is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    return results


def _serve(function: Callable[[Any], Any], items: list, write_fd: int, parent: int) -> NoReturn:
    """The child of ``run_each_in_child``: send ``function(item)`` of every item, then end."""
    status = 0
    try:
        # Ctrl-C reaches the whole process group: the parent handles it and kills this child
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        # a crash is reported as the call's result, not as a dump of this process's threads
        # (loky's workers enable faulthandler)
        faulthandler.disable()
        end_with_parent(parent)
        for item in items:
            _send(write_fd, _encode(function(item)))
        for stream in (sys.stdout, sys.stderr):
            _flush(stream)
        _send(write_fd, b"")
    except BaseException:  # noqa: BLE001 (the parent reports a child that stops early)
        status = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            _flush(stream)
        os._exit(status)


def _flush(stream: Any) -> None:
    with contextlib.suppress(Exception):
        stream.flush()


def _encode(value: Any) -> bytes:
    """The pickle of ``("value", value)``, or of ``("unsent", why)`` if that cannot be made."""
    try:
        return pickle.dumps(("value", value), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # noqa: BLE001 (a value of user code)
        return pickle.dumps(("unsent", describe_exception(exc)))


def _decode(frame: bytes) -> ChildResult:
    """A ``ChildResult`` from a frame ``_encode`` made."""
    try:
        kind, value = pickle.loads(frame)
    except Exception as exc:  # noqa: BLE001 (a class this process cannot import)
        return ChildResult(unsent=f"it cannot be read back: {describe_exception(exc)}")
    if kind == "unsent":
        return ChildResult(unsent=value)
    return ChildResult(value=value)


def _send(fd: int, payload: bytes) -> None:
    """Write one frame (``payload`` after its length) to the pipe ``fd``, all of it."""
    data = memoryview(_LENGTH.pack(len(payload)) + payload)
    while data:
        data = data[os.write(fd, data) :]


def _receive_frame(fd: int, buffer: bytearray, deadline: float | None) -> bytes | None:
    """The next frame's payload from the pipe ``fd`` (``buffer`` holds what was read ahead);
    None at the end of the pipe (also mid-frame: the writer died); ``TimeoutError`` when it is
    not complete at ``deadline`` (``time.monotonic``; None: no limit)."""
    size = _LENGTH.size
    while len(buffer) < size or len(buffer) < size + _LENGTH.unpack_from(buffer)[0]:
        left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            raise TimeoutError
        data = os.read(fd, _READ_SIZE)
        if not data:
            return None
        buffer += data
    length = _LENGTH.unpack_from(buffer)[0]
    payload = bytes(buffer[size : size + length])
    del buffer[: size + length]
    return payload
