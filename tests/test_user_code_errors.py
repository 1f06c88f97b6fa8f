"""User form modules (``--forms PY``) that fail in any way give one clear error line naming the
module file and the form: import failures, forms that raise, return a non-number or NaN, or
never return (a time limit, enforced by running user code in a child process). A ``--forms`` or
``--models`` path that is a FIFO, a device or a symbolic link loop is named for what it is."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

from tests.conftest import run_whatif
from tests.toy_spec import one_covariate_spec
from whatif_bench.cli import main


def run(capsys, *argv):
    """The command line in-process: (exit code, stdout, stderr), with the error-line promises."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in err and "unexpected" not in err
    return code, out, err


def files(tmp_path, name, body):
    """A form module registering ``name`` with ``body``, and a spec whose target uses it."""
    forms = tmp_path / f"{name}.py"
    forms.write_text(
        "import math\nimport numpy as np\n"
        "from whatif_bench.relationships import register_form\n"
        f"@register_form({name!r})\n"
        "def form(y, f, p):\n" + textwrap.indent(textwrap.dedent(body), "    ")
    )
    spec = tmp_path / "toyf.toml"
    spec.write_text(one_covariate_spec(simulator="toyf", form=name, params=None))
    return forms, spec


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("def broken(:\n", r"failed: syntax error at line 1: "),
        ("import no_such_module_for_whatif\n", r"ModuleNotFoundError: No module named"),
        ("raise RuntimeError('boom at import')\n", r"RuntimeError: boom at import"),
        ("import sys\nsys.exit(3)\n", r"it called exit\(3\)"),
        (
            "from whatif_bench.relationships import register_form\n"
            "@register_form('power')\ndef power(y, f, p):\n    return y\n",
            r"ValueError: a primary form named 'power' already exists",
        ),
    ],
    ids=["syntax", "import", "raise", "exit", "duplicate"],
)
def test_a_module_that_fails_to_load_is_one_error(tmp_path, capsys, source, message):
    forms = tmp_path / "bad_module.py"
    forms.write_text(source)
    code, out, err = run(capsys, "relationships", "list", "--forms", str(forms))
    assert code == 1 and out == ""
    assert err.startswith(f"error: form module: importing {forms} failed: ")
    assert pytest.importorskip("re").search(message, err), err


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p.mkdir(), "{forms} is a folder, not a Python file"),
        (lambda p: None, "file {forms} not found"),
        (lambda p: p.write_bytes(b"\xff\xfe\x00garbage"), "importing {forms} failed: "),
    ],
    ids=["folder", "absent", "binary"],
)
def test_an_unusable_module_file_is_one_error(tmp_path, capsys, make, message):
    forms = tmp_path / "forms.py"
    make(forms)
    code, out, err = run(capsys, "relationships", "list", "--forms", str(forms))
    expected = "error: form module: " + message.format(forms=forms)
    assert code == 1 and out == "" and err.startswith(expected), err


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            "if f > 1.5:\n    raise ValueError('f too big')\nreturn y * f\n",
            r"primary form '{name}' \(used by toyf/t\): raised at y=1, f=1\.5\d*: "
            r"ValueError: f too big",
        ),
        # type errors show at once, when the module is loaded (y = 1, f = 1)
        ("return (y, f)\n", r"primary form '{name}': returned tuple at y=1, f=1;"),
        ("return np.array([y, f])\n", r"returned an array of shape \(2,\) at y=1, f=1;"),
        ("return open('x')\n", r"primary form '{name}': raised at y=1, f=1: TypingError"),
    ],
    ids=["raises", "tuple", "array", "not-numba"],
)
@pytest.mark.one_quick  # about 1 s over all its cases
def test_a_form_that_fails_when_called_is_one_error(tmp_path, capsys, body, message, request):
    name = f"bad_{request.node.callspec.id.replace('-', '_')}"
    forms, spec = files(tmp_path, name, body)
    code, out, err = run(
        capsys,
        "relationships",
        "eval",
        "--simulator",
        "toyf",
        "--target",
        "t",
        "--y",
        "3",
        "--spec",
        str(spec),
        "--forms",
        str(forms),
    )
    assert code == 1 and out == ""
    assert err.startswith(f"error: {forms}: primary form {name!r}"), err
    assert pytest.importorskip("re").search(message.format(name=name), err), err


@pytest.mark.slow  # about 3 s
def test_a_form_that_never_returns_is_stopped(tmp_path, capsys):
    forms, spec = files(tmp_path, "loops_forever", "while f > 0.0:\n    y = y + 1.0\nreturn y\n")
    code, out, err = run(
        capsys, "relationships", "check", str(spec), "--forms", str(forms), "--timeout", "3"
    )
    assert code == 1 and out == ""
    assert err.startswith(f"error: {forms}: primary form 'loops_forever': ")
    assert "did not return within 3 s" in err


@pytest.mark.slow  # about 3 s
def test_a_form_that_never_returns_is_stopped_before_eval(tmp_path, capsys, monkeypatch):
    from whatif_bench.relationships import plugins

    monkeypatch.setattr(plugins, "USER_CODE_TIMEOUT_S", 3.0)
    forms, spec = files(tmp_path, "loops_too", "while f > 0.0:\n    y = y + 1.0\nreturn y\n")
    argv = ["--simulator", "toyf", "--target", "t", "--spec", str(spec), "--forms", str(forms)]
    code, out, err = run(capsys, "relationships", "eval", "--y", "1", *argv)
    assert code == 1 and "did not return within 3 s" in err and str(forms) in err


@pytest.mark.slow  # about 2 s
def test_a_form_returning_nan_breaks_the_finite_rule_naming_module_and_form(tmp_path, capsys):
    forms, spec = files(tmp_path, "nan_above_3", "return y * f if f < 3.0 else math.nan\n")
    code, out, err = run(
        capsys, "relationships", "check", str(spec), "--forms", str(forms), "--json"
    )
    assert code == 1 and out, err
    finite = [v for v in json.loads(out)["violations"] if v["rule"] == "finite"]
    assert finite and f"{forms}: primary form 'nan_above_3'" in finite[0]["message"]
    assert "returned nan at y=1, f=3" in finite[0]["message"]
    # eval where the form is finite still works; where it is NaN, one clear error
    argv = ["--simulator", "toyf", "--target", "t", "--spec", str(spec), "--forms", str(forms)]
    code, out, err = run(capsys, "relationships", "eval", "--y", "2", "--factor", "a=2", *argv)
    assert code == 0 and out.strip() == "4"
    code, out, err = run(capsys, "relationships", "eval", "--y", "2", "--factor", "a=4", *argv)
    assert code == 1 and "toyf/t: the target is not finite for these inputs" in err
    assert f"{forms}: primary form 'nan_above_3'" in err


# Paths that are not files: named for what they are, never opened (a FIFO would block).


def _fifo(folder):
    path = folder / "fifo.py"
    os.mkfifo(path)
    return path


def _loop(folder):
    path, other = folder / "loop.py", folder / "other.py"
    path.symlink_to(other)
    other.symlink_to(path)
    return path


PATH_PROBLEMS = [
    (_fifo, "a FIFO (named pipe)"),
    (_loop, "a symbolic link loop"),
    (lambda folder: Path("/dev/null"), "a character device"),
]
PATH_IDS = ["fifo", "loop", "device"]


@pytest.fixture(scope="module")
def corpus(one_target_corpus):
    return one_target_corpus  # epanet/pressure_10, once per session (read only here)


@pytest.mark.parametrize(("make", "what"), PATH_PROBLEMS, ids=PATH_IDS)
@pytest.mark.one_quick  # about 1 s over all its cases
def test_a_models_path_that_is_not_a_file_is_named_so(tmp_path, corpus, make, what):
    path = make(tmp_path)
    out = tmp_path / "o"
    result = run_whatif(
        "evaluate", str(corpus), "--models", f"{path}:Model,naive", "--out", str(out)
    )
    assert result.returncode == 1 and result.stdout == "", result.stderr
    assert result.stderr == f"error: model '{path}:Model': {path}: is {what}, not a Python file\n"
    assert not out.exists()


@pytest.mark.parametrize(("make", "what"), PATH_PROBLEMS, ids=PATH_IDS)
@pytest.mark.parametrize("command", [("relationships", "list"), ("relationships", "check")])
def test_a_forms_path_that_is_not_a_file_is_named_so(tmp_path, make, what, command):
    path = make(tmp_path)
    result = run_whatif(*command, "--forms", str(path))
    assert result.returncode == 1 and result.stdout == "", result.stderr
    assert result.stderr == f"error: form module: {path}: the path is {what}\n"


@pytest.mark.parametrize(("make", "what"), PATH_PROBLEMS, ids=PATH_IDS)
def test_the_shared_loader_names_a_path_that_is_not_a_file(tmp_path, make, what):
    from whatif_bench.usercode import UserCodeError, load_file, load_file_checked

    path = make(tmp_path)
    for load in (load_file, load_file_checked):
        with pytest.raises(UserCodeError) as caught:
            load(path, "label")
        assert str(caught.value) == f"label: {path}: is {what}, not a Python file"
