"""Scoring forecasters on a corpus: metrics, aggregates, baseline forecasters, reports.

from whatif_bench.evaluation import evaluate
result = evaluate("whatif-corpus.h5", ["naive", "ridge", MyModel()], "results/")
print(result.leaderboard)
"""

from whatif_bench.evaluation.aggregate import leaderboard, skill_scores, win_rates
from whatif_bench.evaluation.forecasters import (
    BASELINES,
    Forecast,
    Forecaster,
    TaskInput,
    make_forecaster,
)
from whatif_bench.evaluation.metrics import QUANTILE_LEVELS, wape, wql
from whatif_bench.evaluation.runner import EvaluationResult, evaluate

__all__ = [
    "BASELINES",
    "QUANTILE_LEVELS",
    "EvaluationResult",
    "Forecast",
    "Forecaster",
    "TaskInput",
    "evaluate",
    "leaderboard",
    "make_forecaster",
    "skill_scores",
    "wape",
    "win_rates",
    "wql",
]
