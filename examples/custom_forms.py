"""Example user forms for ``whatif relationships --forms examples/custom_forms.py``.

A form is a plain numba-compilable function of the baseline ``y``, the factor ``f`` and the
packed parameter vector ``p`` (in the order the ``Param`` list gives). It must be the identity
at ``f = 1`` and monotone in ``f``; ``whatif relationships check`` verifies both.
"""

import math

from whatif_bench.relationships import register_effect, register_form
from whatif_bench.relationships.forms import Param


@register_form(
    "logistic_saturation",
    params=[
        Param("gain", 0.0, 10.0, None, "largest relative rise"),
        Param("rate", 1e-9, 10.0, 1.0),
    ],
    formula="y · (1 + gain·(2/(1 + exp(−rate·(f − 1))) − 1))",
    description="Rises along a logistic curve and saturates at (1 + gain)·y.",
)
def logistic_saturation(y, f, p):
    return y * (1.0 + p[0] * (2.0 / (1.0 + math.exp(-p[1] * (f - 1.0))) - 1.0))


@register_effect(
    "cube_root",
    formula="cbrt(f − 1)",
    description="Signed cube root of the factor's change.",
)
def cube_root(f, p):
    d = f - 1.0
    return math.copysign(abs(d) ** (1.0 / 3.0), d)
