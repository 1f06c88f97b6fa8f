"""``whatif llm {run,batch,batch-read,score}``: ask an LLM the tasks of an ``llm`` export and
score its answers (docs/EXPORT_LLM.md, "Running an LLM")."""

from __future__ import annotations

import argparse
import math
import sys

from whatif_bench.cli_lists import add_list_option
from whatif_bench.cli_types import MAX_WAIT_S, bounded_int, positive_int, seconds_float

DEFAULT_CONCURRENCY = 4
DEFAULT_MAX_ATTEMPTS = 10
DEFAULT_TIMEOUT_S = 600.0
DEFAULT_MAX_WAIT_S = 60.0  # llm_runner.DEFAULT_MAX_WAIT_S, without importing it for --help
MAX_CONCURRENCY = 256
MAX_ATTEMPTS = 1000


def wait_seconds(text: str) -> float:
    """``--max-wait``: seconds in [0, 86400]."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 <= value <= MAX_WAIT_S):
        raise argparse.ArgumentTypeError(
            f"must be a number of seconds in [0, {MAX_WAIT_S:,.0f}], got {text[:40]!r}"
        )
    return value


def temperature(text: str) -> float:
    """``--temperature``: a finite number in [0, 2] (the OpenAI range)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 <= value <= 2):
        raise argparse.ArgumentTypeError(f"must be a number in [0, 2], got {text[:40]!r}")
    return value


def _prompt_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--max-context",
        type=positive_int,
        metavar="N",
        help="keep only the last N history steps: the two past tables are cut to their last N "
        "rows and the prompt is rendered again for N past timestamps; recorded in the manifest "
        "(default: the whole history)",
    )
    parser.add_argument(
        "--temperature",
        type=temperature,
        help="sampling temperature sent with each request, in [0, 2] (default: not sent, the "
        "server's default)",
    )
    parser.add_argument(
        "--max-tokens",
        type=positive_int,
        metavar="N",
        help="max_tokens sent with each request (default: not sent, the server's default)",
    )
    parser.add_argument(
        "--limit",
        type=positive_int,
        metavar="N",
        help="only the first N tasks of the export (default: all)",
    )


def add_arguments(subparsers) -> None:
    parser = subparsers.add_parser(
        "llm", help="ask an LLM the tasks of an llm export, read batch results, score answers"
    )
    commands = parser.add_subparsers(dest="llm_command", required=True)

    run = commands.add_parser(
        "run", help="ask an OpenAI-compatible chat-completions endpoint every task"
    )
    run.add_argument("export", metavar="EXPORT_DIR", help="folder of whatif export --format llm")
    run.add_argument(
        "--base-url",
        required=True,
        help="API root of an OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1; "
        "requests go to BASE_URL/chat/completions (required)",
    )
    run.add_argument("--model", required=True, help="model name sent with each request (required)")
    run.add_argument(
        "--out",
        required=True,
        metavar="RESPONSES_DIR",
        help="folder for every response and the final answers; an earlier run's folder is "
        "resumed (required)",
    )
    run.add_argument(
        "--api-key-env",
        default="OPENAI_API_KEY",
        metavar="NAME",
        help="environment variable holding the API key, sent as a Bearer token; unset or "
        "empty: no Authorization header (default: %(default)s)",
    )
    run.add_argument(
        "--concurrency",
        type=bounded_int(MAX_CONCURRENCY, "requests at once"),
        default=DEFAULT_CONCURRENCY,
        help="requests in flight at once (threads) (default: %(default)s)",
    )
    run.add_argument(
        "--max-attempts",
        type=bounded_int(MAX_ATTEMPTS, "attempts per task"),
        default=DEFAULT_MAX_ATTEMPTS,
        help="attempts per task before it is imputed (the naive forecast); requests that got no "
        "response at all (refused, dropped) are not counted (default: %(default)s)",
    )
    run.add_argument(
        "--timeout",
        type=seconds_float,
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help="seconds one request may wait for the server (connect, and each read) "
        "(default: %(default)s)",
    )
    run.add_argument(
        "--max-wait",
        type=wait_seconds,
        default=DEFAULT_MAX_WAIT_S,
        metavar="SECONDS",
        help="cap of the growing wait between attempts (1, 2, 4, ... s); a server's "
        "Retry-After is honoured even if longer (default: %(default)s)",
    )
    run.add_argument(
        "--retry-imputed",
        action="store_true",
        help="on a resume, ask again the tasks an earlier run imputed (every attempt failed), "
        "each with a whole --max-attempts budget; an answer replaces the naive forecast "
        "(default: off: an imputed task is final)",
    )
    _prompt_options(run)
    run.set_defaults(handler=_run)

    batch = commands.add_parser(
        "batch", help="write the tasks as OpenAI Batch API requests (JSON Lines)"
    )
    batch.add_argument("export", metavar="EXPORT_DIR", help="folder of whatif export --format llm")
    batch.add_argument("--model", required=True, help="model name of each request (required)")
    batch.add_argument(
        "--out", required=True, metavar="REQUESTS_JSONL", help="file to write (required)"
    )
    _prompt_options(batch)
    batch.set_defaults(handler=_batch)

    read = commands.add_parser(
        "batch-read", help="read Batch API results into a responses folder, as run writes it"
    )
    read.add_argument("export", metavar="EXPORT_DIR", help="the export the requests came from")
    read.add_argument("results", metavar="RESULTS_JSONL", help="the batch's output file")
    read.add_argument(
        "--out", required=True, metavar="RESPONSES_DIR", help="responses folder (required)"
    )
    read.add_argument(
        "--model",
        help="model name to record (default: the model of the first response body)",
    )
    read.add_argument(
        "--max-context",
        type=positive_int,
        metavar="N",
        help="the --max-context the requests were written with, recorded in the manifest "
        "(default: none)",
    )
    read.set_defaults(handler=_batch_read)

    score = commands.add_parser(
        "score", help="score a responses folder on the corpus the export was made from"
    )
    score.add_argument("responses", metavar="RESPONSES_DIR", help="from llm run or batch-read")
    score.add_argument("--corpus", required=True, help="the corpus the export was made from")
    score.add_argument("--out", required=True, help="evaluation folder to write (required)")
    add_list_option(
        score,
        "--models",
        "--model",
        split_later=True,
        default=["naive"],
        metavar="MODEL",
        help="baselines scored next to the LLM on the same tasks (default: naive)",
    )
    score.add_argument(
        "--reference",
        default="naive",
        help="reference model of the skill score, among --models (default: %(default)s)",
    )
    score.set_defaults(handler=_score)


def _run(args: argparse.Namespace) -> int:
    from whatif_bench.evaluation.llm_runner import run

    args.interrupt_note = (
        f"the answers so far are kept in {args.out}; run the same command again to resume"
    )
    summary = run(
        args.export,
        args.out,
        args.base_url,
        args.model,
        api_key_env=args.api_key_env,
        concurrency=args.concurrency,
        max_attempts=args.max_attempts,
        timeout=args.timeout,
        max_context=args.max_context,
        temperature=args.temperature,
        max_tokens=args.max_tokens,
        limit=args.limit,
        max_wait=args.max_wait,
        progress=sys.stderr.isatty(),
        retry_imputed=args.retry_imputed,
    )
    print(summary.line())
    return 0


def _batch(args: argparse.Namespace) -> int:
    from whatif_bench.evaluation.llm_batch import write_requests

    args.interrupt_note = f"{args.out} is unchanged"
    count = write_requests(
        args.export,
        args.model,
        args.out,
        max_context=args.max_context,
        temperature=args.temperature,
        max_tokens=args.max_tokens,
        limit=args.limit,
    )
    print(f"wrote {count:,} requests to {args.out}")
    return 0


def _batch_read(args: argparse.Namespace) -> int:
    from whatif_bench.evaluation.llm_batch import read_results

    args.interrupt_note = f"the answers so far are kept in {args.out}"
    summary = read_results(
        args.export, args.results, args.out, model=args.model, max_context=args.max_context
    )
    print(summary.line("llm batch-read"))
    return 0


def _score(args: argparse.Namespace) -> int:
    from whatif_bench.corpus import Corpus, check_corpus_file
    from whatif_bench.evaluation.cli import load_model, parse_models
    from whatif_bench.evaluation.llm_answers import LLMAnswers
    from whatif_bench.evaluation.runner import check_out_folder, evaluate

    baselines = [load_model(spec) for spec in parse_models(args.models)]
    answers = LLMAnswers(args.responses)
    check_corpus_file(args.corpus)
    with Corpus(args.corpus) as corpus:
        ids = answers.task_ids_in(corpus)
    out = check_out_folder(args.out, args.corpus, create=False)
    args.interrupt_note = (
        f"finished chunks were kept in {out}/per_task; run the same command again to resume"
    )
    result = evaluate(
        args.corpus,
        [*baselines, answers],
        out,
        reference=args.reference,
        log=lambda message: print(f"note: {message}", file=sys.stderr),
        task_ids=ids,
    )
    board = result.leaderboard
    imputed = sum(1 for task_id in ids if answers.records.get(task_id, {}).get("imputed", False))
    print(f"{len(ids):,} tasks of the export; reference {result.reference}")
    for row in board.itertuples(index=False):
        extra = f"  imputed {imputed:,}" if row.model == answers.name else ""
        print(
            f"  {row.model:<24} skill {row.skill_score:+.4f}  tasks {row.num_tasks:,}  "
            f"failed {row.num_failed:,}{extra}"
        )
    print(f"wrote {result.out}/leaderboard.md, per_task.parquet")
    failing = result.failure_summary()
    for line in failing:
        print(f"warning: {line}", file=sys.stderr)
    return 1 if failing else 0
