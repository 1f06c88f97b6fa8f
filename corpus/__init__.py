"""The corpus: the contract between whoever writes tasks and whoever reads them.

Everything a task is, and how a corpus file holds it, is defined here once: the file format
(``fileformat``), the five axes (``axes``), a pair's recipe and its random stream, the reader
(``Corpus``), ``Task`` and the model's view of it (``TaskInput``), task descriptions, the
summary of ``whatif info``, the stratified task selection, the covariates' units, the nine
quantile levels, and the task columns the Parquet, fev and shard writers share. The generator
writes corpora; evaluation, export and the stream read them; all of them import from here by
the names below (``axes``, ``columns``, ``fileformat`` and ``random_twin``, the numba twin of a
pair's random stream, are public modules)::

    from whatif_bench.corpus import Corpus
    corpus = Corpus("whatif-corpus.h5").filter(simulator="sumo", future="novel", K=3)
    task = corpus["sumo/flow_loop_e_0_near/K3-C2-L128-Emax/novel"]
"""

from typing import TYPE_CHECKING

from whatif_bench._lazy import lazy_exports

if TYPE_CHECKING:
    from whatif_bench.corpus import axes, columns, fileformat, random_twin
    from whatif_bench.corpus.describe import (
        baseline_future,
        describe_task,
        export_describer,
        scenario_text,
    )
    from whatif_bench.corpus.levels import QUANTILE_LEVELS
    from whatif_bench.corpus.provenance import corpus_registry, recorded_source, registry_hash
    from whatif_bench.corpus.reader import Corpus, CorpusError, check_corpus_file, recipe_record
    from whatif_bench.corpus.recipe import PairKey, Recipe, draw_recipe, draw_recipe_from
    from whatif_bench.corpus.seeds import pair_entropy, pair_rng
    from whatif_bench.corpus.selection import check_subset, select_tasks
    from whatif_bench.corpus.summary import file_headline, format_summary, summarise
    from whatif_bench.corpus.task import (
        Task,
        TaskInput,
        frequency_alias,
        start_text,
        utc_naive,
        window_start_time,
    )
    from whatif_bench.corpus.units import covariate_units, task_units

# Imported on first use (see whatif_bench._lazy): the command line reads the packages that
# import this one without loading numpy, h5py or pandas.
_EXPORTS = {
    "axes": "whatif_bench.corpus.axes",
    "columns": "whatif_bench.corpus.columns",
    "fileformat": "whatif_bench.corpus.fileformat",
    "random_twin": "whatif_bench.corpus.random_twin",
    "baseline_future": "whatif_bench.corpus.describe",
    "describe_task": "whatif_bench.corpus.describe",
    "export_describer": "whatif_bench.corpus.describe",
    "scenario_text": "whatif_bench.corpus.describe",
    "QUANTILE_LEVELS": "whatif_bench.corpus.levels",
    "corpus_registry": "whatif_bench.corpus.provenance",
    "recorded_source": "whatif_bench.corpus.provenance",
    "registry_hash": "whatif_bench.corpus.provenance",
    "Corpus": "whatif_bench.corpus.reader",
    "CorpusError": "whatif_bench.corpus.reader",
    "check_corpus_file": "whatif_bench.corpus.reader",
    "recipe_record": "whatif_bench.corpus.reader",
    "PairKey": "whatif_bench.corpus.recipe",
    "Recipe": "whatif_bench.corpus.recipe",
    "draw_recipe": "whatif_bench.corpus.recipe",
    "draw_recipe_from": "whatif_bench.corpus.recipe",
    "pair_entropy": "whatif_bench.corpus.seeds",
    "pair_rng": "whatif_bench.corpus.seeds",
    "check_subset": "whatif_bench.corpus.selection",
    "select_tasks": "whatif_bench.corpus.selection",
    "file_headline": "whatif_bench.corpus.summary",
    "format_summary": "whatif_bench.corpus.summary",
    "summarise": "whatif_bench.corpus.summary",
    "Task": "whatif_bench.corpus.task",
    "TaskInput": "whatif_bench.corpus.task",
    "frequency_alias": "whatif_bench.corpus.task",
    "start_text": "whatif_bench.corpus.task",
    "utc_naive": "whatif_bench.corpus.task",
    "window_start_time": "whatif_bench.corpus.task",
    "covariate_units": "whatif_bench.corpus.units",
    "task_units": "whatif_bench.corpus.units",
}
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)

# ``axes``, ``columns``, ``fileformat`` and ``random_twin`` are public modules: imported by name
# (``from whatif_bench.corpus import axes``), or their public names from them (``from
# whatif_bench.corpus.axes import X``).

__all__ = [
    "axes",
    "columns",
    "fileformat",
    "random_twin",
    "baseline_future",
    "check_corpus_file",
    "check_subset",
    "Corpus",
    "corpus_registry",
    "CorpusError",
    "covariate_units",
    "task_units",
    "describe_task",
    "draw_recipe",
    "draw_recipe_from",
    "export_describer",
    "file_headline",
    "format_summary",
    "frequency_alias",
    "pair_entropy",
    "pair_rng",
    "PairKey",
    "QUANTILE_LEVELS",
    "Recipe",
    "recipe_record",
    "recorded_source",
    "registry_hash",
    "scenario_text",
    "select_tasks",
    "start_text",
    "summarise",
    "Task",
    "TaskInput",
    "utc_naive",
    "window_start_time",
]
