"""The five axes (docs/METHOD.md, section 5), the table every consumer reads, and the history
layout they imply.

``AXES`` describes each axis once: the name users write (``Corpus.filter`` keywords, slice and plot
file names), the column that holds it (corpus index, per-task tables; the field of ``PairKey`` and
``Task``), its values in the canonical order, and its labels for reports. The sweep, the subset
strata, the evaluation slices, ``whatif info``, ``Corpus.filter``, the export card and the stream's
default weights all derive from it, so adding a value to an axis is one edit here (a new context
label also needs its lengths in ``SHARED_CONTEXTS``). The simulator is described alongside the
five: every per-axis table groups by it too. Read the table through ``axis(name)`` and
``table()`` at call time (not through import-time copies), so a patched table reaches every
consumer.

Context/prediction lengths: C1-C3 are shared; C4 is per simulator, fits its baseline and is
declared in its spec header (``c4``). The
layout of a history of context length ``C``: an event-free prefix of ``ceil(0.40 C)`` steps, then
the events' part of ``floor(0.58 C)`` steps (the usable length), in which events of length ``l``
each followed by at least 32 event-free steps sit, then the rest as the end buffer (2 % of ``C``,
at most one step less). Events are spread evenly: the slack is shared out equally after each event.
E_max counts the events that fit in the usable length with a gap *between* events
(``(usable + 32) // (l + 32)``, at least 2, at most 64); the layout then wants a gap after every
event, so when they do not fit the context is extended to the smallest length whose usable part
holds ``E (l + 32)``. This is the one rule found that gives both of the paper's numbers: 1,876
steps for two events of 512 at C1 and 7,504 for eight at OpenDC's C4 (docs/METHOD.md, section 5).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from whatif_bench.errors import WhatIfError

SHARED_CONTEXTS = {"C1": (1024, 128), "C2": (2048, 256), "C3": (4096, 512)}
# The simulators the toolkit ships. Each simulator's C4 (context, prediction) pair fits its own
# baseline, so it lives in the simulator's spec header (``c4 = [context, prediction]``) and
# reaches the generator as ``Relationship.c4``; a user spec file adds a simulator with its own.
SHIPPED_SIMULATORS = ("epanet", "sumo", "opendc", "gridlabd")


class AxisError(WhatIfError):
    """An axis setting is impossible (unknown, or does not fit the baseline)."""


@dataclass(frozen=True)
class Axis:
    """One axis of the benchmark, as every consumer reads it."""

    name: str  # as users write it: Corpus.filter keyword, slices/<name>.csv, skill_by_<name>.png
    column: str  # column of the corpus index and per-task tables; field of PairKey and Task
    values: tuple  # every value, in the canonical (sweep and draw) order
    label: str  # what the axis is, for report headings and plot labels ("symbol: meaning")
    card: str  # short label of the exported dataset card's axis table
    kind: Literal["categorical", "ordered"]  # ordered: values have a meaningful order
    report_rank: int  # position among the report's slices (leaderboard sections, slices/)
    per_pair: bool = True  # False for the future type, which splits a pair into its two tasks
    weights: str | None = None  # the stream's AxisDistribution field weighting its values


AXES: tuple[Axis, ...] = (
    Axis(
        "simulator",
        "simulator",
        SHIPPED_SIMULATORS,  # spec files add simulators; no consumer enumerates this axis
        "simulator",
        "simulator",
        "categorical",
        0,
    ),
    Axis(
        "future",
        "future",
        ("replay", "novel"),
        "future: future type (replay: a history event again; novel: beyond the history)",
        "future",
        "categorical",
        1,
        per_pair=False,
        weights="futures",
    ),
    Axis(
        "K",
        "k",
        (1, 2, 3, 4, 5),
        "K: number of covariates given",
        "K (covariates)",
        "ordered",
        2,
        weights="k",
    ),
    Axis(
        "C",
        "c_label",
        ("C1", "C2", "C3", "C4"),
        "C: context and prediction lengths (C1 shortest)",
        "C (context, prediction)",
        "ordered",
        5,
        weights="contexts",
    ),
    Axis(
        "ell",
        "event_length",
        (32, 64, 128, 256, 512),
        "ℓ: event length [steps]",
        "l (event length)",
        "ordered",
        4,
        weights="event_lengths",
    ),
    Axis(
        "E",
        "e_setting",
        ("Efew", "Emax"),
        "E: history events (Efew: one; Emax: as many as fit)",
        "E (events in history)",
        "categorical",
        3,
        weights="e_settings",
    ),
)


def table() -> tuple[Axis, ...]:
    """The axes in the canonical order (simulator, future, K, C, l, E)."""
    return AXES


def axis(name: str) -> Axis:
    """The axis of a user-facing name (``"K"``, ``"ell"``, ...)."""
    for item in AXES:
        if item.name == name:
            return item
    raise AxisError(f"unknown axis {name!r}; known: {[a.name for a in AXES]}")


def axis_columns() -> dict[str, str]:
    """Axis names as users write them -> the columns that hold them, canonical order."""
    return {a.name: a.column for a in AXES}


def pair_columns() -> list[str]:
    """The columns naming a history (every axis but the future type), canonical order."""
    return [a.column for a in AXES if a.per_pair]


def strata() -> list[str]:
    """The columns of a task's stratum: every axis, canonical order."""
    return [a.column for a in AXES]


def report_axes() -> tuple[Axis, ...]:
    """The axes in the order the reports list them."""
    return tuple(sorted(AXES, key=lambda a: a.report_rank))


# Import-time copies for code that needs constants (the stream's fixed-size kernels, the corpus
# file's provenance attributes); loops and lookups read ``axis()`` instead.
FUTURES: tuple[str, ...] = axis("future").values
K_VALUES: tuple[int, ...] = axis("K").values
CONTEXT_LABELS: tuple[str, ...] = axis("C").values
EVENT_LENGTHS: tuple[int, ...] = axis("ell").values
E_SETTINGS: tuple[str, ...] = axis("E").values
# Axis names as users write them -> the columns of the corpus index that hold them.
AXIS_COLUMNS = axis_columns()
# Future types a corpus may add to the table's (``whatif generate --futures``); off by default,
# so the default corpus stays the benchmark. Restraint: no covariate moves over the horizon
# (every future covariate at its base value); its truth is the counterfactual. It stores
# nothing: both are derived from the pair, and the 10 % rule does not apply to it.
RESTRAINT = "restraint"
OPTIONAL_FUTURES: tuple[str, ...] = (RESTRAINT,)


def future_choices() -> tuple[str, ...]:
    """Every future type a corpus can hold: the table's, then the optional ones."""
    return (*axis("future").values, *OPTIONAL_FUTURES)


def chosen_futures(names) -> tuple[str, ...]:
    """The future types of ``whatif generate --futures`` in canonical order; the table's
    (Replay and Novel, which every pair stores) must be among them. An unknown or missing
    name is an ``AxisError``."""
    names = tuple(names)
    choices = future_choices()
    unknown = [n for n in names if n not in choices]
    if unknown:
        raise AxisError(
            f"unknown future type {unknown[0]!r} in --futures; choose from {', '.join(choices)}"
        )
    missing = [n for n in axis("future").values if n not in names]
    if missing:
        raise AxisError(
            f"--futures must include {' and '.join(axis('future').values)} (every pair stores "
            f"them); {', '.join(missing)} is missing"
        )
    return tuple(n for n in choices if n in names)


MIN_GAP = 32
PREFIX_SHARE = 0.40
BUFFER_SHARE = 0.02
USABLE_PERCENT = 58  # 100 % - 40 % prefix - 2 % buffer, as a whole percentage
NOVEL_REACH = 2  # a Novel future event lasts at most this many prediction windows (its peak inside)
MAX_EVENTS = 64
FEWEST_EVENTS = 1


def contexts(c4: tuple[int, int]) -> dict[str, tuple[int, int]]:
    """The four (context, prediction) lengths of a simulator whose C4 pair (its spec header's
    ``c4``, ``Relationship.c4``) is ``c4``, keyed C1..C4, in steps."""
    lengths = {**SHARED_CONTEXTS, "C4": (int(c4[0]), int(c4[1]))}
    return {label: lengths[label] for label in axis("C").values}


def prefix_length(context: int) -> int:
    """The event-free prefix: ``ceil(0.40 C)`` steps."""
    return math.ceil(PREFIX_SHARE * context)


def usable_length(context: int) -> int:
    """Steps for the events and their gaps: ``floor(0.58 C)`` (what the prefix and the 2 % end
    buffer leave), in integer arithmetic so no rounding of 0.58 moves it."""
    return (USABLE_PERCENT * context) // 100


def buffer_length(context: int) -> int:
    """The end buffer: the steps after the usable part, ``C - ceil(0.40 C) - floor(0.58 C)``
    (2 % of ``C``, at most one step less)."""
    return context - prefix_length(context) - usable_length(context)


def most_events(context: int, event_length: int) -> int:
    """E_max: the most events the usable part holds with a 32-step gap between events, at
    least 2, at most 64.

    At least 2 keeps the two E settings distinct. The count leaves out the last event's gap,
    which the layout wants too, so it may call for an extension (``extended_context``).
    """
    fits = (usable_length(context) + MIN_GAP) // (event_length + MIN_GAP)
    return int(min(MAX_EVENTS, max(2, fits)))


def event_count(context: int, event_length: int, setting: str) -> int:
    if setting == "Efew":
        return FEWEST_EVENTS
    if setting == "Emax":
        return most_events(context, event_length)
    raise AxisError(f"unknown E setting {setting!r}; expected one of {list(axis('E').values)}")


def extended_context(context: int, event_length: int, n_events: int) -> int:
    """The smallest context >= ``context`` whose usable part holds ``n_events`` events, each
    followed by its gap: ``floor(0.58 C) >= E (l + 32)``."""
    needed = n_events * (event_length + MIN_GAP)
    length = max(context, (100 * needed) // USABLE_PERCENT - 1)
    while usable_length(length) < needed:
        length += 1
    return length


@dataclass(frozen=True)
class HistoryLayout:
    """Where the events of one history sit (step indices relative to the window start)."""

    context: int  # possibly extended
    prediction: int
    event_length: int
    starts: tuple[int, ...]

    @property
    def window(self) -> int:
        return self.context + self.prediction

    @property
    def future_length(self) -> int:
        """Steps of the future event inside the prediction window: it starts at the first
        forecast step and is cut by the window end."""
        return min(self.event_length, self.prediction)

    def future_event_length(self, future: str) -> int:
        """How long the future event of ``future`` lasts, in steps (before the window's cut).

        Replay repeats a history event, so it lasts ``l``. A Novel event must reach beyond the
        history inside the window; a bell longer than twice the window would peak after the
        window's end (at C1 with ``l = 512`` the window sees 32 % of its deviation), so a Novel
        event lasts ``min(l, 2 H)``: the smallest change that puts its peak inside the window
        (at its last step, as for ``l = 2 H``). A step event looks the same either way.
        """
        if future == "novel":
            return min(self.event_length, NOVEL_REACH * self.prediction)
        if future == RESTRAINT:  # no event: every covariate stays at its base value
            return 0
        return self.event_length


def layout(context: int, prediction: int, event_length: int, setting: str) -> HistoryLayout:
    """Lay out the history of one (C, l, E) combination."""
    n_events = event_count(context, event_length, setting)
    length = extended_context(context, event_length, n_events)
    prefix = prefix_length(length)
    slack = usable_length(length) - n_events * (event_length + MIN_GAP)
    spacing = event_length + MIN_GAP + slack // n_events
    starts = tuple(prefix + i * spacing for i in range(n_events))
    return HistoryLayout(length, prediction, event_length, starts)
