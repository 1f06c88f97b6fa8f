"""Every form's numba kernel equals its numpy reference; hand-computed values; parameter checks."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from whatif_bench.relationships import kernels as k
from whatif_bench.relationships.forms import BUILTIN_EFFECTS, BUILTIN_FORMS, EFFECTS, FORMS, Param

# Parameters used to exercise each built-in form (inside every bound).
FORM_PARAMS = {
    "proportional": {"overhead": 0.05},
    "inverse": {"exponent": 1.3, "floor": 0.1},
    "power": {"exponent": 0.7},
    "exponential": {"rate": 0.3},
    "asymmetric_power": {"up": 1.4, "down": 0.6},
    "broken_power": {"low": 0.5, "high": 0.1, "knee": 3.0},
    "damped_offset": {"amplitude": -0.5, "rate": 1.0, "level": 2.0},
    "shift": {"amplitude": 12.0, "rate": 0.8, "slope": 0.3},
    "clipped_shift": {"amplitude": 0.6, "rate": 1.0, "lower": 1.0, "upper": 2.0},
    "idle_dynamic": {"idle": 105.5, "switching": 2.0},
    "log_increase": {"rate": 0.3, "floor": 5.0},
}
EFFECT_PARAMS = {
    "signed_power": {"exponent": 0.4},
    "ratio": {},
    "log": {},
    "reduction_only": {"exponent": 1.5},
    "saturating": {"rate": 0.8},
    "exp_saturation": {"rate": 1.0},
}


def test_every_builtin_form_is_exercised_here():
    assert set(FORM_PARAMS) == set(BUILTIN_FORMS)
    assert set(EFFECT_PARAMS) == set(BUILTIN_EFFECTS)


def _kernel_primary(name: str, y: np.ndarray, f: np.ndarray) -> np.ndarray:
    params = FORMS[name].pack(FORM_PARAMS[name])
    out = np.empty_like(y)
    k._evaluate_kernel(
        y,
        f[None, :].copy(),
        k.RelationshipConstants(
            primary_code=FORMS[name].code,
            primary_params=params,
            effect_codes=np.zeros(1, np.int64),
            effect_params=np.zeros((1, 4)),
            weights=np.zeros(1),
            combination=k.MULTIPLICATIVE,
            level=0.0,
            lower=-math.inf,
            upper=math.inf,
        ),
        out,
    )
    return out


@pytest.mark.parametrize("name", sorted(FORM_PARAMS))
def test_primary_kernel_equals_numpy_reference(name, rng):
    y = rng.uniform(-50.0, 400.0, 2000)
    f = np.exp(rng.uniform(np.log(0.01), np.log(20.0), 2000))
    expected = FORMS[name].evaluate_reference(y, f, params=FORMS[name].pack(FORM_PARAMS[name]))
    np.testing.assert_allclose(_kernel_primary(name, y, f), expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", sorted(EFFECT_PARAMS))
def test_effect_kernel_equals_numpy_reference(name, rng):
    f = np.exp(rng.uniform(np.log(0.01), np.log(20.0), 2000))
    params = EFFECTS[name].pack(EFFECT_PARAMS[name])
    kernel = np.array([k._effect_value(EFFECTS[name].code, x, params) for x in f])
    expected = EFFECTS[name].evaluate_reference(f, params=params)
    np.testing.assert_allclose(kernel, expected, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize(
    ("name", "y", "f", "expected"),
    [
        ("proportional", 100.0, 2.0, 195.0),  # 100 (1 + 0.95)
        ("proportional", 100.0, 0.5, 52.5),
        ("inverse", 100.0, 2.0, 100 * (1 + 0.9 * (2**-1.3 - 1))),
        ("power", 8.0, 4.0, 8.0 * 4.0**0.7),
        ("exponential", 10.0, 3.0, 10.0 * math.exp(0.6)),
        ("asymmetric_power", 10.0, 2.0, 10.0 * 2.0**1.4),
        ("asymmetric_power", 10.0, 0.5, 10.0 * 0.5**0.6),
        ("broken_power", 10.0, 9.0, 10.0 * 3.0**0.5 * 3.0**0.1),  # above the knee at 3
        ("damped_offset", 10.0, 2.0, 10.0 - 0.5 * 12.0 * math.tanh(1.0)),
        ("shift", 70.0, 2.0, 70.0 + 12.0 * math.tanh(0.8) + 0.3),
        ("clipped_shift", 1.0, 20.0, 1.0 + 0.6 * math.tanh(19.0)),
        ("clipped_shift", 1.0, 0.1, 1.0),  # clipped at the lower edge
        ("idle_dynamic", 150.0, 2.0, 196.5),  # 150 + (44.5 + 2)
        ("idle_dynamic", 100.0, 2.0, 102.0),  # below idle: only switching
        ("log_increase", -40.0, math.e, -40.0 + 0.3 * 45.0),
    ],
)
def test_hand_computed_values(name, y, f, expected):
    value = _kernel_primary(name, np.array([y]), np.array([f]))[0]
    assert value == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    ("name", "f", "expected"),
    [
        ("signed_power", 2.0, 1.0),
        ("signed_power", 0.0, -1.0),
        ("signed_power", 17.0, 16.0**0.4),
        ("ratio", 3.0, 0.5),
        ("log", math.e, 1.0),
        ("reduction_only", 0.75, -(0.25**1.5)),
        ("reduction_only", 4.0, 0.0),
        ("saturating", 2.0, math.tanh(0.8)),
        ("exp_saturation", 2.0, 1 - math.exp(-1.0)),
    ],
)
def test_hand_computed_effect_values(name, f, expected):
    params = EFFECTS[name].pack(EFFECT_PARAMS[name])
    assert k._effect_value(EFFECTS[name].code, f, params) == pytest.approx(expected, rel=1e-12)


def _params_strategy(form):
    values = {}
    for param in form.params:
        low = max(param.lower, -5.0)
        high = min(param.upper, 5.0)
        values[param.name] = st.floats(low, high, allow_nan=False)
    return st.fixed_dictionaries(values)


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_every_form_is_exactly_the_identity_at_one(data):
    name = data.draw(st.sampled_from(sorted(BUILTIN_FORMS)))
    params = data.draw(_params_strategy(FORMS[name]))
    if name == "clipped_shift":
        params["upper"] = params["lower"] + abs(params["upper"]) + 1.0
        y = data.draw(st.floats(params["lower"], params["upper"]))
    else:
        y = data.draw(st.floats(-1e6, 1e6, allow_nan=False))
    packed = FORMS[name].pack(params)
    assert k._primary_value(FORMS[name].code, y, 1.0, packed) == y


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_every_effect_is_zero_at_one(data):
    name = data.draw(st.sampled_from(sorted(BUILTIN_EFFECTS)))
    params = EFFECTS[name].pack(data.draw(_params_strategy(EFFECTS[name])))
    assert k._effect_value(EFFECTS[name].code, 1.0, params) == 0.0


def test_pack_names_unknown_missing_and_out_of_bounds_parameters():
    form = FORMS["inverse"]
    with pytest.raises(ValueError, match="no parameter.*'slope'"):
        form.pack({"slope": 1.0})
    with pytest.raises(ValueError, match="needs parameter 'exponent'"):
        FORMS["power"].pack({})
    with pytest.raises(ValueError, match="'floor' = 1.5 is outside"):
        form.pack({"floor": 1.5})
    with pytest.raises(ValueError, match="must be a number"):
        form.pack({"floor": "high"})


def test_param_defaults_are_used_when_omitted():
    assert FORMS["inverse"].pack({})[:2].tolist() == [1.0, 0.0]
    assert isinstance(Param("x").default, type(None))
