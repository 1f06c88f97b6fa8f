"""One scoring pass over a corpus, chunk by chunk: what its units are, how a chunk is read and
scored and how its rows are stored (``ScoringPass``); the pass over the tasks (``TASKS``).

An evaluation runs two instances of ``ScoringPass``: ``TASKS`` (here: wql and wape of every
selected task, ``per_task.parquet``) and ``relational.RELATIONAL`` (the relational scores of
every history with a selected task, ``relational.parquet``). Both score a chunk the same way
(``ScoringPass.score``): each model forecasts the chunk's inputs in one batch
(``model_calls.model_forecasts``) and the pass turns the forecasts into one row per unit, with
``failed`` empty when scored, else the reason (``forecast_checks``) and NaN scores.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from whatif_bench.corpus import fileformat
from whatif_bench.evaluation.chunk_store import ChunkLayout
from whatif_bench.evaluation.corpus_ref import CorpusRef, CovariateUnits
from whatif_bench.evaluation.forecast_checks import (
    Predicted,
    forecast_extras,
    one_line,
    score_forecast,
)
from whatif_bench.evaluation.forecasters import Forecaster, TaskInput
from whatif_bench.evaluation.model_calls import ModelCalls, model_forecasts, model_label

if TYPE_CHECKING:
    from whatif_bench.corpus import Corpus

# reads a chunk's units (their ids) from a corpus: the inputs the models see, in the order they
# forecast them, and the truths the scores need (one per unit)
Reader = Callable[["Corpus", list[str], CovariateUnits], tuple[list[TaskInput], list[Any]]]
# one model's rows of a chunk (one per unit, with every column of the pass's layout) from its
# label, its forecasts of the chunk's inputs (or the reason there are none), inputs and truths
Rows = Callable[[str, "Predicted | str", list[TaskInput], list[Any]], list[dict[str, Any]]]


@dataclass(frozen=True)
class ScoringPass:
    """A pass of the evaluation over units of work (tasks, histories), as data.

    - ``title``: the progress bar's label; ``table``: the file of its results in the output
      folder;
    - ``layout``: the columns of its rows (the first the unit's id) and its chunk files;
    - ``failed_values``: what a failed unit holds in the other score columns (NaN);
    - ``units``: the selected tasks (a frame of the corpus's task index) -> its units, in
      order, with the columns the results are joined with (the first the unit's id);
    - ``read``: a chunk's inputs and truths from a corpus (``Reader``);
    - ``rows``: a model's rows of a chunk from its forecasts (``Rows``).

    Its functions are module functions, so a pass is sent to worker processes as is."""

    title: str
    table: str
    layout: ChunkLayout
    failed_values: Mapping[str, Any]
    units: Callable[[pd.DataFrame], pd.DataFrame]
    read: Reader
    rows: Rows

    @property
    def key(self) -> str:
        """The column of the unit's id (``task_id``, ``pair_id``)."""
        return self.layout.columns[0]

    @property
    def unit(self) -> str:
        """What the progress bar counts: ``task``, or ``history`` (a Replay/Novel pair)."""
        return "task" if self.key == "task_id" else "history"

    def score(
        self,
        inputs: list[TaskInput],
        truths: list[Any],
        models: list[Forecaster | str],
        calls: ModelCalls | None = None,
    ) -> list[pd.DataFrame]:
        """A chunk already read (``read``; a dask worker may not see the corpus file), scored
        with each model: one frame of ``layout.columns`` per model, a row per unit. Each model
        sees ``inputs`` (read-only; see ``model_calls.model_forecasts`` for ``calls``), the
        ``truths`` only the scores."""
        calls = calls or ModelCalls()
        frames = []
        for model in models:
            predicted = model_forecasts(model, inputs, calls)  # copies of the list
            label = model_label(model)
            frames.append(self.layout.frame(self.rows(label, predicted, inputs, truths)))
        return frames

    def score_chunk(
        self,
        corpus: CorpusRef,
        ids: list[str],
        models: list[Forecaster | str],
        calls: ModelCalls | None = None,
    ) -> list[pd.DataFrame]:
        """The chunk of units ``ids`` read from this process's reader of ``corpus`` (only what
        the models see and the truths the scores need) and scored (``score``)."""
        reader, units = corpus.open()
        inputs, truths = self.read(reader, ids, units)
        return self.score(inputs, truths, models, calls)

    def failed_frame(self, ids: list[str], label: str, reason: str) -> pd.DataFrame:
        """Model ``label``'s frame of a chunk in which every unit of ``ids`` failed with
        ``reason``: ``failed_values`` in the score columns, as ``score`` writes a failure."""
        rows = [{self.key: i, "model": label, **self.failed_values, "failed": reason} for i in ids]
        return self.layout.frame(rows)


# ---- the pass over the tasks ----------------------------------------------------------------

# A chunk of tasks: the errors, why the task failed (empty: scored), the model's inference
# seconds of it (a measurement; NaN when failed) and whether its forecast was imputed.
TASK_COLUMNS = ("task_id", "model", "wql", "wape", "failed", "seconds", "imputed")
# What a task that failed holds, but for the reason in ``failed``
FAILED_VALUES = {"wql": np.nan, "wape": np.nan, "seconds": np.nan, "imputed": False}


def selected_tasks(tasks: pd.DataFrame) -> pd.DataFrame:
    """The tasks' pass scores every selected task (the rows of the corpus's index, in order),
    described by the index's columns but the storage ones (``fileformat.STORAGE_COLUMNS``:
    offsets into the datasets, ``kept``, ``drop_reason``), which stay in the corpus."""
    return tasks.drop(columns=[c for c in fileformat.STORAGE_COLUMNS if c in tasks.columns])


def read_tasks(
    corpus: Corpus, task_ids: list[str], units: CovariateUnits
) -> tuple[list[TaskInput], list[np.ndarray]]:
    """The tasks' inputs (what the models see) and their truths, the future targets (H,)
    float32 each, read without the rest of the tasks."""
    return corpus.task_inputs(task_ids, units), corpus.ground_truths(task_ids)


def task_rows(
    label: str, predicted: Predicted | str, inputs: list[TaskInput], truths: list[np.ndarray]
) -> list[dict[str, Any]]:
    """Model ``label``'s row of each task of a chunk (``TASK_COLUMNS``, ``task_row``)."""
    return [
        {"task_id": given.task_id, "model": label, **task_row(truth, predicted, index)}
        for index, (given, truth) in enumerate(zip(inputs, truths, strict=True))
    ]


def task_row(truth: np.ndarray, predicted: Predicted | str, index: int) -> dict[str, Any]:
    """The result of forecast ``index`` of a batch against ``truth`` (H,): wql, wape, failed,
    seconds (s) and imputed.

    ``seconds`` is the forecast's own ``seconds`` when it gives one, else the predict call's
    share per task (``Predicted.share``); a failed task (the batch, the forecast, its
    ``imputed`` or ``seconds`` unusable) has NaN errors and seconds and ``imputed`` False."""
    if isinstance(predicted, str):
        return {**FAILED_VALUES, "failed": predicted}
    forecast = predicted.forecasts[index]
    try:
        metrics = score_forecast(truth.astype(np.float64), forecast)
        extras = metrics if isinstance(metrics, str) else forecast_extras(forecast)
    except Exception as exc:
        extras = one_line(f"scoring raised {type(exc).__name__}: {exc}")
    if isinstance(extras, str):
        return {**FAILED_VALUES, "failed": extras}
    assert isinstance(metrics, dict)
    imputed, seconds = extras
    own = predicted.share if seconds is None else seconds
    return {**metrics, "failed": "", "seconds": own, "imputed": imputed}


TASKS = ScoringPass(
    title="evaluating",
    table="per_task.parquet",
    layout=ChunkLayout(
        kind="",
        columns=TASK_COLUMNS,
        dtypes={"wql": "float64", "wape": "float64", "seconds": "float64", "imputed": bool},
        # a chunk written before the per-task timings: read with seconds NaN (not measured)
        # and imputed False (no forecast could be marked imputed then)
        legacy_columns=TASK_COLUMNS[:5],
        legacy_fill={"seconds": np.nan, "imputed": False},
    ),
    failed_values=FAILED_VALUES,
    units=selected_tasks,
    read=read_tasks,
    rows=task_rows,
)
