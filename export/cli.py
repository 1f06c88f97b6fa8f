"""``whatif export``: selected corpus tasks as Parquet (Hugging Face), fev, LLM prompts, GluonTS."""

from __future__ import annotations

from whatif_bench.cli_lists import add_list_option
from whatif_bench.cli_types import seed_int
from whatif_bench.export.formats import MODULES


def add_arguments(subparsers) -> None:
    from whatif_bench.cli_types import fraction
    from whatif_bench.corpus.axes import future_choices

    parser = subparsers.add_parser(
        "export",
        help="export corpus tasks as Parquet (Hugging Face), fev, LLM prompts or GluonTS JSON Lines",
    )
    parser.add_argument("corpus", help="corpus file (from whatif generate)")
    parser.add_argument(
        "--format", required=True, choices=list(MODULES), help="output format (required)"
    )
    parser.add_argument(
        "--out",
        required=True,
        help="folder to write; finished only once it holds manifest.json (required)",
    )
    parser.add_argument(
        "--subset",
        type=fraction,
        help=(
            "stratified fraction of the tasks, in (0, 1]: each combination of simulator, future, "
            "K, C, ell and E keeps ceil(fraction x its tasks), so at least one each and a larger "
            "share than asked for small fractions (default: all tasks)"
        ),
    )
    parser.add_argument(
        "--seed", type=seed_int, default=0, help="seed of the --subset draw (default: 0)"
    )
    add_list_option(
        parser,
        "--simulators",
        "--simulator",
        metavar="SIM",
        help="only these simulators (default: all)",
    )
    add_list_option(
        parser,
        "--futures",
        "--future",
        allowed=list(future_choices()),
        metavar="FUTURE",
        help="only these future types (default: all the corpus holds; restraint only in a "
        "corpus generated with --futures replay novel restraint)",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an existing export at --out, once the new one is complete (default: off)",
    )
    parser.add_argument(
        "--per-task",
        action="store_true",
        help="fev only: also write one fev Task per task, whose fev scores equal whatif "
        "evaluate's (fev pools a Task's series otherwise; default: off)",
    )
    parser.set_defaults(handler=_export)


def _export(args) -> int:
    import sys

    from whatif_bench.export.api import export_corpus

    args.interrupt_note = f"no export was written; {args.out} is unchanged"
    out = export_corpus(
        args.corpus,
        args.format,
        args.out,
        subset=args.subset,
        seed=args.seed,
        simulators=args.simulators,
        futures=args.futures,
        overwrite=args.overwrite,
        progress=sys.stderr.isatty(),
        per_task=args.per_task,
    )
    print(f"wrote {out}")
    return 0
