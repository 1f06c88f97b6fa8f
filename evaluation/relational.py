"""Relational scores (docs/RELATIONAL.md): does a forecaster move its forecast the right way,
by the right amount, more for Novel than for Replay, and not at all when nothing moves?

Each history (pair) has three futures over the same past: Replay and Novel (a future event),
and **Restraint**: no covariate moves (every future covariate at its base value), whose truth
is the counterfactual (the baseline over the horizon). A model forecasts all three; with
``f_x`` its forecast (point, else median) under future ``x`` and ``y_x`` the truth,

- the *forecast effect* of an event future is ``f_event − f_restraint`` and its *true effect*
  ``y_event − y_restraint``, both over the event window (the first ``min(ℓ, H)`` steps);
- **direction**: share of event-window steps with a non-zero true effect where
  ``sign(forecast effect) == sign(true effect)`` (a forecast effect of exactly 0 has sign 0 and
  so never agrees: a model that ignores the covariates scores 0);
- **intensity**: median over the event-window steps whose |true effect| is at least
  ``INTENSITY_FLOOR`` of its window mean of ``forecast effect / true effect`` (1: the right size,
  0: no reaction, below 0: the wrong way);
- **contrast**: 1 if the forecast's mean |effect| over the window orders Novel and Replay as the
  truth's does (``sign`` of Novel minus Replay agrees), else 0; undefined when the truth ties;
- **restraint**: share of the ``H`` restraint steps where ``|f_restraint − y_cf| ≤ |naive − y_cf|``
  with ``naive`` the last history value (the naive forecast's error is the band).

All arrays are float64 here; a score with no step to count is NaN (left out of the means).

``RELATIONAL`` is the evaluation's pass over the histories (``scoring.ScoringPass``): a chunk of
histories is read as three inputs each (``relational_parts``), each model forecasts them in one
batch, and each history gets a row of ``RELATIONAL_COLUMNS`` (``history_rows``).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from whatif_bench.corpus.axes import pair_columns
from whatif_bench.evaluation.chunk_store import ChunkLayout
from whatif_bench.evaluation.corpus_ref import CovariateUnits
from whatif_bench.evaluation.forecast_checks import Predicted, central
from whatif_bench.evaluation.forecasters import TaskInput
from whatif_bench.evaluation.scoring import ScoringPass

if TYPE_CHECKING:
    from whatif_bench.corpus import Corpus

# intensity counts the steps whose |true effect| is at least this share of the window's mean
# |true effect|: near a sign change of the true effect the ratio is noise over a tiny number
INTENSITY_FLOOR = 0.01
EVENT_FUTURES = ("replay", "novel")
RESTRAINT = "restraint"
# per-history columns of relational.parquet (besides pair_id, model, failed)
SCORE_COLUMNS = [
    "direction",
    "direction_replay",
    "direction_novel",
    "intensity",
    "intensity_replay",
    "intensity_novel",
    "contrast",
    "restraint",
]


@dataclass(frozen=True)
class HistoryTruth:
    """The exact truths of one history's three futures."""

    pair_id: str
    counterfactual: np.ndarray  # (H,) the target with no future event: Restraint's truth
    replay: np.ndarray  # (H,) the target under the Replay future
    novel: np.ndarray  # (H,) the target under the Novel future
    event_steps: int  # steps of the future event inside the horizon, min(l, H)
    last_value: float  # the last history value (the naive forecast)


def direction_counts(forecast_effect: np.ndarray, true_effect: np.ndarray) -> tuple[int, int]:
    """(agreeing steps, counted steps): steps with a non-zero true effect are counted; they
    agree when the forecast effect has the same sign (a zero forecast effect never agrees)."""
    counted = true_effect != 0.0
    agree = np.sign(forecast_effect[counted]) == np.sign(true_effect[counted])
    return int(agree.sum()), int(counted.sum())


def _share(agree: int, counted: int) -> float:
    return agree / counted if counted else float("nan")


def direction(forecast_effect: np.ndarray, true_effect: np.ndarray) -> float:
    """Share of the steps with a non-zero true effect whose forecast effect has its sign;
    NaN if the true effect is 0 at every step."""
    return _share(*direction_counts(forecast_effect, true_effect))


def intensity_ratios(forecast_effect: np.ndarray, true_effect: np.ndarray) -> np.ndarray:
    """``forecast effect / true effect`` at the steps whose |true effect| is at least
    ``INTENSITY_FLOOR`` of its mean over the window (none if the true effect is 0 throughout)."""
    size = np.abs(true_effect)
    scale = float(size.mean()) if size.size else 0.0
    if scale == 0.0:
        return np.empty(0)
    counted = size >= INTENSITY_FLOOR * scale
    return forecast_effect[counted] / true_effect[counted]


def intensity(forecast_effect: np.ndarray, true_effect: np.ndarray) -> float:
    """Median of ``intensity_ratios``; NaN if no step counts."""
    ratios = intensity_ratios(forecast_effect, true_effect)
    return float(np.median(ratios)) if ratios.size else float("nan")


def contrast(
    forecast_replay: np.ndarray,
    forecast_novel: np.ndarray,
    true_replay: np.ndarray,
    true_novel: np.ndarray,
) -> float:
    """1.0 if the forecast effects order Novel and Replay by mean |effect| as the true effects
    do, else 0.0 (a forecast tie never agrees); NaN if the true magnitudes are equal."""
    truth = np.sign(np.mean(np.abs(true_novel)) - np.mean(np.abs(true_replay)))
    if truth == 0.0:
        return float("nan")
    forecast = np.sign(np.mean(np.abs(forecast_novel)) - np.mean(np.abs(forecast_replay)))
    return float(forecast == truth)


def restraint(forecast: np.ndarray, counterfactual: np.ndarray, last_value: float) -> float:
    """Share of steps where the Restraint forecast is at least as close to the counterfactual
    as the naive forecast (the last history value) is; NaN for an empty horizon."""
    if counterfactual.size == 0:
        return float("nan")
    inside = np.abs(forecast - counterfactual) <= np.abs(last_value - counterfactual)
    return float(inside.mean())


def history_scores(forecasts: dict[str, np.ndarray], truth: HistoryTruth) -> dict[str, float]:
    """Every relational score of one history from the model's central forecasts (H,) under
    ``replay``, ``novel`` and ``restraint`` (``SCORE_COLUMNS``)."""
    window = slice(0, truth.event_steps)
    base_forecast = forecasts[RESTRAINT][window]
    base_truth = truth.counterfactual[window]
    scores: dict[str, float] = {}
    effects = {}
    agree_all = counted_all = 0
    ratios = []
    for future in EVENT_FUTURES:
        made = forecasts[future][window] - base_forecast
        true = getattr(truth, future)[window] - base_truth
        effects[future] = (made, true)
        agree, counted = direction_counts(made, true)
        agree_all, counted_all = agree_all + agree, counted_all + counted
        scores[f"direction_{future}"] = _share(agree, counted)
        ratios.append(intensity_ratios(made, true))
        scores[f"intensity_{future}"] = float(np.median(ratios[-1])) if ratios[-1].size else np.nan
    pooled = np.concatenate(ratios)
    scores["direction"] = _share(agree_all, counted_all)
    scores["intensity"] = float(np.median(pooled)) if pooled.size else float("nan")
    scores["contrast"] = contrast(
        effects["replay"][0], effects["novel"][0], effects["replay"][1], effects["novel"][1]
    )
    scores["restraint"] = restraint(forecasts[RESTRAINT], truth.counterfactual, truth.last_value)
    return {name: scores[name] for name in SCORE_COLUMNS}


def _median(values: pd.Series) -> float:
    finite = values.dropna()
    return float(finite.median()) if len(finite) else float("nan")


def _mean(values: pd.Series) -> float:
    finite = values.dropna()
    return float(finite.mean()) if len(finite) else float("nan")


def summarise(per_history: pd.DataFrame, by: list[str] | None = None) -> pd.DataFrame:
    """Per model (and ``by`` columns): the mean over histories of direction, contrast and
    restraint, the median over histories of each intensity, and ``num_histories`` (histories
    scored, failures left out). Rows in the models' first-seen order."""
    scored = per_history[per_history["failed"] == ""]
    keys = [*(by or []), "model"]
    rows = []
    models = list(dict.fromkeys(per_history["model"]))
    groups = dict(list(scored.groupby(keys, sort=True)))
    order = sorted(groups, key=lambda key: (key[:-1], models.index(key[-1])))
    for key in order:
        group = groups[key]
        row = dict(zip(keys, key, strict=True))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            for column in SCORE_COLUMNS:
                summary = _median if column.startswith("intensity") else _mean
                row[column] = summary(group[column])
        row["num_histories"] = len(group)
        rows.append(row)
    return pd.DataFrame(rows, columns=[*keys, *SCORE_COLUMNS, "num_histories"])


# ---- the evaluation's pass over the histories -------------------------------------------------

# A chunk of histories: the history (pair), the model, its scores and why it failed (empty:
# scored); the file names' kind, ``chunk-relational-NNNNN.parquet``
RELATIONAL_COLUMNS = ("pair_id", "model", *SCORE_COLUMNS, "failed")
FUTURES = (*EVENT_FUTURES, RESTRAINT)  # a history's inputs, in the order a batch holds them


def histories(tasks: pd.DataFrame) -> pd.DataFrame:
    """The histories with a selected task (one row per pair of ``tasks``, a frame of the
    corpus's task index), in the corpus's order, with the axis columns of their results."""
    found = tasks.drop_duplicates("pair_id").sort_values("row", kind="stable")
    return found[["pair_id", "target", *pair_columns()]]


def relational_parts(
    corpus: Corpus, pair_ids: list[str], units: CovariateUnits | None = None
) -> tuple[list[TaskInput], list[HistoryTruth]]:
    """The inputs of each history's three futures (Replay, Novel, Restraint, history by
    history: ``FUTURES``) and their truths, read from ``corpus``."""
    inputs = {
        future: corpus.task_inputs([f"{p}/{future}" for p in pair_ids], units)
        for future in EVENT_FUTURES
    }
    inputs[RESTRAINT] = corpus.restraint_inputs(pair_ids, units)
    truths = {
        future: corpus.ground_truths([f"{p}/{future}" for p in pair_ids])
        for future in EVENT_FUTURES
    }
    counterfactuals = corpus.counterfactual_futures(pair_ids)
    rows = corpus.pairs.set_index("pair_id").loc[pair_ids]
    batch, made = [], []
    for index, pair_id in enumerate(pair_ids):
        batch += [inputs[future][index] for future in FUTURES]
        restraint_input = inputs[RESTRAINT][index]
        made.append(
            HistoryTruth(
                pair_id=pair_id,
                counterfactual=counterfactuals[index].astype(np.float64),
                replay=truths["replay"][index].astype(np.float64),
                novel=truths["novel"][index].astype(np.float64),
                event_steps=int(
                    min(rows["event_length"].iloc[index], rows["prediction"].iloc[index])
                ),
                last_value=float(restraint_input.history_target[-1]),
            )
        )
    return batch, made


def history_rows(
    label: str, predicted: Predicted | str, inputs: list[TaskInput], truths: list[HistoryTruth]
) -> list[dict[str, Any]]:
    """Model ``label``'s row of each history of a chunk (``RELATIONAL_COLUMNS``) from its
    forecasts of ``inputs`` (three per history, as ``relational_parts`` orders them). A
    history whose forecasts cannot be used has NaN scores and the reason in ``failed``."""
    forecasts = predicted if isinstance(predicted, str) else predicted.forecasts
    rows = []
    for index, truth in enumerate(truths):
        failed = forecasts if isinstance(forecasts, str) else ""
        made: dict[str, np.ndarray] = {}
        for offset, future in enumerate(FUTURES):
            if failed:
                break
            value = central(forecasts[3 * index + offset], truth.counterfactual.size)
            if isinstance(value, str):
                failed = f"{future} forecast: {value}"
            else:
                made[future] = value
        scores = dict.fromkeys(SCORE_COLUMNS, np.nan) if failed else history_scores(made, truth)
        rows.append({"pair_id": truth.pair_id, "model": label, **scores, "failed": failed})
    return rows


RELATIONAL = ScoringPass(
    title="relational",
    table="relational.parquet",
    layout=ChunkLayout(kind="relational", columns=RELATIONAL_COLUMNS),
    failed_values=dict.fromkeys(SCORE_COLUMNS, np.nan),
    units=histories,
    read=relational_parts,
    rows=history_rows,
)
