"""The forms library: every primary form g(y, f) and secondary effect r(f), described as data.

A ``FormDefinition`` names the parameters (with bounds), the formula shown in the generated
reference, the plain-numpy reference and the kernel code. Users add forms with
``register_form`` / ``register_effect``; their function is compiled with numba, and spec
files can then name it. Spec files only ever *name* forms; they never carry code.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from whatif_bench.relationships import kernels as k
from whatif_bench.relationships import reference as ref

MAX_PARAMS = 4
Kind = Literal["primary", "effect"]


@dataclass(frozen=True)
class Param:
    """One named constant of a form, with inclusive bounds and an optional default."""

    name: str
    lower: float = -math.inf
    upper: float = math.inf
    default: float | None = None
    doc: str = ""


@dataclass(frozen=True)
class FormDefinition:
    """A closed-form family: primary ``g(y, f; p)`` or secondary effect ``r(f; p)``."""

    name: str
    kind: Kind
    code: int
    params: tuple[Param, ...]
    formula: str
    description: str
    reference: Callable[..., np.ndarray]
    scalar: Callable[..., float] | None = field(default=None, compare=False)

    def pack(self, values: Mapping[str, float]) -> np.ndarray:
        """Validate named constants and pack them into a float64 vector of ``MAX_PARAMS``.

        Raises ``ValueError`` naming the parameter that is unknown, missing or out of bounds.
        """
        known = {param.name for param in self.params}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(
                f"form {self.name!r} has no parameter(s) {unknown}; its parameters are "
                f"{[param.name for param in self.params]}"
            )
        packed = np.zeros(MAX_PARAMS, dtype=np.float64)
        for index, param in enumerate(self.params):
            value = values.get(param.name, param.default)
            if value is None:
                raise ValueError(f"form {self.name!r} needs parameter {param.name!r}")
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"parameter {param.name!r} must be a number, got {value!r}")
            value = float(value)
            if not (param.lower <= value <= param.upper) or not math.isfinite(value):
                raise ValueError(
                    f"parameter {param.name!r} = {value} is outside [{param.lower}, {param.upper}]"
                )
            packed[index] = value
        return packed

    def evaluate_reference(self, *args: np.ndarray, params: np.ndarray) -> np.ndarray:
        """Evaluate the plain-numpy reference: ``(y, f)`` for primary forms, ``(f,)`` for effects."""
        arrays = [np.asarray(a, dtype=np.float64) for a in args]
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return np.asarray(self.reference(*arrays, params), dtype=np.float64)


FORMS: dict[str, FormDefinition] = {}
EFFECTS: dict[str, FormDefinition] = {}


def _add(definition: FormDefinition) -> FormDefinition:
    table = FORMS if definition.kind == "primary" else EFFECTS
    if definition.name in table:
        raise ValueError(f"a {definition.kind} form named {definition.name!r} already exists")
    if len(definition.params) > MAX_PARAMS:
        raise ValueError(f"form {definition.name!r} has more than {MAX_PARAMS} parameters")
    table[definition.name] = definition
    return definition


_POS = 1e-9  # smallest accepted value of parameters that must be strictly positive

for _definition in (
    FormDefinition(
        "proportional",
        "primary",
        k.PROPORTIONAL,
        (Param("overhead", 0.0, 0.99, 0.0, "share of y that does not scale with f"),),
        "y · (1 + (1 − overhead)·(f − 1))",
        "Close to linear in the factor, with a small fixed share (overhead) that does not scale.",
        ref.proportional,
    ),
    FormDefinition(
        "inverse",
        "primary",
        k.INVERSE,
        (
            Param("exponent", _POS, 4.0, 1.0, "how fast y falls with f"),
            Param("floor", 0.0, 0.99, 0.0, "share of y that does not fall"),
        ),
        "y · (1 + (1 − floor)·(f^(−exponent) − 1))",
        "Falls inversely with the factor (1/f for exponent 1), keeping a fixed floor share.",
        ref.inverse,
    ),
    FormDefinition(
        "power",
        "primary",
        k.POWER,
        (Param("exponent", -4.0, 4.0, None, "power of f; <1 sublinear, >1 faster than linear"),),
        "y · f^exponent",
        "Power law: sublinear (0 < exponent < 1), faster than linear (> 1) or inverse (< 0).",
        ref.power,
    ),
    FormDefinition(
        "exponential",
        "primary",
        k.EXPONENTIAL,
        (Param("rate", -2.0, 2.0, None, "growth rate per unit of (f − 1)"),),
        "y · exp(rate·(f − 1))",
        "Exponential in the factor's change.",
        ref.exponential,
    ),
    FormDefinition(
        "asymmetric_power",
        "primary",
        k.ASYMMETRIC_POWER,
        (
            Param("up", -4.0, 4.0, None, "exponent for f ≥ 1"),
            Param("down", -4.0, 4.0, None, "exponent for f < 1"),
        ),
        "y · f^up if f ≥ 1, else y · f^down",
        "Different behaviour when the covariate is raised and when it is reduced.",
        ref.asymmetric_power,
    ),
    FormDefinition(
        "broken_power",
        "primary",
        k.BROKEN_POWER,
        (
            Param("low", -4.0, 4.0, None, "exponent below the knee"),
            Param("high", -4.0, 4.0, None, "exponent above the knee"),
            Param("knee", _POS, 1e6, None, "factor where the branch changes"),
        ),
        "y · m(f)/m(1), m(f) = f^low for f ≤ knee, knee^low·(f/knee)^high above",
        "Piecewise power law (two branches); registry entries keep every drawn factor on one branch.",
        ref.broken_power,
    ),
    FormDefinition(
        "damped_offset",
        "primary",
        k.DAMPED_OFFSET,
        (
            Param("amplitude", -0.99, 10.0, None, "largest offset, as a share of |y| + level"),
            Param("rate", _POS, 10.0, 1.0, "how quickly the offset saturates"),
            Param("level", 0.0, math.inf, 0.0, "offset floor in the target's unit"),
        ),
        "y + amplitude·(|y| + level)·tanh(rate·(f − 1))",
        "An offset proportional to the target's level that saturates (is damped) for large changes.",
        ref.damped_offset,
    ),
    FormDefinition(
        "shift",
        "primary",
        k.SHIFT,
        (
            Param("amplitude", -math.inf, math.inf, None, "damped shift, in the target's unit"),
            Param("rate", _POS, 10.0, 1.0, "how quickly the shift saturates"),
            Param("slope", -math.inf, math.inf, 0.0, "small linear term per unit of (f − 1)"),
        ),
        "y + amplitude·tanh(rate·(f − 1)) + slope·(f − 1)",
        "A damped shift in the target's own unit plus a small linear term.",
        ref.shift,
    ),
    FormDefinition(
        "clipped_shift",
        "primary",
        k.CLIPPED_SHIFT,
        (
            Param("amplitude", -math.inf, math.inf, None, "damped shift, in the target's unit"),
            Param("rate", _POS, 10.0, 1.0, "how quickly the shift saturates"),
            Param("lower", -math.inf, math.inf, None, "lower edge of the window"),
            Param("upper", -math.inf, math.inf, None, "upper edge of the window"),
        ),
        "clip(y + amplitude·tanh(rate·(f − 1)), lower, upper)",
        "A damped shift whose result is clipped into a fixed window.",
        ref.clipped_shift,
    ),
    FormDefinition(
        "idle_dynamic",
        "primary",
        k.IDLE_DYNAMIC,
        (
            Param("idle", 0.0, math.inf, None, "fixed idle part, in the target's unit"),
            Param("switching", 0.0, math.inf, 0.0, "small switching term per unit of (f − 1)"),
        ),
        "y + (max(y − idle, 0) + switching)·(f − 1)",
        "A fixed idle part plus a dynamic part that scales with f and a small switching term.",
        ref.idle_dynamic,
    ),
    FormDefinition(
        "log_increase",
        "primary",
        k.LOG_INCREASE,
        (
            Param("rate", _POS, 10.0, None, "gain per unit of ln f, as a share of |y| + floor"),
            Param("floor", 0.0, math.inf, 0.0, "magnitude floor in the target's unit"),
        ),
        "y + rate·(|y| + floor)·ln f",
        "Logarithmic rise that increases the target whatever its sign (EPANET's shared form).",
        ref.log_increase,
    ),
    FormDefinition(
        "signed_power",
        "effect",
        k.SIGNED_POWER,
        (Param("exponent", _POS, 4.0, None, "power of |f − 1|"),),
        "sign(f − 1)·|f − 1|^exponent",
        "Signed power of the factor's change.",
        ref.signed_power,
    ),
    FormDefinition(
        "ratio",
        "effect",
        k.RATIO,
        (),
        "(f − 1)/(f + 1)",
        "Bounded ratio shape in (−1, 1).",
        ref.ratio,
    ),
    FormDefinition("log", "effect", k.LOG, (), "ln f", "Logarithm of the factor.", ref.log),
    FormDefinition(
        "reduction_only",
        "effect",
        k.REDUCTION_ONLY,
        (Param("exponent", _POS, 4.0, 1.0, "power of the reduction (1 − f)"),),
        "−(1 − f)^exponent if f < 1, else 0",
        "Acts only when the covariate is reduced below its base value.",
        ref.reduction_only,
    ),
    FormDefinition(
        "saturating",
        "effect",
        k.SATURATING,
        (Param("rate", _POS, 10.0, 1.0, "how quickly the effect saturates"),),
        "tanh(rate·(f − 1))",
        "Saturating effect bounded in (−1, 1).",
        ref.saturating,
    ),
    FormDefinition(
        "exp_saturation",
        "effect",
        k.EXP_SATURATION,
        (Param("rate", _POS, 10.0, 1.0, "approach rate"),),
        "1 − exp(−rate·(f − 1))",
        "Approaches 1 for large factors, falls off exponentially below f = 1.",
        ref.exp_saturation,
    ),
):
    _add(_definition)

BUILTIN_FORMS = frozenset(FORMS)
BUILTIN_EFFECTS = frozenset(EFFECTS)


def _register(
    kind: Kind,
    name: str,
    params: tuple[Param, ...] | list[Param],
    formula: str,
    description: str,
) -> Callable[[Callable[..., float]], FormDefinition]:
    def decorator(function: Callable[..., float]) -> FormDefinition:
        import numba

        table = FORMS if kind == "primary" else EFFECTS
        scalar = numba.njit(**k.JIT_FLAGS)(function)
        code = k.CUSTOM_CODE_BASE + len(table)

        def reference(*arrays: np.ndarray) -> np.ndarray:
            *data, packed = arrays
            return np.vectorize(lambda *xs: function(*xs, packed), otypes=[np.float64])(*data)

        return _add(
            FormDefinition(name, kind, code, tuple(params), formula, description, reference, scalar)
        )

    return decorator


def register_form(
    name: str,
    params: list[Param] | tuple[Param, ...] = (),
    formula: str = "",
    description: str = "",
) -> Callable[[Callable[..., float]], FormDefinition]:
    """Register a user primary form ``fn(y, f, p) -> float`` (``p``: packed parameter vector).

    The function must be numba-compilable, be the identity at ``f = 1`` and be monotone in f;
    ``whatif relationships check`` verifies the last two for every relationship using it.
    """
    return _register("primary", name, params, formula or name, description)


def register_effect(
    name: str,
    params: list[Param] | tuple[Param, ...] = (),
    formula: str = "",
    description: str = "",
) -> Callable[[Callable[..., float]], FormDefinition]:
    """Register a user secondary effect ``fn(f, p) -> float`` (zero at f = 1, non-decreasing)."""
    return _register("effect", name, params, formula or name, description)
