"""The ``whatif`` command line: thin argument parsing over the package's Python API."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from whatif_bench._version import __version__
from whatif_bench.errors import WhatIfError


def _relationships_parser(subparsers: argparse._SubParsersAction) -> None:
    from whatif_bench.relationships import cli as rel_cli

    parser = subparsers.add_parser(
        "relationships", help="inspect, evaluate, check and document relationships"
    )
    rel_cli.add_arguments(parser)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="whatif", description="WhatIf-Bench toolkit")
    parser.add_argument("--version", action="version", version=f"whatif-bench {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True)
    _relationships_parser(subparsers)
    from whatif_bench.simulators import cli as sim_cli

    sim_cli.add_simulate_arguments(
        subparsers.add_parser("simulate", help="run simulators and write a baselines file")
    )
    sim_cli.add_baselines_arguments(
        subparsers.add_parser("baselines", help="inspect or plot a baselines file")
    )
    from whatif_bench.generator import cli as gen_cli

    gen_cli.add_arguments(subparsers)
    from whatif_bench.evaluation import cli as eval_cli

    eval_cli.add_arguments(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``whatif`` script; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except WhatIfError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted; nothing was written", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
