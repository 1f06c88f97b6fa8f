"""Seeding of the training stream, after Gymnasium's convention.

One helper (``resolve_seed``, from ``whatif_bench.seeding``) turns a user's seed (a non-negative
integer, or ``None`` for fresh entropy) into the seed the stream uses and reports it, so every
stream can be replayed. The stream's root is ``SeedSequence(seed, spawn_key=(STREAM_DOMAIN,))``;
slot ``i`` (task number ``i``) draws from its ``i``-th child -- the one ``root.spawn`` would give
-- so a slot's task does not depend on which worker makes it, nor on how many workers there
are. This is the ``stream`` domain of ``whatif_bench.seeding``'s table.
"""

from __future__ import annotations

import numpy as np

from whatif_bench.seeding import SeedError, resolve_seed, rng, spawn_code

__all__ = ["STREAM_DOMAIN", "SeedError", "resolve_seed", "slot_rng"]

# Keeps the stream's children apart from any other use of the same seed in this toolkit (the
# benchmark keys its pairs by a 4-word hash of the pair id, never by a 2-word key).
STREAM_DOMAIN = spawn_code("stream")  # 0x57484946, "WHIF"


def slot_rng(seed: int, slot: int) -> np.random.Generator:
    """The PCG64 generator of one slot: child ``slot`` of the stream's seed sequence."""
    return rng("stream", seed, slot)
