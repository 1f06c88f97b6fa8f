"""argparse ``type=`` helpers: a bad number is a usage error (exit 2) with a clear message.

parser.add_argument("--jobs", type=positive_int, default=default_jobs())
parser.add_argument("--seed", type=seed_int, default=0)
"""

from __future__ import annotations

import argparse

MAX_SEED = 2**63 - 1  # the master seed is stored as a signed 64-bit HDF5 attribute


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def positive_int(text: str) -> int:
    """An integer >= 1 (e.g. a number of worker processes)."""
    value = _integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer (>= 1), got {value}")
    return value


def seed_int(text: str) -> int:
    """A master seed: an integer with 0 <= seed <= 2**63 - 1."""
    value = _integer(text)
    if not 0 <= value <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"must be between 0 and 2**63 - 1, got {value}")
    return value
