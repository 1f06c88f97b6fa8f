"""``whatif diagnose CORPUS`` and ``whatif relationships diagnose [FILE ...]`` (docs/DIAGNOSTICS.md).

Argument parsing only; the work is in ``generator/diagnose.py`` (imported when a command runs,
so the command line starts without numpy or pandas).
"""

from __future__ import annotations

import argparse
import json
import sys

from whatif_bench.cli_cluster import jobs_help_text, jobs_of
from whatif_bench.cli_lists import add_list_option
from whatif_bench.cli_types import fraction, jobs_int, seed_int


def _output_arguments(parser: argparse.ArgumentParser) -> None:
    add_list_option(
        parser,
        "--targets",
        "--target",
        metavar="TARGET",
        help="only these targets, as NAME or SIMULATOR/NAME (default: all)",
    )
    parser.add_argument(
        "--out",
        metavar="DIR",
        help="also write diagnostics.csv, pairs.csv, imprints.csv, plots/*.png and "
        "diagnostics.json to this folder; it appears only once complete, and an earlier "
        "diagnostics folder there is replaced (default: none, print only)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print the report as JSON instead of a table (default: a table)",
    )


def add_arguments(subparsers) -> None:
    """``whatif diagnose``."""
    parser = subparsers.add_parser(
        "diagnose",
        help="per target: pass rate, drop reasons, event effects, whether Novel futures "
        "leave the history's response range",
    )
    parser.add_argument("file", help="corpus file")
    _output_arguments(parser)
    parser.add_argument(
        "--jobs",
        type=jobs_int,
        help=jobs_help_text("worker processes (1 when --forms is given)"),
    )
    add_list_option(
        parser,
        "--forms",
        files=True,
        metavar="PY",
        help="Python files that register user forms (executed; needed for a corpus built with "
        "--forms; must be unchanged) (default: none)",
    )
    parser.set_defaults(handler=_diagnose_corpus)


def add_relationships_arguments(sub) -> None:
    """``whatif relationships diagnose``."""
    parser = sub.add_parser(
        "diagnose",
        help="the diagnose report for a spec's targets, on pairs drawn in memory as generate "
        "would draw them (nothing is written unless --out)",
    )
    parser.add_argument(
        "files",
        nargs="*",
        metavar="FILE",
        help="spec files loaded after the shipped ones; their targets are diagnosed "
        "(default: none, every shipped target whose simulator has baselines)",
    )
    add_list_option(
        parser,
        "--forms",
        files=True,
        metavar="PY",
        help="Python files that register user forms (executed) (default: none)",
    )
    parser.add_argument(
        "--baselines",
        help="baselines file holding the targets' series: a store (.h5) or a CSV/Parquet table "
        "(default: the shipped one)",
    )
    parser.add_argument(
        "--sample",
        type=fraction,
        default=1.0,
        metavar="F",
        help="fraction in (0, 1] of each target's 200 pairs to draw, picked at random "
        "(default: %(default)s, every pair generate would make)",
    )
    parser.add_argument(
        "--seed",
        type=seed_int,
        default=0,
        help="master seed of the pairs (and of the --sample pick), as generate's --seed "
        "(default: %(default)s)",
    )
    _output_arguments(parser)
    parser.set_defaults(handler=_diagnose_spec)


def _report(report, args: argparse.Namespace, inputs: list[str]) -> int:
    from whatif_bench.generator.diagnose import format_table, write_folder

    if args.json:
        json.dump(report.as_dict(), sys.stdout, indent=1, allow_nan=False)
        sys.stdout.write("\n")
    else:
        print(format_table(report))
    if args.out is not None:
        print(f"wrote {write_folder(report, args.out, inputs)}", file=sys.stderr)
    return 0


def _diagnose_corpus(args: argparse.Namespace) -> int:
    from whatif_bench.generator.diagnose import check_out_folder, diagnose_corpus

    args.interrupt_note = "no report was written"
    if args.out is not None:
        check_out_folder(args.out, [args.file])  # before the work
    report = diagnose_corpus(
        args.file, args.targets, jobs=jobs_of(args), progress=True, forms=args.forms
    )
    return _report(report, args, [args.file])


def _diagnose_spec(args: argparse.Namespace) -> int:
    from whatif_bench.generator.diagnose import (
        check_out_folder,
        diagnose_relationships,
        select_names,
    )
    from whatif_bench.outputs import refuse_empty
    from whatif_bench.relationships.plugins import load_form_modules, probe_user_forms
    from whatif_bench.relationships.registry import load_registry
    from whatif_bench.relationships.spec import relationships_of_files

    args.interrupt_note = "no report was written"
    if args.baselines is not None:  # "" is not "the shipped one"
        refuse_empty(args.baselines, "--baselines")
    inputs = [*args.files, *args.forms, *([args.baselines] if args.baselines else [])]
    if args.out is not None:
        check_out_folder(args.out, inputs)  # before the work
    load_form_modules(args.forms)
    registry = load_registry(args.files)
    declared = relationships_of_files(args.files) if args.files else None
    available = [
        (r.simulator, r.target)
        for r in registry
        if declared is None or (r.simulator, r.target) in declared
    ]
    where = ", ".join(args.files) if args.files else "the shipped registry"
    chosen = [registry.get(*item) for item in select_names(available, args.targets, where)]
    if args.forms:
        probe_user_forms(chosen)
    report = diagnose_relationships(
        chosen,
        baselines_path=args.baselines,
        sample=args.sample,
        seed=args.seed,
        progress=True,
        source={"spec_files": list(args.files), "forms": list(args.forms)},
        # by default every shipped target that has baselines, as generate; named ones must
        skip_unsimulated=not args.files and not args.targets,
    )
    return _report(report, args, inputs)
