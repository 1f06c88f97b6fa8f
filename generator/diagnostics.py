"""Task diagnostics: does a relationship make good tasks? (docs/DIAGNOSTICS.md)

Two questions per target: do its events pass the 10 % rule (and if not, why), and do its
Novel futures move the target beyond anything its history showed? A saturating or logarithmic
response lets a model that only repeats the largest history response do well on Novel futures,
which then no longer test extrapolation.

``diagnose_target`` measures every pair (one history with its Replay and Novel futures) of one
target and returns one row per pair; ``summarise_target`` condenses those rows into the target's
line of the report, flag included. Where the pairs come from (a corpus file, or pairs drawn in
memory for a spec) is ``generator/diagnose.py``'s business.

Per pair, with ``y`` the event-free baseline, ``y'`` the target under the events and the 10 %
statistic ``effect(a, y) = mean |a - y| / mean |y|`` of ``relationships/verification.py``:

- ``history_effects`` (E,): the statistic of each history event over its own window;
- ``replay_effect``, ``novel_effect``: the statistic of each future event over its span (the
  part of the event inside the prediction window, ``min(l, H)`` steps);
- ``novel_amplification``: ``novel_effect / max(history_effects)`` (NaN for 0/0);
- ``novel_margin``: ``min over r of mean |y'_novel - y'_r| / mean |y|`` over the future span,
  where ``r`` runs over "no event" (``y'_r = y``) and every history event replayed at the first
  forecast step (``y'_r``: the future that event's factors would give): how far the Novel future
  lies from the nearest response the history showed, in units of the baseline level;
- ``novel_beyond``: how far the Novel future's covariates go beyond the range their history
  showed (``generator/novel_range.py``), the smallest over the task's K covariates: the furthest
  Novel factor inside the window over the history's largest factor (a covariate pushed up) or
  the history's smallest over it (pushed down); > 1 is beyond the range; 2: a reach of twice
  the history's largest factor, or half its smallest;
- ``coverage``: ``min(l, H) / H``, the share of the prediction window the future event covers;
- ``event_steps``, ``zero_baseline_steps``, ``bound_steps``: the steps of the pair's tasks that
  events touch (every history event window, and the future span once per future type), how
  many of them have ``y = 0``, and how many have ``y'`` at a bound of the target's clipping
  window (-1 when the target has none).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from whatif_bench.corpus import Recipe
from whatif_bench.generator.materialise import _future, materialise
from whatif_bench.generator.novel_range import novel_reach
from whatif_bench.generator.sweep import PairResult
from whatif_bench.relationships.engine import Relationship
from whatif_bench.relationships.verification import THRESHOLD, future_ratio, history_ratios

# [design] The flag rule (docs/DIAGNOSTICS.md, "The flag"): a target is flagged when, over its
# kept pairs, the median Novel margin is below the 10 % rule's own threshold: in most of its
# Novel tasks, a forecast that repeats the strongest history response is off by less than the
# change the benchmark requires of any event before it counts as visible.
MARGIN_THRESHOLD = THRESHOLD
QUANTILES = {"p10": 0.10, "p50": 0.50, "p90": 0.90}

PAIR_COLUMNS = (
    "pair_id",
    "simulator",
    "target",
    "k",
    "c_label",
    "event_length",
    "e_setting",
    "n_events",
    "kept",
    "drop_reason",
    "max_history_effect",
    "replay_effect",
    "novel_effect",
    "novel_amplification",
    "novel_margin",
    "novel_beyond",
    "coverage",
    "event_steps",
    "zero_baseline_steps",
    "bound_steps",
)


def relative_change(actual: np.ndarray, other: np.ndarray, baseline: np.ndarray) -> float:
    """``mean |actual - other| / mean |baseline|``, with the 10 % statistic's zero convention.

    With ``other = baseline`` this is ``verification.effect_ratio``: a window whose baseline is
    0 throughout has no relative change, 0.
    """
    change = float(np.mean(np.abs(actual - other)))
    level = float(np.mean(np.abs(baseline)))
    if level == 0.0:
        return 0.0
    return change / level


def amplification(novel_effect: float, history_effects: np.ndarray) -> float:
    """``novel_effect / max(history_effects)`` as floating-point division: infinite when the
    denominator is 0 and the numerator is not; NaN (undefined, left out of the summaries) for
    0 / 0. (Effects are finite: a zero baseline gives 0.)"""
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(np.float64(novel_effect) / np.max(history_effects))


def novel_margin(
    relationship: Relationship, recipe: Recipe, future_baseline: np.ndarray, novel: np.ndarray
) -> float:
    """The smallest ``relative_change`` of the Novel future from "no event" or from any history
    event replayed at the first forecast step, over the future span.

    ``future_baseline`` (H,) is the event-free prediction window, ``novel`` (H,) the Novel future.
    Each distinct factor row of the history is replayed once, exactly as the generator builds a
    future (``materialise._future``).
    """
    span = recipe.layout.future_length
    baseline_span = future_baseline[:span]
    best = relative_change(novel[:span], baseline_span, baseline_span)
    for factors in np.unique(recipe.factors, axis=0):
        replayed, _ = _future(relationship, future_baseline, recipe.layout.event_length, factors)
        best = min(best, relative_change(novel[:span], replayed[:span], baseline_span))
    return best


def _event_steps(starts, length: int) -> np.ndarray:
    """Indices (relative to the window start) of every history event's steps."""
    return (np.asarray(starts, dtype=np.int64)[:, None] + np.arange(length)).reshape(-1)


def diagnose_pair(
    relationship: Relationship,
    recipe: Recipe,
    baseline: np.ndarray,
    stored: tuple[np.ndarray, float, float, str] | None = None,
) -> tuple[dict, np.ndarray]:
    """One pair's row (see ``PAIR_COLUMNS``) and its history effects (E,).

    ``baseline`` is the target's full float64 baseline series. ``stored``: the pair's recorded
    (history effects, Replay effect, Novel effect, drop reason) when it comes from a corpus;
    ``None`` computes them with the generator's own verification, as ``whatif generate`` does.
    """
    arrays = materialise(recipe, relationship, baseline)
    layout = recipe.layout
    past, ahead = arrays.baseline[: layout.context], arrays.baseline[layout.context :]
    replay, novel = arrays.future_targets["replay"], arrays.future_targets["novel"]
    if stored is None:
        result = PairResult(
            recipe=recipe,
            history_ratios=history_ratios(
                arrays.history_target, past, layout.starts, layout.event_length
            ),
            replay_ratio=future_ratio(replay, ahead, layout.event_length),
            novel_ratio=future_ratio(novel, ahead, layout.event_length),
        )
        stored = (
            result.history_ratios,
            result.replay_ratio,
            result.novel_ratio,
            result.drop_reason,
        )
    effects, replay_effect, novel_effect, reason = stored
    effects = np.asarray(effects, dtype=np.float64)
    span = layout.future_length
    steps = _event_steps(layout.starts, layout.event_length)
    zero = int(np.count_nonzero(past[steps] == 0.0)) + 2 * int(
        np.count_nonzero(ahead[:span] == 0.0)
    )
    bound = -1
    if relationship.is_state():
        bounds = np.asarray(relationship.window, dtype=np.float64)
        bound = sum(
            int(np.count_nonzero(np.isin(values, bounds)))
            for values in (arrays.history_target[steps], replay[:span], novel[:span])
        )
    key = recipe.key
    row = {
        "pair_id": key.pair_id,
        "simulator": key.simulator,
        "target": key.target,
        "k": key.k,
        "c_label": key.c_label,
        "event_length": key.event_length,
        "e_setting": key.e_setting,
        "n_events": int(effects.size),
        "kept": reason == "",
        "drop_reason": reason,
        "max_history_effect": float(np.max(effects)),
        "replay_effect": float(replay_effect),
        "novel_effect": float(novel_effect),
        "novel_amplification": amplification(float(novel_effect), effects),
        "novel_margin": novel_margin(relationship, recipe, ahead, novel),
        "novel_beyond": float(novel_reach(recipe, relationship).beyond.min()),
        "coverage": span / layout.prediction,
        "event_steps": int(steps.size + 2 * span),
        "zero_baseline_steps": zero,
        "bound_steps": bound,
    }
    return row, effects


def diagnose_target(
    relationship: Relationship,
    baseline: np.ndarray,
    recipes: list[Recipe],
    stored: list[tuple[np.ndarray, float, float, str]] | None = None,
) -> tuple[pd.DataFrame, np.ndarray]:
    """Every pair of one target: a frame of ``PAIR_COLUMNS`` (one row per recipe, in order) and
    all history effects concatenated (sum of E). Runs in a worker process."""
    rows, effects = [], []
    for index, recipe in enumerate(recipes):
        row, history = diagnose_pair(
            relationship, recipe, baseline, None if stored is None else stored[index]
        )
        rows.append(row)
        effects.append(history)
    frame = pd.DataFrame(rows, columns=list(PAIR_COLUMNS))
    return frame, (np.concatenate(effects) if effects else np.empty(0))


def quantile(values: np.ndarray, q: float) -> float:
    """numpy's default (linear) quantile of ``values`` without NaN, where ``inf`` counts as
    larger than any number (numpy's own gives NaN next to an infinite value); NaN if empty."""
    ordered = np.sort(np.asarray(values, dtype=np.float64)[~np.isnan(values)])
    if ordered.size == 0:
        return math.nan
    position = q * (ordered.size - 1)
    low, high = math.floor(position), math.ceil(position)
    if low == high or ordered[low] == ordered[high]:
        return float(ordered[low])
    if math.isinf(ordered[high]):
        return math.inf
    return float(ordered[low] + (ordered[high] - ordered[low]) * (position - low))


def quantiles(values: np.ndarray) -> dict:
    """p10, p50, p90 of ``values`` (NaN left out, ``inf`` above every number; see
    ``quantile``), ``n``: how many values that is, ``infinite``: how many of them are infinite.
    A quantile is None when there is no value."""
    values = np.asarray(values, dtype=np.float64)
    values = values[~np.isnan(values)]
    out: dict = {
        name: (quantile(values, q) if values.size else None) for name, q in QUANTILES.items()
    }
    out["n"] = int(values.size)
    out["infinite"] = int(np.count_nonzero(np.isinf(values)))
    return out


def summarise_target(relationship: Relationship, pairs: pd.DataFrame, effects: np.ndarray) -> dict:
    """The target's report line (JSON-able) from its pair rows and history effects.

    Pass rate, drop reasons, effect sizes, coverage and the step shares are over every
    generated pair; the Novel amplification, the Novel margin, how far beyond the history's
    range the Novel covariates go (``novel_beyond``; ``novel_inside`` counts kept pairs not
    beyond it, 0 when the method holds) and the flag over the kept pairs (the pairs that make
    tasks).
    """
    kept = pairs[pairs["kept"]]
    n_pairs, n_kept = len(pairs), len(kept)
    margins = kept["novel_margin"].to_numpy(dtype=np.float64)
    median_margin = quantile(margins, 0.5) if n_kept else None
    event_steps = int(pairs["event_steps"].sum())
    state = relationship.is_state()
    return {
        "simulator": relationship.simulator,
        "target": relationship.target,
        "form": relationship.form.name,
        "combination": relationship.combination,
        "window": list(relationship.window) if state else None,
        "pairs": n_pairs,
        "kept": n_kept,
        "pass_rate": n_kept / n_pairs if n_pairs else None,
        "dropped": {
            reason: int((pairs["drop_reason"] == reason).sum())
            for reason in ("history", "replay", "novel")
        },
        "history_effect": quantiles(effects),
        "replay_effect": quantiles(pairs["replay_effect"].to_numpy()),
        "novel_effect": quantiles(pairs["novel_effect"].to_numpy()),
        "novel_amplification": quantiles(kept["novel_amplification"].to_numpy()),
        "novel_margin": quantiles(margins),
        "margin_below_threshold": (float(np.mean(margins < MARGIN_THRESHOLD)) if n_kept else None),
        "novel_beyond": quantiles(kept["novel_beyond"].to_numpy()),
        "novel_inside": int((kept["novel_beyond"] <= 1.0).sum()),
        "coverage": float(pairs["coverage"].mean()) if n_pairs else None,
        "zero_baseline_share": (
            int(pairs["zero_baseline_steps"].sum()) / event_steps if event_steps else None
        ),
        "at_bound_share": (
            int(pairs["bound_steps"].sum()) / event_steps if state and event_steps else None
        ),
        "flagged": (median_margin < MARGIN_THRESHOLD) if median_margin is not None else None,
    }
