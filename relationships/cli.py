"""``whatif relationships ...``: list, eval, check and doc sub-commands."""

from __future__ import annotations

import argparse
import json
import math
import sys

from whatif_bench.cli_lists import add_list_option
from whatif_bench.cli_types import (
    MAX_WAIT_S,
    integer_text,
    integer_value,
    seconds_float,
    shown,
)
from whatif_bench.errors import RelationshipError


def add_arguments(parser: argparse.ArgumentParser) -> argparse._SubParsersAction:
    """The sub-commands of ``whatif relationships``; returns their subparsers, to which the
    command line adds ``relationships diagnose`` (it lives in the generator, a floor above)."""
    sub = parser.add_subparsers(dest="action", required=True)

    def with_specs(p: argparse.ArgumentParser) -> None:
        add_list_option(
            p,
            "--spec",
            "--specs",
            files=True,
            metavar="FILE",
            help="extra spec files to load after the shipped ones (default: none)",
        )
        add_list_option(
            p,
            "--forms",
            files=True,
            metavar="PY",
            help="Python files that register user forms (executed) (default: none)",
        )

    listing = sub.add_parser("list", help="list targets and their covariates")
    listing.add_argument("--simulator", help="only this simulator (default: all)")
    listing.add_argument(
        "--json", action="store_true", help="machine-readable output (default: a table)"
    )
    with_specs(listing)
    listing.set_defaults(handler=_list)

    evaluate = sub.add_parser("eval", help="evaluate one target under constant factors")
    evaluate.add_argument("--simulator", required=True, help="simulator of the target (required)")
    evaluate.add_argument("--target", required=True, help="target name (required)")
    add_list_option(
        evaluate,
        "--y",
        split_later=True,  # numbers: read, with their own errors, by _parse_numbers
        required=True,
        metavar="Y",
        help="baseline values (required)",
    )
    add_list_option(
        evaluate,
        "--factor",
        "--factors",
        files=True,  # an item is COV=F1,F2,...: its commas are its own
        metavar="COV=F1,F2,...",
        help="factors of each covariate, read in step with the other covariates' lists "
        "(default: none, every covariate at 1)",
    )
    evaluate.add_argument(
        "--k", type=integer_text, help="number of covariates K (default: last one named)"
    )
    evaluate.add_argument(
        "--json", action="store_true", help="machine-readable output (default: a table)"
    )
    with_specs(evaluate)
    evaluate.set_defaults(handler=_eval)

    check = sub.add_parser(
        "check", help="run the rule checks on a spec file (or on the shipped registry)"
    )
    check.add_argument(
        "files", nargs="*", metavar="FILE", help="spec files to check (default: the shipped ones)"
    )
    add_list_option(
        check,
        "--forms",
        files=True,
        metavar="PY",
        help="Python files that register user forms (executed) (default: none)",
    )
    check.add_argument(
        "--timeout",
        type=seconds_float,
        default=None,
        metavar="SECONDS",
        help=f"time limit per relationship for checking user forms, at most {MAX_WAIT_S:g} "
        "(one day) (default: 60)",
    )
    check.add_argument(
        "--json", action="store_true", help="machine-readable output (default: text)"
    )
    check.add_argument(
        "--imprints",
        choices=("below", "all", "none"),
        default="below",
        help='secondary covariates\' imprints to list (docs/METHOD.md, "Separable imprints"): '
        "below, those whose own effect cannot reach the 10 %% rule (warnings: the exit status "
        "stays that of the rules); all, every (target, K, covariate) with its figures; none, "
        "not measured (default: %(default)s)",
    )
    check.set_defaults(handler=_check)

    plot = sub.add_parser(
        "plot", help="response curves: the target against each covariate's factor"
    )
    plot.add_argument("--simulator", required=True, help="simulator to plot (required)")
    plot.add_argument("--target", help="one target (default: every target of the simulator)")
    plot.add_argument("--out", required=True, help="folder for <target>.png files (required)")
    with_specs(plot)
    plot.set_defaults(handler=_plot)

    doc = sub.add_parser("doc", help="write the Markdown reference of every relationship")
    doc.add_argument(
        "--out",
        default="docs/RELATIONSHIPS.md",
        help="output file, or - for stdout (default: %(default)s)",
    )
    doc.set_defaults(handler=_doc)
    return sub


def _load(args: argparse.Namespace):
    from whatif_bench.relationships.plugins import load_form_modules
    from whatif_bench.relationships.registry import load_registry

    forms = getattr(args, "forms", [])
    load_form_modules(forms)
    registry = load_registry(getattr(args, "spec", []))
    if forms:
        from whatif_bench.relationships.plugins import probe_user_forms

        probe_user_forms(registry)
    return registry


def _list(args: argparse.Namespace) -> int:
    registry = _load(args)
    rows = [r.summary() for r in registry.relationships(args.simulator)]
    if args.json:
        json.dump(rows, sys.stdout)
        sys.stdout.write("\n")
        return 0
    for row in rows:
        covariates = ", ".join(
            f"{name} ({row['direction'][name]}, {row['shape'][name]})" for name in row["covariates"]
        )
        print(f"{row['simulator']:<9} {row['target']:<34} {row['combination']:<14} {covariates}")
    return 0


def _parse_numbers(text: str, what: str) -> list[float]:
    """Comma-separated finite numbers (``nan``, ``inf`` and overflowing ones such as 1e400
    are refused here, naming the option; a long value is shown shortened)."""
    try:
        values = [float(v) for v in text.split(",") if v.strip() != ""]
    except ValueError:
        raise RelationshipError(
            f"{what}: expected comma-separated numbers, got {shown(text)!r}"
        ) from None
    if not values:
        raise RelationshipError(f"{what}: no numbers given")
    for raw, value in zip((v for v in text.split(",") if v.strip() != ""), values, strict=True):
        if not math.isfinite(value):
            raise RelationshipError(f"{what}: {shown(raw)!r} is not a finite number")
    return values


def _eval(args: argparse.Namespace) -> int:
    import numpy as np

    registry = _load(args)
    relationship = registry.get(args.simulator, args.target)
    y = np.array(_parse_numbers(",".join(args.y), "--y"))
    factor_lists: dict[str, list[float]] = {}
    for item in args.factor:
        name, sep, values = item.partition("=")
        if not sep:
            raise RelationshipError(f"--factor expects COV=F1,F2,..., got {shown(item)!r}")
        relationship.covariate(name)  # unknown names raise with the valid list
        if name in factor_lists:
            raise RelationshipError(f"--factor given twice for {name!r}")
        factor_lists[name] = _parse_numbers(values, f"--factor {name}")
    lengths = {len(v) for v in factor_lists.values()}
    if len(lengths) > 1:
        raise RelationshipError(
            f"every --factor list must have the same length, got lengths {sorted(lengths)}"
        )
    n_rows = lengths.pop() if lengths else 1
    k = None
    if args.k is not None:  # checked here, where the value as typed is known
        k, typed = integer_value(args.k)
        if not 1 <= k <= relationship.max_k:
            raise RelationshipError(
                f"{relationship.simulator}/{relationship.target}: K must be in "
                f"1..{relationship.max_k}, got {typed}"
            )
    values = relationship.evaluate_grid(y, factor_lists, n_rows, k)
    if not np.all(np.isfinite(values)):
        from whatif_bench.relationships.plugins import describe_user_code, uses_user_code

        culprit = (
            f"; it calls {describe_user_code(relationship)}" if uses_user_code(relationship) else ""
        )
        raise RelationshipError(
            f"{relationship.simulator}/{relationship.target}: the target is not finite for "
            f"these inputs{culprit}"
        )
    if args.json:
        json.dump({"values": values.tolist()}, sys.stdout)
        sys.stdout.write("\n")
    else:
        for row in values:
            print(" ".join(f"{v:.10g}" for v in row))
    return 0


def _check(args: argparse.Namespace) -> int:
    from whatif_bench.relationships.checks import check_registry
    from whatif_bench.relationships.plugins import load_form_modules
    from whatif_bench.relationships.registry import load_registry
    from whatif_bench.relationships.spec import relationships_of_files

    load_form_modules(args.forms, timeout=args.timeout)
    registry = load_registry(args.files) if args.files else load_registry()
    wanted = None
    if args.files:
        wanted = relationships_of_files(args.files)
    report = check_registry(
        registry, only=wanted, timeout=args.timeout, imprints=args.imprints != "none"
    )
    if args.json:
        json.dump(report.as_dict(args.imprints), sys.stdout, indent=1, allow_nan=False)
        sys.stdout.write("\n")
    else:
        print(report.format(args.imprints))
    return 0 if report.ok else 1  # imprint warnings leave the status alone


def _plot(args: argparse.Namespace) -> int:
    from whatif_bench.outputs import check_output_path, make_folder, safe_name
    from whatif_bench.relationships.plotting import plot_response

    out = check_output_path(args.out, folder=True)  # an existing file is refused up front
    registry = _load(args)
    chosen = (
        [registry.get(args.simulator, args.target)]
        if args.target
        else registry.relationships(args.simulator)
    )
    names = [safe_name(r.target, f"{r.simulator} target name") for r in chosen]
    make_folder(out)
    for relationship, name in zip(chosen, names, strict=True):
        print(f"wrote {plot_response(relationship, out / f'{name}.png')}")
    return 0


def _doc(args: argparse.Namespace) -> int:
    from whatif_bench.outputs import REFERENCE, check_file_output, write_text_atomic
    from whatif_bench.relationships.docs import render_reference
    from whatif_bench.relationships.registry import load_registry

    if args.out != "-":
        # refused up front: a folder, a path under a file, a file that is not a reference
        check_file_output(args.out, REFERENCE)
    text = render_reference(load_registry())
    if args.out == "-":
        sys.stdout.write(text)
    else:
        print(f"wrote {write_text_atomic(args.out, text, kind=REFERENCE)}")
    return 0
