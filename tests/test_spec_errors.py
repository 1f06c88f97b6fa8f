"""Malformed spec files fail loudly, naming the file, the entry and the field."""

from __future__ import annotations

import os

import numpy as np
import pytest

from tests.conftest import run_cli
from whatif_bench.errors import SpecError
from whatif_bench.outputs import is_safe_name
from whatif_bench.relationships import load_registry

GOOD = """
[simulator]
name = "toy"
title = "toy"
history_pool = [0.5, 2]
c4 = [2048, 256]

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


def _assert_edit_is_reported(tmp_path, old, new, message):
    """Replace ``old`` by ``new`` in GOOD: it loads when ``message`` is None, else the SpecError
    matches ``message`` and names the file."""
    assert old in GOOD
    text = GOOD.replace(old, new, 1)
    if message is None:
        _load(tmp_path, text)
        return
    with pytest.raises(SpecError, match=message) as error:
        _load(tmp_path, text)
    assert str(tmp_path / "toy.toml") in str(error.value)


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
            r"field 'history_pool': must be a non-empty list of factors != 1 between 0.01 and 1000",
        ),
        (
            "history_pool = [0.5, 2]",
            "history_pool = [0.5, 2]\nonly_increase = true",
            r"only increase",
        ),
        ("c4 = [2048, 256]\n", "", r"\[simulator\]: field 'c4': is required"),
        ("c4 = [2048, 256]", "c4 = [2048]", r"field 'c4': expected \[context, prediction\]"),
        ("c4 = [2048, 256]", "c4 = [2048.0, 256]", r"field 'c4': expected \[context, prediction\]"),
        ("c4 = [2048, 256]", "c4 = [256, 2048]", r"field 'c4': needs 32 <= prediction <= context"),
        ("c4 = [2048, 256]", "c4 = [1000, 256]", r"field 'c4': needs .* context >= 1,024"),
        ("c4 = [2048, 256]", "c4 = [2048, 31]", r"field 'c4': needs 32 <= prediction"),
        ("c4 = [2048, 256]", "c4 = [2048, 0]", r"field 'c4': needs 32 <= prediction <= context"),
        ("c4 = [2048, 256]", "c4 = [20000000, 256]", r"field 'c4': needs 32 <= prediction"),
        ("c4 = [2048, 256]", 'c4 = "long"', r"field 'c4': expected a list, got str"),
        ("[[targets]]", "[[targets]]\n", None),  # harmless whitespace: still valid
    ],
)
def test_malformed_spec_names_file_entry_and_field(tmp_path, old, new, message):
    _assert_edit_is_reported(tmp_path, old, new, message)


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


# ---- hardening: names, bytes, numbers --------------------------------------------------------

BIG = "9" * 400


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        # names become file names (plots) and parts of task ids <simulator>/<target>/...
        ('name = "t"', 'name = "../../x"', r"targets\[0\]: field 'name': '../../x' is not a valid"),
        ('name = "t"', 'name = "/etc/passwd"', r"targets\[0\]: field 'name': '/etc/passwd' is not"),
        ('name = "t"', 'name = "a/b"', r"targets\[0\]: field 'name': 'a/b' is not a valid name"),
        ('name = "t"', 'name = ".hidden"', r"targets\[0\]: field 'name': '.hidden' is not"),
        ('name = "t"', 'name = "-rf"', r"targets\[0\]: field 'name': '-rf' is not a valid name"),
        ('name = "t"', 'name = ""', r"targets\[0\]: field 'name': '' is not a valid name"),
        ('name = "t"', 'name = "a\\u0000b"', r"targets\[0\]: field 'name': 'a\\x00b' is not"),
        ('name = "t"', f'name = "{"t" * 129}"', r"targets\[0\]: field 'name': 'tttt"),
        ('name = "a"', 'name = "../a"', r"covariates\[0\]: field 'name': '../a' is not a valid"),
        ('name = "a"', 'name = "a=b"', r"covariates\[0\]: field 'name': 'a=b' is not a valid"),
        ('name = "toy"', 'name = "../toy"', r"\[simulator\]: field 'name': '../toy' is not"),
        # numbers: overflow, NaN and infinity name the field
        ("base_value = 1.0", f"base_value = {BIG}", r"field 'base_value': number with 400 digits"),
        ("base_value = 1.0", "base_value = 1e400", r"field 'base_value': must be finite, got inf"),
        ("base_value = 1.0", "base_value = nan", r"field 'base_value': must be finite, got nan"),
        ("base_value = 1.0", "base_value = -inf", r"field 'base_value': must be finite, got -inf"),
        ("weight = 0.2", "weight = nan", r"covariate 'b': field 'weight': must be finite"),
        (
            "typical_range = [1.0, 10.0]",
            "typical_range = [1.0, inf]",
            r"class 'c': field 'typical_range': bounds must be finite",
        ),
        (
            "typical_range = [1.0, 10.0]",
            "typical_range = [nan, 10.0]",
            r"class 'c': field 'typical_range': bounds must be finite",
        ),
        (
            "typical_range = [1.0, 10.0]",
            f"typical_range = [1, {BIG}]",
            r"class 'c': field 'typical_range': number with 400 digits is too large",
        ),
        ("history_pool = [0.5, 2]", "history_pool = [0.5, inf]", r"field 'history_pool'"),
        ("history_pool = [0.5, 2]", "history_pool = [0.5, nan]", r"field 'history_pool'"),
        ("history_pool = [0.5, 2]", "history_pool = [0.005, 2]", r"between 0.01 and 1000"),
        ("history_pool = [0.5, 2]", "history_pool = [0.5, 1001]", r"between 0.01 and 1000"),
        ("history_pool = [0.5, 2]", f"history_pool = [0.5, {BIG}]", r"field 'history_pool'"),
        (
            "params = { exponent = 0.5 }",
            "params = { exponent = nan }",
            r"target 't': field 'params': entry 'exponent' must be a finite number",
        ),
        (
            "params = { exponent = 0.5 }",
            f"params = {{ exponent = {BIG} }}",
            r"target 't': field 'params': entry 'exponent': number with 400 digits",
        ),
        (
            'rationale = "toy"\n',
            'rationale = "toy"\nlevel = 1e400\n',
            r"class 'c': field 'level': must be finite, got inf",
        ),
        ('name = "t"', 'name = "cpu_usage_host-0"', None),  # shipped-style names load
        ('name = "t"', 'name = "co2.e_0_1"', None),
    ],
)
def test_bad_names_and_numbers_name_file_entry_and_field(tmp_path, old, new, message):
    _assert_edit_is_reported(tmp_path, old, new, message)


def _fifo(path):
    os.mkfifo(path)
    return path


def _loop(path):
    partner = path.with_name("partner.toml")
    path.symlink_to(partner)
    partner.symlink_to(path)
    return path


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p.write_bytes(np.random.default_rng(0).bytes(4096)), r"not a UTF-8 text file"),
        (lambda p: p.write_bytes(GOOD.encode() + b"\xff\xfe"), r"invalid byte at offset"),
        (lambda p: p.write_bytes(GOOD.encode() + b"\x00"), r"contains NUL bytes"),
        (lambda p: p.write_text("a = " + "[" * 100_000), r"not valid TOML: .*nested too deeply"),
        (lambda p: p.write_text(f"a = {'9' * 5000}"), r"not valid TOML: .*4300 digits"),
        (lambda p: p.write_text("# x\n" * 1_200_000), r"larger than 4 MiB"),
        (lambda p: p.mkdir(), r"cannot read spec file: is a folder"),
        (_fifo, r"cannot read spec file: is a FIFO \(named pipe\), not a regular file"),
        (_loop, r"cannot read spec file: is a symbolic link loop, not a regular file"),
        (lambda p: None, r"cannot read spec file: No such file"),
    ],
    ids=[
        "random-bytes",
        "invalid-utf8",
        "nul",
        "deep",
        "long-int",
        "huge",
        "folder",
        "fifo",
        "loop",
        "absent",
    ],
)
def test_unusable_spec_files_are_one_clear_error(tmp_path, make, message):
    path = tmp_path / "toy.toml"
    make(path)
    with pytest.raises(SpecError, match=message) as error:
        load_registry([path], include_builtin=False)
    assert str(error.value).startswith(str(path))


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_an_unreadable_spec_file_is_reported(tmp_path):
    path = tmp_path / "toy.toml"
    path.write_text(GOOD)
    path.chmod(0)
    with pytest.raises(SpecError, match=r"toy.toml: cannot read spec file: Permission denied"):
        load_registry([path], include_builtin=False)


def test_a_byte_order_mark_is_accepted(tmp_path):
    path = tmp_path / "toy.toml"
    path.write_bytes(b"\xef\xbb\xbf" + GOOD.encode())
    assert [r.target for r in load_registry([path], include_builtin=False)] == ["t"]


def test_every_shipped_name_is_a_safe_file_name(registry):
    assert len(registry) == 99
    for relationship in registry:
        assert is_safe_name(relationship.simulator) and is_safe_name(relationship.target)
        assert all(is_safe_name(name) for name in relationship.covariate_names)


def test_bad_spec_through_the_command_line_is_one_error_line(tmp_path):
    spec = tmp_path / "toy.toml"
    spec.write_text(GOOD.replace('name = "t"', 'name = "../../x"', 1))
    result = run_cli(
        "relationships",
        "plot",
        "--simulator",
        "toy",
        "--spec",
        str(spec),
        "--out",
        str(tmp_path / "o"),
    )
    assert result.returncode == 1
    assert result.stderr.startswith(f"error: {spec}: targets[0]: field 'name': '../../x'")
    assert "Traceback" not in result.stderr and "unexpected" not in result.stderr
    assert not (tmp_path.parent / "x.png").exists() and not (tmp_path / "o").exists()


def test_a_permission_error_names_the_spec_file(tmp_path, monkeypatch):
    from whatif_bench.relationships import spec as spec_module

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    path = tmp_path / "toy.toml"
    path.write_text(GOOD)
    monkeypatch.setattr(spec_module.os, "open", refuse)
    with pytest.raises(SpecError, match=r"toy.toml: cannot read spec file: Permission denied"):
        load_registry([path], include_builtin=False)
