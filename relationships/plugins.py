"""Loading user form modules: the one place where user code is executed, on explicit request.

User code can fail in every way: a module that does not import, a form function that raises,
returns something other than one number, returns NaN, or never returns. Each becomes one
``SpecError`` naming the module file and the form:

- importing goes through ``whatif_bench.usercode`` (the loader ``whatif evaluate`` uses for
  model modules too, with the same errors); the forms a failed module registered are removed
  again. The module is executed in a forked child first (``usercode.import_in_child``), so one
  that ends or crashes the process at import (``os._exit``, a segfault) or never finishes is
  an error naming it, not the end of the command;
- ``probe_user_forms`` calls every user form of the given relationships on the factors and
  baselines the rule checks use, in a forked child process with a time limit per relationship.

[design] A child process, not ``SIGALRM``: user forms are compiled by numba and run inside
compiled kernels, where a Python signal handler never gets to run, so an endless loop could
only be stopped by killing the process. ``os.fork`` (POSIX, as is the rest of the toolkit:
``fcntl`` locks) gives the child the forms already loaded, so the module is not executed
twice; the parent kills the child when a call takes longer than ``timeout`` seconds.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from whatif_bench.errors import SpecError
from whatif_bench.outputs import path_problem
from whatif_bench.relationships.forms import EFFECTS, FORMS, FormDefinition
from whatif_bench.usercode import (
    describe_exception,
    import_in_child,
    load_file,
    run_each_in_child,
)

FORM_MODULE = "form module"  # how errors name a module of forms (see whatif_bench.usercode)
USER_CODE_TIMEOUT_S = 60.0  # per relationship: numba compiles the user's function in that time

_loaded: set[Path] = set()
# (kind, form name) -> the module file that registered it
_origins: dict[tuple[str, str], str] = {}


def form_origin(definition: FormDefinition) -> str:
    """The module file that registered a user form ("built-in" for the shipped ones)."""
    return _origins.get((definition.kind, definition.name), "built-in")


def load_form_modules(
    paths: Iterable[str | Path], timeout: float | None = None, probe: bool = True
) -> None:
    """Execute Python files that call ``register_form``/``register_effect`` (each at most once).

    Each form a module registers is then compiled and called once (at ``y = 1``, ``f = 1``,
    parameters at their default) in a child process, so one that numba cannot compile, that
    raises or returns something other than a number, or that does not return within
    ``timeout`` seconds is reported here, naming module and form (and is not kept).
    ``probe=False`` skips that call: for a worker process re-loading a module its parent
    already probed (``source.TargetRef``).
    """
    for raw in paths:
        problem = path_problem(raw)  # a symbolic link loop, a FIFO, a device: one clear error
        if problem is not None:
            raise SpecError(f"form module: {os.fspath(raw)}: the path is {problem}")
        path = Path(os.path.realpath(raw))
        if path in _loaded:
            continue
        before = (set(FORMS), set(EFFECTS))
        name = f"whatif_user_forms_{len(_loaded)}"
        limit = USER_CODE_TIMEOUT_S if timeout is None else timeout
        if probe:  # a module that ends or crashes the process at import, in a child first
            import_in_child(raw, FORM_MODULE, SpecError, module_name=name, timeout=limit)
        try:
            load_file(raw, FORM_MODULE, SpecError, module_name=name)
        except BaseException:  # also Ctrl-C: forget what the module registered before it failed
            _forget_new_forms(*before)
            raise
        new = [FORMS[n] for n in sorted(set(FORMS) - before[0])]
        new += [EFFECTS[n] for n in sorted(set(EFFECTS) - before[1])]
        for definition in new:
            _origins[(definition.kind, definition.name)] = str(raw)
        if not probe:
            _loaded.add(path)
            continue
        try:
            failures = call_each_with_timeout(
                _probe_alone,
                new,
                USER_CODE_TIMEOUT_S if timeout is None else timeout,
                # (mypy cannot infer the type of a lambda with a default argument)
                lambda d, raw=raw: f"{raw}: {d.kind} form {d.name!r}",  # type: ignore[misc]
            )
        except SpecError:
            _forget_new_forms(*before)
            raise
        for failure in failures:
            if failure is not None and failure["kind"] == "error":
                _forget_new_forms(*before)
                raise SpecError(failure["message"])
        _loaded.add(path)


def _forget_new_forms(forms: set[str], effects: set[str]) -> None:
    for name in set(FORMS) - forms:
        del FORMS[name]
    for name in set(EFFECTS) - effects:
        del EFFECTS[name]


def uses_user_code(relationship: Any) -> bool:
    """Whether evaluating ``relationship`` calls a user form or effect."""
    return any(True for _ in _user_forms(relationship))


def _user_forms(relationship: Any) -> Iterator[tuple[FormDefinition, Any]]:
    """(form, packed parameters) of every user form ``relationship`` calls."""
    if relationship.form.scalar is not None:
        yield relationship.form, relationship.primary_params
    for info in relationship.covariates[1:]:
        if info.effect.scalar is not None:
            yield info.effect, info.effect.pack(info.effect_params)


def _representative_params(form: FormDefinition) -> Any:
    """Each parameter at its default, else 1 moved into its bounds."""
    import numpy as np

    from whatif_bench.relationships.forms import MAX_PARAMS

    packed = np.zeros(MAX_PARAMS, dtype=np.float64)
    for index, param in enumerate(form.params):
        value = param.default if param.default is not None else 1.0
        packed[index] = min(max(value, param.lower), param.upper)
    return packed


def _call(form: FormDefinition, point: tuple[float, ...], params: Any, where: str) -> dict | None:
    """Call one user form at one point: ``None`` if it returned a finite number, else the
    failure as ``{"kind": "error" | "finite", "message": ...}``."""
    import numpy as np

    names = ("y", "f")[-len(point) :]
    shown = ", ".join(f"{n}={v:.6g}" for n, v in zip(names, point, strict=True))
    assert form.scalar is not None, "user forms are compiled when registered"
    try:
        value = form.scalar(*point, params)
    except Exception as exc:  # noqa: BLE001 (user code)
        return {
            "kind": "error",
            "message": f"{where}: raised at {shown}: {describe_exception(exc)}",
        }
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | float):
        kind = type(value).__name__
        if isinstance(value, np.ndarray):
            kind = f"an array of shape {value.shape}"
        message = f"{where}: returned {kind} at {shown}; a form returns one number"
        return {"kind": "error", "message": message}
    if not math.isfinite(value):
        message = f"{where}: returned {value} at {shown}; forms must return finite numbers"
        return {"kind": "finite", "message": message}
    return None


def _probe_alone(form: FormDefinition) -> dict | None:
    """Compile and call a newly registered form once, at ``y = 1``, ``f = 1``."""
    point = (1.0, 1.0) if form.kind == "primary" else (1.0,)
    where = f"{form_origin(form)}: {form.kind} form {form.name!r}"
    return _call(form, point, _representative_params(form), where)


def probe_relationship(relationship: Any) -> dict | None:
    """Call each user form of ``relationship`` on the rule checks' baselines and factors.

    Returns ``None``, or the first failure as ``{"kind": ..., "message": ...}``: kind
    ``"error"`` for an exception or a result that is not one number, ``"finite"`` for a NaN or
    infinite result. Run it through ``call_each_with_timeout``.
    """
    from whatif_bench.relationships.ranges import factor_grid, sample_baselines

    grid = factor_grid(relationship.history_pool)
    baselines = sample_baselines(relationship)
    non_finite = None
    for form, params in _user_forms(relationship):
        where = (
            f"{form_origin(form)}: {form.kind} form {form.name!r} "
            f"(used by {relationship.simulator}/{relationship.target})"
        )
        points = (
            [(float(y), float(f)) for y in baselines for f in grid]
            if form.kind == "primary"
            else [(float(f),) for f in grid]
        )
        for point in points:
            failure = _call(form, point, params, where)
            if failure is not None and failure["kind"] == "error":
                return failure
            if failure is not None and non_finite is None:
                non_finite = failure
    return non_finite


def call_each_with_timeout(
    function: Callable[[Any], Any],
    items: Sequence[Any],
    timeout: float,
    describe: Callable[[Any], str],
) -> list[Any]:
    """``[function(item) for item in items]`` computed in a forked child process.

    A call that raises, or that takes more than ``timeout`` seconds (the child is then
    killed), or a child that dies, is a ``SpecError`` whose message starts with
    ``describe(item)``; the items after it are not run (``usercode.run_each_in_child``).
    """
    outcomes = run_each_in_child(
        functools.partial(_result_or_error, function),
        items,
        timeout,
        stop=lambda outcome: "error" in outcome,
    )
    results: list[Any] = []
    for item, outcome in zip(items, outcomes, strict=False):
        if outcome.timed_out:
            raise SpecError(
                f"{describe(item)}: user form code did not return within {timeout:g} s "
                "(an endless loop?)"
            )
        if not outcome.ok:
            raise SpecError(f"{describe(item)}: the process running user form code died")
        if "error" in outcome.value:
            raise SpecError(f"{describe(item)}: {outcome.value['error']}")
        results.append(outcome.value["result"])
    return results


def _result_or_error(function: Callable[[Any], Any], item: Any) -> dict:
    """``{"result": function(item)}``, or ``{"error": <the exception in one line>}``."""
    try:
        return {"result": function(item)}
    except BaseException as exc:  # noqa: BLE001 (user code)
        return {"error": describe_exception(exc)}


def probe_user_forms(relationships: Iterable[Any], timeout: float | None = None) -> None:
    """Raise a ``SpecError`` naming module and form if a user form used by ``relationships``
    raises, returns something other than one number, or takes longer than ``timeout`` seconds
    (default ``USER_CODE_TIMEOUT_S``).

    (NaN or infinite results are a broken rule that ``whatif relationships check`` reports.)
    """
    chosen = [r for r in relationships if uses_user_code(r)]
    limit = USER_CODE_TIMEOUT_S if timeout is None else timeout
    for failure in call_each_with_timeout(probe_relationship, chosen, limit, describe_user_code):
        if failure is not None and failure["kind"] == "error":
            raise SpecError(failure["message"])


def describe_user_code(relationship: Any) -> str:
    """ "<module>: form 'name' (used by sim/target)" for every user form of a relationship."""
    parts = [
        f"{form_origin(form)}: {form.kind} form {form.name!r}"
        for form, _ in _user_forms(relationship)
    ]
    return f"{'; '.join(parts)} (used by {relationship.simulator}/{relationship.target})"
