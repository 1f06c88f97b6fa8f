"""The ``whatif`` command line: thin argument parsing over the package's Python API."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from whatif_bench._version import __version__
from whatif_bench.ctrl_c import CtrlCWatch, ctrl_c_caused
from whatif_bench.errors import WhatIfError


def _relationships_parser(subparsers: argparse._SubParsersAction) -> None:
    from whatif_bench.generator import diagnose_cli
    from whatif_bench.relationships import cli as rel_cli

    parser = subparsers.add_parser(
        "relationships", help="inspect, evaluate, check and document relationships"
    )
    actions = rel_cli.add_arguments(parser)
    # `relationships diagnose` draws pairs as generate would: the generator's, registered here
    # so that relationships (a floor below the generator) never imports it
    diagnose_cli.add_relationships_arguments(actions)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="whatif", description="WhatIf-Bench toolkit")
    parser.add_argument("--version", action="version", version=f"whatif-bench {__version__}")
    parser.add_argument(
        "--debug",
        action="store_true",
        help="show the full traceback of an error instead of one line (default: off)",
    )
    subparsers = parser.add_subparsers(dest="command", required=True)
    _relationships_parser(subparsers)
    from whatif_bench.simulators import cli as sim_cli

    sim_cli.add_simulate_arguments(
        subparsers.add_parser("simulate", help="run simulators and write a baselines file")
    )
    sim_cli.add_baselines_arguments(
        subparsers.add_parser("baselines", help="inspect or plot a baselines file")
    )
    sim_cli.add_worlds_arguments(
        subparsers.add_parser(
            "worlds", help="training worlds: real simulator runs the benchmark never uses"
        )
    )
    from whatif_bench.simulators import containers_cli

    containers_cli.add_arguments(
        subparsers.add_parser(
            "images", help="build the container images and check them against the host runs"
        )
    )
    from whatif_bench.generator import cli as gen_cli

    gen_cli.add_arguments(subparsers)
    from whatif_bench.generator import diagnose_cli

    diagnose_cli.add_arguments(subparsers)
    from whatif_bench.evaluation import cli as eval_cli

    eval_cli.add_arguments(subparsers)
    from whatif_bench.evaluation import llm_cli

    llm_cli.add_arguments(subparsers)
    from whatif_bench.export import cli as export_cli

    export_cli.add_arguments(subparsers)
    from whatif_bench.stream import cli as stream_cli

    stream_cli.add_arguments(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``whatif`` script; returns the process exit code.

    The one error boundary of the command line: a failure prints a single ``error: ...`` line
    and exits 1 (argparse's usage errors exit 2); ``--debug`` re-raises to show the traceback.
    A Ctrl-C exits 130 and says what was kept (each command sets ``interrupt_note``).
    """
    with CtrlCWatch() as ctrl_c:
        try:
            parser = build_parser()
        except KeyboardInterrupt:  # while the commands' modules import
            print("interrupted; nothing was written", file=sys.stderr)
            return 130
        args = parser.parse_args(argv)
        try:
            return int(args.handler(args) or 0)
        except KeyboardInterrupt:
            return _interrupted(args)
        except BrokenPipeError:
            return 0
        except Exception as exc:
            # after a Ctrl-C, a failure is how a compiled library passed the interrupt on
            if ctrl_c.pressed or ctrl_c_caused(exc):
                return _interrupted(args)
            if args.debug:
                raise
            print(f"error: {describe_error(exc)}", file=sys.stderr)
            return 1


def _interrupted(args: argparse.Namespace) -> int:
    note = getattr(args, "interrupt_note", "nothing was written")
    print(f"interrupted; {note}", file=sys.stderr)
    return 130


def entry() -> None:
    """The ``whatif`` console script: ``main`` on the command line's arguments, then this
    process's worker processes ended at once (``workers.stop_workers``; nothing waits for
    them any more), then exit with ``main``'s code."""
    code = main()
    from whatif_bench.workers import stop_workers

    stop_workers()
    sys.exit(code)


def describe_error(exc: BaseException) -> str:
    """One line for an exception: the toolkit's own message, or the type and message of an
    unexpected one (with a pointer to ``--debug``)."""
    if isinstance(exc, WhatIfError):
        message = str(exc)
    elif isinstance(exc, MemoryError):
        message = "out of memory"
    elif isinstance(exc, RecursionError):
        message = "input nested too deeply"
    else:
        text = str(exc) or "no message"
        message = f"unexpected {type(exc).__name__}: {text} (rerun with --debug for the traceback)"
    return " ".join(message.split()) if "\n" in message else message


if __name__ == "__main__":
    entry()
