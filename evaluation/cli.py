"""``whatif evaluate``: score forecasters on a corpus and write the reports."""

from __future__ import annotations

import argparse
import math
import sys

from whatif_bench.cli_cluster import add_cluster_arguments, cluster_from_args, jobs_of
from whatif_bench.cli_lists import add_list_option
from whatif_bench.cli_types import MAX_WAIT_S, bounded_int, fraction, seed_int

# The baselines' names, for --help without importing numpy; tests/test_forecasters.py checks
# them against forecasters.BASELINES, which --models is validated against.
BASELINE_NAMES = (
    "naive",
    "linear",
    "ridge",
    "xgboost",
    "tuned-linear",
    "tuned-ridge",
    "tuned-xgboost",
)
# The foundation-model adapters' names (evaluation/foundation ADAPTERS, checked against it by
# tests/test_forecasters.py) and the LLM answers' prefix, for --help without importing them.
ADAPTER_NAMES = ("chronos2", "timesfm", "tabpfn-ts")
LLM_PREFIX = "llm"


def add_arguments(subparsers) -> None:
    parser = subparsers.add_parser("evaluate", help="score forecasters on a corpus")
    parser.add_argument("corpus", help="corpus file (from whatif generate)")
    add_list_option(
        parser,
        "--models",
        "--model",
        split_later=True,
        default=["naive", "linear", "ridge", "xgboost"],
        metavar="MODEL",
        help=f"baselines ({', '.join(BASELINE_NAMES)}; docs/METHOD.md, "
        f"section 9); foundation models {', '.join(f'{n}[:MODEL]' for n in ADAPTER_NAMES)} "
        "(MODEL: a Hugging Face id or a local folder, default the adapter's own; each needs "
        f"its extra, docs/MODELS.md); {LLM_PREFIX}:RESPONSES_DIR for an LLM's answers from "
        "whatif llm run; or FILE.py:Class / module:Class for your own "
        "(default: naive linear ridge xgboost)",
    )
    parser.add_argument(
        "--device",
        type=device_name,
        default="cpu",
        help="device of the foundation models: cpu, cuda, cuda:N or mps (default: %(default)s)",
    )
    parser.add_argument(
        "--model-batch-size",
        type=bounded_int(65536),
        default=64,
        metavar="N",
        help="tasks per call of a foundation model (default: %(default)s)",
    )
    parser.add_argument(
        "--out", required=True, help="folder for per-task errors, tables and plots (required)"
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
    add_cluster_arguments(parser, jobs_help="worker processes scoring chunks of tasks")
    parser.add_argument(
        "--reference",
        default="naive",
        help="reference model of the skill score (default: %(default)s)",
    )
    parser.add_argument(
        "--seed", type=seed_int, default=0, help="seed of the --subset draw (default: %(default)s)"
    )
    parser.add_argument(
        "--relational",
        action="store_true",
        help=(
            "also score every history on the relational scores (direction, intensity, contrast, "
            "restraint; docs/RELATIONAL.md): each model forecasts its Replay, Novel and "
            "Restraint (no covariate moves) futures; writes relational.parquet"
        ),
    )
    parser.add_argument(
        "--model-timeout",
        type=model_timeout,
        default=DEFAULT_MODEL_TIMEOUT_S,
        metavar="SECONDS",
        help=(
            "time limit of one predict call (a batch of up to 256 tasks) of a model of yours "
            "(FILE.py:Class, module:Class), which runs in a child process: after it, that "
            "model's remaining tasks fail and the others finish; 0 or none: no limit, and the "
            "model runs in the worker process itself; also the limit of importing its module, "
            "which is first done in a child process (default: %(default)s)"
        ),
    )
    parser.set_defaults(handler=_evaluate)


def device_name(text: str) -> str:
    """``--device``: ``cpu``, ``cuda``, ``cuda:N`` or ``mps`` (the foundation models' devices,
    as ``evaluation.foundation.common.DEVICES``)."""
    kind, colon, number = text.partition(":")
    if kind in ("cpu", "mps") and not colon:
        return text
    if kind == "cuda" and (not colon or number.isdigit()):
        return text
    raise argparse.ArgumentTypeError(f"must be cpu, cuda, cuda:N or mps, got {text[:40]!r}")


# runner.DEFAULT_MODEL_TIMEOUT_S, without importing the runner (numpy, pandas) for --help;
# tests/test_model_isolation.py checks they agree
DEFAULT_MODEL_TIMEOUT_S = 600.0


def model_timeout(text: str) -> float | None:
    """``--model-timeout``: seconds > 0, or ``0`` / ``none`` for no limit (None)."""
    if text.strip().lower() == "none":
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if value == 0:
        return None
    if not (math.isfinite(value) and 0 < value <= MAX_WAIT_S):  # also refuses nan and inf
        raise argparse.ArgumentTypeError(
            f"must be a number of seconds > 0 and at most {MAX_WAIT_S:,.0f} (one day), or 0 or "
            f"none for no limit, got {text[:40]!r}"
        )
    return value


def load_model(
    spec: str,
    timeout: float | None = DEFAULT_MODEL_TIMEOUT_S,
    device: str = "cpu",
    batch_size: int = 64,
):
    """A baseline name; a foundation model ``chronos2[:MODEL]`` (any ``ADAPTER_NAMES``, built
    by ``evaluation.foundation.foundation_model`` on ``device`` with ``batch_size``; nothing is
    loaded before it predicts); ``llm:RESPONSES_DIR`` (the answers of ``whatif llm run``); or
    ``path/to/file.py:Class`` / ``package.module:Class`` (instantiated). The part before the
    first ``:`` is read as an adapter name or ``llm`` first, so a module of yours named like
    one is given as ``./chronos2.py:Class`` or ``package.chronos2:Class``.

    Any failure (unknown name, missing file, a FIFO or a symbolic link loop, import error,
    missing class, a constructor that raises) is one ``ModelError`` naming ``spec``; the module
    is loaded by ``whatif_bench.usercode``, as form modules are, with the same errors. It is
    executed in a forked child process first (``checked``), so a module that ends or crashes
    the process at import, or takes more than ``timeout`` seconds (None: no limit), is such an
    error too, not the end of the command."""
    from whatif_bench.evaluation.forecasters import BASELINES, ModelError
    from whatif_bench.usercode import describe_exception, load_attribute

    prefix, colon, argument = spec.partition(":")
    if prefix in ADAPTER_NAMES:
        if colon and not argument:
            raise ModelError(f"model {spec!r}: give {prefix}:MODEL or just {prefix}")
        from whatif_bench.evaluation.foundation import foundation_model

        return foundation_model(
            prefix, argument or None, device=device, batch_size=batch_size, name=prefix
        )
    if prefix == LLM_PREFIX and colon:
        if not argument:
            raise ModelError(f"model {spec!r}: give {LLM_PREFIX}:RESPONSES_DIR")
        from whatif_bench.evaluation.llm_answers import from_spec

        return from_spec(argument)
    if not colon:
        if spec not in BASELINES:
            raise ModelError(
                f"unknown model {spec!r}; baselines: {list(BASELINES)}; foundation models: "
                f"{', '.join(f'{n}[:MODEL]' for n in ADAPTER_NAMES)}; "
                f"{LLM_PREFIX}:RESPONSES_DIR; or give FILE.py:Class or module:Class"
            )
        return spec
    where, _, name = spec.rpartition(":")
    if not where or not name:
        raise ModelError(f"model {spec!r}: expected FILE.py:Class or module:Class")
    label = f"model {spec!r}"
    factory = load_attribute(where, name, label, ModelError, "class", checked=True, timeout=timeout)
    try:
        return factory()
    except Exception as exc:
        raise ModelError(
            f"model {spec!r}: creating {name}() raised {describe_exception(exc)}"
        ) from None


def parse_models(given: str | list[str]) -> list[str]:
    """The model specs of ``--models`` (its values, each possibly comma-separated); empty items
    and repeats are errors."""
    from whatif_bench.evaluation.forecasters import ModelError

    text = given if isinstance(given, str) else ",".join(given)
    specs = [item.strip() for item in text.split(",")]
    if not any(specs):
        raise ModelError("--models is empty; give baseline names or FILE.py:Class")
    if "" in specs:
        raise ModelError(f"--models {text!r} has an empty item (a stray comma?)")
    repeated = sorted({s for s in specs if specs.count(s) > 1})
    if repeated:
        raise ModelError(f"--models lists {', '.join(repeated)} more than once")
    return specs


def _number(value: float, spec: str) -> str:
    """A score, or n/a for a model without one (it failed on every task)."""
    return format(value, spec) if math.isfinite(value) else "n/a".rjust(len(format(0.0, spec)))


def _note(message: str) -> None:
    print(f"note: {message}", file=sys.stderr)


def _evaluate(args: argparse.Namespace) -> int:
    from whatif_bench.corpus import check_corpus_file
    from whatif_bench.evaluation.runner import check_out_folder, evaluate

    specs = parse_models(args.models)
    check_corpus_file(args.corpus)  # the cause: missing, a folder, a FIFO, a loop, empty
    # checked before importing models or reading tasks; created once the workers are ready
    out = check_out_folder(args.out, args.corpus, create=False)
    models = [
        load_model(spec, args.model_timeout, args.device, args.model_batch_size) for spec in specs
    ]
    args.interrupt_note = (
        f"finished chunks were kept in {out}/per_task; run the same command again to resume"
    )
    result = evaluate(
        args.corpus,
        models,
        out,
        subset=args.subset,
        jobs=jobs_of(args),
        reference=args.reference,
        seed=args.seed,
        log=_note,
        cluster=cluster_from_args(args),
        relational=args.relational,
        model_timeout=args.model_timeout,
    )
    board = result.leaderboard
    print(f"{len(result.per_task['task_id'].unique()):,} tasks; reference {result.reference}")
    for row in board.itertuples(index=False):
        print(
            f"  {row.model:<14} skill {_number(row.skill_score, '+.4f')}  win rate "
            f"{_number(row.win_rate, '.4f')}  tasks {row.num_tasks:,}  failed {row.num_failed:,}"
            f"  imputed {row.num_imputed:,}  s/task {_number(row.seconds_per_task, '.3g')}"
        )
    if result.relational is not None:
        histories = result.relational["pair_id"].nunique()
        print(f"relational scores over {histories:,} histories")
        for row in board.itertuples(index=False):
            print(
                f"  {row.model:<14} direction {_number(row.direction, '.4f')}  intensity "
                f"{_number(row.intensity, '+.4f')}  contrast {_number(row.contrast, '.4f')}  "
                f"restraint {_number(row.restraint, '.4f')}  histories {row.num_histories:,}"
            )
    written = ", relational.parquet" if result.relational is not None else ""
    print(f"wrote {result.out}/leaderboard.md, slices/, plots/, per_task.parquet{written}")
    for line in result.imputed_summary():  # scored as the model's forecasts: not failures
        _note(line)
    failing = result.failure_summary()
    for line in failing:
        print(f"warning: {line}", file=sys.stderr)
    if failing:
        print(
            f"error: {len(failing)} model(s) failed on some tasks (reasons in the failed column "
            f"of {result.out}/per_task.parquet); the reports score them on the other tasks",
            file=sys.stderr,
        )
        return 1
    return 0
