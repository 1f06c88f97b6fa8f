"""The LLM prompt template, answer parsing and the retry harness of the ``llm`` export.

An LLM answers a task with one block per target, tagged with the target's dummy id::

    <target_1>
    (2024-02-05T00:00:00, 12.5)
    (2024-02-05T00:05:00, 12.75)
    </target_1>

``parse_response`` turns such an answer into arrays (or a reason why it cannot), never raising;
``forecast_with_retries`` asks again after a failure, with a growing wait, and imputes the naive
forecast (the last history value) when no answer parses; a ``FatalModelError`` is not retried.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from whatif_bench.errors import WhatIfError

FILES = ("past_covariates.csv", "past_target.csv", "future_timestamps.csv", "future_covariates.csv")

# The one prompt template. Placeholders: {targets}, {covariates}, {context_length},
# {prediction_length}, {interval_s}, {first_future}, {second_future}, {last_future},
# {example_tag}. It never names the real variables, the simulator or the units.
TEMPLATE = """\
You are given a time-series forecasting task as four CSV tables. The variable names are
anonymised: the target is {targets} and the covariates are {covariates}.

1. past_covariates.csv: the covariates {covariates} at {context_length} past timestamps.
2. past_target.csv: the target {targets} at the same {context_length} past timestamps.
3. future_timestamps.csv: the {prediction_length} future timestamps to forecast; the
   {targets} column is left blank.
4. future_covariates.csv: the covariates {covariates} at those {prediction_length} future
   timestamps. They are a known scenario, set in advance, and may differ from anything seen
   in the past.

Every table has a "timestamp" column in ISO 8601, one row every {interval_s} seconds.

Forecast {targets} at every future timestamp, using the past and the future covariates.

Answer format: for each target, in the order {targets}, write one block opened by its tag and
closed by the matching closing tag. Inside a block write one pair (timestamp, value) per line,
for every future timestamp exactly once, with the timestamp exactly as in
future_timestamps.csv and the value as a plain finite decimal number. For example:

{example_tag}
({first_future}, 0.0)
({second_future}, 0.0)
...
({last_future}, 0.0)
{example_close}

Write nothing else inside the blocks.
"""


def dummy_ids(prefix: str, count: int) -> tuple[str, ...]:
    """``<prefix_1>`` … ``<prefix_count>``: the anonymised variable names."""
    return tuple(f"<{prefix}_{i}>" for i in range(1, count + 1))


def render_prompt(
    targets: Sequence[str],
    covariates: Sequence[str],
    context_length: int,
    future_timestamps: Sequence[str],
    interval_s: int,
) -> str:
    """The prompt of one task: ``TEMPLATE`` filled in."""

    def listing(names: Sequence[str]) -> str:
        return ", ".join(names) if names else "(none)"

    stamps = list(future_timestamps)
    tag = _bare(targets[0])
    return TEMPLATE.format(
        targets=listing(targets),
        covariates=listing(covariates),
        context_length=context_length,
        prediction_length=len(stamps),
        interval_s=interval_s,
        first_future=stamps[0],
        second_future=stamps[1] if len(stamps) > 1 else stamps[0],
        last_future=stamps[-1],
        example_tag=f"<{tag}>",
        example_close=f"</{tag}>",
    )


def inline_prompt(task_folder) -> str:
    """``prompt.txt`` of a task folder followed by its four tables, for text-only model APIs.

    Each table is appended under its file name in a fenced code block, in ``FILES`` order.
    """
    from pathlib import Path

    folder = Path(task_folder)
    parts = [(folder / "prompt.txt").read_text(encoding="utf-8")]
    for name in FILES:
        parts.append(f"\n{name}:\n```csv\n{(folder / name).read_text(encoding='utf-8')}```\n")
    return "".join(parts)


# ---- parsing ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ParsedAnswer:
    """The values of one answer, or why it could not be read.

    ``values`` maps each variable (as passed in) to a float64 array in the order of the
    timestamps given to ``parse_response``; it is ``None`` when ``ok`` is false, and then
    ``reason`` says what was wrong.
    """

    ok: bool
    values: dict[str, np.ndarray] | None = None
    reason: str | None = None

    def array(self) -> np.ndarray:
        """The values as one (V, H) array in variable order."""
        if not self.ok or self.values is None:
            raise ValueError(f"no values: {self.reason}")
        return np.stack(list(self.values.values()))


_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_STAMP = re.compile(
    r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?)?(?:Z|[+-]\d{2}:?\d{2})?"
)
_PAIR = re.compile(r"\(([^(),]*),([^(),]*)\)")
_FENCE = re.compile(r"^[ \t]*```[^\n]*$", re.MULTILINE)
_FILLER = re.compile(r"[\s,;*\-]*")  # what may separate pairs: space, commas, list bullets
_QUOTES = "'\"`"


def _bare(variable: str) -> str:
    """``<target_1>`` and ``target_1`` both name the tag ``target_1``."""
    return variable.strip().removeprefix("<").removesuffix(">").strip()


def _short(text: str, limit: int = 40) -> str:
    text = " ".join(text.split())
    return repr(text if len(text) <= limit else text[:limit] + "…")


def _as_timestamp(text: str) -> pd.Timestamp | None:
    text = text.strip().strip(_QUOTES).strip()
    if _STAMP.fullmatch(text) is None:
        return None
    try:
        stamp = pd.Timestamp(text)
    except Exception:  # noqa: BLE001 - any parse failure is a bad timestamp
        return None
    return None if stamp is pd.NaT else stamp


def _block(text: str, tag: str) -> tuple[str | None, str | None]:
    """The inside of the one ``<tag>…</tag>`` block, or ``(None, reason)``."""
    name = re.escape(tag)
    opening = list(re.finditer(rf"<\s*{name}\s*>", text))
    closing = list(re.finditer(rf"<\s*/\s*{name}\s*>", text))
    if not opening:
        return None, f"no <{tag}> block"
    if len(opening) > 1:
        return None, f"{len(opening)} <{tag}> blocks, expected one"
    if not closing:
        return None, f"<{tag}> is never closed (truncated answer?)"
    if len(closing) > 1:
        return None, f"{len(closing)} </{tag}> closing tags, expected one"
    if closing[0].start() < opening[0].end():
        return None, f"</{tag}> comes before <{tag}>"
    return text[opening[0].end() : closing[0].start()], None


def _parse_block(
    inside: str, tag: str, expected: dict[pd.Timestamp, int]
) -> tuple[np.ndarray | None, str | None]:
    inside = _FENCE.sub("", inside)
    values = np.full(len(expected), np.nan)
    seen = np.zeros(len(expected), dtype=bool)
    last = 0
    for match in _PAIR.finditer(inside):
        between = inside[last : match.start()]
        if _FILLER.fullmatch(between) is None:
            return None, f"unexpected text in <{tag}>: {_short(between)}"
        last = match.end()
        stamp_text, value_text = match.group(1), match.group(2)
        stamp = _as_timestamp(stamp_text)
        if stamp is None:
            return None, f"<{tag}>: {_short(stamp_text)} is not a timestamp"
        where = expected.get(stamp)
        if where is None:
            return None, f"<{tag}>: {stamp.isoformat()} is not one of the future timestamps"
        if seen[where]:
            return None, f"<{tag}>: {stamp.isoformat()} appears more than once"
        value_text = value_text.strip().strip(_QUOTES).strip()
        if value_text.lower().lstrip("+-") in ("nan", "inf", "infinity"):
            return None, f"<{tag}>: value {_short(value_text)} at {stamp.isoformat()} is not finite"
        if _NUMBER.fullmatch(value_text) is None:
            return (
                None,
                f"<{tag}>: value {_short(value_text)} at {stamp.isoformat()} is not a number",
            )
        value = float(value_text)
        if not np.isfinite(value):
            return None, f"<{tag}>: value {_short(value_text)} at {stamp.isoformat()} is not finite"
        values[where] = value
        seen[where] = True
    rest = inside[last:]
    if _FILLER.fullmatch(rest) is None:
        return None, f"unexpected text in <{tag}>: {_short(rest)}"
    if not seen.all():
        missing = int((~seen).sum())
        first = next(stamp for stamp, i in expected.items() if not seen[i])
        return None, f"<{tag}>: {missing} future timestamp(s) missing, first {first.isoformat()}"
    return values, None


def parse_response(
    text: str,
    timestamps: Sequence | pd.DatetimeIndex,
    variables: Sequence[str] = ("<target_1>",),
) -> ParsedAnswer:
    """Read an LLM answer: per variable, a ``(timestamp, value)`` pair for every timestamp.

    Tolerant of text around the blocks, blank lines, markdown code fences, list bullets and
    quotes; strict about the content: one block per variable, every timestamp exactly once and
    no other, every value a finite decimal number. Never raises on a bad answer; the returned
    ``ParsedAnswer`` says why it failed.
    """
    if not isinstance(text, str):
        return ParsedAnswer(False, reason=f"the answer is a {type(text).__name__}, not text")
    try:
        stamps = [pd.Timestamp(stamp) for stamp in timestamps]
    except Exception as exc:  # noqa: BLE001 - the caller's timestamps, reported not raised
        return ParsedAnswer(False, reason=f"bad expected timestamps ({exc})")
    expected = {stamp: i for i, stamp in enumerate(stamps)}
    if len(expected) != len(stamps):
        return ParsedAnswer(False, reason="the expected timestamps are not unique")
    try:
        return _parse(text, expected, variables)
    except Exception as exc:  # noqa: BLE001 - the contract: a reason, never an exception
        return ParsedAnswer(
            False, reason=f"could not read the answer ({type(exc).__name__}: {exc})"
        )


def _parse(text: str, expected: dict[pd.Timestamp, int], variables: Sequence[str]) -> ParsedAnswer:
    values: dict[str, np.ndarray] = {}
    for variable in variables:
        tag = _bare(variable)
        inside, reason = _block(text, tag)
        if inside is None:
            return ParsedAnswer(False, reason=reason)
        array, reason = _parse_block(inside, tag, expected)
        if array is None:
            return ParsedAnswer(False, reason=reason)
        values[variable] = array
    return ParsedAnswer(True, values=values)


# ---- retries ------------------------------------------------------------------------------


def growing_wait(attempt: int) -> float:
    """Seconds to wait after failed attempt ``attempt`` (1, 2, …): 1, 2, 4, … capped at 60."""
    return float(min(2.0 ** (attempt - 1), 60.0))


@dataclass(frozen=True)
class RetryResult:
    """The forecast of one task and how it was obtained.

    ``values`` is (V, H) float64 in variable and timestamp order; ``attempts`` the number of
    calls to ``ask``; ``imputed`` whether every attempt failed and ``values`` is the naive
    forecast; ``reasons`` why each failed attempt failed (empty on a first-time success).
    """

    values: np.ndarray
    attempts: int
    imputed: bool
    reasons: list[str] = field(default_factory=list)

    @property
    def point(self) -> np.ndarray:
        """The forecast of the first target (the only one in a WhatIf-Bench task)."""
        return self.values[0]


class FatalModelError(WhatIfError):
    """A model call that must not be retried: asking again cannot help (a refused key, a bad
    request, a bug in the client). ``forecast_with_retries`` re-raises it at once; ``whatif
    llm run`` stops the whole run with it."""


def forecast_with_retries(
    ask: Callable[[str], str],
    prompt: str,
    timestamps: Sequence | pd.DatetimeIndex,
    history_last_value: float | Sequence[float],
    max_attempts: int = 10,
    wait: Callable[[int], float] = growing_wait,
    variables: Sequence[str] = ("<target_1>",),
    sleep: Callable[[float], object] = time.sleep,
) -> RetryResult:
    """Ask up to ``max_attempts`` times until the answer parses; else impute the naive forecast.

    A call to ``ask`` that raises an ``Exception`` (a timeout, a rate limit, a server error)
    counts as a failed attempt like an unparseable answer, except ``FatalModelError``, which
    is re-raised at once, without another attempt: raise it from ``ask`` for failures that
    asking again cannot mend (HTTP 401/403/400, a bug in your client). Between attempts
    ``sleep(wait(n))`` is called, ``n`` the failed attempt's number; there is no wait after the
    last attempt. ``history_last_value`` is one value per variable (or a single value for a
    single variable): the naive forecast repeats it.
    """
    if max_attempts < 1:
        raise ValueError("max_attempts must be at least 1")
    variables = tuple(variables)
    last = np.atleast_1d(np.asarray(history_last_value, dtype=np.float64))
    if last.shape != (len(variables),):
        raise ValueError(f"need one last history value per variable ({len(variables)})")
    horizon = len(timestamps)
    reasons: list[str] = []
    for attempt in range(1, max_attempts + 1):
        try:
            answer = ask(prompt)
        except FatalModelError:
            raise
        except Exception as exc:  # noqa: BLE001 - any other failure of the call is retried
            reasons.append(f"ask failed: {type(exc).__name__}: {exc}")
        else:
            parsed = parse_response(answer, timestamps, variables)
            if parsed.ok:
                return RetryResult(parsed.array(), attempt, False, reasons)
            reasons.append(str(parsed.reason))
        if attempt < max_attempts:
            sleep(wait(attempt))
    naive = np.repeat(last[:, None], horizon, axis=1)
    return RetryResult(naive, max_attempts, True, reasons)
