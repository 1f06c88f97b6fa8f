"""The one loader of user code (``whatif_bench.usercode``): every way a user's module can be
unusable is one error line of the caller's class, and form modules (``--forms``) and model
modules (``--models``) report the same failure with the same words."""

from __future__ import annotations

import sys

import pytest

from whatif_bench.cli import main
from whatif_bench.errors import SpecError, WhatIfError
from whatif_bench.evaluation.forecasters import ModelError
from whatif_bench.usercode import (
    UserCodeError,
    describe_exception,
    load_attribute,
    load_file,
    load_module,
)


def _write(path, content):
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)


# (file content, or None for no file, or "<dir>" for a folder; the message after "label: ")
BAD_FILES = {
    "absent": (None, "file {path} not found"),
    "folder": ("<dir>", "{path} is a folder, not a Python file"),
    "syntax": ("class M(:\n", "importing {path} failed: syntax error at line 1: "),
    "null-bytes": (b"\xff\xfe\x00garbage", "importing {path} failed: "),
    "missing-import": (
        "import no_such_module_for_usercode\n",
        "importing {path} failed: ModuleNotFoundError: No module named "
        "'no_such_module_for_usercode'",
    ),
    "raises": (
        "raise RuntimeError('broken\\n  at import')\n",
        "importing {path} failed: RuntimeError: broken at import",
    ),
    "raises-no-message": ("raise KeyError\n", "importing {path} failed: KeyError"),
    "exit": ("import sys\nsys.exit(3)\n", "importing {path} failed: it called exit(3)"),
    "long-message": (
        "raise ValueError('x' * 1000)\n",
        "importing {path} failed: ValueError: " + "x" * 300 + " ...",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
@pytest.mark.parametrize("error", [UserCodeError, SpecError, ModelError])
def test_an_unusable_file_is_one_error_of_the_callers_class(tmp_path, case, error):
    content, message = BAD_FILES[case]
    path = tmp_path / "user_module.py"
    if content == "<dir>":
        path.mkdir()
    else:
        _write(path, content)
    with pytest.raises(error) as caught:
        load_file(path, "my label", error)
    text = str(caught.value)
    assert type(caught.value) is error and isinstance(caught.value, WhatIfError)
    assert text.startswith("my label: " + message.format(path=path)), text
    assert "\n" not in text and caught.value.__cause__ is None


BAD_ATTRIBUTES = {
    "missing": ("x = 1\n", "M", "{where} has no class 'M'"),
    "none": ("M = None\n", "M", "{where}.M is not a class"),
    "number": ("M = 3\n", "M", "{where}.M is not a class"),
}


@pytest.mark.parametrize("case", sorted(BAD_ATTRIBUTES))
def test_a_missing_or_uncallable_attribute_is_named(tmp_path, case):
    content, name, message = BAD_ATTRIBUTES[case]
    path = tmp_path / "models.py"
    path.write_text(content)
    with pytest.raises(ModelError) as caught:
        load_attribute(str(path), name, "model 'x'", ModelError)
    assert str(caught.value) == "model 'x': " + message.format(where=path)


@pytest.mark.parametrize(
    ("where", "message"),
    [
        (
            "no_such_package_for_usercode.mod",
            "importing no_such_package_for_usercode.mod failed: ModuleNotFoundError: No module "
            "named 'no_such_package_for_usercode'",
        ),
        ("raising_usercode_module", "importing raising_usercode_module failed: OSError: disk"),
    ],
)
def test_a_module_name_that_cannot_be_imported_is_one_error(tmp_path, monkeypatch, where, message):
    (tmp_path / "raising_usercode_module.py").write_text("raise OSError('disk')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(UserCodeError) as caught:
        load_module(where, "label")
    assert str(caught.value) == f"label: {message}"
    sys.modules.pop("raising_usercode_module", None)


def test_a_good_file_and_a_good_module_name_load(tmp_path, monkeypatch):
    path = tmp_path / "good_usercode.py"
    path.write_text("class M:\n    value = 7\n")
    module = load_file(path, "label")
    assert module.__name__ == "good_usercode" and "good_usercode" not in sys.modules
    assert load_attribute(str(path), "M", "label")().value == 7
    monkeypatch.syspath_prepend(str(tmp_path))
    assert load_attribute("good_usercode", "M", "label").value == 7
    sys.modules.pop("good_usercode", None)


def test_ctrl_c_while_loading_is_not_a_user_code_error(tmp_path):
    path = tmp_path / "interrupting.py"
    path.write_text("raise KeyboardInterrupt\n")
    with pytest.raises(KeyboardInterrupt):
        load_file(path, "label")


def test_a_syntax_error_in_an_imported_file_names_that_file(tmp_path, monkeypatch):
    (tmp_path / "helper_with_typo.py").write_text("x = (\n")
    main_file = tmp_path / "uses_helper.py"
    main_file.write_text("import helper_with_typo\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(UserCodeError) as caught:
        load_file(main_file, "label")
    assert f"of {tmp_path / 'helper_with_typo.py'}: " in str(caught.value)
    sys.modules.pop("helper_with_typo", None)


def test_describe_exception_is_one_line():
    assert describe_exception(SystemExit("bye")) == "it called exit('bye')"
    assert describe_exception(ValueError("a\n\tb")) == "ValueError: a b"


@pytest.mark.parametrize(
    ("content", "cause"),
    [
        ("raise RuntimeError('boom at import')\n", "RuntimeError: boom at import"),
        ("import sys\nsys.exit(4)\n", "it called exit(4)"),
        ("def f(:\n", "syntax error at line 1: "),
    ],
    ids=["raise", "exit", "syntax"],
)
def test_forms_and_models_report_a_broken_module_alike(tmp_path, capsys, content, cause):
    path = tmp_path / "broken_user_code.py"
    path.write_text(content)
    assert main(["relationships", "list", "--forms", str(path)]) == 1
    forms_err = capsys.readouterr().err.strip()
    corpus = tmp_path / "c.h5"  # models are loaded before the corpus is read
    corpus.write_bytes(b"")
    out = str(tmp_path / "out")
    assert main(["evaluate", str(corpus), "--models", f"{path}:M", "--out", out]) == 1
    models_err = capsys.readouterr().err.strip()
    same = f"importing {path} failed: {cause}"
    assert forms_err.startswith(f"error: form module: {same}"), forms_err
    assert models_err.startswith(f"error: model '{path}:M': {same}"), models_err
    assert forms_err.split(": ", 2)[2] == models_err.split(": ", 2)[2]


@pytest.mark.parametrize(
    ("content", "cause"),
    [
        ("import os\nos._exit(0)\n", "it ended the process (exit status 0)"),
        ("import os\nos._exit(5)\n", "it ended the process (exit status 5)"),
        ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n", "(SIGKILL, signal 9)"),
        ("import sys\nsys.exit(2)\n", "it called exit(2)"),
        ("while True:\n    pass\n", "it did not finish within 1 s (an endless loop?)"),
    ],
    ids=["os-exit-0", "os-exit-5", "killed", "exit", "endless"],
)
@pytest.mark.one_quick  # about 2 s over all its cases
def test_import_in_child_names_a_module_that_ends_its_process(tmp_path, content, cause):
    from whatif_bench.usercode import import_in_child

    path = tmp_path / "ends.py"
    path.write_text(content)
    with pytest.raises(SpecError) as info:
        import_in_child(path, "form module", SpecError, timeout=1.0)
    assert str(info.value).startswith(f"form module: importing {path} failed: ")
    assert cause in str(info.value)


def test_import_in_child_leaves_this_process_alone(tmp_path):
    from whatif_bench.usercode import import_in_child

    path = tmp_path / "fine.py"
    path.write_text("import sys\nsys.whatif_marker_of_the_child = True\n")
    import_in_child(path, "form module", SpecError, timeout=30.0)  # no error
    assert not hasattr(sys, "whatif_marker_of_the_child")
