"""The five axes (docs/METHOD.md, section 5) and the history layout they imply.

Context/prediction lengths: C1-C3 are shared; C4 is per simulator and fits its baseline. The
layout of a history of context length ``C``: an event-free prefix of at least 40 % of ``C``,
events of length ``l`` each followed by at least 32 event-free steps, an event-free buffer of at
least 2 % of ``C``. Events are spread evenly: the slack is shared out equally after each event.
When the events of a setting do not fit, the context is extended to the smallest length that
holds them (the paper extends C1 to 1,876 steps for two events of 512).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from whatif_bench.errors import WhatIfError

FUTURES = ("replay", "novel")
# Axis names as users write them -> the columns of the corpus index that hold them.
AXIS_COLUMNS = {
    "simulator": "simulator",
    "future": "future",
    "K": "k",
    "C": "c_label",
    "ell": "event_length",
    "E": "e_setting",
}
K_VALUES = (1, 2, 3, 4, 5)
EVENT_LENGTHS = (32, 64, 128, 256, 512)
E_SETTINGS = ("Efew", "Emax")
MIN_GAP = 32
PREFIX_SHARE = 0.40
BUFFER_SHARE = 0.02
MAX_EVENTS = 64
FEWEST_EVENTS = 1

SHARED_CONTEXTS = {"C1": (1024, 128), "C2": (2048, 256), "C3": (4096, 512)}
C4 = {
    "epanet": (8000, 864),  # baseline 9,216 steps of 300 s
    "sumo": (7488, 864),  # baseline 8,640 steps of 300 s: 26 days of context, 3 days ahead
    "opendc": (7488, 864),  # baseline 8,640 steps of 300 s
    "gridlabd": (7200, 720),  # baseline 20,160 steps of 60 s: 5 days of context, 12 h ahead
}


class AxisError(WhatIfError):
    """An axis setting is impossible (unknown, or does not fit the baseline)."""


def contexts(simulator: str) -> dict[str, tuple[int, int]]:
    """The four (context, prediction) lengths of a simulator, keyed C1..C4."""
    if simulator not in C4:
        raise AxisError(f"no C4 setting for simulator {simulator!r}; known: {sorted(C4)}")
    return {**SHARED_CONTEXTS, "C4": C4[simulator]}


def prefix_length(context: int) -> int:
    return math.ceil(PREFIX_SHARE * context)


def buffer_length(context: int) -> int:
    return math.ceil(BUFFER_SHARE * context)


def usable_length(context: int) -> int:
    """Steps between the event-free prefix and the end buffer."""
    return context - prefix_length(context) - buffer_length(context)


def most_events(context: int, event_length: int) -> int:
    """The most events (each followed by 32 free steps) the context holds, at least 2, at most 64.

    At least 2 keeps the two E settings distinct; the context is extended when 2 do not fit.
    """
    fits = usable_length(context) // (event_length + MIN_GAP)
    return int(min(MAX_EVENTS, max(2, fits)))


def event_count(context: int, event_length: int, setting: str) -> int:
    if setting == "Efew":
        return FEWEST_EVENTS
    if setting == "Emax":
        return most_events(context, event_length)
    raise AxisError(f"unknown E setting {setting!r}; expected one of {list(E_SETTINGS)}")


def extended_context(context: int, event_length: int, n_events: int) -> int:
    """The smallest context >= ``context`` whose usable part holds ``n_events`` events."""
    needed = n_events * (event_length + MIN_GAP)
    length = context
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
        """The future event starts at the first forecast step; it is cut by the window end."""
        return min(self.event_length, self.prediction)


def layout(context: int, prediction: int, event_length: int, setting: str) -> HistoryLayout:
    """Lay out the history of one (C, l, E) combination."""
    n_events = event_count(context, event_length, setting)
    length = extended_context(context, event_length, n_events)
    prefix = prefix_length(length)
    slack = usable_length(length) - n_events * (event_length + MIN_GAP)
    spacing = event_length + MIN_GAP + slack // n_events
    starts = tuple(prefix + i * spacing for i in range(n_events))
    return HistoryLayout(length, prediction, event_length, starts)
