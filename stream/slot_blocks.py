"""A streamed task's float32 block, and padded batches placed straight from blocks.

The stream's kernels (``stream._kernels``) write each kept slot's arrays one after another into
one float32 block of ``(K + 2) * (C + H)`` values, in this order:

======================  ========  ==========================================================
``history_target``      (C,)      the target over the context
``history_covariates``  (K, C)    the covariates over the context, row by row
``future_covariates``   (K, H)    the chosen future's covariates
``future_target``       (H,)      the chosen future's target
``counterfactual``      (C + H,)  the baseline window: ``counterfactual_history`` (C,) then
                                  ``counterfactual_future`` (H,)
======================  ========  ==========================================================

``block_arrays`` gives a block's six arrays as views. ``place_blocks`` writes many blocks into
the rows of a padded batch in one kernel call, every cell of those rows (the values where
``collate_tasks`` puts them, zeros elsewhere), so the batch needs no zeroing first (or, with
``zero_padding=False``, the values alone, into rows that hold zeros already);
``place_blocks_reference`` is its readable numpy twin (tests compare them, also with
``NUMBA_DISABLE_JIT=1``).
"""

from __future__ import annotations

from collections.abc import Mapping

import numba
import numpy as np

from whatif_bench.relationships.kernels import JIT_OPTIONS

# a padded batch's float arrays (``stream.items`` and ``collate_tasks`` use these names):
# histories (B, [K_max,] C_max) end at a row's end, futures (B, [K_max,] H_max) start at its start
HISTORY_ARRAYS = ("history_target", "history_covariates", "counterfactual_history")
FUTURE_ARRAYS = ("future_covariates", "future_target", "counterfactual_future")
COVARIATE_ARRAYS = ("history_covariates", "future_covariates")  # (K, T): padded to K too
BATCH_ARRAYS = (*HISTORY_ARRAYS, *FUTURE_ARRAYS)


def block_size(k: int, context: int, horizon: int, start: int = 0) -> int:
    """float32 values in the block of a task with ``k`` covariates, ``context`` and ``horizon``
    steps; with ``start``, where a block that starts there ends."""
    return start + (k + 2) * (context + horizon)


def block_arrays(block: np.ndarray, k: int, context: int, horizon: int) -> dict[str, np.ndarray]:
    """The six arrays of ``block`` ((K + 2) (C + H),) by ``Task`` field, views (no copy); values
    past the block's size are no part of it."""
    at = (k + 1) * context
    window = block[at + (k + 1) * horizon : at + (k + 2) * horizon + context]
    return {
        "history_target": block[:context],
        "history_covariates": block[context:at].reshape(k, context),
        "future_covariates": block[at : at + k * horizon].reshape(k, horizon),
        "future_target": block[at + k * horizon : at + (k + 1) * horizon],
        "counterfactual_history": window[:context],
        "counterfactual_future": window[context:],
    }


def place_blocks_reference(
    flat: np.ndarray,
    starts: np.ndarray,
    ks: np.ndarray,
    contexts: np.ndarray,
    horizons: np.ndarray,
    rows: np.ndarray,
    out: Mapping[str, np.ndarray],
    zero_padding: bool = True,
) -> None:
    """Write block ``j`` (``flat[starts[j]:]``, of ``ks[j]`` covariates, ``contexts[j]`` and
    ``horizons[j]`` steps) into row ``rows[j]`` of each array of ``out`` (``BATCH_ARRAYS``):
    histories at the row's end, futures at its start, covariates in its first K rows, and
    (``zero_padding``) zeros in every other cell of the row. ``place_blocks`` without its
    checks, in numpy."""
    for j, row in enumerate(rows):
        k, context, horizon = int(ks[j]), int(contexts[j]), int(horizons[j])
        arrays = block_arrays(flat[starts[j] :], k, context, horizon)
        for name in BATCH_ARRAYS:
            target = out[name][row]
            if zero_padding:
                target[...] = 0
            values = arrays[name]
            steps = values.shape[-1]
            history = name in HISTORY_ARRAYS
            columns = slice(target.shape[-1] - steps, None) if history else slice(steps)
            if name in COVARIATE_ARRAYS:
                target[:k, columns] = values
            else:
                target[columns] = values


@numba.njit(**JIT_OPTIONS)
def _place_row(out: np.ndarray, values: np.ndarray, right: bool, zero_padding: bool) -> None:
    """``values`` (T,) into ``out`` (L,), L >= T, at its end if ``right`` else its start; zeros in
    the rest if ``zero_padding``. Plain loops: numba vectorises them, where slice assignment
    here copied at a fifth of the speed for rows that stay in the cache."""
    steps, pad = values.shape[0], out.shape[0] - values.shape[0]
    first = pad if right else 0
    for t in range(steps):
        out[first + t] = values[t]
    zeros = 0 if right else steps
    for t in range(zeros, zeros + pad if zero_padding else zeros):
        out[t] = 0


@numba.njit(**JIT_OPTIONS)
def _place_blocks(
    flat: np.ndarray,
    starts: np.ndarray,
    ks: np.ndarray,
    contexts: np.ndarray,
    horizons: np.ndarray,
    rows: np.ndarray,
    history_target: np.ndarray,
    history_covariates: np.ndarray,
    counterfactual_history: np.ndarray,
    future_covariates: np.ndarray,
    future_target: np.ndarray,
    counterfactual_future: np.ndarray,
    zero_padding: bool,
) -> None:
    for j in range(starts.shape[0]):
        k, context, horizon, row = ks[j], contexts[j], horizons[j], rows[j]
        at = starts[j]
        _place_row(history_target[row], flat[at : at + context], True, zero_padding)
        at += context
        for i in range(history_covariates.shape[1]):
            if i < k:
                _place_row(history_covariates[row, i], flat[at : at + context], True, zero_padding)
                at += context
            elif zero_padding:
                history_covariates[row, i] = 0
        for i in range(future_covariates.shape[1]):
            if i < k:
                _place_row(future_covariates[row, i], flat[at : at + horizon], False, zero_padding)
                at += horizon
            elif zero_padding:
                future_covariates[row, i] = 0
        _place_row(future_target[row], flat[at : at + horizon], False, zero_padding)
        at += horizon
        _place_row(counterfactual_history[row], flat[at : at + context], True, zero_padding)
        _place_row(
            counterfactual_future[row],
            flat[at + context : at + context + horizon],
            False,
            zero_padding,
        )


def place_blocks(
    flat: np.ndarray,
    starts: np.ndarray,
    ks: np.ndarray,
    contexts: np.ndarray,
    horizons: np.ndarray,
    rows: np.ndarray,
    out: Mapping[str, np.ndarray],
    zero_padding: bool = True,
) -> None:
    """``place_blocks_reference`` in one kernel call, after checking that every block lies in
    ``flat`` (float32) and fits its row: K <= K_max, C <= C_max, H <= H_max.

    Parameters
    ----------
    flat : (N,) float32
        The blocks (``block_arrays``' layout).
    starts, ks, contexts, horizons, rows : (m,) int
        Block ``j``'s offset in ``flat``, its K, C and H (steps), and its row of the batch.
    out : mapping of ``BATCH_ARRAYS`` to C-contiguous float32 arrays
        (B, C_max), (B, K_max, C_max), (B, C_max), (B, K_max, H_max), (B, H_max), (B, H_max):
        the rows ``rows`` are written (whole with ``zero_padding``); the others are left as
        they are.
    zero_padding : bool
        Write the zeros around the values; ``False`` leaves those cells as they are (rows
        that hold zeros already: a DataLoader worker's new shared memory, whose pages cost
        nothing until written).
    """
    given = [np.asarray(values) for values in (starts, ks, contexts, horizons, rows)]
    if any(values.dtype.kind not in "iu" for values in given if values.size):
        raise ValueError("starts, ks, contexts, horizons and rows must be integers")
    columns = [np.ascontiguousarray(values, dtype=np.int64) for values in given]
    arrays = [out[name] for name in BATCH_ARRAYS]
    shapes = [array.shape for array in arrays]
    if len(shapes[1]) != 3 or len(shapes[4]) != 2:
        raise ValueError("history_covariates must be (B, K_max, C_max), future_target (B, H_max)")
    size, k_max, c_max = shapes[1]
    h_max = shapes[4][1]
    wanted = [(size, c_max), (size, k_max, c_max), (size, c_max)]
    wanted += [(size, k_max, h_max), (size, h_max), (size, h_max)]
    if shapes != wanted:
        raise ValueError(f"the batch's arrays {BATCH_ARRAYS} must be {wanted}, got {shapes}")
    for name, array in zip(BATCH_ARRAYS, arrays, strict=True):
        if array.dtype != np.float32 or not array.flags.c_contiguous:
            raise ValueError(f"{name} must be a C-contiguous float32 array")
    if flat.dtype != np.float32 or flat.ndim != 1:
        raise ValueError("flat must be a 1-D float32 array")
    if len({column.shape for column in columns}) != 1 or columns[0].ndim != 1:
        raise ValueError("starts, ks, contexts, horizons and rows must have one length")
    # the checks in Python: a block's handful of numbers, where numpy's calls cost more
    first, k, context, horizon, row = (column.tolist() for column in columns)
    if first:
        ends = map(block_size, k, context, horizon, first)
        if min(first) < 0 or max(ends) > flat.shape[0]:
            raise ValueError("a block lies outside flat")
        for what, values, most in (
            ("K", k, k_max),
            ("C", context, c_max),
            ("H", horizon, h_max),
            ("row", row, size - 1),
        ):
            if min(values) < 0 or max(values) > most:
                raise ValueError(f"a block does not fit its row of the batch: {what} beyond it")
    starts, ks, contexts, horizons, rows = columns
    history_target, history_covariates, counterfactual_history = arrays[:3]
    future_covariates, future_target, counterfactual_future = arrays[3:]
    _place_blocks(
        flat,
        starts,
        ks,
        contexts,
        horizons,
        rows,
        history_target,
        history_covariates,
        counterfactual_history,
        future_covariates,
        future_target,
        counterfactual_future,
        bool(zero_padding),
    )
