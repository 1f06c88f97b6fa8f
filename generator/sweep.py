"""The sweep: every target x K x C x l x E, drawn, materialised, verified, streamed to HDF5.

Work is split by target (200 pairs each) over joblib workers or a dask cluster
(``whatif_bench.cluster``); results come back in the canonical order and are written by the
main process, so the file does not depend on the number of workers or where they run.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from whatif_bench.corpus import PairKey, Recipe, axes, draw_recipe, pair_entropy
from whatif_bench.corpus.axes import HistoryLayout
from whatif_bench.generator.kernels import (
    COVARIATES_AT,
    EVENTS_AT,
    FACTORS_AT,
    FALLBACK,
    KEPT,
    N_LAYOUT,
    TargetPlan,
    generate_pairs,
    target_plan,
)
from whatif_bench.generator.materialise import STORE_DTYPE, PairArrays, materialise
from whatif_bench.generator.types import GenerationConfig, GenerationError, PairResult
from whatif_bench.relationships.engine import Relationship
from whatif_bench.relationships.source import RegistrySource, TargetRef, portable, resolve
from whatif_bench.relationships.verification import future_ratio, history_ratios
from whatif_bench.workers import default_jobs


def pair_keys(relationship: Relationship) -> Iterator[tuple[PairKey, int, int]]:
    """Every (pair key, context, prediction) of one target, in the canonical order: the product
    of the axis table's K (up to the target's ``max_k``), C, l and E values."""
    ks = [k for k in axes.axis("K").values if k <= relationship.max_k]
    lengths = axes.contexts(relationship.c4)
    for k, c_label, event_length, e_setting in itertools.product(
        ks, lengths, axes.axis("ell").values, axes.axis("E").values
    ):
        key = PairKey(
            relationship.simulator, relationship.target, k, c_label, event_length, e_setting
        )
        context, prediction = lengths[c_label]
        yield key, context, prediction


def build_pair(recipe: Recipe, relationship: Relationship, baseline: np.ndarray) -> PairResult:
    """Materialise and verify one recipe; keep float32 arrays only when every event passes."""
    arrays = materialise(recipe, relationship, baseline)
    layout = recipe.layout
    past = arrays.baseline[: layout.context]
    future_baseline = arrays.baseline[layout.context :]
    result = PairResult(
        recipe=recipe,
        history_ratios=history_ratios(
            arrays.history_target, past, layout.starts, layout.event_length
        ),
        replay_ratio=future_ratio(
            arrays.future_targets["replay"], future_baseline, layout.event_length
        ),
        novel_ratio=future_ratio(
            arrays.future_targets["novel"], future_baseline, layout.event_length
        ),
    )
    if result.kept:
        result.arrays = stored_arrays(arrays)
    return result


def stored_arrays(arrays: PairArrays) -> dict[str, np.ndarray]:
    """A kept pair's float32 arrays, as the corpus stores them: ``history_target`` (C,),
    ``history_covariates`` (K, C), ``future_target`` (2 H,) Replay then Novel and
    ``future_covariates`` (2, K, H)."""
    return {
        "history_target": arrays.history_target.astype(STORE_DTYPE),
        "history_covariates": arrays.history_covariates.astype(STORE_DTYPE),
        "future_target": np.concatenate(
            [arrays.future_targets["replay"], arrays.future_targets["novel"]]
        ).astype(STORE_DTYPE),
        "future_covariates": np.stack(
            [arrays.future_covariates["replay"], arrays.future_covariates["novel"]]
        ).astype(STORE_DTYPE),
    }


def check_finite(result: PairResult) -> None:
    """Refuse a kept pair whose float32 arrays hold inf or NaN (a value beyond float32)."""
    for name, values in result.arrays.items():
        bad = np.flatnonzero(~np.isfinite(values.reshape(-1)))
        if bad.size:
            raise GenerationError(
                f"{result.recipe.key.pair_id}: {name} has the non-finite value "
                f"{values.reshape(-1)[bad[0]]} at index {bad[0]} (beyond float32?)"
            )


def reference_pair(
    key: PairKey, relationship: Relationship, context: int, prediction: int, baseline, seed: int
) -> PairResult:
    """One pair made by the method's own functions, one draw at a time: ``draw_recipe``, then
    ``build_pair``, then ``check_finite``. This defines a pair; ``generate_target`` makes the
    same pairs to the bit in numba kernels (``generator.kernels``)."""
    recipe = draw_recipe(key, relationship, context, prediction, baseline.size, seed)
    result = build_pair(recipe, relationship, baseline)
    check_finite(result)
    return result


def generate_target(
    relationship: Relationship | TargetRef, baseline: np.ndarray, seed: int, fast: bool = True
) -> list[PairResult]:
    """All pairs of one target, in the canonical order (run inside a worker; a ``TargetRef``
    is loaded there).

    ``fast`` (default) makes them in one numba call (``generator.kernels.generate_pairs``) and
    hands any pair the kernel cannot make exactly to ``reference_pair``, which raises its
    error; ``False``, and a target with user forms, makes every pair with ``reference_pair``.
    The results are the same to the bit either way (tests/test_generator_kernels.py).
    """
    loaded = resolve(relationship)
    keys = list(pair_keys(loaded))
    plan = target_plan(loaded, baseline) if fast else None
    if plan is None or any(_layout(key, c, p).window > baseline.size for key, c, p in keys):
        # (a window that does not fit: the reference raises its error at that pair)
        return [reference_pair(key, loaded, c, p, baseline, seed) for key, c, p in keys]
    return _kernel_pairs(loaded, plan, keys, baseline, seed)


@functools.lru_cache(maxsize=1024)
def _cached_layout(context: int, prediction: int, event_length: int, setting: str) -> HistoryLayout:
    return axes.layout(context, prediction, event_length, setting)


def _layout(key: PairKey, context: int, prediction: int) -> HistoryLayout:
    return _cached_layout(context, prediction, key.event_length, key.e_setting)


def _kernel_pairs(
    relationship: Relationship,
    plan: TargetPlan,
    keys: list[tuple[PairKey, int, int]],
    baseline: np.ndarray,
    seed: int,
) -> list[PairResult]:
    """``generate_target``'s fast path: the layouts and seed words of every pair, one kernel
    call, then one ``PairResult`` per pair whose arrays are views of the kernel's blocks."""
    layouts = [_layout(key, c, p) for key, c, p in keys]
    rows = np.zeros((len(keys), N_LAYOUT), dtype=np.int64)
    starts: list[int] = []
    events_at = factors_at = covariates_at = 0
    for row, (key, _, _), history in zip(rows, keys, layouts, strict=True):
        n_events = len(history.starts)
        row[:] = (
            key.k,
            history.context,
            history.prediction,
            history.event_length,
            history.future_event_length("novel"),
            n_events,
            len(starts),
            baseline.size - history.window,
            events_at,
            factors_at,
            covariates_at,
        )
        starts.extend(history.starts)
        events_at += n_events
        factors_at += n_events * key.k
        covariates_at += key.k
    entropy = np.stack([pair_entropy(seed, key.pair_id) for key, _, _ in keys])
    out = generate_pairs(plan, entropy, rows, np.asarray(starts, dtype=np.int64))
    results = []
    # (plain lists: indexing numpy arrays one value at a time would cost more than the kernel)
    picks, offsets, future_ratios = (
        out.picks.tolist(),
        out.offsets.tolist(),
        out.future_ratios.tolist(),
    )
    for (key, context, prediction), history, row, (
        window_start,
        replay_source,
        status,
    ), at, ratios in zip(keys, layouts, rows.tolist(), picks, offsets, future_ratios, strict=True):
        if status == FALLBACK:  # the reference makes it, or raises its error
            results.append(reference_pair(key, relationship, context, prediction, baseline, seed))
            continue
        k, n_events = key.k, len(history.starts)
        e0, f0, c0 = row[EVENTS_AT], row[FACTORS_AT], row[COVARIATES_AT]
        factors = out.factors[f0 : f0 + n_events * k].reshape(n_events, k)
        recipe = Recipe(
            key=key,
            layout=history,
            window_start=window_start,
            directions=out.directions[e0 : e0 + n_events],
            factors=factors,
            replay_source=replay_source,
            replay_factors=factors[replay_source].copy(),
            novel_factors=out.novel_factors[c0 : c0 + k],
        )
        result = PairResult(
            recipe=recipe,
            history_ratios=out.ratios[e0 : e0 + n_events],
            replay_ratio=ratios[0],
            novel_ratio=ratios[1],
        )
        if status == KEPT:
            result.arrays = _kept_arrays(out.blocks, at, k, history.context, history.prediction)
        results.append(result)
    return results


def _kept_arrays(
    blocks: tuple[np.ndarray, ...], offsets: list[int], k: int, context: int, prediction: int
) -> dict[str, np.ndarray]:
    """A kept pair's float32 arrays (``stored_arrays``' shapes), views of the kernel's
    ``blocks`` at ``offsets`` (one per block, DATA_DATASETS' order)."""
    return {
        "history_target": blocks[0][offsets[0] : offsets[0] + context],
        "history_covariates": blocks[1][offsets[1] : offsets[1] + k * context].reshape(k, context),
        "future_target": blocks[2][offsets[2] : offsets[2] + 2 * prediction],
        "future_covariates": blocks[3][offsets[3] : offsets[3] + 2 * k * prediction].reshape(
            2, k, prediction
        ),
    }


@contextlib.contextmanager
def _interrupt_flag():
    """Remember a Ctrl-C even if Python drops its KeyboardInterrupt (raised inside a __del__)."""
    flag = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return
    previous = signal.getsignal(signal.SIGINT)

    def handler(signum, frame):
        flag.set()
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, handler)
    try:
        yield flag
    finally:
        signal.signal(signal.SIGINT, previous)


def generate(config: GenerationConfig, progress: bool = True, cluster=None) -> Path:
    """Run the whole sweep and write the corpus file atomically; returns its path.

    ``config.jobs`` threads of this process make the targets side by side (their kernels let
    go of Python's lock) and compress the task arrays; ``cluster`` (a
    ``whatif_bench.cluster.DaskCluster`` or a connected ``distributed.Client``) runs the
    targets on a dask cluster instead; it is connected first, so an unreachable scheduler
    fails before anything is written, and the file is byte for byte the one a local run
    writes.
    Before any work the output is checked (not a folder, not under a file, not the baselines
    file, and an existing file only if it is a whatif corpus: ``outputs.check_file_output``)
    and locked (a second run on the same output fails at once); the temporaries of killed runs
    are removed (``outputs.atomic_output``). The corpus is written to a per-process hidden
    temporary file and renamed over ``config.out`` only when complete, so a failed,
    interrupted or killed run leaves any earlier corpus as it was. A full disk or a
    read-only folder is an ``OutputError`` naming the path. ``config.specs`` and
    ``config.forms`` are read (and the forms modules run) once here; dask workers re-load the
    modules by path and hash (``relationships.source``).
    """
    from whatif_bench.cluster import open_pool
    from whatif_bench.generator.selection import select_targets
    from whatif_bench.generator.writer import CorpusWriter
    from whatif_bench.outputs import CORPUS, atomic_output, check_file_output

    if cluster is not None and config.jobs not in (None, 1):
        raise GenerationError(f"give jobs ({config.jobs} local threads) or a cluster, not both")
    out = Path(config.out)
    inputs = [config.baselines, *config.specs, *config.forms]
    check_file_output(out, CORPUS, inputs)  # before the pool starts
    with (
        open_pool(config.jobs or default_jobs(), cluster, threads=True) as pool,
        atomic_output(config.out, inputs=inputs, kind=CORPUS) as tmp,
    ):
        source = config.registry_source()  # the spec texts and forms hashes, read once
        selection = select_targets(config, source)
        with (
            _interrupt_flag() as interrupted,
            CorpusWriter(config, selection, tmp, source) as writer,
        ):
            for relationship, results in _run(selection, source, config.seed, pool, progress):
                if interrupted.is_set():
                    raise KeyboardInterrupt
                writer.add_target(relationship, results)
            if interrupted.is_set():  # never finish a file after a Ctrl-C
                raise KeyboardInterrupt
    return out


def _run(selection, source: RegistrySource, seed: int, pool, progress: bool):
    from tqdm import tqdm

    from whatif_bench.generator import chunks
    from whatif_bench.generator import kernels as sweep_kernels
    from whatif_bench.jit_cache import announce_first_compilation
    from whatif_bench.relationships import kernels

    announce_first_compilation(
        "relationship and generator kernels", kernels, sweep_kernels, chunks, enabled=progress
    )
    # this process's threads share its relationships; a dask worker loads user forms itself
    calls = (
        (portable(rel, source) if pool.distributed else rel, baseline.series[rel.target], seed)
        for rel, baseline in selection
    )
    outputs = pool.ordered(generate_target, calls)
    bar = tqdm(total=len(selection), desc="generating", unit="target", disable=not progress)
    try:
        for (relationship, _), results in zip(selection, outputs, strict=True):
            bar.set_postfix_str(f"{relationship.simulator}/{relationship.target}")
            yield relationship, results
            bar.update()
    finally:
        bar.close()
