"""``whatif evaluate``: score forecasters on a corpus and write the reports."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
from pathlib import Path

from whatif_bench.errors import WhatIfError


def add_arguments(subparsers) -> None:
    parser = subparsers.add_parser("evaluate", help="score forecasters on a corpus")
    parser.add_argument("corpus")
    parser.add_argument(
        "--models",
        default="naive,linear,ridge,xgboost",
        help="comma-separated baselines, or FILE.py:Class / module:Class for your own",
    )
    parser.add_argument("--out", required=True, help="folder for per-task errors, tables and plots")
    parser.add_argument("--subset", type=float, help="stratified fraction of the tasks (e.g. 0.05)")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    parser.add_argument("--reference", default="naive", help="reference model of the skill score")
    parser.add_argument("--seed", type=int, default=0, help="seed of the --subset draw")
    parser.set_defaults(handler=_evaluate)


def load_model(spec: str):
    """A baseline name, or ``path/to/file.py:Class`` / ``package.module:Class`` (instantiated)."""
    if ":" not in spec:
        return spec
    where, _, name = spec.rpartition(":")
    if where.endswith(".py"):
        path = Path(where)
        if not path.is_file():
            raise WhatIfError(f"model file {where} not found")
        module_spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(where)
    try:
        return getattr(module, name)()
    except AttributeError:
        raise WhatIfError(f"{where} has no class {name!r}") from None


def _evaluate(args: argparse.Namespace) -> int:
    from whatif_bench.evaluation.runner import evaluate

    models = [load_model(m.strip()) for m in args.models.split(",") if m.strip()]
    if not models:
        raise WhatIfError("--models is empty")
    result = evaluate(
        args.corpus,
        models,
        args.out,
        subset=args.subset,
        jobs=args.jobs,
        reference=args.reference,
        seed=args.seed,
    )
    board = result.leaderboard
    print(f"{len(result.per_task['task_id'].unique()):,} tasks; reference {result.reference}")
    for row in board.itertuples(index=False):
        print(f"  {row.model:<14} skill {row.skill_score:+.4f}  win rate {row.win_rate:.4f}")
    print(f"wrote {result.out}/leaderboard.md, slices/, plots/, per_task.parquet")
    return 0
