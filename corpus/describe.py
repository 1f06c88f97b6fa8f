"""Structured descriptions and scenario sentences of tasks, built from their recipes.

``describe_task(task, relationship)`` is a JSON-able dict (docs/CORPUS_FORMAT.md, "Task
descriptions"): the window, the covariates (shape, base value, unit, direction), every event
(history and future; start as a step of the window and as a time, length in steps and in time,
per covariate the factor and the physical value at the peak), the relationship (form,
combination, target class) and the exact attribution of the future event's effect on the target
to each covariate. ``scenario_text(task, relationship)`` is the future event in one templated
English paragraph, in the covariates' own units, for text-conditioned forecasters.

Attribution. The effect of covariate set ``S`` is ``v(S) = sum_t (y'_S(t) - y(t))`` over the
future window, where ``y'_S`` is the engine's target with the covariates outside ``S`` held at
factor 1 (``K`` unchanged, so the dampening ``s(K)`` is the task's). Each covariate gets its
Shapley value ``phi_c = sum_{S not containing c} |S|! (K-|S|-1)! / K! (v(S + c) - v(S))``: by
efficiency ``sum_c phi_c = v(N) - v({})`` exactly, for both combination classes and whatever the
clipping window does. ``v({})`` is 0 whenever the engine leaves ``y`` unchanged at factor 1
(every shipped form); any remainder is reported as ``unattributed``, so contributions plus
``unattributed`` always equal the total effect. For an additive class that clips nothing, the
game is additive and the Shapley values are the terms of the sum: ``g(y, f_p) - y`` for the
primary and ``(|y| + level) w_c r_c(f_c)`` for a secondary.

[design] Shapley for both classes (one code path, exact under clipping) rather than a term split
for additive classes; all ``2^K`` coalitions (K <= 5: 32) go through one call of the real
engine on the real baseline window, so a description costs well under a millisecond of engine
time. Everything here is deterministic: lists in covariate order, keys in a fixed order.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from whatif_bench.corpus.axes import NOVEL_REACH, RESTRAINT
from whatif_bench.corpus.task import window_start_texts
from whatif_bench.relationships.engine import EventSchedule, Relationship

SCHEMA = "whatif-task-description/1"


# ---- formatting -----------------------------------------------------------------------
@functools.lru_cache(maxsize=4096)  # a corpus has few event lengths
def duration_text(seconds: float) -> str:
    """A duration in words: ``7200`` -> ``"2 hours"``, ``5400`` -> ``"1 hour 30 minutes"``,
    ``300`` -> ``"5 minutes"``, ``90`` -> ``"1 minute 30 seconds"``, ``86400`` -> ``"1 day"``."""
    remaining = round(float(seconds))
    parts = []
    for size, unit in ((86400, "day"), (3600, "hour"), (60, "minute"), (1, "second")):
        count, remaining = divmod(remaining, size)
        if count:
            parts.append(f"{count} {unit}{'' if count == 1 else 's'}")
    return " ".join(parts) if parts else "0 seconds"


def clock_text(moment: pd.Timestamp) -> str:
    """``YYYY-MM-DD HH:MM`` (``:SS`` added when not on a whole minute), zone as in the task."""
    text = moment.strftime("%Y-%m-%d %H:%M" if moment.second == 0 else "%Y-%m-%d %H:%M:%S")
    return text + (f" {moment.strftime('%Z')}" if moment.tzinfo is not None else "")


def number_text(value: float) -> str:
    """A value in at most 4 significant digits, without a trailing ``.0``: ``6``, ``0.45``."""
    return f"{value:.4g}"


def _with_unit(value: float, unit: str) -> str:
    return f"{number_text(value)} {unit}".rstrip() if unit else number_text(value)


# ---- the description ------------------------------------------------------------------
def _event(
    task,
    covariates: list[tuple[str, str, float, str]],
    kind: str,
    source: str,
    start: int,
    start_time: str,
    length: int,
    factors: Sequence[float],
    direction: str,
) -> dict[str, Any]:
    """One event: where and how long, and per covariate its factor and peak value.

    ``covariates``: the task's K covariates as (name, shape, base value, unit); ``factors``:
    the event's K factors; ``start_time``: the time of the window's step ``start`` (ISO
    text); ``source``: ``"history event i"`` for history events, ``"replay of history event
    i"`` or ``"novel"`` for the future one; ``direction``: ``"up"`` or ``"down"``, the way the
    event pushes the target (a history event, and the one a replay repeats), ``"novel"`` for
    a novel future."""
    window = task.context_length + task.prediction_length
    return {
        "kind": kind,
        "source": source,
        "start_step": start,
        "start_time": start_time,
        "length_steps": length,
        "steps_in_window": int(min(length, window - start)),
        "duration_s": int(length * task.interval_s),
        "duration": duration_text(length * task.interval_s),
        "direction": direction,
        "covariates": [
            {
                "covariate": name,
                "shape": shape,
                "factor": float(factor),
                "peak_value": float(base_value * factor),
                "unit": unit,
            }
            for (name, shape, base_value, unit), factor in zip(covariates, factors, strict=True)
        ],
    }


def coalition_effects(
    relationship: Relationship,
    baseline: np.ndarray,
    length: int,
    factors: np.ndarray,
) -> np.ndarray:
    """``(2^K, n)`` per-step effect ``y'_S(t) - y(t)`` of each coalition ``S`` (bit ``c`` of the
    row index set: covariate ``c`` takes its factor, else 1) of an event at step 0 of
    ``length`` steps with ``factors`` (K,), over ``baseline`` (n,) float64 (the event is cut at
    its end, as the future event is by the window).

    The engine's value at a step depends on that step's baseline and factors only, so at a step
    where all K factors are exactly 1 every coalition has the all-ones value: the coalitions
    are evaluated (``Relationship.evaluate_coalitions``) up to the last step the event moves,
    and one all-ones row over the rest. ``coalition_effects_reference`` evaluates every
    coalition at every step with ``Relationship.evaluate``; the two are equal to the bit."""
    factors = np.asarray(factors, dtype=np.float64)
    k = factors.shape[0]
    n = baseline.shape[0]
    trajectories = _trajectories(relationship, n, length, factors)  # (K, n)
    moved = np.flatnonzero((trajectories != 1.0).any(axis=0))
    m = int(moved[-1]) + 1 if moved.size else 0  # the steps [0, m) hold every moved one
    out = np.empty((2**k, n))
    if m:
        values = relationship.evaluate_coalitions(baseline[:m], trajectories[:, :m])
        np.subtract(values, baseline[None, :m], out=out[:, :m])
    if m < n:  # every factor is 1 here: one row is every coalition's
        rest = relationship.evaluate(baseline[m:], np.ones((k, n - m)))
        out[:, m:] = rest - baseline[m:]
    return out


def coalition_effects_reference(
    relationship: Relationship,
    baseline: np.ndarray,
    length: int,
    factors: np.ndarray,
) -> np.ndarray:
    """``coalition_effects`` the plain way: all 2^K coalitions evaluated at every step
    (``Relationship.evaluate_coalitions_reference``)."""
    factors = np.asarray(factors, dtype=np.float64)
    trajectories = _trajectories(relationship, baseline.shape[0], length, factors)
    values = relationship.evaluate_coalitions_reference(baseline, trajectories)
    return values - baseline[None, :]


def _trajectories(relationship: Relationship, n: int, length: int, factors: np.ndarray):
    """(K, n) factor trajectories of one event at step 0 of ``length`` steps, cut at ``n``."""
    schedule = EventSchedule(np.array([0]), np.array([length]), factors[None, :])
    return relationship.factor_trajectories(max(length, n), schedule)[:, :n]


@functools.lru_cache(maxsize=8)
def _shapley_terms(k: int) -> tuple[tuple[tuple[int, int, float], ...], ...]:
    """Per covariate ``c``, the ``(mask | bit, mask, weight)`` of every coalition ``mask``
    without ``c``, in increasing ``mask``: the terms ``shapley`` sums, in its order."""
    terms = []
    for c in range(k):
        bit = 1 << c
        row = []
        for mask in range(2**k):
            if mask & bit:
                continue
            s = bin(mask).count("1")
            weight = math.factorial(s) * math.factorial(k - s - 1) / math.factorial(k)
            row.append((mask | bit, mask, weight))
        terms.append(tuple(row))
    return tuple(terms)


def shapley(values: np.ndarray) -> np.ndarray:
    """Shapley values (K,) of a game given as ``values`` (2^K,) or (2^K, n): ``values[m]`` is
    the worth of the coalition whose members are the set bits of ``m``; along a second axis,
    one game per column (per-step attribution), giving (K, n)."""
    values = np.asarray(values, dtype=np.float64)
    k = int(round(math.log2(values.shape[0])))
    if 2**k != values.shape[0]:
        raise ValueError(f"a game over K players has 2^K worths, got {values.shape[0]}")
    if values.ndim == 1:  # one game: the same sums in Python floats (IEEE doubles, same order)
        worths = values.tolist()
        phi = []
        for terms in _shapley_terms(k):
            total = 0.0
            for joined, mask, weight in terms:
                total += weight * (worths[joined] - worths[mask])
            phi.append(total)
        return np.array(phi)
    out = np.zeros((k, *values.shape[1:]))
    for c, terms in enumerate(_shapley_terms(k)):
        for joined, mask, weight in terms:
            out[c] += weight * (values[joined] - values[mask])
    return out


def attribution(
    relationship: Relationship,
    baseline: np.ndarray,
    length: int,
    factors: np.ndarray,
    per_step: bool = False,
) -> dict[str, Any]:
    """The future event's effect on the target over ``baseline`` (H,), split per covariate
    (Shapley; see the module doc): ``total``, ``contributions`` (covariate -> sum over the
    window, in covariate order), ``unattributed`` (``v({})``, normally 0) and, with
    ``per_step``, the (K, H) per-step contributions and (H,) per-step totals."""
    baseline = np.ascontiguousarray(baseline, dtype=np.float64)
    if per_step:
        effects = coalition_effects(relationship, baseline, length, factors)
        worths = effects.sum(axis=1)
    else:  # the same sums in one kernel call, without the (2^K, H) effects
        worths = relationship.coalition_worths(baseline, length, factors)
    phi = shapley(worths)
    names = relationship.covariate_names[: len(factors)]
    out: dict[str, Any] = {
        "method": "shapley",
        "steps": int(baseline.shape[0]),
        "total": float(worths[-1]),
        "contributions": {name: float(value) for name, value in zip(names, phi, strict=True)},
        "unattributed": float(worths[0]),
    }
    if per_step:
        out["per_step_total"] = [float(v) for v in effects[-1]]
        out["per_step"] = {
            name: [float(v) for v in row] for name, row in zip(names, shapley(effects), strict=True)
        }
    return out


def describe_task(
    task,
    relationship: Relationship,
    baseline_future: np.ndarray | None = None,
    per_step: bool = False,
) -> dict[str, Any]:
    """The structured description of ``task`` (a ``Task``) under ``relationship`` (the one
    its corpus was built with; ``corpus.provenance.corpus_registry``).

    ``baseline_future`` (H,) is the event-free target over the forecast window in float64
    (``Corpus.baseline`` cut at ``start_step + C``); without it the task's float32
    ``counterfactual_future`` is used, which moves the attribution by float32 rounding only.
    ``per_step`` adds the per-step attribution. Keys come in a fixed order; every number is a
    plain ``int`` or ``float``."""
    recipe = task.recipe
    k = task.k
    if tuple(relationship.covariate_names[:k]) != tuple(task.covariates):
        raise ValueError(
            f"{task.task_id}: covariates {list(task.covariates)} are not the first {k} of "
            f"{relationship.simulator}/{relationship.target} {list(relationship.covariate_names)}"
        )
    length = int(recipe["event_length"])
    covariates = [
        (info.name, info.shape, info.base_value, info.unit) for info in relationship.covariates[:k]
    ]
    # the window's, every event's and the future's time in one call (the baseline's start
    # looked up once)
    starts = [int(start) for start in recipe["event_starts"]]
    window_start, *times = window_start_texts(
        task.baseline_start,
        [task.start_step + start for start in [0, *starts, task.context_length]],
        task.interval_s,
    )
    events = [
        _event(
            task,
            covariates,
            "history",
            f"history event {i}",
            start,
            start_time,
            length,
            factors,
            "up" if direction > 0 else "down",
        )
        for i, (start, start_time, direction, factors) in enumerate(
            zip(starts, times[:-1], recipe["directions"], recipe["factors"], strict=True)
        )
    ]
    replayed = int(recipe["replay_source"])
    future_length = _future_event_length(task)
    future_factors = np.asarray(recipe["future_factors"], dtype=np.float64)
    if task.future != RESTRAINT:  # a Restraint future has no event: every factor stays 1
        events.append(
            _event(
                task,
                covariates,
                "future",
                f"replay of history event {replayed}" if task.future == "replay" else "novel",
                int(task.context_length),
                times[-1],
                int(future_length),
                future_factors.tolist(),
                events[replayed]["direction"] if task.future == "replay" else "novel",
            )
        )
    if baseline_future is None:
        baseline_future = np.asarray(task.counterfactual_future, dtype=np.float64)
    lower, upper = relationship.window
    future_start = times[-1]
    return {
        "schema": SCHEMA,
        "task_id": task.task_id,
        "future": task.future,
        "simulator": task.simulator,
        "target": task.target,
        "target_unit": relationship.unit,
        "relationship": {
            "form": relationship.form.name,
            "combination": relationship.combination,
            "target_class": relationship.target_class,
            "window": [_finite(lower), _finite(upper)],
        },
        "window": {
            "start_time": window_start,
            "future_start_time": future_start,
            "interval_s": int(task.interval_s),
            "context_length": task.context_length,
            "prediction_length": task.prediction_length,
        },
        "covariates": [
            {
                "name": info.name,
                "role": "primary" if i == 0 else "secondary",
                "shape": info.shape,
                "base_value": float(info.base_value),
                "unit": info.unit,
                "direction": info.direction,
            }
            for i, info in enumerate(relationship.covariates[:k])
        ],
        "events": events,
        # a Restraint future has no event (length 0): its factors of 1 give no effect anyway
        "effect": attribution(
            relationship, baseline_future, future_length or length, future_factors, per_step
        ),
    }


def baseline_future(corpus, task) -> np.ndarray:
    """The float64 event-free target over ``task``'s forecast window (H,), from ``corpus``'s
    embedded baseline (what ``describe_task`` takes as ``baseline_future``)."""
    begin = task.start_step + task.context_length
    series = corpus._baseline_cached(task.simulator, task.target)
    return np.asarray(series[begin : begin + task.prediction_length], dtype=np.float64)


class Describer:
    """Descriptions and scenario texts of the tasks of one open corpus, with the registry it
    was built with (``forms``: as for ``whatif verify``; see ``corpus.provenance``)."""

    def __init__(self, corpus, forms=()) -> None:
        from whatif_bench.corpus.provenance import corpus_registry

        self.corpus = corpus
        self.registry, _ = corpus_registry(corpus, forms)

    def relationship(self, task) -> Relationship:
        return self.registry.get(task.simulator, task.target)

    def describe(self, task, per_step: bool = False) -> dict[str, Any]:
        """``describe_task`` on the corpus's float64 baseline."""
        return describe_task(
            task, self.relationship(task), baseline_future(self.corpus, task), per_step
        )

    def json(self, task) -> str:
        """The description as compact JSON text (the exports' ``description`` column)."""
        return json.dumps(self.describe(task), allow_nan=False, separators=(",", ":"))

    def text(self, task, **options) -> str:
        """``scenario_text`` (``options``: its ``names``, ``units``, ``relations``)."""
        return scenario_text(task, self.relationship(task), **options)


def export_describer(corpus) -> Describer | None:
    """The ``Describer`` an export uses, or ``None`` when ``corpus`` was built with user forms
    modules: their code runs only when given again, which an export does not take, so its
    descriptions are left null."""
    from whatif_bench.corpus.provenance import recorded_source

    if recorded_source(corpus).forms:
        return None
    return Describer(corpus)


def _finite(value: float) -> float | None:
    """``None`` (JSON null) for an infinite bound, else the bound as a float."""
    return float(value) if np.isfinite(value) else None


# ---- the scenario sentence ---------------------------------------------------------------
def _covariate_clause(
    name: str,
    unit: str,
    shape: str,
    factor: float,
    base: float,
    length: int,
    interval_s: int,
    start: pd.Timestamp,
    cut: bool,
    units: bool,
) -> str:
    """One covariate's part of the scenario."""
    peak = _with_unit(base * factor, unit if units else "")
    base_text = _with_unit(base, unit if units else "")
    duration = duration_text(length * interval_s)
    returns = "" if cut else ", then returns"
    if factor == 1.0:
        return f"{name} stays at its base value ({base_text})"
    if shape == "step":
        return (
            f"{name} is set to {number_text(factor)} times its base value ({peak} instead of "
            f"{base_text}) for {duration}{returns}"
        )
    peak_time = start + pd.Timedelta(seconds=(length - 1) / 2.0 * interval_s)
    way = "up" if factor > 1.0 else "down"
    return (
        f"{name} ramps {way} to {number_text(factor)} times its base value ({peak} instead of "
        f"{base_text}) over {duration}, peaking at {clock_text(peak_time)}{returns}"
    )


def _future_event_length(task) -> int:
    """The future event's length in steps: the recipe's ``future_event_length``, else (a recipe
    written without it) what the method gives: ``min(l, 2 H)`` for a Novel event, ``l`` for a
    Replay one (docs/METHOD.md, section 5)."""
    recipe = task.recipe
    if "future_event_length" in recipe:
        return int(recipe["future_event_length"])
    length = int(recipe["event_length"])
    return min(length, NOVEL_REACH * task.prediction_length) if task.future == "novel" else length


def _join(clauses: list[str], separator: str) -> str:
    """``a``; ``a and b`` (``a; and b`` with ``separator="; "``); ``a<sep>b<sep>and c``."""
    if len(clauses) == 1:
        return clauses[0]
    if len(clauses) == 2 and separator == ", ":
        return f"{clauses[0]} and {clauses[1]}"
    return separator.join(clauses[:-1]) + f"{separator}and {clauses[-1]}"


def scenario_text(
    task,
    relationship: Relationship,
    names: Mapping[str, str] | None = None,
    units: bool = True,
    relations: bool = True,
) -> str:
    """The future event of ``task`` in words (deterministic; the same task gives the same text).

    Times are the task's clock times, durations in days/hours/minutes, values in the
    covariates' units. ``names`` renames variables (e.g. to the anonymised ids of the ``llm``
    export); ``units=False`` drops the units; ``relations=False`` drops the sentence on how the
    target responds (direction and combination), leaving only what the future covariates say.
    """
    recipe = task.recipe
    names = dict(names or {})
    length = _future_event_length(task)
    horizon = task.prediction_length
    start = task.start + pd.Timedelta(seconds=task.context_length * task.interval_s)
    if task.future == RESTRAINT:
        held = [
            f"{names.get(info.name, info.name)} at "
            f"{_with_unit(info.base_value, info.unit if units else '')}"
            for info in relationship.covariates[: task.k]
        ]
        return (
            f"From {clock_text(start)}, for the {duration_text(horizon * task.interval_s)} "
            f"forecast window, no covariate changes: {_join(held, ', ')}, their base values."
        )
    cut = length > horizon
    clauses = [
        _covariate_clause(
            names.get(info.name, info.name),
            info.unit,
            info.shape,
            float(factor),
            float(info.base_value),
            length,
            task.interval_s,
            start,
            cut,
            units,
        )
        for info, factor in zip(
            relationship.covariates[: task.k], recipe["future_factors"], strict=True
        )
    ]
    text = f"From {clock_text(start)}, {_join(clauses, '; ')}."
    if cut:
        text += (
            f" The event lasts longer than the {duration_text(horizon * task.interval_s)} "
            "forecast window and is still under way when the window ends."
        )
    if relations:
        target = names.get(task.target, task.target)
        unit = f" ({relationship.unit})" if units and relationship.unit else ""
        responses = [
            f"{'rises' if info.direction == 'direct' else 'falls'} as "
            f"{names.get(info.name, info.name)} rises"
            for info in relationship.covariates[: task.k]
        ]
        text += f" The target, {target}{unit}, {_join(responses, ', ')}"
        if task.k > 1:
            text += f"; the covariates' effects combine {relationship.combination}ly"
        text += "."
    return text
