"""Every option of every ``whatif`` command explains itself and states its default, and the
command line starts without the heavy libraries."""

from __future__ import annotations

import argparse
import subprocess
import sys

from whatif_bench import __version__
from whatif_bench.cli import build_parser


def _walk(parser: argparse.ArgumentParser, path: str = "whatif"):
    """Yield (command path, parser, action) for every argument of every (sub)command."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _walk(child, f"{path} {name}")
        else:
            yield path, parser, action


def _help_text(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """The help as ``--help`` prints it (``%(default)s`` and the like filled in)."""
    return parser._get_formatter()._expand_help(action) if action.help else ""


ARGUMENTS = list(_walk(build_parser()))


def test_the_walk_reaches_every_subcommand():
    commands = {path for path, _, _ in ARGUMENTS}
    for expected in (
        "whatif generate",
        "whatif evaluate",
        "whatif export",
        "whatif baselines plot",
        "whatif relationships check",
        "whatif simulate",
        "whatif show",
    ):
        assert expected in commands


def test_every_argument_has_help():
    missing = [
        f"{path} {action.option_strings or action.dest}"
        for path, parser, action in ARGUMENTS
        if not isinstance(action, argparse._HelpAction) and not _help_text(parser, action).strip()
    ]
    assert not missing, f"arguments without help: {missing}"


def test_every_option_with_a_default_states_it():
    silent = []
    for path, parser, action in ARGUMENTS:
        default = action.default
        if not action.option_strings or isinstance(
            action, argparse._HelpAction | argparse._VersionAction
        ):
            continue
        if default is None or default is False:
            continue
        text = _help_text(parser, action)
        if "default:" not in text:
            silent.append(f"{path} {action.option_strings[0]}: no 'default: ...' in {text!r}")
        elif isinstance(default, str | int | float) and str(default) not in text:
            silent.append(f"{path} {action.option_strings[0]}: default {default!r} not in {text!r}")
    assert not silent, "\n".join(silent)


def test_version_runs_in_a_subprocess():
    done = subprocess.run(
        [sys.executable, "-m", "whatif_bench.cli", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"whatif-bench {__version__}"


def test_building_the_command_line_imports_no_heavy_library():
    code = (
        "import sys\n"
        "from whatif_bench.cli import build_parser\n"
        "build_parser()\n"
        "heavy = {'numpy', 'numba', 'h5py', 'pandas', 'scipy', 'matplotlib', 'pyarrow', 'xgboost'}\n"
        "print(sorted(heavy & {name.partition('.')[0] for name in sys.modules}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]"


def test_the_public_api_still_imports_from_the_subpackages():
    code = (
        "from whatif_bench.relationships import load_registry, EventSchedule\n"
        "from whatif_bench.generator import Corpus, generate\n"
        "from whatif_bench.evaluation import evaluate, BASELINES\n"
        "from whatif_bench.simulators import read_baselines, epanet\n"
        "from whatif_bench.export import export_corpus\n"
        "import whatif_bench.generator as g\n"
        "assert 'Corpus' in dir(g) and g.Corpus is Corpus\n"
        "try:\n"
        "    g.no_such_name\n"
        "except AttributeError as exc:\n"
        "    assert 'no_such_name' in str(exc)\n"
        "else:\n"
        "    raise SystemExit('no AttributeError')\n"
    )
    subprocess.run([sys.executable, "-c", code], timeout=120, check=True)
