"""Relationship spec files (TOML) parsed into validated, immutable spec objects.

A spec file describes one simulator: its ordered covariates, its target classes (combination
rule, directions, secondary weights) and its targets (primary covariate, form, constants).
Parsing never evaluates code. Every error is a ``SpecError`` naming file, entry and field.
See ``docs/AUTHORING.md`` for the format.
"""

from __future__ import annotations

import math
import os
import re
import stat
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from whatif_bench.errors import SpecError
from whatif_bench.outputs import is_safe_name, path_problem
from whatif_bench.relationships.forms import EFFECTS, FORMS
from whatif_bench.relationships.ranges import MAX_POOL_FACTOR, MIN_POOL_FACTOR
from whatif_bench.relationships.shapes import SHAPE_CODES

DIRECTIONS = ("direct", "inverse")
COMBINATIONS = ("multiplicative", "additive")
MAX_COVARIATES_PER_TASK = 5
MAX_SPEC_BYTES = 4 * 1024 * 1024  # the largest shipped file is ~20 kB
# Names of simulators, covariates and targets: they become file names (plots) and parts of task
# ids ``<simulator>/<target>/...`` and of ``--factor COV=F`` arguments, so they are identifier-
# like: letters, digits, ``_ . -``, starting with a letter, digit or ``_`` (no ``/``, no ``..``
# path, no leading ``-`` that would read as an option, no ``=``). Every such name also passes
# ``outputs.is_safe_name``.
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}")


@dataclass(frozen=True)
class CovariateSpec:
    """A covariate: its event shape, base value (physical unit) and secondary effect shape."""

    name: str
    shape: str
    base_value: float
    unit: str
    effect: str
    effect_params: Mapping[str, float]
    weight: float | None
    group: str
    description: str


@dataclass(frozen=True)
class TargetClassSpec:
    """Rules shared by a class of targets: combination, directions, weights, value window."""

    name: str
    combination: str
    level: float
    window: tuple[float, float]
    typical_range: tuple[float, float]
    directions: Mapping[str, str]
    weights: Mapping[str, float]
    rationale: str


@dataclass(frozen=True)
class TargetSpec:
    """One target: its class, unit, primary covariate and primary form with constants."""

    name: str
    target_class: str
    unit: str
    primary: str
    form: str
    params: Mapping[str, float]
    directions: Mapping[str, str]
    weights: Mapping[str, float]
    rationale: str


@dataclass(frozen=True)
class SimulatorSpec:
    """Everything one spec file declares about one simulator."""

    name: str
    title: str
    source: str
    extends: bool
    dampening: float
    history_pool: tuple[float, ...]
    only_increase: bool
    c4: tuple[int, int]  # (context, prediction) steps of the C4 axis value
    covariates: tuple[CovariateSpec, ...]
    classes: Mapping[str, TargetClassSpec]
    targets: tuple[TargetSpec, ...]


class _Table:
    """A TOML table read field by field; unknown or missing fields raise ``SpecError``."""

    def __init__(self, data: Any, where: str) -> None:
        if not isinstance(data, dict):
            raise SpecError(f"{where}: expected a table, got {type(data).__name__}")
        self.data = data
        self.where = where
        self.used: set[str] = set()

    def error(self, field: str, message: str) -> SpecError:
        return SpecError(f"{self.where}: field {field!r}: {message}")

    def get(self, field: str, kind: type | tuple[type, ...], default: Any = ...) -> Any:
        self.used.add(field)
        if field not in self.data:
            if default is ...:
                raise self.error(field, "is required")
            return default
        value = self.data[field]
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = _int_to_float(value, lambda m: self.error(field, m))
        if isinstance(value, bool) and kind is not bool:
            raise self.error(field, f"expected {_kind_name(kind)}, got a boolean")
        if not isinstance(value, kind):
            raise self.error(field, f"expected {_kind_name(kind)}, got {type(value).__name__}")
        if isinstance(value, float) and not math.isfinite(value):
            raise self.error(field, f"must be finite, got {value}")
        return value

    def number(self, field: str, default: Any = ..., lower: float = -math.inf) -> float:
        value = self.get(field, float, default)
        if value is not None and value < lower:
            raise self.error(field, f"must be >= {lower}, got {value}")
        return value

    def name(self, field: str) -> str:
        """A simulator, covariate or target name (see ``_NAME``)."""
        value = self.get(field, str)
        if _NAME.fullmatch(value) is None or not is_safe_name(value):
            raise self.error(
                field,
                f"{value!r} is not a valid name: use 1-128 letters, digits or _ . -, "
                "starting with a letter, digit or _",
            )
        return value

    def pair(self, field: str, default: tuple[float, float] | None = None) -> tuple[float, float]:
        """An ordered, finite ``[lower, upper]`` pair; ``default`` (if given) when absent."""
        if default is not None and field not in self.data:
            self.used.add(field)
            return default
        value = self.get(field, list)
        if len(value) != 2 or not all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in value
        ):
            raise self.error(field, f"expected [lower, upper] with lower < upper, got {value!r}")
        lower, upper = (_int_to_float(v, lambda m: self.error(field, m)) for v in value)
        if not (math.isfinite(lower) and math.isfinite(upper)):
            raise self.error(field, f"bounds must be finite, got {value!r}")
        if not lower < upper:
            raise self.error(field, f"expected [lower, upper] with lower < upper, got {value!r}")
        return lower, upper

    def finish(self) -> None:
        unknown = sorted(set(self.data) - self.used)
        if unknown:
            raise SpecError(f"{self.where}: unknown field(s) {unknown}")


def _int_to_float(value: int | float, error: Any) -> float:
    """``float(value)``; an integer too large for a float is ``error(message)`` raised."""
    try:
        return float(value)
    except OverflowError:
        digits = len(str(abs(value))) if abs(value) < 10**4000 else "4000+"
        raise error(f"number with {digits} digits is too large") from None


def _kind_name(kind: type | tuple[type, ...]) -> str:
    names: dict[object, str] = {
        str: "a string",
        float: "a number",
        bool: "true/false",
        list: "a list",
        dict: "a table",
    }
    return names.get(kind, getattr(kind, "__name__", str(kind)))


def _number_map(table: _Table, field: str, lower: float) -> dict[str, float]:
    raw = table.get(field, dict, {})
    out: dict[str, float] = {}
    for key, value in raw.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise table.error(field, f"entry {key!r} must be a finite number, got {value!r}")
        number = _int_to_float(value, lambda m, key=key: table.error(field, f"entry {key!r}: {m}"))
        if not math.isfinite(number):
            raise table.error(field, f"entry {key!r} must be a finite number, got {value!r}")
        if number < lower:
            raise table.error(field, f"entry {key!r} must be >= {lower}, got {number}")
        out[key] = number
    return out


def _direction_map(table: _Table, field: str) -> dict[str, str]:
    raw = table.get(field, dict, {})
    for key, value in raw.items():
        if value not in DIRECTIONS:
            raise table.error(
                field, f"entry {key!r} must be one of {list(DIRECTIONS)}, got {value!r}"
            )
    return dict(raw)


def _check_form(
    table: _Table, field: str, name: str, params: Mapping[str, float], kind: str
) -> None:
    library = FORMS if kind == "primary" else EFFECTS
    if name not in library:
        raise table.error(field, f"unknown {kind} form {name!r} (known: {sorted(library)})")
    try:
        library[name].pack(params)
    except ValueError as exc:
        raise table.error(field, str(exc)) from None


def _parse_covariate(raw: Any, where: str) -> CovariateSpec:
    table = _Table(raw, where)
    name = table.name("name")
    table.where = f"{where.rsplit(':', 1)[0]}: covariate {name!r}"
    shape = table.get("shape", str)
    if shape not in SHAPE_CODES:
        raise table.error("shape", f"must be one of {sorted(SHAPE_CODES)}, got {shape!r}")
    base_value = table.number("base_value")
    effect = table.get("effect", str)
    effect_params = _number_map(table, "effect_params", -math.inf)
    _check_form(table, "effect", effect, effect_params, "effect")
    spec = CovariateSpec(
        name=name,
        shape=shape,
        base_value=base_value,
        unit=table.get("unit", str),
        effect=effect,
        effect_params=effect_params,
        weight=table.number("weight", None, lower=0.0),
        group=table.get("group", str, ""),
        description=table.get("description", str),
    )
    table.finish()
    return spec


def _parse_class(name: str, raw: Any, where: str, covariates: set[str]) -> TargetClassSpec:
    table = _Table(raw, f"{where}: class {name!r}")
    combination = table.get("combination", str)
    if combination not in COMBINATIONS:
        raise table.error(
            "combination", f"must be one of {list(COMBINATIONS)}, got {combination!r}"
        )
    directions = _direction_map(table, "directions")
    weights = _number_map(table, "weights", 0.0)
    for field, mapping in (("directions", directions), ("weights", weights)):
        unknown = sorted(set(mapping) - covariates)
        if unknown:
            raise table.error(field, f"unknown covariate(s) {unknown}")
    spec = TargetClassSpec(
        name=name,
        combination=combination,
        level=table.number("level", 0.0, lower=0.0),
        window=table.pair("window", (-math.inf, math.inf)),
        typical_range=table.pair("typical_range"),
        directions=directions,
        weights=weights,
        rationale=table.get("rationale", str),
    )
    if not (spec.window[0] <= spec.typical_range[0] and spec.typical_range[1] <= spec.window[1]):
        raise table.error(
            "typical_range",
            f"{list(spec.typical_range)} must lie inside the window {list(spec.window)}",
        )
    table.finish()
    return spec


def _parse_target(raw: Any, where: str) -> tuple[TargetSpec, _Table, bool]:
    """The target, its table (for later errors) and its ``overrides`` flag."""
    table = _Table(raw, where)
    name = table.name("name")
    table.where = f"{where.rsplit(':', 1)[0]}: target {name!r}"
    overrides = table.get("overrides", bool, False)
    form = table.get("form", str)
    params = _number_map(table, "params", -math.inf)
    _check_form(table, "form", form, params, "primary")
    spec = TargetSpec(
        name=name,
        target_class=table.get("class", str),
        unit=table.get("unit", str),
        primary=table.get("primary", str),
        form=form,
        params=params,
        directions=_direction_map(table, "directions"),
        weights=_number_map(table, "weights", 0.0),
        rationale=table.get("rationale", str),
    )
    table.finish()
    return spec, table, overrides


def covariates_for(primary: str, order: tuple[str, ...]) -> tuple[str, ...]:
    """The ordered covariates of a target: its primary, then the first others of ``order``."""
    others = [name for name in order if name != primary]
    return (primary, *others[: MAX_COVARIATES_PER_TASK - 1])


def parse_toml(text: str, source: str) -> dict:
    """The TOML document of a spec file (never evaluated, only parsed).

    Besides TOML syntax errors, what makes the parser itself fail is a ``SpecError`` too:
    arrays nested thousands deep (the parser is recursive) and integers longer than Python's
    4300-digit conversion limit.
    """
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{source}: not valid TOML: {exc}") from None
    except RecursionError:
        raise SpecError(f"{source}: not valid TOML: arrays or tables nested too deeply") from None
    except ValueError as exc:  # e.g. a 5000-digit integer
        raise SpecError(f"{source}: not valid TOML: {exc}") from None


def parse_spec(
    document: dict | str, source: str, base: SimulatorSpec | None = None
) -> SimulatorSpec:
    """Validate one spec file (its text or parsed document); ``base`` is the simulator it extends."""
    if isinstance(document, str):
        document = parse_toml(document, source)
    top = _Table(document, source)
    header = _Table(top.get("simulator", dict), f"{source}: [simulator]")
    name = header.name("name")
    extends = header.get("extends", bool, False)
    if extends and base is None:
        raise header.error("extends", f"no simulator named {name!r} is loaded to extend")
    if not extends and base is not None:
        raise header.error(
            "name", f"simulator {name!r} already exists; set extends = true to add to it"
        )

    if base is not None:  # extends = true (checked above)
        for field in ("title", "dampening", "history_pool", "only_increase", "c4"):
            if field in header.data:
                raise header.error(field, "cannot be changed by a file that extends a simulator")
        if "covariates" in document:
            raise SpecError(f"{source}: a file that extends {name!r} cannot declare covariates")
        title, dampening = base.title, base.dampening
        history_pool, only_increase = base.history_pool, base.only_increase
        c4 = base.c4
        covariates = base.covariates
    else:
        title = header.get("title", str)
        dampening = header.number("dampening", 0.5, lower=0.0)
        pool = header.get("history_pool", list)
        if not pool or not all(
            isinstance(v, int | float)
            and not isinstance(v, bool)
            and MIN_POOL_FACTOR
            <= _int_to_float(v, lambda m: header.error("history_pool", m))
            <= MAX_POOL_FACTOR
            and v != 1
            for v in pool
        ):
            raise header.error(
                "history_pool",
                f"must be a non-empty list of factors != 1 between {MIN_POOL_FACTOR:g} and "
                f"{MAX_POOL_FACTOR:g}, got {pool!r}",
            )
        history_pool = tuple(sorted(float(v) for v in pool))
        only_increase = header.get("only_increase", bool, False)
        if only_increase and min(history_pool) < 1:
            raise header.error(
                "history_pool", "a simulator whose targets only increase draws factors > 1 only"
            )
        c4 = _c4(header)
        raw_covariates = top.get("covariates", list)
        covariates = tuple(
            _parse_covariate(raw, f"{source}: covariates[{i}]")
            for i, raw in enumerate(raw_covariates)
        )
        if not covariates:
            raise SpecError(f"{source}: declares no covariates")
        seen: set[str] = set()
        for covariate in covariates:
            if covariate.name in seen:
                raise SpecError(f"{source}: covariate {covariate.name!r} is declared twice")
            seen.add(covariate.name)
    header.finish()

    covariate_names = {c.name for c in covariates}
    classes = {
        key: _parse_class(key, value, source, covariate_names)
        for key, value in top.get("classes", dict, {}).items()
    }
    if base is not None:
        clash = sorted(set(classes) & set(base.classes))
        if clash:
            raise SpecError(f"{source}: class(es) {clash} already exist in simulator {name!r}")
        classes = {**base.classes, **classes}

    targets: list[TargetSpec] = list(base.targets) if base is not None else []
    earlier = {t.name: i for i, t in enumerate(targets)}  # declared by the files loaded before
    names: set[str] = set()
    for index, raw in enumerate(top.get("targets", list, [])):
        target, table, overrides = _parse_target(raw, f"{source}: targets[{index}]")
        if target.name in names:
            raise SpecError(f"{table.where}: target is declared twice in simulator {name!r}")
        names.add(target.name)
        if overrides and target.name not in earlier:
            raise table.error(
                "overrides", f"simulator {name!r} has no target {target.name!r} to override"
            )
        if not overrides and target.name in earlier:
            assert base is not None  # earlier targets come from the simulator being extended
            raise table.error(
                "name",
                f"simulator {name!r} already has a target {target.name!r} (from {base.source}); "
                "set overrides = true to replace it",
            )
        _check_target(target, table, classes, covariates, only_increase)
        if overrides:  # replaced in place: the registry's order (and task order) is kept
            targets[earlier[target.name]] = target
        else:
            targets.append(target)
    top.finish()
    if not targets:
        raise SpecError(f"{source}: declares no targets")
    return SimulatorSpec(
        name=name,
        title=title,
        source=source if base is None else f"{base.source}, {source}",
        extends=extends,
        dampening=dampening,
        history_pool=history_pool,
        only_increase=only_increase,
        c4=c4,
        covariates=covariates,
        classes=classes,
        targets=tuple(targets),
    )


MAX_WINDOW_STEPS = 10_000_000  # C4 context + prediction; a longer window is no task we can store
# C4 is each simulator's longest setting: at least C1's context (1,024 steps), and a horizon that
# holds the shortest event (32 steps), so every C4 pair can carry a future event. (Kept here
# rather than read from corpus.axes: relationships sits below the corpus room.)
MIN_C4_CONTEXT = 1024
MIN_C4_PREDICTION = 32


def _c4(header: _Table) -> tuple[int, int]:
    """``c4 = [context, prediction]``: whole numbers of steps, 32 <= prediction <= context,
    1,024 <= context, context + prediction <= 10,000,000."""
    value = header.get("c4", list)
    if len(value) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise header.error("c4", f"expected [context, prediction] in whole steps, got {value!r}")
    context, prediction = value
    if (
        not MIN_C4_PREDICTION <= prediction <= context
        or context < MIN_C4_CONTEXT
        or context + prediction > MAX_WINDOW_STEPS
    ):
        raise header.error(
            "c4",
            f"needs {MIN_C4_PREDICTION} <= prediction <= context, context >= {MIN_C4_CONTEXT:,} "
            f"and context + prediction <= {MAX_WINDOW_STEPS:,} steps, got [{context}, {prediction}]",
        )
    return int(context), int(prediction)


def _check_target(
    target: TargetSpec,
    table: _Table,
    classes: Mapping[str, TargetClassSpec],
    covariates: tuple[CovariateSpec, ...],
    only_increase: bool,
) -> None:
    by_name = {c.name: c for c in covariates}
    order = tuple(by_name)
    if target.target_class not in classes:
        raise table.error(
            "class", f"unknown class {target.target_class!r} (known: {sorted(classes)})"
        )
    if target.primary not in by_name:
        raise table.error("primary", f"unknown covariate {target.primary!r} (known: {list(order)})")
    for field, mapping in (("directions", target.directions), ("weights", target.weights)):
        unknown = sorted(set(mapping) - set(by_name))
        if unknown:
            raise table.error(field, f"unknown covariate(s) {unknown}")
    target_class = classes[target.target_class]
    acting = covariates_for(target.primary, order)
    for name in acting:
        if by_name[name].base_value == 0.0:
            raise table.error(
                "primary",
                f"covariate {name!r} has base value 0, so a factor cannot change it; it must not act on a target",
            )
        direction = target.directions.get(name, target_class.directions.get(name))
        if direction is None:
            raise table.error(
                "directions",
                f"no direction for covariate {name!r} (set it here or in class {target_class.name!r})",
            )
        if only_increase and direction != "direct":
            raise table.error(
                "directions",
                f"covariate {name!r}: this simulator's targets only increase, so every direction is 'direct'",
            )
    for name in acting[1:]:
        if secondary_weight(name, target, target_class, by_name[name]) is None:
            raise table.error(
                "weights",
                f"no secondary weight for covariate {name!r} (set it here, in class "
                f"{target_class.name!r} or on the covariate)",
            )


def secondary_weight(
    name: str, target: TargetSpec, target_class: TargetClassSpec, covariate: CovariateSpec
) -> float | None:
    """A secondary's weight: the target's value, else its class's, else the covariate's own."""
    if name in target.weights:
        return target.weights[name]
    if name in target_class.weights:
        return target_class.weights[name]
    return covariate.weight


def read_spec_text(path: str | Path) -> str:
    """A spec file's text (UTF-8; a leading byte-order mark is dropped).

    A missing, unreadable, non-regular, over-large (``MAX_SPEC_BYTES``) or non-UTF-8 file,
    or one containing NUL bytes, is a ``SpecError`` naming it.
    """
    problem = path_problem(path)
    if problem is not None:
        raise SpecError(f"{path}: cannot read spec file: is {problem}, not a regular file")
    try:
        # O_NONBLOCK: opening a named pipe must not wait for a writer; it is refused below
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with open(descriptor, "rb") as handle:
            info = os.fstat(handle.fileno())
            if stat.S_ISDIR(info.st_mode):
                raise IsADirectoryError
            if not stat.S_ISREG(info.st_mode):
                raise SpecError(f"{path}: cannot read spec file: not a regular file")
            data = handle.read(MAX_SPEC_BYTES + 1)
    except IsADirectoryError:
        raise SpecError(f"{path}: cannot read spec file: is a folder, not a file") from None
    except OSError as exc:
        raise SpecError(f"{path}: cannot read spec file: {exc.strerror or exc}") from None
    if len(data) > MAX_SPEC_BYTES:
        raise SpecError(
            f"{path}: spec file is larger than {MAX_SPEC_BYTES // (1024 * 1024)} MiB; "
            "is it the right file?"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(
            f"{path}: not a UTF-8 text file (invalid byte at offset {exc.start}); "
            "spec files are UTF-8 TOML"
        ) from None
    if "\x00" in text:
        raise SpecError(f"{path}: not a text file (contains NUL bytes); spec files are UTF-8 TOML")
    return text.removeprefix("\ufeff")


def simulator_name(document: dict, source: str) -> str:
    """The simulator a parsed spec file is about, read without validating the rest."""
    header = document.get("simulator")
    if not isinstance(header, dict) or not isinstance(header.get("name"), str):
        raise SpecError(f"{source}: [simulator]: field 'name': is required")
    return header["name"]


def relationships_of_files(files: list[str]) -> set[tuple[str, str]]:
    """(simulator, target) pairs declared by the given (already validated) spec files."""
    wanted: set[tuple[str, str]] = set()
    for path in files:
        document = parse_toml(read_spec_text(path), path)
        simulator = simulator_name(document, path)
        wanted |= {(simulator, t["name"]) for t in document.get("targets", [])}
    return wanted
