"""``argparse`` types shared by the commands: a bad number is a usage error (exit 2) that says
what was expected, before any work starts."""

from __future__ import annotations

import argparse

MAX_SEED = 2**63


def positive_int(text: str) -> int:
    """An integer >= 1 (worker counts, sizes)."""
    try:
        value = int(text)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def seed_int(text: str) -> int:
    """A random seed: an integer with 0 <= seed < 2**63."""
    try:
        value = int(text)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(
            f"must be an integer seed in [0, 2**63), got {text!r}"
        ) from None
    if not 0 <= value < MAX_SEED:
        raise argparse.ArgumentTypeError(f"must be an integer seed in [0, 2**63), got {text!r}")
    return value
