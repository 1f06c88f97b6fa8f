"""Kernel sets: the cached built-in kernels, or kernels rebuilt to dispatch user forms too.

Built-in kernels are compiled once and cached on disk by numba. When a user registers a form,
the same kernel code is re-jitted (not cached) against a dispatcher that tries the user's
functions before the built-in ones, so user forms run at the same speed as built-in ones.
"""

from __future__ import annotations

import types
from dataclasses import dataclass
from typing import Any

import numba

from whatif_bench.relationships import kernels as k
from whatif_bench.relationships.forms import EFFECTS, FORMS


@dataclass(frozen=True)
class KernelSet:
    """The array kernels, all compiled against the same form dispatchers."""

    evaluate: Any
    apply_events: Any
    trajectories: Any
    coalitions: Any
    worths: Any


BUILTIN_KERNELS = KernelSet(
    k._evaluate_kernel,
    k.apply_events_kernel,
    k._trajectories_kernel,
    k._coalitions_kernel,
    k._worths_kernel,
)
_custom_cache: dict[tuple[int, ...], KernelSet] = {}


def _chain_primary(base: Any, code: int, function: Any) -> Any:
    @numba.njit(**k.JIT_FLAGS)
    def dispatch(form_code, y, f, p):
        if form_code == code:
            return function(y, f, p)
        return base(form_code, y, f, p)

    return dispatch


def _chain_effect(base: Any, code: int, function: Any) -> Any:
    @numba.njit(**k.JIT_FLAGS)
    def dispatch(form_code, f, p):
        if form_code == code:
            return function(f, p)
        return base(form_code, f, p)

    return dispatch


def _rejit(kernel: Any, namespace: dict[str, Any]) -> Any:
    function = getattr(kernel, "py_func", kernel)  # a plain function under NUMBA_DISABLE_JIT=1
    clone = types.FunctionType(function.__code__, namespace, function.__name__)
    return numba.njit(**k.JIT_FLAGS)(clone)


def current_kernels() -> KernelSet:
    """Kernels able to evaluate every form registered so far (built-in ones if no user forms)."""
    custom_forms = [d for d in FORMS.values() if d.scalar is not None]
    custom_effects = [d for d in EFFECTS.values() if d.scalar is not None]
    if not custom_forms and not custom_effects:
        return BUILTIN_KERNELS
    key = tuple(d.code for d in custom_forms) + (-1,) + tuple(d.code for d in custom_effects)
    if key not in _custom_cache:
        primary = k._primary_value
        for definition in custom_forms:
            primary = _chain_primary(primary, definition.code, definition.scalar)
        effect = k._effect_value
        for definition in custom_effects:
            effect = _chain_effect(effect, definition.code, definition.scalar)
        namespace = dict(vars(k))
        namespace["_primary_value"] = primary
        namespace["_effect_value"] = effect
        _custom_cache[key] = KernelSet(
            _rejit(k._evaluate_kernel, namespace),
            _rejit(k.apply_events_kernel, namespace),
            BUILTIN_KERNELS.trajectories,
            _rejit(k._coalitions_kernel, namespace),
            _rejit(k._worths_kernel, namespace),
        )
    return _custom_cache[key]
