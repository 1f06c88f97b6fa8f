"""Per-pair random streams: one ``SeedSequence`` child per pair, keyed by the pair's id.

The key is derived from the pair id's SHA-256, never from a running counter, so a pair draws the
same numbers whichever other pairs are generated and in whatever order or process. The
convention is the ``pairs`` domain of ``whatif_bench.seeding``, which builds the streams.
"""

from __future__ import annotations

import numpy as np

from whatif_bench.corpus.random_twin import slot_entropy
from whatif_bench.seeding import check_seed, rng, seed_sequence, sha256_words


def pair_seed_sequence(master_seed: int, pair_id: str) -> np.random.SeedSequence:
    """The seed sequence of one pair: the master seed, spawned at a key hashed from ``pair_id``."""
    return seed_sequence("pairs", check_seed(master_seed, "master seed"), pair_id)


def pair_rng(master_seed: int, pair_id: str) -> np.random.Generator:
    """A PCG64 generator for one pair (see ``pair_seed_sequence``)."""
    return rng("pairs", check_seed(master_seed, "master seed"), pair_id)


def pair_entropy(master_seed: int, pair_id: str) -> np.ndarray:
    """The words ``pair_seed_sequence`` mixes, as ``uint64`` (the master seed's 32-bit words
    padded to NumPy's pool size, then the pair id's SHA-256 words): what the numba twin of the
    pair's generator is seeded with (``corpus.random_twin.seed_state``)."""
    return slot_entropy(check_seed(master_seed, "master seed"), sha256_words(pair_id))
