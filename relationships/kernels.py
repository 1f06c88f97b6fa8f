"""numba kernels of the relationship engine: raw, unvalidated (the API lives in ``engine.py``).

Python code calls ``Relationship``'s methods, which check their inputs and then run these.
The names without an underscore (``apply_events_kernel``, ``fill_bell_profile``, the
constants) are public for other jitted code only: the stream's sampler (``stream/_kernels.py``)
calls them inside its own kernel, after validating its inputs as the engine does.

Kernels take contiguous float64/int64 arrays and scalars only, never pandas objects, and never
draw random numbers. Numeric flags live in ``JIT_OPTIONS``: no ``fastmath``, so results are
bit-reproducible and equal to the plain-numpy references in ``reference.py``.

Form and effect codes are the indices used in ``forms.py``; codes >= ``CUSTOM_CODE_BASE`` belong
to user-registered forms and are dispatched by kernels rebuilt in ``dispatch.py``.
"""

from __future__ import annotations

import math
from typing import Literal, NamedTuple, TypedDict

import numba
import numpy as np


class JitFlags(TypedDict, total=False):
    """Keyword arguments of ``numba.njit`` used here (typed, so the checker accepts ``**``)."""

    fastmath: bool
    error_model: Literal["python", "numpy"]
    cache: bool
    nogil: bool


# The one place for numba's numeric flags. JIT_FLAGS suit functions made at run time (user
# forms, dispatch chains), which numba cannot cache on disk; JIT_OPTIONS add the cache.
JIT_FLAGS: JitFlags = {"fastmath": False, "error_model": "numpy"}
JIT_OPTIONS: JitFlags = {**JIT_FLAGS, "cache": True}
CUSTOM_CODE_BASE = 100


class RelationshipConstants(NamedTuple):
    """One relationship restricted to its first K covariates, as the kernels read it.

    Built by ``Relationship.kernel_constants`` (engine.py); numba passes it to a kernel as one
    typed tuple, so a kernel reads ``constants.level`` instead of its 12th argument.
    """

    primary_code: int  # the primary form's code (forms.py)
    primary_params: np.ndarray  # (MAX_PARAMS,) float64: the primary form's packed parameters
    effect_codes: (
        np.ndarray
    )  # (K,) int64: each covariate's effect code (row 0, the primary, unused)
    effect_params: np.ndarray  # (K, MAX_PARAMS) float64: each effect's packed parameters
    weights: np.ndarray  # (K,) float64: signed, dampened weights (0 for the primary)
    combination: int  # MULTIPLICATIVE or ADDITIVE
    level: float  # additive level, in the target's unit
    lower: float  # clipping window, in the target's unit (-inf / inf: none)
    upper: float


MULTIPLICATIVE = 0
ADDITIVE = 1

STEP = 0
BELL = 1

# Primary forms g(y, f; p): identity at f = 1 by construction (every term is a multiple of
# (f - 1), log f, tanh(k (f - 1)) or f ** p, all exactly neutral at f = 1).
PROPORTIONAL = 0
INVERSE = 1
POWER = 2
EXPONENTIAL = 3
ASYMMETRIC_POWER = 4
BROKEN_POWER = 5
DAMPED_OFFSET = 6
SHIFT = 7
CLIPPED_SHIFT = 8
IDLE_DYNAMIC = 9
LOG_INCREASE = 10

# Secondary effect shapes r(f): r(1) = 0 and non-decreasing in f.
SIGNED_POWER = 0
RATIO = 1
LOG = 2
REDUCTION_ONLY = 3
SATURATING = 4
EXP_SATURATION = 5


@numba.njit(**JIT_OPTIONS)
def _broken_power_multiplier(f: float, low: float, high: float, knee: float) -> float:
    """``f ** low`` below the knee, continued by ``(f / knee) ** high`` above it."""
    if f <= knee:
        return f**low
    return knee**low * (f / knee) ** high


@numba.njit(**JIT_OPTIONS)
def _primary_value(code: int, y: float, f: float, p: np.ndarray) -> float:
    """Value of built-in primary form ``code`` at baseline ``y`` and factor ``f``."""
    if code == PROPORTIONAL:
        return y * (1.0 + (1.0 - p[0]) * (f - 1.0))
    if code == INVERSE:
        return y * (1.0 + (1.0 - p[1]) * (f ** (-p[0]) - 1.0))
    if code == POWER:
        return y * f ** p[0]
    if code == EXPONENTIAL:
        return y * math.exp(p[0] * (f - 1.0))
    if code == ASYMMETRIC_POWER:
        if f >= 1.0:
            return y * f ** p[0]
        return y * f ** p[1]
    if code == BROKEN_POWER:
        at_one = _broken_power_multiplier(1.0, p[0], p[1], p[2])
        return y * (_broken_power_multiplier(f, p[0], p[1], p[2]) / at_one)
    if code == DAMPED_OFFSET:
        return y + p[0] * (abs(y) + p[2]) * math.tanh(p[1] * (f - 1.0))
    if code == SHIFT:
        return y + p[0] * math.tanh(p[1] * (f - 1.0)) + p[2] * (f - 1.0)
    if code == CLIPPED_SHIFT:
        return min(max(y + p[0] * math.tanh(p[1] * (f - 1.0)), p[2]), p[3])
    if code == IDLE_DYNAMIC:
        return y + (max(y - p[0], 0.0) + p[1]) * (f - 1.0)
    if code == LOG_INCREASE:
        return y + p[0] * (abs(y) + p[1]) * math.log(f)
    return math.nan


@numba.njit(**JIT_OPTIONS)
def _effect_value(code: int, f: float, p: np.ndarray) -> float:
    """Value of built-in secondary effect ``code`` at factor ``f`` (0 at f = 1)."""
    if code == SIGNED_POWER:
        d = f - 1.0
        if d >= 0.0:
            return d ** p[0]
        return -((-d) ** p[0])
    if code == RATIO:
        return (f - 1.0) / (f + 1.0)
    if code == LOG:
        return math.log(f)
    if code == REDUCTION_ONLY:
        if f >= 1.0:
            return 0.0
        return -((1.0 - f) ** p[0])
    if code == SATURATING:
        return math.tanh(p[0] * (f - 1.0))
    if code == EXP_SATURATION:
        return 1.0 - math.exp(-p[0] * (f - 1.0))
    return math.nan


@numba.njit(**JIT_OPTIONS)
def _effect_term(combination: int, weight: float, r: float) -> float:
    """One secondary's term: ``1 + w r`` in a product, ``w r`` in a sum."""
    if combination == MULTIPLICATIVE:
        return 1.0 + weight * r
    return weight * r


@numba.njit(**JIT_OPTIONS)
def _accumulate(combination: int, acc: float, term: float) -> float:
    """Fold one secondary's term into the running product or sum (in covariate order)."""
    if combination == MULTIPLICATIVE:
        return acc * term
    return acc + term


@numba.njit(**JIT_OPTIONS)
def _combine(
    combination: int, y: float, g: float, acc: float, level: float, lower: float, upper: float
) -> float:
    """Merge the primary value ``g`` with the secondaries' product or sum ``acc``.

    Multiplicative: ``g * acc`` for ``g >= 0`` and ``g / acc`` below zero, so a larger product
    always raises the target. Additive: ``g + (|y| + level) * acc``. Then clip to the window.
    """
    if combination == MULTIPLICATIVE:
        value = g * acc if g >= 0.0 else g / acc
    else:
        value = g + (abs(y) + level) * acc
    return min(max(value, lower), upper)


@numba.njit(**JIT_OPTIONS)
def _evaluate_kernel(
    y: np.ndarray, factors: np.ndarray, constants: RelationshipConstants, out: np.ndarray
) -> None:
    """Target for baseline ``y`` (T,) under per-timestep factors (K, T); row 0 is the primary."""
    c = constants
    n_covariates = factors.shape[0]
    neutral = 1.0 if c.combination == MULTIPLICATIVE else 0.0
    for t in range(y.shape[0]):
        g = _primary_value(c.primary_code, y[t], factors[0, t], c.primary_params)
        acc = neutral
        for i in range(1, n_covariates):
            r = _effect_value(c.effect_codes[i], factors[i, t], c.effect_params[i])
            acc = _accumulate(c.combination, acc, _effect_term(c.combination, c.weights[i], r))
        out[t] = _combine(c.combination, y[t], g, acc, c.level, c.lower, c.upper)


@numba.njit(**JIT_OPTIONS)
def _coalitions_kernel(
    y: np.ndarray, factors: np.ndarray, constants: RelationshipConstants, out: np.ndarray
) -> None:
    """Target for baseline ``y`` (T,) under every coalition of the factors (K, T): row ``m``
    of ``out`` (2^K, T) is ``_evaluate_kernel`` of the factors whose rows are covariate ``c``'s
    where bit ``c`` of ``m`` is set and 1 elsewhere. Each step's primary value and secondary
    terms are made once at factor 1 and once at the step's factor, then combined per coalition
    in covariate order, the very operations ``_evaluate_kernel`` makes for that coalition."""
    c = constants
    n_covariates = factors.shape[0]
    neutral = 1.0 if c.combination == MULTIPLICATIVE else 0.0
    at_one = np.empty(n_covariates)
    moved = np.empty(n_covariates)
    for i in range(1, n_covariates):
        r = _effect_value(c.effect_codes[i], 1.0, c.effect_params[i])
        at_one[i] = _effect_term(c.combination, c.weights[i], r)
    for t in range(y.shape[0]):
        g_one = _primary_value(c.primary_code, y[t], 1.0, c.primary_params)
        g_moved = _primary_value(c.primary_code, y[t], factors[0, t], c.primary_params)
        for i in range(1, n_covariates):
            r = _effect_value(c.effect_codes[i], factors[i, t], c.effect_params[i])
            moved[i] = _effect_term(c.combination, c.weights[i], r)
        for m in range(out.shape[0]):
            g = g_moved if m & 1 else g_one
            acc = neutral
            for i in range(1, n_covariates):
                term = moved[i] if (m >> i) & 1 else at_one[i]
                acc = _accumulate(c.combination, acc, term)
            out[m, t] = _combine(c.combination, y[t], g, acc, c.level, c.lower, c.upper)


# ---- sums as NumPy computes them -------------------------------------------------------
@numba.njit(**JIT_OPTIONS)
def _block_sum(values: np.ndarray, first: int, n: int) -> float:
    """NumPy's sum of at most 128 values: 8 interleaved lanes (plain order below 8 values)."""
    if n < 8:
        total = 0.0
        for i in range(n):
            total += values[first + i]
        return total
    lanes = np.empty(8)
    for j in range(8):
        lanes[j] = values[first + j]
    i = 8
    while i < n - (n % 8):
        for j in range(8):
            lanes[j] += values[first + i + j]
        i += 8
    total = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + (
        (lanes[4] + lanes[5]) + (lanes[6] + lanes[7])
    )
    while i < n:
        total += values[first + i]
        i += 1
    return total


@numba.njit(**JIT_OPTIONS)
def pairwise_sum(values: np.ndarray, first: int, n: int) -> float:
    """``np.sum(values[first:first + n])`` to the bit: NumPy's pairwise summation.

    NumPy sums blocks of at most 128 values (``_block_sum``) and splits longer runs in two at a
    multiple of 8, adding the halves' sums. The split is done here with explicit stacks, not
    recursion (numba cannot load a cached recursive function). NumPy adds the result to the
    sum's identity, +0.0, which changes nothing but a -0.0 (eight or more -0.0 values), so
    both returns add it too.
    """
    if n <= 128:
        return 0.0 + _block_sum(values, first, n)
    firsts = np.empty(192, dtype=np.int64)
    sizes = np.empty(192, dtype=np.int64)  # -1: add the two sums on top of ``sums``
    sums = np.empty(96)
    firsts[0], sizes[0] = first, n
    todo, done = 1, 0
    while todo:
        todo -= 1
        start, size = firsts[todo], sizes[todo]
        if size < 0:
            done -= 1
            sums[done - 1] += sums[done]
        elif size <= 128:
            sums[done] = _block_sum(values, start, size)
            done += 1
        else:
            half = size // 2
            half -= half % 8
            firsts[todo], sizes[todo] = 0, -1
            firsts[todo + 1], sizes[todo + 1] = start + half, size - half
            firsts[todo + 2], sizes[todo + 2] = start, half
            todo += 3
    return 0.0 + sums[0]


@numba.njit(**JIT_OPTIONS)
def fill_bell_profile(length: int, buffer: np.ndarray) -> None:
    """Write the bell weights of an event of ``length`` steps into ``buffer[:length]``."""
    centre = (length - 1) / 2.0
    sigma = length / 6.0
    for t in range(length):
        z = (t - centre) / sigma
        buffer[t] = math.exp(-0.5 * z * z)


@numba.njit(**JIT_OPTIONS)
def apply_events_kernel(
    y: np.ndarray,
    starts: np.ndarray,
    lengths: np.ndarray,
    event_factors: np.ndarray,
    shape_codes: np.ndarray,
    constants: RelationshipConstants,
    out: np.ndarray,
) -> None:
    """Target under non-overlapping events; untouched steps are copied, not recomputed.

    ``y`` and ``out`` are (T,); ``starts`` and ``lengths`` (E,) int64 steps; ``event_factors``
    (E, K); ``shape_codes`` (K,). Step-shaped secondaries are evaluated once per event,
    bell-shaped ones per timestep.
    """
    c = constants
    out[:] = y
    n_covariates = event_factors.shape[1]
    neutral = 1.0 if c.combination == MULTIPLICATIVE else 0.0
    max_length = 0
    for e in range(starts.shape[0]):
        max_length = max(max_length, lengths[e])
    profile = np.empty(max_length)
    profile_length = -1
    has_bell = False
    for i in range(n_covariates):
        if shape_codes[i] == BELL:
            has_bell = True
    step_terms = np.empty(n_covariates)
    for e in range(starts.shape[0]):
        length = lengths[e]
        if has_bell and length != profile_length:
            fill_bell_profile(length, profile)
            profile_length = length
        for i in range(1, n_covariates):
            if shape_codes[i] == STEP:
                r = _effect_value(c.effect_codes[i], event_factors[e, i], c.effect_params[i])
                step_terms[i] = _effect_term(c.combination, c.weights[i], r)
        primary_factor = event_factors[e, 0]
        primary_is_bell = shape_codes[0] == BELL
        start = starts[e]
        for t in range(length):
            index = start + t
            fp = 1.0 + (primary_factor - 1.0) * profile[t] if primary_is_bell else primary_factor
            g = _primary_value(c.primary_code, y[index], fp, c.primary_params)
            acc = neutral
            for i in range(1, n_covariates):
                if shape_codes[i] == STEP:
                    term = step_terms[i]
                else:
                    fc = 1.0 + (event_factors[e, i] - 1.0) * profile[t]
                    r = _effect_value(c.effect_codes[i], fc, c.effect_params[i])
                    term = _effect_term(c.combination, c.weights[i], r)
                acc = _accumulate(c.combination, acc, term)
            out[index] = _combine(c.combination, y[index], g, acc, c.level, c.lower, c.upper)


@numba.njit(**JIT_OPTIONS)
def _trajectories_kernel(
    starts: np.ndarray,
    lengths: np.ndarray,
    event_factors: np.ndarray,
    shape_codes: np.ndarray,
    out: np.ndarray,
) -> None:
    """Factor trajectories (K, T) of every covariate: 1 outside events, shaped inside."""
    out[:, :] = 1.0
    max_length = 0
    for e in range(starts.shape[0]):
        max_length = max(max_length, lengths[e])
    profile = np.empty(max_length)
    for e in range(starts.shape[0]):
        length = lengths[e]
        fill_bell_profile(length, profile)
        for c in range(event_factors.shape[1]):
            factor = event_factors[e, c]
            for t in range(length):
                if shape_codes[c] == BELL:
                    out[c, starts[e] + t] = 1.0 + (factor - 1.0) * profile[t]
                else:
                    out[c, starts[e] + t] = factor


@numba.njit(**JIT_OPTIONS)
def _worths_kernel(
    y: np.ndarray,
    length: int,
    factors: np.ndarray,
    shape_codes: np.ndarray,
    constants: RelationshipConstants,
    out: np.ndarray,
) -> None:
    """The worth of every coalition of one event (a task description's attribution): ``out[m]``
    ((2^K,) float64) is the sum over the steps of ``y`` (T,) of the target under coalition
    ``m`` minus ``y``, for an event at step 0 of ``length`` steps with ``factors`` (K,) shaped
    by ``shape_codes`` (K,) and cut at step T. Coalition ``m`` moves the covariates whose bits
    are set and holds the others at factor 1.

    The very operations of ``_trajectories_kernel`` (the factors), ``_coalitions_kernel`` (every
    coalition up to the last step any factor moves), ``_evaluate_kernel`` at factor 1 (the steps
    after it, one value for every coalition) and NumPy's row sums (``pairwise_sum``): equal to
    the bit to summing the rows of ``corpus.describe.coalition_effects`` with NumPy."""
    c = constants
    n = y.shape[0]
    k = factors.shape[0]
    neutral = 1.0 if c.combination == MULTIPLICATIVE else 0.0
    span = min(length, n)
    profile = np.empty(length)
    fill_bell_profile(length, profile)
    shaped = np.empty((k, span))  # the factors over the event's steps inside the window
    moved_until = 0  # one past the last step where any factor is not 1
    for t in range(span):
        for i in range(k):
            if shape_codes[i] == BELL:
                shaped[i, t] = 1.0 + (factors[i] - 1.0) * profile[t]
            else:
                shaped[i, t] = factors[i]
            if shaped[i, t] != 1.0:
                moved_until = t + 1
    at_one = np.empty(k)
    moved = np.empty(k)
    rest = neutral  # every secondary at factor 1, in covariate order
    for i in range(1, k):
        r = _effect_value(c.effect_codes[i], 1.0, c.effect_params[i])
        at_one[i] = _effect_term(c.combination, c.weights[i], r)
        rest = _accumulate(c.combination, rest, at_one[i])
    rows = 2**k
    effects = np.empty(rows * n)  # row m: coalition m's effect at every step
    for t in range(moved_until):
        g_one = _primary_value(c.primary_code, y[t], 1.0, c.primary_params)
        g_moved = _primary_value(c.primary_code, y[t], shaped[0, t], c.primary_params)
        for i in range(1, k):
            r = _effect_value(c.effect_codes[i], shaped[i, t], c.effect_params[i])
            moved[i] = _effect_term(c.combination, c.weights[i], r)
        for m in range(rows):
            g = g_moved if m & 1 else g_one
            acc = neutral
            for i in range(1, k):
                term = moved[i] if (m >> i) & 1 else at_one[i]
                acc = _accumulate(c.combination, acc, term)
            value = _combine(c.combination, y[t], g, acc, c.level, c.lower, c.upper)
            effects[m * n + t] = value - y[t]
    for t in range(moved_until, n):
        g = _primary_value(c.primary_code, y[t], 1.0, c.primary_params)
        effect = _combine(c.combination, y[t], g, rest, c.level, c.lower, c.upper) - y[t]
        for m in range(rows):
            effects[m * n + t] = effect
    for m in range(rows):
        out[m] = pairwise_sum(effects, m * n, n)
