"""Numbers and timestamps as text for the text exports (``llm`` CSV tables, ``gluonts`` JSON).

A float32 value is written as the shortest text that reads back to it exactly, a timestamp in
ISO 8601. Both are pure functions of the value, so an export may keep what it formatted and
look it up for the next task: ``FloatTexts`` and ``StampTexts`` do that for one export. A
covariate holds few distinct values and the tasks of a target share its timeline, so most
values of a task were already formatted for an earlier one (86 % of the float texts and all
but 16.7 k of 3.17 M stamps in the README's 760-task corpus). ``float_texts`` and
``iso_stamps`` format one array with nothing kept.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["FloatTexts", "StampTexts", "float_texts", "iso_stamps"]


# the most texts one FloatTexts keeps, and the most stamps one StampTexts keeps in all its spans:
# past it, it starts again empty (about 100 MiB of texts; the texts are the same either way,
# only formatted again)
MEMO_LIMIT = 1 << 20


def _shortest_exact(values: np.ndarray) -> list[str]:
    """Each float32 of ``values`` (shape (n,)) as the shortest text that reads back (via
    float64) to it exactly: numpy's shortest float32 repr, or, in the rare case where reading
    that text as float64 and rounding to float32 would give another value (double rounding),
    the float64 repr, which always reads back exactly. NaN stays NaN, -0.0 stays -0.0."""
    texts = [str(value) for value in values]
    if not texts:
        return texts
    back = np.array(texts, dtype=np.float64).astype(np.float32)
    wrong = ~((back == values) & (np.signbit(back) == np.signbit(values)))
    wrong &= ~(np.isnan(back) & np.isnan(values))
    for i in np.flatnonzero(wrong):
        texts[i] = repr(float(values[i]))
    return texts


class FloatTexts:
    """The shortest exact texts of float32 values, each distinct bit pattern formatted once
    for the life of the object (one export); -0.0 and 0.0, and NaN payloads, stay apart."""

    def __init__(self) -> None:
        self._texts: dict[int, str] = {}  # bit pattern -> text, at most MEMO_LIMIT of them

    def __call__(self, values: np.ndarray) -> np.ndarray:
        """The text of every value of ``values`` (any shape, cast to float32), flattened: an
        object array of ``str`` of shape (values.size,)."""
        import pandas as pd

        bits = np.ascontiguousarray(values, dtype=np.float32).ravel().view(np.uint32)
        # the distinct patterns in order of first appearance, by hashing: about 4 times faster
        # than numpy's sort-based unique on a task's values; which order does not matter
        where, patterns = pd.factorize(bits)
        patterns = np.asarray(patterns, dtype=np.uint32)
        keys = patterns.tolist()
        get = self._texts.get
        texts = [get(key) for key in keys]
        missing = [i for i, text in enumerate(texts) if text is None]
        if missing:
            if len(self._texts) + len(missing) > MEMO_LIMIT:
                self._texts.clear()
            fresh = _shortest_exact(patterns[missing].view(np.float32))
            for i, text in zip(missing, fresh, strict=True):
                texts[i] = self._texts[keys[i]] = text
        distinct = np.empty(patterns.size, dtype=object)
        distinct[:] = texts
        return distinct[where.ravel()]


class StampTexts:
    """``isoformat()`` of timestamps. Whole-second stamps at a regular step (every corpus
    task's), without a time zone or in one whose offset from UTC does not change over the
    stamps, are cut from a span of texts kept per step and offset for the life of the object
    (one export), which grows to cover each index asked: the tasks of a target share its
    timeline, so a task's stamps are a slice of texts made before. Other stamps are formatted
    each time."""

    def __init__(self) -> None:
        # (step in s, offset text) -> (first stamp of the span, s since 1970 on the wall
        # clock; the texts of the span's stamps)
        self._spans: dict[tuple[int, str], tuple[int, list[str]]] = {}

    def __call__(self, index: pd.DatetimeIndex) -> list[str]:
        """``stamp.isoformat()`` of every stamp of ``index``, shape (n,)."""
        wall, offset = _wall_clock(index)
        if wall is not None:
            seconds = wall.astype("datetime64[s]")
            if (seconds == wall).all():
                keys = seconds.view(np.int64)
                steps = np.diff(keys)
                if keys.size > 1 and steps[0] > 0 and (steps == steps[0]).all():
                    return self._regular(int(keys[0]), int(steps[0]), int(keys.size), offset)
                return [text + offset for text in _second_texts(keys)]
        return [stamp.isoformat() for stamp in index]

    def _regular(self, first: int, step: int, count: int, offset: str) -> list[str]:
        """The texts of ``count`` stamps ``first + i * step`` (s since 1970 on the wall clock)
        followed by ``offset``, from the span of ``(step, offset)``, grown (or, if it is not
        on the same grid or would pass ``MEMO_LIMIT`` stamps, started again) to hold them."""
        origin, texts = self._spans.get((step, offset), (first, []))
        end = origin + len(texts) * step
        low, high = min(origin, first), max(end, first + count * step)

        def made(seconds: np.ndarray) -> list[str]:
            return [text + offset for text in _second_texts(seconds)]

        if (first - origin) % step or not texts or (high - low) // step > MEMO_LIMIT:
            origin, texts = first, made(np.arange(count, dtype=np.int64) * step + first)
        else:
            if low < origin:
                texts = made(np.arange(low, origin, step, dtype=np.int64)) + texts
                origin = low
            if high > end:
                texts = texts + made(np.arange(end, high, step, dtype=np.int64))
        others = sum(len(kept) for key, (_, kept) in self._spans.items() if key != (step, offset))
        if others + len(texts) > MEMO_LIMIT:  # the other spans go (one span alone may be full)
            self._spans.clear()
        self._spans[(step, offset)] = (origin, texts)
        start = (first - origin) // step
        return texts[start : start + count]


def _wall_clock(index: pd.DatetimeIndex) -> tuple[np.ndarray | None, str]:
    """The stamps' wall-clock times (datetime64, shape (n,)) and the text of their offset from
    UTC as ``isoformat`` ends with it (``""`` without a zone); for zoned stamps, ``None`` when
    the offset changes over them (a clock change) or there are none."""
    if index.tz is None:
        return index.values, ""
    if not len(index):
        return None, ""
    wall = index.tz_localize(None).values
    offsets = wall.view(np.int64) - index.tz_convert(None).values.view(np.int64)
    if not (offsets == offsets[0]).all():
        return None, ""
    text, naive = index[0].isoformat(), index[0].tz_localize(None).isoformat()
    if not text.startswith(naive):
        return None, ""
    return wall, text[len(naive) :]


def _second_texts(seconds: np.ndarray) -> list[str]:
    """ISO 8601 texts (``YYYY-MM-DDTHH:MM:SS``) of seconds since 1970 (int64, shape (m,))."""
    texts: list[str] = np.datetime_as_string(seconds.view("datetime64[s]"), unit="s").tolist()
    return texts


def float_texts(values: np.ndarray) -> list[str]:
    """The shortest exact text of each value of ``values`` (any shape, cast to float32),
    flattened, shape (values.size,); see ``FloatTexts``."""
    texts: list[str] = FloatTexts()(values).tolist()
    return texts


def iso_stamps(index: pd.DatetimeIndex) -> list[str]:
    """``stamp.isoformat()`` of every stamp of ``index``, shape (n,); see ``StampTexts``."""
    return StampTexts()(index)
