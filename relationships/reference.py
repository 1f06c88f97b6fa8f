"""Plain-numpy reference implementations of every built-in form, effect and the combination.

Readable, vectorised and independent of numba: the tests compare the kernels against these,
and the benchmark uses them as the "vectorised numpy" engine. ``p`` is the packed parameter
vector of ``forms.FormDefinition.pack`` (unused trailing entries are ignored).
"""

from __future__ import annotations

import numpy as np


def proportional(y, f, p):
    """``y (1 + (1 - overhead)(f - 1))``: linear in f with a fixed share that does not scale."""
    return y * (1.0 + (1.0 - p[0]) * (f - 1.0))


def inverse(y, f, p):
    """``y (1 + (1 - floor)(f^-a - 1))``: falls like 1/f^a down to a fixed floor share."""
    return y * (1.0 + (1.0 - p[1]) * (f ** (-p[0]) - 1.0))


def power(y, f, p):
    """``y f^a``: sublinear for 0 < a < 1, faster than linear for a > 1."""
    return y * f ** p[0]


def exponential(y, f, p):
    """``y exp(k (f - 1))``."""
    return y * np.exp(p[0] * (f - 1.0))


def asymmetric_power(y, f, p):
    """``y f^up`` for f >= 1 and ``y f^down`` for f < 1."""
    return y * np.where(f >= 1.0, f ** p[0], f ** p[1])


def _broken(f, low, high, knee):
    return np.where(f <= knee, f**low, knee**low * (f / knee) ** high)


def broken_power(y, f, p):
    """``y m(f) / m(1)`` with ``m`` a power law whose exponent changes at ``knee``."""
    return y * (_broken(f, p[0], p[1], p[2]) / _broken(np.float64(1.0), p[0], p[1], p[2]))


def damped_offset(y, f, p):
    """``y + A (|y| + level) tanh(k (f - 1))``: an offset that saturates for large changes."""
    return y + p[0] * (np.abs(y) + p[2]) * np.tanh(p[1] * (f - 1.0))


def shift(y, f, p):
    """``y + A tanh(k (f - 1)) + b (f - 1)``: a damped shift plus a small linear term."""
    return y + p[0] * np.tanh(p[1] * (f - 1.0)) + p[2] * (f - 1.0)


def clipped_shift(y, f, p):
    """``clip(y + A tanh(k (f - 1)), lower, upper)``."""
    return np.minimum(np.maximum(y + p[0] * np.tanh(p[1] * (f - 1.0)), p[2]), p[3])


def idle_dynamic(y, f, p):
    """``y + (max(y - idle, 0) + s)(f - 1)``: idle power fixed, dynamic part and switching scale."""
    return y + (np.maximum(y - p[0], 0.0) + p[1]) * (f - 1.0)


def log_increase(y, f, p):
    """``y + a (|y| + c) ln f``: rises with f whatever the sign of y."""
    return y + p[0] * (np.abs(y) + p[1]) * np.log(f)


def signed_power(f, p):
    """``sign(f - 1) |f - 1|^a``."""
    d = f - 1.0
    return np.sign(d) * np.abs(d) ** p[0]


def ratio(f, p):
    """``(f - 1) / (f + 1)``, bounded in (-1, 1)."""
    return (f - 1.0) / (f + 1.0)


def log(f, p):
    """``ln f``."""
    return np.log(f)


def reduction_only(f, p):
    """``-(1 - f)^a`` for f < 1, else 0: acts only when the covariate is reduced."""
    return np.where(f < 1.0, -(np.maximum(1.0 - f, 0.0) ** p[0]), 0.0)


def saturating(f, p):
    """``tanh(k (f - 1))``."""
    return np.tanh(p[0] * (f - 1.0))


def exp_saturation(f, p):
    """``1 - exp(-k (f - 1))``."""
    return 1.0 - np.exp(-p[0] * (f - 1.0))


def combine(combination, y, g, terms, level, lower, upper):
    """Merge primary values ``g`` with secondary effect terms (list of arrays ``w_c r_c``).

    Multiplicative: ``P = prod(1 + w_c r_c)``; ``g P`` where ``g >= 0`` else ``g / P``.
    Additive: ``g + (|y| + level) sum(w_c r_c)``. The result is clipped to [lower, upper].
    """
    if combination == "multiplicative":
        product = np.ones_like(g)
        for term in terms:
            product = product * (1.0 + term)
        value = np.where(g >= 0.0, g * product, g / product)
    else:
        total = np.zeros_like(g)
        for term in terms:
            total = total + term
        value = g + (np.abs(y) + level) * total
    return np.clip(value, lower, upper)
