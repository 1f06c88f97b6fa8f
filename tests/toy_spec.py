"""A one-covariate spec file for tests that need a small registry of their own."""

from __future__ import annotations


def one_covariate_spec(
    simulator: str = "toy",
    target: str = "t",
    form: str = "power",
    params: str | None = "{ exponent = 0.5 }",
    covariate_unit: str = "u",
    target_unit: str = "u",
) -> str:
    """TOML text: simulator ``simulator`` with covariate ``a`` (step) acting on ``target``
    through ``form``. Units and ``params`` are inserted as TOML text (escape them yourself)."""
    params_line = f"params = {params}\n" if params is not None else ""
    return f"""
[simulator]
name = "{simulator}"
title = "{simulator}"
history_pool = [0.5, 2]
c4 = [2048, 256]

[[covariates]]
name = "a"
shape = "step"
base_value = 1.0
unit = "{covariate_unit}"
effect = "ratio"
description = "a"

[classes.c]
combination = "multiplicative"
typical_range = [1.0, 10.0]
directions = {{ a = "direct" }}
rationale = "toy"

[[targets]]
name = "{target}"
class = "c"
unit = "{target_unit}"
primary = "a"
form = "{form}"
{params_line}rationale = "toy"
"""
