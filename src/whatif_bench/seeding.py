"""Every random draw of the toolkit: one table of seed domains, one seed check, one builder.

A *domain* is one place the toolkit draws random numbers. ``DOMAINS`` names each with what it
draws for, its *convention* (how its ``SeedSequence`` is built from the seed and a key) and the
parts of its key; ``rng(domain, seed, *key)`` builds that domain's ``Generator`` (always
``Generator(PCG64(seed_sequence(domain, seed, *key)))``) and nothing else in the toolkit makes one
(``tests/test_seeding.py`` scans the sources for ``default_rng``, ``SeedSequence``,
``RandomState`` and ``np.random.<anything>(...)`` elsewhere).

The conventions differ by domain, and stay so on purpose: each was fixed when its outputs were
first made, and changing one would change every output made with it -- every corpus (the
pairs), every training stream and its shards (stream, shuffle), every ``--subset`` draw, every
check report. So ``rng`` reproduces each bit for bit:

``pair-hash`` (``pairs``)
    ``SeedSequence(seed, spawn_key=sha256_words(pair_id))``: the spawn key is the first four
    little-endian 32-bit words of the SHA-256 of the pair id, never a running counter, so a pair
    draws the same numbers whichever other pairs are generated, in whatever order or process.
``spawn`` (``stream``, ``shuffle``)
    ``SeedSequence(seed, spawn_key=(code, *key))``: the domain's 32-bit code keeps its children
    apart from any other use of the same seed (``0x57484946`` "WHIF" for the stream's slots,
    ``0x53485546`` "SHUF" for the torch dataset's epochs). Slot ``i`` is child ``i`` of
    ``SeedSequence(seed, spawn_key=(code,))``, the one ``spawn`` would give; ``corpus.random_twin``
    reproduces this inside numba from the same code.
``plain`` (``subset``, ``checks``)
    ``SeedSequence(seed)``, what ``np.random.default_rng(seed)`` builds; no key. The two plain
    domains draw the same stream for the same seed (harmless: they draw on unrelated things,
    a task frame and a relationship's contexts), which keeping them bit-identical keeps.
``entropy-list`` (``tuned``)
    ``SeedSequence([seed, *key])``, what ``np.random.default_rng([seed, *key])`` builds; the key
    is the task's four 32-bit words (``evaluation.forecasters.task_key``).
``crc32`` (``imprints``)
    ``SeedSequence(crc32("/".join(key)))``: no seed (the imprint figures are fixed for a spec),
    the key text's CRC-32 is the entropy.

The seed itself is checked once, here: ``check_seed`` (a non-negative integer of at most
``MAX_SEED`` = 2**63 - 1, stored as a signed 64-bit HDF5 attribute; ``bool``, floats, NaN,
strings refused) and ``resolve_seed`` (the same, or fresh entropy for ``None``, after
Gymnasium's convention). This module is core: NumPy is imported only when a generator is built,
so the command line's parser (``cli_types.seed_int``) stays free of it.
"""

from __future__ import annotations

import hashlib
import numbers
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from whatif_bench.errors import WhatIfError

if TYPE_CHECKING:
    import numpy as np

MAX_SEED = 2**63 - 1  # the master seed is stored as a signed 64-bit HDF5 attribute
SEED_RANGE = "between 0 and 2**63 - 1"  # how the messages name 0 .. MAX_SEED

# the conventions (module doc)
PAIR_HASH = "pair-hash"
SPAWN = "spawn"
PLAIN = "plain"
ENTROPY_LIST = "entropy-list"
CRC32 = "crc32"
CONVENTIONS = {
    PAIR_HASH: "SeedSequence(seed, spawn_key=sha256_words(pair_id))",
    SPAWN: "SeedSequence(seed, spawn_key=(code, *key))",
    PLAIN: "SeedSequence(seed)",
    ENTROPY_LIST: "SeedSequence([seed, *key])",
    CRC32: 'SeedSequence(crc32("/".join(key)))',
}


class SeedError(WhatIfError, ValueError):
    """A seed is not a non-negative integer within 0 .. 2**63 - 1 (or a key does not fit)."""


@dataclass(frozen=True)
class SeedDomain:
    """One place the toolkit draws random numbers (module doc)."""

    name: str
    purpose: str  # what is drawn, and by which function
    convention: str  # a key of CONVENTIONS
    key: tuple[str, ...]  # the names of the key's parts, in order
    code: int | None = None  # the spawn-key code of a SPAWN domain

    @property
    def seeded(self) -> bool:
        """Whether the domain takes a seed (all but ``crc32``, whose key is its entropy)."""
        return self.convention != CRC32


STREAM_CODE = 0x57484946  # "WHIF"
SHUFFLE_CODE = 0x53485546  # "SHUF"

DOMAINS: dict[str, SeedDomain] = {
    domain.name: domain
    for domain in (
        SeedDomain(
            "pairs",
            "the generator's recipe of one pair (corpus.seeds.pair_rng, corpus.recipe), and the "
            "spec diagnosis' sample of pairs, keyed 'diagnose-sample/SIM/TARGET' "
            "(generator.diagnose.sampled_keys)",
            PAIR_HASH,
            ("pair_id",),
        ),
        SeedDomain(
            "stream",
            "the training stream's task of one slot (stream.seeding.slot_rng; in numba "
            "corpus.random_twin.slot_entropy(seed, (STREAM_CODE,)))",
            SPAWN,
            ("slot",),
            STREAM_CODE,
        ),
        SeedDomain(
            "shuffle",
            "the torch CorpusDataset's order of one epoch (stream.torch_data.CorpusDataset.order)",
            SPAWN,
            ("epoch",),
            SHUFFLE_CODE,
        ),
        SeedDomain(
            "subset",
            "the stratified --subset draw of evaluate and export (corpus.selection.select_tasks)",
            PLAIN,
            (),
        ),
        SeedDomain(
            "checks",
            "the random contexts of the rule checks (relationships.checks.check_relationship)",
            PLAIN,
            (),
        ),
        SeedDomain(
            "imprints",
            "the sampled events of the imprint figures (relationships.imprints.event_rows)",
            CRC32,
            ("simulator", "target", "k"),
        ),
        SeedDomain(
            "tuned",
            "the (origin, horizon) pairs a tuned baseline fits on for one task "
            "(evaluation.forecasters.TunedPairs.pairs)",
            ENTROPY_LIST,
            ("word0", "word1", "word2", "word3"),
        ),
    )
}


def _is_integer(value: object) -> bool:
    """An ``int`` or NumPy integer, never a ``bool`` (``numbers.Integral`` spares numpy)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _checked(seed: object, what: str, expected: str) -> int:
    if not _is_integer(seed):
        raise SeedError(f"the {what} must be {expected}, got {seed!r}")
    value = int(seed)  # type: ignore[call-overload]
    if not 0 <= value <= MAX_SEED:
        raise SeedError(f"the {what} must be {SEED_RANGE}, got {value}")
    return value


def check_seed(seed: object, what: str = "seed") -> int:
    """``seed`` as an ``int``, checked: an integer (``int`` or NumPy) in 0 .. ``MAX_SEED``.

    A ``SeedError`` names ``what`` ("the master seed must be ...") for booleans, floats (NaN and
    1.0 too), strings, ``None`` and values outside 0 .. 2**63 - 1.
    """
    return _checked(seed, what, "a non-negative integer")


def fresh_seed() -> int:
    """A seed in 0 .. ``MAX_SEED`` from fresh OS entropy (what ``resolve_seed(None)`` takes)."""
    import numpy as np

    # numpy types entropy as int | Sequence[int] | None; drawn fresh it is an int
    return int(np.random.SeedSequence().entropy % (MAX_SEED + 1))  # type: ignore[operator]


def resolve_seed(seed: object, what: str = "seed") -> int:
    """The seed a stream uses: ``seed`` itself, checked, or fresh entropy when ``None``.

    Raises ``SeedError`` for booleans, non-integers, negative numbers and values above
    ``2**63 - 1``.
    """
    if seed is None:
        return fresh_seed()
    return _checked(seed, what, "a non-negative integer or None")


def sha256_words(text: str) -> tuple[int, int, int, int]:
    """The first four little-endian 32-bit words of the SHA-256 of ``text`` (UTF-8)."""
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    words = tuple(int.from_bytes(digest[i : i + 4], "little") for i in range(0, 16, 4))
    return words  # type: ignore[return-value]


def _domain(name: str) -> SeedDomain:
    try:
        return DOMAINS[name]
    except KeyError:
        raise SeedError(f"no seed domain {name!r}; the domains are {sorted(DOMAINS)}") from None


def _key_words(domain: SeedDomain, key: tuple) -> list[int]:
    for part in key:
        if not _is_integer(part) or int(part) < 0:
            raise SeedError(
                f"the {domain.name} key's parts must be non-negative integers, got {part!r}"
            )
    return [int(part) for part in key]


def spawn_code(domain: str) -> int:
    """The spawn-key code of a ``spawn`` domain (``stream``: 0x57484946, ``shuffle``:
    0x53485546), for ``corpus.random_twin``'s numba twin of its seed sequence."""
    code = _domain(domain).code
    if code is None:
        raise SeedError(f"the {domain} domain has no spawn-key code (it is not a spawn domain)")
    return code


def seed_sequence(domain: str, seed: int | None, *key: object) -> np.random.SeedSequence:
    """The ``SeedSequence`` of ``domain`` for ``seed`` and ``key`` (its convention: module doc).

    ``seed`` is checked (``check_seed``); it must be ``None`` for the unseeded ``imprints``.
    ``key`` has the domain's parts (``DOMAINS[domain].key``), else a ``SeedError``.
    """
    import numpy as np

    spec = _domain(domain)
    if len(key) != len(spec.key):
        raise SeedError(
            f"the {spec.name} domain takes a key of {len(spec.key)} part(s) {spec.key}, "
            f"got {len(key)}: {key!r}"
        )
    if not spec.seeded:
        if seed is not None:
            raise SeedError(f"the {spec.name} domain takes no seed (its key is its entropy)")
        return np.random.SeedSequence(zlib.crc32("/".join(map(str, key)).encode()))
    value = check_seed(seed)
    if spec.convention == PAIR_HASH:
        (pair_id,) = key
        if not isinstance(pair_id, str):
            raise SeedError(f"the pairs key is a pair id (a string), got {pair_id!r}")
        return np.random.SeedSequence(entropy=value, spawn_key=sha256_words(pair_id))
    words = _key_words(spec, key)
    if spec.convention == SPAWN:
        return np.random.SeedSequence(entropy=value, spawn_key=(spawn_code(domain), *words))
    if spec.convention == ENTROPY_LIST:
        return np.random.SeedSequence([value, *words])
    return np.random.SeedSequence(value)  # PLAIN


def rng(domain: str, seed: int | None, *key: object) -> np.random.Generator:
    """The PCG64 ``Generator`` of ``domain`` for ``seed`` and ``key`` (see ``seed_sequence``)."""
    import numpy as np

    return np.random.Generator(np.random.PCG64(seed_sequence(domain, seed, *key)))
