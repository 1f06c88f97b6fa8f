"""Per-pair random streams: one ``SeedSequence`` child per pair, keyed by the pair's id.

The key is derived from the pair id's SHA-256, never from a running counter, so a pair draws the
same numbers whichever other pairs are generated and in whatever order or process.
"""

from __future__ import annotations

import hashlib

import numpy as np


def pair_seed_sequence(master_seed: int, pair_id: str) -> np.random.SeedSequence:
    """The seed sequence of one pair: the master seed, spawned at a key hashed from ``pair_id``."""
    if master_seed < 0:
        raise ValueError(f"the master seed must be >= 0, got {master_seed}")
    digest = hashlib.sha256(pair_id.encode("utf-8")).digest()
    key = tuple(int.from_bytes(digest[i : i + 4], "little") for i in range(0, 16, 4))
    return np.random.SeedSequence(entropy=master_seed, spawn_key=key)


def pair_rng(master_seed: int, pair_id: str) -> np.random.Generator:
    """A PCG64 generator for one pair (see ``pair_seed_sequence``)."""
    return np.random.Generator(np.random.PCG64(pair_seed_sequence(master_seed, pair_id)))
