"""numba twins of the NumPy draws that recipes make (the corpus's pairs and the training stream).

A pair's generator is ``Generator(PCG64(SeedSequence(seed, spawn_key=key)))``: for the corpus the
key is the pair id's SHA-256 words (``corpus.seeds``, the ``pairs`` domain of
``whatif_bench.seeding``), for the stream ``(STREAM_DOMAIN, slot)`` (``stream.seeding``). Making
one in Python costs about 20 us and each draw 1-2 us, more than all the arithmetic of a pair, so
the generator's and the stream's kernels draw the very same numbers inside numba: the functions
here reproduce, bit for bit, NumPy's ``SeedSequence`` mixing, its ``PCG64`` (128-bit LCG with
the XSL-RR output), and the ``Generator`` methods the recipes call:
``integers(n)`` (Lemire's bounded draw on 32-bit halves, which ``PCG64`` buffers),
``random()``, ``uniform(low, high)`` and ``choice(n, p=p)`` (a cumulative sum searched with one
``random()``). tests/test_stream_kernels.py checks every one against NumPy itself.

The jitted draws without an underscore (``seed_state``, ``next_integer``, ``next_double``,
``next_uniform``, ``next_choice``) are for other jitted code; Python calls the validating
wrappers (``slot_generator``, ``draw_integers`` ...).

A generator's state is a ``uint64`` array of ``STATE_WORDS``: the 128-bit state and increment as
(high, low) words, then PCG64's buffered 32-bit half (a flag and the value). All arithmetic is
on ``uint64`` without overflow (products of 32-bit halves), so the same code runs as plain
Python under ``NUMBA_DISABLE_JIT=1`` without NumPy overflow warnings.
"""

from __future__ import annotations

import numba
import numpy as np

from whatif_bench.relationships.kernels import JIT_OPTIONS

STATE_WORDS = 6  # state high, state low, increment high, increment low, has a half, the half
STATE_HI, STATE_LO, INC_HI, INC_LO, HAS_HALF, HALF = range(STATE_WORDS)

_U0 = np.uint64(0)
_U1 = np.uint64(1)
_M32 = np.uint64(0xFFFFFFFF)
_TWO32 = np.uint64(1 << 32)
_S11 = np.uint64(11)
_S16 = np.uint64(16)
_S32 = np.uint64(32)
_S58 = np.uint64(58)
_S63 = np.uint64(63)
_S64 = np.uint64(64)
# NumPy's SeedSequence constants (numpy/random/bit_generator.pyx) and pool size
_POOL = 4
_INIT_A = np.uint64(0x43B0D7E5)
_MULT_A = np.uint64(0x931E8875)
_INIT_B = np.uint64(0x8B51F9DD)
_MULT_B = np.uint64(0x58F38DED)
_MIX_L = np.uint64(0xCA01F9DD)
_MIX_R = np.uint64(0x4973F715)
# PCG64's default 128-bit multiplier, (high, low)
_PCG_MULT_HI = np.uint64(0x2360ED051FC65DA4)
_PCG_MULT_LO = np.uint64(0x4385DF649FCCF645)
_DOUBLE_UNIT = 1.0 / 9007199254740992.0  # 2 ** -53


# ---- 64- and 128-bit arithmetic without overflow -----------------------------------------
@numba.njit(**JIT_OPTIONS)
def _mul64(x, y):
    """The full 128-bit product of two ``uint64`` as (high, low) words."""
    x0, x1 = x & _M32, x >> _S32
    y0, y1 = y & _M32, y >> _S32
    w0 = x0 * y0
    t = x1 * y0 + (w0 >> _S32)
    w1 = (t & _M32) + x0 * y1
    high = x1 * y1 + (t >> _S32) + (w1 >> _S32)
    low = (w0 & _M32) | ((w1 & _M32) << _S32)
    return high, low


@numba.njit(**JIT_OPTIONS)
def _add64(x, y):
    """``x + y`` modulo 2**64 and the carry (0 or 1)."""
    low = (x & _M32) + (y & _M32)
    high = (x >> _S32) + (y >> _S32) + (low >> _S32)
    return (low & _M32) | ((high & _M32) << _S32), high >> _S32


@numba.njit(**JIT_OPTIONS)
def _low64(x, y):
    """``x * y`` modulo 2**64."""
    return _mul64(x, y)[1]


@numba.njit(**JIT_OPTIONS)
def _step(state: np.ndarray) -> None:
    """One PCG64 step: ``state = state * MULT + inc`` modulo 2**128."""
    s_hi, s_lo = state[STATE_HI], state[STATE_LO]
    high, low = _mul64(s_lo, _PCG_MULT_LO)
    high = _add64(high, _low64(s_hi, _PCG_MULT_LO))[0]
    high = _add64(high, _low64(s_lo, _PCG_MULT_HI))[0]
    low, carry = _add64(low, state[INC_LO])
    high = _add64(_add64(high, state[INC_HI])[0], carry)[0]
    state[STATE_HI], state[STATE_LO] = high, low


# ---- SeedSequence -> PCG64 -----------------------------------------------------------------
@numba.njit(**JIT_OPTIONS)
def _hashmix(value, hash_const: np.ndarray):
    value = value ^ hash_const[0]
    hash_const[0] = (hash_const[0] * _MULT_A) & _M32
    value = (value * hash_const[0]) & _M32
    return value ^ (value >> _S16)


@numba.njit(**JIT_OPTIONS)
def _mix(x, y):
    result = (((_MIX_L * x) & _M32) + _TWO32 - ((_MIX_R * y) & _M32)) & _M32
    return result ^ (result >> _S16)


@numba.njit(**JIT_OPTIONS)
def seed_state(entropy: np.ndarray, state: np.ndarray) -> None:
    """Seed ``state`` as ``PCG64(SeedSequence(...))`` does from the assembled entropy words.

    ``entropy`` holds NumPy's assembled uint32 words (the run entropy padded to the pool size,
    then the spawn key), one per ``uint64``.
    """
    pool = np.zeros(_POOL, dtype=np.uint64)
    hash_const = np.full(1, _INIT_A, dtype=np.uint64)
    for i in range(_POOL):
        pool[i] = _hashmix(entropy[i] if i < entropy.shape[0] else _U0, hash_const)
    for i_src in range(_POOL):
        for i_dst in range(_POOL):
            if i_src != i_dst:
                pool[i_dst] = _mix(pool[i_dst], _hashmix(pool[i_src], hash_const))
    for i_src in range(_POOL, entropy.shape[0]):
        for i_dst in range(_POOL):
            pool[i_dst] = _mix(pool[i_dst], _hashmix(entropy[i_src], hash_const))
    # generate_state(4, uint64): eight uint32 words, paired little-endian
    words = np.zeros(8, dtype=np.uint64)
    mult = _INIT_B
    for i in range(8):
        value = pool[i % _POOL] ^ mult
        mult = (mult * _MULT_B) & _M32
        value = (value * mult) & _M32
        words[i] = value ^ (value >> _S16)
    seed_hi, seed_lo = words[0] | (words[1] << _S32), words[2] | (words[3] << _S32)
    inc_hi, inc_lo = words[4] | (words[5] << _S32), words[6] | (words[7] << _S32)
    # pcg_setseq_128_srandom_r: inc = (initseq << 1) | 1; step; state += initstate; step
    state[INC_HI] = (inc_hi << _U1) | (inc_lo >> _S63)
    state[INC_LO] = (inc_lo << _U1) | _U1
    state[STATE_HI], state[STATE_LO] = _U0, _U0
    _step(state)
    low, carry = _add64(state[STATE_LO], seed_lo)
    state[STATE_HI] = _add64(_add64(state[STATE_HI], seed_hi)[0], carry)[0]
    state[STATE_LO] = low
    _step(state)
    state[HAS_HALF], state[HALF] = _U0, _U0


# ---- the draws ---------------------------------------------------------------------------
@numba.njit(**JIT_OPTIONS)
def _next64(state: np.ndarray):
    """PCG64's next 64-bit output (XSL-RR of the stepped state)."""
    _step(state)
    value = state[STATE_HI] ^ state[STATE_LO]
    rotation = state[STATE_HI] >> _S58
    return (value >> rotation) | (value << ((_S64 - rotation) & _S63))


@numba.njit(**JIT_OPTIONS)
def _next32(state: np.ndarray):
    """PCG64's next 32-bit output: the low half of a 64-bit output, then its high half."""
    if state[HAS_HALF] != _U0:
        state[HAS_HALF] = _U0
        return state[HALF]
    value = _next64(state)
    state[HAS_HALF] = _U1
    state[HALF] = value >> _S32
    return value & _M32


@numba.njit(**JIT_OPTIONS)
def next_double(state: np.ndarray) -> float:
    """``Generator.random()``: a double in [0, 1) from the top 53 bits of a 64-bit output."""
    return float(_next64(state) >> _S11) * _DOUBLE_UNIT


@numba.njit(**JIT_OPTIONS)
def next_integer(state: np.ndarray, n: int) -> np.int64:
    """``Generator.integers(n)`` for ``1 <= n <= 2**32 - 1``: Lemire's method on 32-bit draws.

    ``n == 1`` draws nothing (NumPy returns 0 at once).
    """
    if n == 1:
        return np.int64(0)
    bound = np.uint64(n)
    product = _next32(state) * bound
    leftover = product & _M32
    if leftover < bound:
        threshold = (_M32 - (bound - _U1)) % bound
        while leftover < threshold:
            product = _next32(state) * bound
            leftover = product & _M32
    return np.int64(product >> _S32)


@numba.njit(**JIT_OPTIONS)
def next_choice(state: np.ndarray, cdf: np.ndarray, count: int) -> int:
    """``Generator.choice(count, p=p)`` given ``cdf`` as NumPy builds it from ``p`` (see
    ``choice_cdf``): one ``random()`` searched in ``cdf[:count]`` (``side="right"``)."""
    u = next_double(state)
    index = 0
    while index < count and cdf[index] <= u:
        index += 1
    return index


@numba.njit(**JIT_OPTIONS)
def next_uniform(state: np.ndarray, low: float, span: float) -> float:
    """``Generator.uniform(low, low + span)``: ``low + span * random()``."""
    return low + span * next_double(state)


# ---- public, validating wrappers -------------------------------------------------------------
def slot_entropy(seed: int, key: tuple[int, ...]) -> np.ndarray:
    """The uint32 words NumPy's ``SeedSequence(seed, spawn_key=key)`` mixes, as ``uint64``.

    The run entropy (the seed's little-endian 32-bit words) is padded with zeros to the pool
    size, then each spawn-key entry's words follow.
    """
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise ValueError(f"the seed must be a non-negative integer, got {seed!r}")
    words = _words(int(seed))
    words += [0] * (_POOL - len(words))
    for part in key:
        if isinstance(part, bool) or not isinstance(part, int | np.integer) or part < 0:
            raise ValueError(f"spawn-key entries must be non-negative integers, got {part!r}")
        words += _words(int(part))
    return np.asarray(words, dtype=np.uint64)


def _words(value: int) -> list[int]:
    words = [value & 0xFFFFFFFF]
    value >>= 32
    while value:
        words.append(value & 0xFFFFFFFF)
        value >>= 32
    return words


def choice_cdf(weights) -> np.ndarray:
    """The cumulative sum ``Generator.choice(n, p=weights / weights.sum())`` searches, (n,)
    float64, computed with NumPy's own operations so it is the same to the bit."""
    p = np.asarray(weights, dtype=float)
    if p.ndim != 1 or p.size == 0 or not np.all(np.isfinite(p)) or np.any(p < 0) or p.sum() <= 0:
        raise ValueError(f"weights must be a non-empty list of finite values >= 0, got {weights}")
    p = p / p.sum()
    cdf = p.cumsum()
    cdf /= cdf[-1]
    return cdf


def slot_generator(seed: int, key: tuple[int, ...]) -> np.ndarray:
    """The state (``STATE_WORDS`` uint64) of ``PCG64(SeedSequence(seed, spawn_key=key))``."""
    state = np.zeros(STATE_WORDS, dtype=np.uint64)
    seed_state(slot_entropy(seed, key), state)
    return state


def _check_state(state: np.ndarray) -> None:
    if (
        not isinstance(state, np.ndarray)
        or state.dtype != np.uint64
        or state.shape != (STATE_WORDS,)
    ):
        raise ValueError(f"a generator state is a ({STATE_WORDS},) uint64 array")


def draw_integers(state: np.ndarray, n: int) -> int:
    """One ``Generator.integers(n)`` from ``state`` (advanced in place), ``1 <= n < 2**32``."""
    _check_state(state)
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or not 1 <= n < 2**32:
        raise ValueError(f"n must be an integer in 1 .. 2**32 - 1, got {n!r}")
    return int(next_integer(state, int(n)))


def draw_random(state: np.ndarray) -> float:
    """One ``Generator.random()`` from ``state`` (advanced in place)."""
    _check_state(state)
    return next_double(state)


def draw_choice(state: np.ndarray, cdf: np.ndarray) -> int:
    """One ``Generator.choice(len(cdf), p=...)`` from ``state`` and ``choice_cdf(weights)``."""
    _check_state(state)
    cdf = np.ascontiguousarray(cdf, dtype=np.float64)
    if cdf.ndim != 1 or cdf.size == 0:
        raise ValueError("cdf must be a non-empty one-dimensional array (see choice_cdf)")
    return next_choice(state, cdf, cdf.size)
