"""Malformed spec files fail loudly, naming the file, the entry and the field."""

from __future__ import annotations

import pytest

from whatif_bench.errors import SpecError
from whatif_bench.relationships import load_registry

GOOD = """
[simulator]
name = "toy"
title = "toy"
history_pool = [0.5, 2]

[[covariates]]
name = "a"
shape = "step"
base_value = 1.0
unit = "u"
effect = "ratio"
description = "a"

[[covariates]]
name = "b"
shape = "bell"
base_value = 2.0
unit = "u"
effect = "ratio"
weight = 0.2
description = "b"

[classes.c]
combination = "multiplicative"
typical_range = [1.0, 10.0]
directions = { a = "direct", b = "direct" }
rationale = "toy"

[[targets]]
name = "t"
class = "c"
unit = "u"
primary = "a"
form = "power"
params = { exponent = 0.5 }
rationale = "toy"
"""


def _load(tmp_path, text, name="toy.toml"):
    path = tmp_path / name
    path.write_text(text)
    return load_registry([path], include_builtin=False)


def test_good_spec_loads(tmp_path):
    registry = _load(tmp_path, GOOD)
    assert [r.target for r in registry] == ["t"]
    assert registry.get("toy", "t").covariates[1].weight == 0.2  # the covariate's own weight


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            'form = "power"',
            'form = "powr"',
            r"target 't': field 'form': unknown primary form 'powr'",
        ),
        (
            "params = { exponent = 0.5 }",
            "params = { exponent = 9.0 }",
            r"target 't': field 'form': parameter 'exponent' = 9.0 is outside",
        ),
        (
            "params = { exponent = 0.5 }",
            "params = { exponant = 0.5 }",
            r"field 'form': form 'power' has no parameter\(s\) \['exponant'\]",
        ),
        ('class = "c"', 'class = "d"', r"target 't': field 'class': unknown class 'd'"),
        ('primary = "a"', 'primary = "z"', r"target 't': field 'primary': unknown covariate 'z'"),
        (
            'directions = { a = "direct", b = "direct" }',
            'directions = { a = "direct" }',
            r"target 't': field 'directions': no direction for covariate 'b'",
        ),
        (
            'directions = { a = "direct", b = "direct" }',
            'directions = { a = "up", b = "direct" }',
            r"class 'c': field 'directions': entry 'a' must be one of",
        ),
        (
            "weight = 0.2\n",
            "",
            r"target 't': field 'weights': no secondary weight for covariate 'b'",
        ),
        ('shape = "bell"', 'shape = "ramp"', r"covariate 'b': field 'shape': must be one of"),
        (
            'effect = "ratio"\nweight',
            'effect = "ration"\nweight',
            r"covariate 'b': field 'effect': unknown effect form 'ration'",
        ),
        (
            'combination = "multiplicative"',
            'combination = "both"',
            r"class 'c': field 'combination': must be one of",
        ),
        (
            "typical_range = [1.0, 10.0]",
            "typical_range = [10.0, 1.0]",
            r"class 'c': field 'typical_range': expected \[lower, upper\]",
        ),
        ('unit = "u"\nprimary', 'units = "u"\nprimary', r"target 't': field 'unit': is required"),
        (
            'rationale = "toy"\n',
            'rationale = "toy"\ncolour = "red"\n',
            r"class 'c': unknown field\(s\) \['colour'\]",
        ),
        (
            "base_value = 1.0",
            'base_value = "one"',
            r"covariate 'a': field 'base_value': expected a number, got str",
        ),
        ("base_value = 1.0", "base_value = 0.0", r"covariate 'a' has base value 0"),
        (
            "history_pool = [0.5, 2]",
            "history_pool = [1, 2]",
            r"field 'history_pool': must be a non-empty list of positive factors != 1",
        ),
        (
            "history_pool = [0.5, 2]",
            "history_pool = [0.5, 2]\nonly_increase = true",
            r"only increase",
        ),
        ("[[targets]]", "[[targets]]\n", None),  # harmless whitespace: still valid
    ],
)
def test_malformed_spec_names_file_entry_and_field(tmp_path, old, new, message):
    assert old in GOOD
    text = GOOD.replace(old, new, 1)
    if message is None:
        _load(tmp_path, text)
        return
    with pytest.raises(SpecError, match=message) as error:
        _load(tmp_path, text)
    assert str(tmp_path / "toy.toml") in str(error.value)


def test_invalid_toml_is_reported_with_the_file(tmp_path):
    with pytest.raises(SpecError, match=r"toy.toml: not valid TOML"):
        _load(tmp_path, GOOD + "\n[[targets]\n")


def test_duplicate_target_is_rejected(tmp_path):
    duplicate = GOOD + GOOD[GOOD.index("[[targets]]") :]
    with pytest.raises(SpecError, match="target 't': target is declared twice"):
        _load(tmp_path, duplicate)


def test_a_second_file_for_a_loaded_simulator_must_say_extends(tmp_path):
    (tmp_path / "a.toml").write_text(GOOD)
    (tmp_path / "b.toml").write_text(GOOD)
    with pytest.raises(SpecError, match="already exists; set extends = true"):
        load_registry([tmp_path / "a.toml", tmp_path / "b.toml"], include_builtin=False)


def test_extending_an_unknown_simulator_is_rejected(tmp_path):
    text = '[simulator]\nname = "nope"\nextends = true\n'
    with pytest.raises(SpecError, match="no simulator named 'nope' is loaded to extend"):
        _load(tmp_path, text)


def test_a_missing_spec_file_is_reported(tmp_path):
    with pytest.raises(SpecError, match="cannot read spec file"):
        load_registry([tmp_path / "absent.toml"], include_builtin=False)


def test_loading_a_spec_never_executes_code(tmp_path):
    marker = tmp_path / "executed"
    text = GOOD.replace(
        'rationale = "toy"\n',
        f'rationale = "__import__(\\"pathlib\\").Path(\\"{marker}\\").touch()"\n',
        1,
    )
    registry = _load(tmp_path, text)
    assert "__import__" in registry.simulators["toy"].classes["c"].rationale
    assert not marker.exists()
