"""Scoring forecasters on a corpus: metrics, aggregates, baseline forecasters, reports.

from whatif_bench.evaluation import evaluate
result = evaluate("whatif-corpus.h5", ["naive", "ridge", MyModel()], "results/")
print(result.leaderboard)
"""

from typing import TYPE_CHECKING

from whatif_bench._lazy import lazy_exports

if TYPE_CHECKING:
    from whatif_bench.evaluation.aggregate import leaderboard, skill_scores, win_rates
    from whatif_bench.evaluation.forecasters import (
        BASELINES,
        Forecast,
        Forecaster,
        NoForecast,
        TaskInput,
        make_forecaster,
    )
    from whatif_bench.evaluation.metrics import QUANTILE_LEVELS, wape, wql
    from whatif_bench.evaluation.runner import EvaluationResult, evaluate

# Imported on first use (see whatif_bench._lazy): the command line reads this package's
# argument parsing without loading numpy, numba, h5py or pandas.
_EXPORTS = {
    "leaderboard": "whatif_bench.evaluation.aggregate",
    "skill_scores": "whatif_bench.evaluation.aggregate",
    "win_rates": "whatif_bench.evaluation.aggregate",
    "BASELINES": "whatif_bench.evaluation.forecasters",
    "Forecast": "whatif_bench.evaluation.forecasters",
    "Forecaster": "whatif_bench.evaluation.forecasters",
    "NoForecast": "whatif_bench.evaluation.forecasters",
    "TaskInput": "whatif_bench.evaluation.forecasters",
    "make_forecaster": "whatif_bench.evaluation.forecasters",
    "QUANTILE_LEVELS": "whatif_bench.evaluation.metrics",
    "wape": "whatif_bench.evaluation.metrics",
    "wql": "whatif_bench.evaluation.metrics",
    "EvaluationResult": "whatif_bench.evaluation.runner",
    "evaluate": "whatif_bench.evaluation.runner",
}
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)

__all__ = [
    "BASELINES",
    "QUANTILE_LEVELS",
    "EvaluationResult",
    "Forecast",
    "Forecaster",
    "NoForecast",
    "TaskInput",
    "evaluate",
    "leaderboard",
    "make_forecaster",
    "skill_scores",
    "wape",
    "win_rates",
    "wql",
]
