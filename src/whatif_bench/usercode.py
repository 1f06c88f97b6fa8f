"""Loading a user's Python code: a module of forms (``--forms``) or of forecasters (``--models``).

The one loader both use, with one set of errors. Every failure is one line, ``<label>: <what>``,
raised as the caller's error class (``SpecError`` for forms, ``ModelError`` for models):

- ``file F not found`` / ``F is a folder, not a Python file`` / ``F cannot be loaded as a
  Python module``;
- ``importing F failed: <the cause in one line>``: a syntax error (with its line), an exception
  (its type and message), or a call of ``exit()``; the traceback is left out;
- ``F has no class 'Name'`` / ``F.Name is not a class``: the expected attribute is missing or
  cannot be called.

``load_file_checked`` first executes the file in a forked child process (``import_in_child``),
so a module that ends the process (``os._exit``), crashes it (a segfault) or never finishes
importing is an error naming it too, ``importing F failed: it ended the process (exit status
0)``, instead of taking the command with it (an exit status 0 looked like a pass).

A Ctrl-C while the module runs is a ``KeyboardInterrupt`` as usual, never a user-code error.
A module loaded from a file is not entered in ``sys.modules`` (two files of one name never
clash); its classes are then sent to worker processes by value (joblib and dask pickle them with
cloudpickle).
"""

from __future__ import annotations

import faulthandler
import importlib
import importlib.util
import os
import select
import signal
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from whatif_bench.errors import WhatIfError

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


def load_file(
    path: str | os.PathLike,
    label: str,
    error: type[WhatIfError] = UserCodeError,
    module_name: str | None = None,
) -> ModuleType:
    """Execute the Python file ``path`` as a new module (named ``module_name``, by default the
    file's stem) and return it; any failure is one ``error`` starting with ``label``."""
    shown = os.fspath(path)
    file = Path(path)
    if file.is_dir():
        raise error(f"{label}: {shown} is a folder, not a Python file")
    if not file.is_file():
        raise error(f"{label}: file {shown} not found")
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


def load_module(where: str, label: str, error: type[WhatIfError] = UserCodeError) -> ModuleType:
    """The module ``where``: a ``.py`` file (``load_file``) or a dotted module name imported
    from ``sys.path``; any failure is one ``error`` starting with ``label``."""
    if where.endswith(".py"):
        return load_file(where, label, error)
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
) -> Any:
    """``name`` of the module ``where`` (see ``load_module``), which must be callable (a class
    or a factory); a missing or uncallable attribute is one ``error`` naming it as a ``kind``."""
    module = load_module(where, label, error)
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
    if not hasattr(os, "fork"):
        return
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into the caller
        try:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C
            faulthandler.disable()  # a crash is the error line, not a dump of threads
            os.close(read_fd)
            try:
                load_file(path, label, error, module_name)
                message = "ok"
            except BaseException as exc:  # noqa: BLE001 (the error's own message)
                message = "error:" + str(exc)
            os.write(write_fd, message.encode("utf-8", "replace")[:60000])
        finally:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except Exception:  # noqa: BLE001
                    pass
            os._exit(0)
    os.close(write_fd)
    parts: list[bytes] = []
    deadline = None if timeout is None else time.monotonic() + timeout
    finished = False
    try:
        while True:
            left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            ready, _, _ = select.select([read_fd], [], [], left)
            if not ready:
                raise error(
                    f"{label}: importing {os.fspath(path)} failed: it did not finish within "
                    f"{timeout:g} s (an endless loop?)"
                )
            data = os.read(read_fd, 65536)
            if not data:
                break
            parts.append(data)
        finished = True
    finally:
        os.close(read_fd)
        if not finished:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _, status = os.waitpid(pid, 0)
    message = b"".join(parts).decode("utf-8", "replace")
    if message == "ok":
        return
    if message.startswith("error:"):
        raise error(message[len("error:") :])
    raise error(f"{label}: importing {os.fspath(path)} failed: {describe_status(status)}")
