"""Loading a user's Python code: a module of forms (``--forms``) or of forecasters (``--models``).

The one loader both use, with one set of errors. Every failure is one line, ``<label>: <what>``,
raised as the caller's error class (``SpecError`` for forms, ``ModelError`` for models):

- ``file F not found`` / ``F is a folder, not a Python file`` / ``F cannot be loaded as a
  Python module``;
- ``importing F failed: <the cause in one line>``: a syntax error (with its line), an exception
  (its type and message), or a call of ``exit()``; the traceback is left out;
- ``F has no class 'Name'`` / ``F.Name is not a class``: the expected attribute is missing or
  cannot be called.

A Ctrl-C while the module runs is a ``KeyboardInterrupt`` as usual, never a user-code error.
A module loaded from a file is not entered in ``sys.modules`` (two files of one name never
clash); its classes are then sent to worker processes by value (joblib and dask pickle them with
cloudpickle).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
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
