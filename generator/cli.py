"""``whatif generate``, ``whatif info``, ``whatif verify`` and ``whatif show``."""

from __future__ import annotations

import argparse
import json
import sys

from whatif_bench.cli_cluster import add_cluster_arguments, cluster_from_args, jobs_help_text
from whatif_bench.cli_lists import add_list_option
from whatif_bench.cli_types import jobs_int, seed_int
from whatif_bench.errors import WhatIfError


def add_arguments(subparsers) -> None:
    generate = subparsers.add_parser("generate", help="regenerate the task corpus")
    generate.add_argument(
        "--baselines",
        help="baselines file: a store (.h5) or a CSV/Parquet table (docs/BASELINES_FORMAT.md) "
        "(default: the shipped one)",
    )
    generate.add_argument(
        "--out",
        default="whatif-corpus.h5",
        help="corpus file to write; an existing corpus there is replaced only once the new one "
        "is complete (default: whatif-corpus.h5)",
    )
    add_list_option(
        generate,
        "--simulators",
        "--simulator",
        metavar="SIM",
        help="only these simulators (default: all with baselines)",
    )
    add_list_option(
        generate,
        "--targets",
        "--target",
        metavar="TARGET",
        help="targets as NAME or SIMULATOR/NAME (default: all with baselines)",
    )
    generate.add_argument(
        "--seed", type=seed_int, default=0, help="master seed, 0 to 2**63 - 1 (default: 0)"
    )
    add_list_option(
        generate,
        "--spec",
        "--specs",
        files=True,
        metavar="FILE",
        help="user spec files loaded after the shipped ones: each adds targets, or replaces those "
        "it marks overrides = true; their text is recorded in the corpus (default: none)",
    )
    add_list_option(
        generate,
        "--futures",
        default=["replay", "novel"],
        metavar="FUTURE",
        help="future types of every history: replay and novel (always), and optionally "
        "restraint (no covariate moves; truth: the counterfactual; nothing stored, not checked "
        "by the 10 %% rule) (default: replay novel, the benchmark)",
    )
    add_forms_argument(generate, "its hash is recorded in the corpus")
    add_cluster_arguments(
        generate,
        jobs_help="worker threads of this process (targets side by side, and the compression)",
    )
    generate.set_defaults(handler=_generate)

    info = subparsers.add_parser("info", help="counts by simulator, future and axis; pass rate")
    info.add_argument("file", help="corpus file")
    info.add_argument(
        "--json", action="store_true", help="machine-readable output (default: a table)"
    )
    info.set_defaults(handler=_info)

    verify = subparsers.add_parser("verify", help="rebuild every task from its recipe and compare")
    verify.add_argument("file", help="corpus file")
    verify.add_argument(
        "--baselines",
        help="baselines file to compare the embedded series with (default: the shipped one)",
    )
    verify.add_argument(
        "--reference",
        action="store_true",
        help="rebuild each pair with the method's one-at-a-time functions instead of the "
        "generator's kernels (the same pairs to the bit, several times slower; default: off)",
    )
    verify.add_argument(
        "--jobs",
        type=jobs_int,
        help=jobs_help_text(
            # checking.MIN_PAIRS_PER_PROCESS (not imported: the parser stays light)
            "worker processes, each checking whole targets (at most one per 2,000 pairs; the "
            "report is the same whatever the number)"
        ),
    )
    add_forms_argument(verify, "needed for a corpus built with --forms; must be unchanged")
    verify.set_defaults(handler=_verify)

    show = subparsers.add_parser("show", help="print one task (and plot it)")
    show.add_argument("task_id", help="task id, e.g. sumo/flow_loop_e_0_near/K3-C2-L128-Emax/novel")
    show.add_argument("--corpus", required=True, help="corpus file (required)")
    show.add_argument(
        "--plot",
        metavar="PNG",
        help="draw history, both futures and covariates to this PNG file; a folder (existing, "
        "or written with a trailing /) gets <task id with / as _>.png (default: no plot)",
    )
    described = show.add_mutually_exclusive_group()
    described.add_argument(
        "--describe",
        action="store_const",
        const="json",
        help="print the task's structured description (JSON, with the exact per-covariate "
        "attribution; docs/CORPUS_FORMAT.md, 'Task descriptions') instead of the summary "
        "(default: off)",
    )
    described.add_argument(
        "--scenario",
        dest="describe",
        action="store_const",
        const="text",
        help="print the future event as a sentence in the covariates' units instead of the "
        "summary (default: off)",
    )
    add_forms_argument(show, "needed for a corpus built with --forms; must be unchanged")
    show.set_defaults(handler=_show)


def add_forms_argument(parser: argparse.ArgumentParser, note: str) -> None:
    """``--forms PY ...``, as ``whatif relationships check`` takes it."""
    add_list_option(
        parser,
        "--forms",
        files=True,
        metavar="PY",
        help=f"Python files that register user forms (executed; {note}) (default: none)",
    )


def _generate(args: argparse.Namespace) -> int:
    import time

    from whatif_bench.generator.sweep import GenerationConfig, generate
    from whatif_bench.outputs import refuse_empty
    from whatif_bench.simulators.store import shipped_baselines_path

    args.interrupt_note = f"no corpus was written; {args.out} is unchanged"
    config = GenerationConfig(
        baselines=str(
            shipped_baselines_path()
            if args.baselines is None
            else refuse_empty(args.baselines, "--baselines")
        ),
        out=args.out,
        seed=args.seed,
        simulators=tuple(args.simulators),
        targets=tuple(args.targets),
        jobs=args.jobs,
        specs=tuple(args.spec),
        forms=tuple(args.forms),
        futures=tuple(args.futures),
    )
    started = time.perf_counter()
    path = generate(config, progress=True, cluster=cluster_from_args(args))
    from whatif_bench.corpus import file_headline

    print(file_headline(path))
    print(f"wrote {path} in {time.perf_counter() - started:.1f} s")
    return 0


def _info(args: argparse.Namespace) -> int:
    from whatif_bench.corpus import Corpus, format_summary, summarise

    with Corpus(args.file) as corpus:
        summary = summarise(corpus)
    if args.json:
        json.dump(summary, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(format_summary(summary))
    return 0


def _verify(args: argparse.Namespace) -> int:
    from whatif_bench.generator.checking import verify_corpus
    from whatif_bench.outputs import refuse_empty

    if args.baselines is not None:  # "" is not "the shipped one"
        refuse_empty(args.baselines, "--baselines")
    report = verify_corpus(
        args.file,
        baselines_path=args.baselines,
        forms=args.forms,
        reference=args.reference,
        jobs=args.jobs,
    )
    for warning in report.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    for problem in report.problems:
        print(problem)
    verdict = (
        "every pair rebuilt bit for bit, every attribute as recorded"
        if report.ok
        else f"{len(report.problems)} problem(s)"
    )
    print(f"verified {report.checked:,} pairs: {verdict}")
    return 0 if report.ok else 1


def _show(args: argparse.Namespace) -> int:
    import numpy as np

    from whatif_bench.corpus import Corpus, corpus_registry
    from whatif_bench.outputs import refuse_empty

    if args.plot is not None:  # "" would quietly draw nothing
        refuse_empty(args.plot, "--plot")
    with Corpus(args.corpus) as corpus:
        registry, _ = corpus_registry(corpus, args.forms)  # refuses a changed forms module
        try:
            task = corpus[args.task_id]
        except KeyError as exc:
            raise WhatIfError(str(exc.args[0])) from None
        if args.describe:
            return _describe(args, corpus, registry, task)
        recipe = task.recipe
        relationship = registry.get(task.simulator, task.target)
        # the units every export writes (corpus.task_units), from the corpus's own registry
        units = {info.name: info.unit for info in relationship.covariates}
        target_unit = task.units.get(task.target) or ""

        def with_unit(value: float, unit: str) -> str:
            return f"{value:.6g} {unit}".rstrip()

        print(f"{task.task_id}")
        print(
            f"  context {task.context_length} steps, prediction {task.prediction_length} steps "
            f"of {task.interval_s} s; window starts at baseline step {task.start_step} "
            f"({task.start.isoformat()})"
        )
        print(
            f"  covariates (K={task.k}): "
            + ", ".join(
                f"{c} ({shape}, base {with_unit(base, units.get(c, ''))})"
                for c, shape, base in zip(
                    task.covariates, recipe["shapes"], recipe["base_values"], strict=True
                )
            )
        )
        print(
            f"  {len(recipe['event_starts'])} history events of {recipe['event_length']} steps "
            f"at {recipe['event_starts']}"
        )
        for start, direction, factors in zip(
            recipe["event_starts"], recipe["directions"], recipe["factors"], strict=True
        ):
            print(
                f"    step {start:>5} {'up  ' if direction > 0 else 'down'} "
                f"factors {np.round(factors, 4).tolist()}"
            )
        print(
            f"  future ({task.future}) factors {np.round(recipe['future_factors'], 4).tolist()}"
            + (f" (copied from event {recipe['replay_source']})" if task.future == "replay" else "")
        )
        print(
            f"  target {task.target} [{target_unit or 'unit unknown'}]: history mean "
            f"{with_unit(task.history_target.mean(), target_unit)}; future mean "
            f"{with_unit(task.future_target.mean(), target_unit)} vs counterfactual "
            f"{with_unit(task.counterfactual_future.mean(), target_unit)}"
        )
        if args.plot:
            from whatif_bench.generator.plotting import plot_task

            other = "novel" if task.future == "replay" else "replay"
            pair_id = task.task_id.rsplit("/", 1)[0]
            path = plot_path(args.plot, task.task_id)
            # the pair's picture: Replay and Novel, and the counterfactual (Restraint's truth)
            shown = task if task.future != "restraint" else corpus[f"{pair_id}/replay"]
            written = plot_task(shown, corpus[f"{pair_id}/{other}"], path, [args.corpus], units)
            print(f"wrote {written}")
    return 0


def _describe(args: argparse.Namespace, corpus, registry, task) -> int:
    """``whatif show --describe``: the description (JSON) or the scenario text on stdout; a
    ``--plot`` is still drawn, its "wrote" line going to stderr."""
    from whatif_bench.corpus import baseline_future, describe_task, scenario_text

    relationship = registry.get(task.simulator, task.target)
    if args.describe == "text":
        print(scenario_text(task, relationship))
    else:
        description = describe_task(task, relationship, baseline_future(corpus, task))
        json.dump(description, sys.stdout, indent=1, allow_nan=False)
        sys.stdout.write("\n")
    if args.plot:
        from whatif_bench.generator.plotting import plot_task

        other = "novel" if task.future == "replay" else "replay"
        pair_id = task.task_id.rsplit("/", 1)[0]
        units = {info.name: info.unit for info in relationship.covariates}
        written = plot_task(
            task,
            corpus[f"{pair_id}/{other}"],
            plot_path(args.plot, task.task_id),
            [args.corpus],
            units,
        )
        print(f"wrote {written}", file=sys.stderr)
    return 0


def plot_path(plot: str, task_id: str) -> str:
    """The PNG ``--plot`` names: the path itself, or ``<task id, / as _>.png`` in a folder."""
    import os

    from whatif_bench.outputs import OutputError, safe_name

    if plot == "":
        raise OutputError("--plot: the output path is empty")
    if os.path.isdir(plot) or plot.endswith(os.sep):
        return os.path.join(plot, safe_name(task_id.replace("/", "_") + ".png", "task id"))
    return plot
