"""Seeding of the training stream, after Gymnasium's convention.

One helper turns a user's seed (a non-negative integer, or ``None`` for fresh entropy) into a
``SeedSequence`` and reports the seed it used, so every stream can be replayed. The stream's
root is ``SeedSequence(seed, spawn_key=(STREAM_DOMAIN,))``; slot ``i`` (task number ``i``) draws
from its ``i``-th child -- the one ``root.spawn`` would give -- so a slot's task does not depend
on which worker makes it, nor on how many workers there are.
"""

from __future__ import annotations

import numpy as np

from whatif_bench.cli_types import MAX_SEED
from whatif_bench.errors import WhatIfError

# Keeps the stream's children apart from any other use of the same seed in this toolkit (the
# benchmark keys its pairs by a 4-word hash of the pair id, never by a 2-word key).
STREAM_DOMAIN = 0x57484946  # "WHIF"


class SeedError(WhatIfError, ValueError):
    """A seed is not a non-negative integer within 0 .. 2**63 - 1."""


def resolve_seed(seed: int | None) -> int:
    """The seed a stream uses: ``seed`` itself, checked, or fresh entropy when ``None``.

    Raises ``SeedError`` for booleans, non-integers, negative numbers and values above
    ``2**63 - 1``.
    """
    if seed is None:
        # numpy types entropy as int | Sequence[int] | None; drawn fresh it is an int
        return int(np.random.SeedSequence().entropy % (MAX_SEED + 1))  # type: ignore[operator]
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer):
        raise SeedError(f"the seed must be a non-negative integer or None, got {seed!r}")
    if not 0 <= int(seed) <= MAX_SEED:
        raise SeedError(f"the seed must be between 0 and 2**63 - 1, got {seed}")
    return int(seed)


def slot_rng(seed: int, slot: int) -> np.random.Generator:
    """The PCG64 generator of one slot: child ``slot`` of the stream's seed sequence."""
    sequence = np.random.SeedSequence(entropy=seed, spawn_key=(STREAM_DOMAIN, slot))
    return np.random.Generator(np.random.PCG64(sequence))
