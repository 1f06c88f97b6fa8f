"""argparse ``type=`` helpers: a bad number is a usage error (exit 2) with a clear message,
given before any work starts. Every count-like option has an upper bound as well as a lower
one, so an absurd value (``--jobs 10**400``, ``--count 10**30``) is refused up front instead of
overflowing or exhausting memory later (docs/RELIABILITY.md, section 8).

parser.add_argument("--jobs", type=jobs_int, default=default_jobs())
parser.add_argument("--seed", type=seed_int, default=0)
parser.add_argument("--count", type=count_int)
parser.add_argument("--days", type=days_float)
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable

# MAX_SEED is re-exported: the seed's range and check are whatif_bench.seeding's
from whatif_bench.seeding import MAX_SEED as MAX_SEED
from whatif_bench.seeding import SEED_RANGE, SeedError, check_seed

# Stream slots are numbered 0 .. count - 1 and stored as signed 64-bit integers (the HDF5
# shards' first_slot, the Parquet recipe); the shard bounds are generated lazily, so a count
# this large costs no memory up front.
MAX_COUNT = 2**63 - 1
# A shard is made whole in memory (by one worker, then written by the main process): with the
# largest tasks (C4 context of ~8,000 steps, K = 5: ~0.25 MB of float32) 16,384 tasks are
# ~4 GB; the default (4,096) is a quarter of that.
MAX_SHARD_SIZE = 16_384
# Worker processes: the work is CPU-bound, so more processes than cores only add memory (each
# worker holds its own copy of the worlds or an open corpus) and start-up time. Eight per core
# leaves room for oversubscribing on purpose; more is a typo.
JOBS_PER_CORE = 8
# Simulated days (simulate, worlds build): the base runs are 14 to 32 days; ten years is more
# than 100 times the longest, and at GridLAB-D's 60 s step already 5.3 million steps.
MAX_DAYS = 3660.0
# Time limits in seconds (relationships check --timeout, --dask-timeout): one day. Longer waits
# overflow the system's timers (select, threading) and are never what was meant.
MAX_WAIT_S = 86_400.0
# Integers longer than this are out of every range above; they are not converted (int() refuses
# more than 4,300 digits with a misleading message, and printing them would flood the terminal).
_MAX_DIGITS = 40


def max_jobs() -> int:
    """The largest ``--jobs`` (and ``--dask-local``): ``JOBS_PER_CORE`` x this machine's cores."""
    return JOBS_PER_CORE * (os.cpu_count() or 1)


def jobs_bound_help() -> str:
    """The ``--jobs`` bound as the options' help states it."""
    return (
        f"at most {JOBS_PER_CORE} per core ({max_jobs()} on this machine): the work is "
        "CPU-bound, so more processes only cost memory"
    )


def _shown(text: str, most: int = 40) -> str:
    """``text`` for a message, shortened when long (a 400-digit number stays one short line)."""
    text = text.strip()
    return text if len(text) <= most else f"{text[:20]}... ({len(text):,} characters)"


def _integer(text: str) -> int:
    """``text`` as an int; an integer of more than ``_MAX_DIGITS`` digits becomes +-10**40,
    outside every bound, without converting it."""
    stripped = text.strip()
    body = stripped.lstrip("+-").replace("_", "").lstrip("0")
    if body.isascii() and body.isdigit() and len(body) > _MAX_DIGITS:
        return -(10**_MAX_DIGITS) if stripped.startswith("-") else 10**_MAX_DIGITS
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {_shown(text)!r}") from None


def _value(text: str, value: int) -> str:
    """The value as the message shows it: the number, or the (shortened) text if huge."""
    return _shown(text) if abs(value) >= 10**_MAX_DIGITS else str(value)


def positive_int(text: str) -> int:
    """An integer >= 1, without an upper bound (the CLI's options use ``bounded_int``)."""
    value = _integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(
            f"must be a positive integer (>= 1), got {_value(text, value)}"
        )
    return value


def _one_to(text: str, top: int, shown_top: str) -> int:
    """``text`` as an integer in ``1 .. top``, else the usage error naming ``shown_top``."""
    value = _integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(
            f"must be a positive integer (>= 1), got {_value(text, value)}; "
            f"allowed: 1 to {shown_top}"
        )
    if value > top:
        raise argparse.ArgumentTypeError(
            f"must be between 1 and {shown_top}, got {_value(text, value)}"
        )
    return value


def bounded_int(top: int, high_text: str = "") -> Callable[[str], int]:
    """An argparse type: an integer in ``1 .. top``; ``high_text`` explains the bound in the
    message (e.g. "2**63 - 1")."""
    shown_top = f"{top:,}" + (f" ({high_text})" if high_text else "")

    def parse(text: str) -> int:
        return _one_to(text, top, shown_top)

    parse.__name__ = "bounded_int"
    return parse


#: ``whatif stream --count``: 1 .. 2**63 - 1 tasks.
count_int = bounded_int(MAX_COUNT, "2**63 - 1")
#: ``whatif stream --shard-size``: 1 .. 16,384 tasks per shard.
shard_size_int = bounded_int(MAX_SHARD_SIZE, "a shard is made whole in memory")


def jobs_int(text: str) -> int:
    """``--jobs`` and ``--dask-local``: worker processes, 1 .. ``max_jobs()`` (8 x the cores)."""
    shown_top = f"{max_jobs():,} ({JOBS_PER_CORE} per core, {os.cpu_count() or 1} cores)"
    return _one_to(text, max_jobs(), shown_top)


def seed_int(text: str) -> int:
    """A master seed: an integer with 0 <= seed <= 2**63 - 1 (``seeding.check_seed``)."""
    value = _integer(text)
    try:
        return check_seed(value)
    except SeedError:
        raise argparse.ArgumentTypeError(
            f"must be {SEED_RANGE}, got {_value(text, value)}"
        ) from None


def positive_float(text: str) -> float:
    """A finite number > 0 (``0``, negatives, ``nan``, ``inf`` and 1e400 are refused)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {_shown(text)!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {_shown(text)!r}")
    return value


def fraction(text: str) -> float:
    """``--subset``, ``--sample``: a number in (0, 1] (``nan``, ``inf`` and words are refused
    with the same message)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0.0 < value <= 1.0:  # also refuses nan and inf
        raise argparse.ArgumentTypeError(f"must be a fraction in (0, 1], got {_shown(text)!r}")
    return value


def bounded_float(high: float, high_text: str) -> Callable[[str], float]:
    """An argparse type: a finite number in ``(0, high]``; ``high_text`` names the unit."""

    def parse(text: str) -> float:
        value = positive_float(text)
        if value > high:
            raise argparse.ArgumentTypeError(
                f"must be a number in (0, {high:g}] {high_text}, got {_shown(text)!r}"
            )
        return value

    parse.__name__ = "bounded_float"
    return parse


#: ``--days``: simulated days in (0, 3660].
days_float = bounded_float(MAX_DAYS, "days (ten years)")
#: ``--timeout``, ``--dask-timeout``: seconds in (0, 86400].
seconds_float = bounded_float(MAX_WAIT_S, "s (one day)")


def shown(text: str) -> str:
    """``text`` as a message outside an argparse type quotes a value the user typed
    (``relationships eval --y``): shortened when long, by the rule of the types here."""
    return _shown(text)


def integer_text(text: str) -> str:
    """An argparse type for an integer option whose range is known only later (``relationships
    eval --k``: 1 to the target's number of covariates): ``text`` itself once it is an integer,
    so the later check can show it as typed (``integer_value``); anything else is the usage
    error ``invalid int value: ...``, shortened when long."""
    try:
        _integer(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"invalid int value: {_shown(text)!r}") from None
    return text


def integer_value(text: str) -> tuple[int, str]:
    """An ``integer_text`` as (its value, the value as a message shows it). One of more than 40
    digits is never converted: it is +-10**40, outside every range, shown shortened."""
    value = _integer(text)
    return value, _value(text, value)
