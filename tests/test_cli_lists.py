"""One command-line convention (whatif_bench.cli_lists, cli_cluster): every list option takes
one or more values, the flag may repeat, names may be comma-separated; every --jobs has the
same default, all cores."""

from __future__ import annotations

import argparse

import pytest
from hypothesis import given
from hypothesis import strategies as st

from whatif_bench.cli import build_parser
from whatif_bench.cli_cluster import jobs_of
from whatif_bench.cli_lists import ListOption, add_list_option
from whatif_bench.workers import default_jobs

NAMES = st.lists(st.from_regex(r"[a-z][a-z0-9_/]{0,8}", fullmatch=True), min_size=1, max_size=6)


def _parser(**options) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="t", exit_on_error=False)
    add_list_option(parser, "--things", "--thing", metavar="T", help="things", **options)
    return parser


@given(NAMES, st.data())
def test_the_three_forms_give_the_same_list(names, data):
    parser = _parser()
    spaced = parser.parse_args(["--things", *names]).things
    repeated = parser.parse_args([a for n in names for a in ("--thing", n)]).things
    cut = data.draw(st.integers(0, len(names)))
    mixed = parser.parse_args(
        ["--things", ",".join(names[:cut]), *names[cut:]] if cut else ["--things", *names]
    ).things
    assert spaced == repeated == mixed == names


def test_the_default_is_replaced_not_extended_and_never_shared():
    parser = _parser(default=["a", "b"])
    assert parser.parse_args([]).things == ["a", "b"]
    assert parser.parse_args(["--things", "c"]).things == ["c"]
    assert parser.parse_args(["--things", "c", "--things", "d"]).things == ["c", "d"]
    assert parser.parse_args([]).things == ["a", "b"]  # the default was not changed


def test_files_keep_their_commas():
    parser = _parser(files=True)
    assert parser.parse_args(["--things", "a,b.py", "c.py"]).things == ["a,b.py", "c.py"]


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--things", "a,,b"], "an empty item in 'a,,b'"),
        (["--things", ","], "an empty item"),
        (["--things", "a,zzz"], "invalid choice: 'zzz' (choose from a, b)"),
        (["--things"], "expected at least one argument"),
    ],
)
def test_bad_lists_are_one_usage_error(argv, says, capsys):
    parser = argparse.ArgumentParser(prog="t")
    add_list_option(parser, "--things", metavar="T", help="things", allowed=["a", "b"])
    with pytest.raises(SystemExit) as stopped:
        parser.parse_args(argv)
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert says in err and err.count("error:") == 1


def _every_action():
    """(command, action) for every option of every ``whatif`` command."""

    def walk(parser, name):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub, child in action.choices.items():
                    yield from walk(child, f"{name} {sub}")
            else:
                yield name, action

    yield from walk(build_parser(), "whatif")


def test_every_list_option_of_whatif_takes_the_one_form():
    lists = [
        (command, action.option_strings)
        for command, action in _every_action()
        if action.option_strings
        and (
            action.nargs in ("+", "*")
            or isinstance(action, argparse._AppendAction)
            or "comma-separated" in (action.help or "")
        )
        and not isinstance(action, ListOption)
    ]
    assert lists == []
    found = [a for _, a in _every_action() if isinstance(a, ListOption)]
    assert len(found) >= 20
    for action in found:
        assert "the option may repeat" in action.help, action.help
        assert "(default" in action.help or "(required)" in action.help, action.help


def test_every_jobs_option_has_the_one_default():
    jobs = [(command, a) for command, a in _every_action() if "--jobs" in a.option_strings]
    assert {c for c, _ in jobs} >= {"whatif generate", "whatif evaluate", "whatif stream"}
    for command, action in jobs:
        assert action.default is None, command
        assert f"(default: all {default_jobs()} cores" in action.help, command
    assert jobs_of(argparse.Namespace(jobs=None)) == default_jobs()
    assert jobs_of(argparse.Namespace(jobs=3)) == 3
    assert jobs_of(argparse.Namespace(jobs=None, dask_local=2, dask_scheduler=None)) == 1


@pytest.mark.parametrize(
    "argv",
    [
        ["worlds", "build", "--simulator", "epanet", "gridlabd"],
        ["worlds", "build", "--simulators", "epanet,gridlabd"],
        ["worlds", "build", "--simulator", "epanet", "--simulator", "gridlabd"],
    ],
)
def test_worlds_build_takes_several_simulators_in_every_form(argv):
    assert build_parser().parse_args(argv).simulator == ["epanet", "gridlabd"]
