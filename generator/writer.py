"""Writing the corpus: one HDF5 file, streamed target by target to a temporary path.

See ``docs/CORPUS_FORMAT.md`` for the layout. Every dataset is written without timestamps and
in a fixed order, so the same config gives a byte-identical file. ``CorpusWriter`` only writes
the temporary file (``complete`` is set last, then the file is closed and synced); locking the
output and renaming the file into place is ``outputs.atomic_output``'s job (see ``generate``).
Writes go through ``h5write.GuardedFile``, so a full disk is an ``OSError``, never a crash.
"""

from __future__ import annotations

import itertools
import json
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from whatif_bench._version import __version__
from whatif_bench.corpus import axes
from whatif_bench.corpus.fileformat import (
    CHUNK,
    DATA_DATASETS,
    FORMAT,
    FORMAT_VERSION,
    USER_REGISTRY,
)
from whatif_bench.generator.chunks import ChunkAppender, ChunkQueue, create_task_array
from whatif_bench.generator.types import GenerationError, PairResult
from whatif_bench.h5write import GuardedFile
from whatif_bench.relationships.ranges import NOVEL_OFFSET, NOVEL_SCALE
from whatif_bench.relationships.source import RegistrySource
from whatif_bench.relationships.verification import THRESHOLD
from whatif_bench.simulators.store import combine_hashes, series_hash
from whatif_bench.workers import default_jobs


def write_user_registry(h5, source: RegistrySource) -> None:
    """``/user_registry``: the exact user spec texts (``spec_000`` ..., each with its ``name``)
    and the forms modules (attribute ``forms``: JSON [{"path", "sha256"}]), in load order.
    Written only when the corpus used user files (a shipped-only corpus is unchanged)."""
    import h5py

    if source.is_shipped:
        return
    group = h5.create_group(USER_REGISTRY, track_order=True)
    forms = [{"path": m.path, "sha256": m.sha256} for m in source.forms]
    group.attrs["forms"] = json.dumps(forms)
    for index, spec in enumerate(source.specs):
        dataset = group.create_dataset(
            f"spec_{index:03d}", data=spec.text, dtype=h5py.string_dtype("utf-8"), track_times=False
        )
        dataset.attrs["name"] = spec.name


def axes_description(registry, futures: tuple[str, ...] | None = None) -> dict:
    """The axis settings a corpus is generated with: the table's values, every simulator's
    (context, prediction) lengths from ``registry`` (C4 from each spec header) and the layout
    constants (the corpus attribute ``axes``). ``futures``: the future types chosen
    (``GenerationConfig.futures``; default the table's)."""
    return {
        "futures": list(futures or axes.axis("future").values),
        "K": list(axes.axis("K").values),
        "contexts": {
            sim: axes.contexts(registry.simulators[sim].c4) for sim in sorted(registry.simulators)
        },
        "event_lengths": list(axes.axis("ell").values),
        "E_settings": list(axes.axis("E").values),
        "fewest_events": axes.FEWEST_EVENTS,
        "max_events": axes.MAX_EVENTS,
        "min_gap": axes.MIN_GAP,
        "prefix_share": axes.PREFIX_SHARE,
        "buffer_share": axes.BUFFER_SHARE,
        "usable_percent": axes.USABLE_PERCENT,
        "novel_event_windows": axes.NOVEL_REACH,
        "novel_offset": list(NOVEL_OFFSET),
        "novel_scale": list(NOVEL_SCALE),
        "threshold": THRESHOLD,
    }


class CorpusWriter:
    """Context manager: write the corpus to ``tmp``, target by target; complete it on success.

    On a clean exit the file gets ``complete=True`` as its very last write, is closed and
    synced; on an exception it is closed as it is (the caller removes it). A failed write (full
    disk) raises ``OSError`` from ``add_target`` or from the exit, naming no path (the caller
    does).
    """

    def __init__(
        self, config, selection, tmp: str | os.PathLike, source: RegistrySource | None = None
    ) -> None:
        self.config = config
        self.selection = selection
        self.source = source or RegistrySource()  # what the relationships were loaded from
        self.path = Path(config.out)
        self.tmp = Path(tmp)
        self.columns: dict[str, list] = {}
        self.events: dict[str, list] = {"start": [], "direction": [], "ratio": []}
        self.factors: list[np.ndarray] = []
        self.future_factors: dict[str, list[np.ndarray]] = {"replay": [], "novel": []}
        self.offsets = dict.fromkeys(OFFSET_COLUMNS, 0)  # where the next target's rows start

    def __enter__(self) -> CorpusWriter:
        import h5py

        self.guard = GuardedFile(self.tmp)
        self.h5 = h5py.File(self.guard, "w", track_order=True)
        try:
            self.h5.attrs["format"] = FORMAT
            self.h5.attrs["format_version"] = FORMAT_VERSION
            self.h5.attrs["complete"] = False
            data = self.h5.create_group("data")
            threads = self.config.jobs or default_jobs()
            self.pool = ThreadPoolExecutor(threads) if threads > 1 else None
            self.chunks = ChunkQueue(self.pool)
            self.appenders = {}
            for name in DATA_DATASETS:
                self.appenders[name] = ChunkAppender(
                    create_task_array(data, name, CHUNK), CHUNK, self.chunks
                )
            self._write_baselines()
            self.guard.check()
        except BaseException:  # also Ctrl-C: the caller removes the temporary file
            self._close()
            raise
        return self

    def _write_baselines(self) -> None:
        group = self.h5.create_group("baselines", track_order=True)
        seen = {}
        hashes: dict[int, str] = {}  # a simulator's hash covers all its series: once each
        for relationship, baselines in self.selection:
            seen[baselines.simulator] = baselines
            if id(baselines) not in hashes:
                hashes[id(baselines)] = baselines.content_hash()
            sim = group.require_group(baselines.simulator)
            sim.attrs["interval_s"] = baselines.interval_s
            sim.attrs["start"] = baselines.start
            sim.attrs["simulator_version"] = baselines.simulator_version
            sim.attrs["content_hash"] = hashes[id(baselines)]
            values = baselines.series[relationship.target]
            dataset = sim.create_dataset(relationship.target, data=values, track_times=False)
            dataset.attrs["unit"] = relationship.unit
            dataset.attrs["relationship"] = json.dumps(relationship.summary())
            dataset.attrs["content_hash"] = series_hash(
                baselines.simulator,
                relationship.target,
                relationship.unit,
                baselines.interval_s,
                baselines.start,
                values,
            )
        self.baselines_hash = combine_hashes({s: hashes[id(b)] for s, b in seen.items()})

    def add_target(self, relationship, results: list[PairResult]) -> None:
        """Append one target's pairs (in canonical order)."""
        reasons = [result.drop_reason for result in results]  # (from the ratios: once a pair)
        self._add_rows(results, reasons)
        chunks: dict[str, list[np.ndarray]] = {name: [] for name in DATA_DATASETS}
        for result, reason in zip(results, reasons, strict=True):
            if not reason:
                for name in DATA_DATASETS:
                    chunks[name].append(result.arrays[name].reshape(-1))
        self.chunks.next_block()
        for name, parts in chunks.items():
            if parts:
                self.appenders[name].append(parts)
        # the previous target's chunks, compressed meanwhile; this one's are being compressed
        self.chunks.write_before(self.chunks.mark)
        self.guard.check()  # a full disk stops the run here, not after the last target

    def _add_rows(self, results: list[PairResult], reasons: list[str]) -> None:
        """The pairs' rows of ``/pairs``, their events and factors, appended in order after the
        previous target's (``target_rows``); ``reasons`` are their drop reasons (``""``: kept)."""
        if not results:  # no columns for a target without pairs ("nothing was generated")
            return
        rows = target_rows(results, reasons, self.offsets)
        for column, values in rows.columns.items():
            self.columns.setdefault(column, []).extend(values)
        for name, values in rows.events.items():
            self.events[name].extend(values)
        self.factors.extend(rows.factors)
        for name, parts in rows.future_factors.items():
            self.future_factors[name].extend(parts)
        for name, size in rows.sizes.items():
            self.offsets[name] += size

    def _finish(self) -> None:
        import h5py

        if not self.columns:
            raise GenerationError("nothing was generated")
        for appender in self.appenders.values():
            appender.finish()
        self.chunks.write_all()
        pairs = self.h5.create_group("pairs", track_order=True)
        for column, values in self.columns.items():
            if isinstance(values[0], str):
                data = np.array(values, dtype=h5py.string_dtype("utf-8"))
            elif isinstance(values[0], bool | np.bool_):
                data = np.array(values, dtype=bool)
            elif isinstance(values[0], float):
                data = np.array(values, dtype=np.float64)
            else:
                data = np.array(values, dtype=np.int64)
            pairs.create_dataset(column, data=data, track_times=False)
        events = self.h5.create_group("events", track_order=True)
        events.create_dataset(
            "start", data=np.array(self.events["start"], dtype=np.int32), track_times=False
        )
        events.create_dataset(
            "direction", data=np.array(self.events["direction"], dtype=np.int8), track_times=False
        )
        events.create_dataset(
            "ratio", data=np.array(self.events["ratio"], dtype=np.float64), track_times=False
        )
        events.create_dataset("factors", data=np.concatenate(self.factors), track_times=False)
        futures = self.h5.create_group("futures", track_order=True)
        for name, parts in self.future_factors.items():
            futures.create_dataset(f"{name}_factors", data=np.concatenate(parts), track_times=False)
        kept = np.array(self.columns["kept"])
        attrs = self.h5.attrs
        attrs["toolkit_version"] = __version__
        attrs["master_seed"] = self.config.seed
        attrs["config"] = json.dumps(self.config.recorded(), sort_keys=True)
        attrs["axes"] = json.dumps(
            axes_description(self.source.load(), self.config.futures), sort_keys=True
        )
        attrs["baselines_hash"] = self.baselines_hash
        attrs["registry_hash"] = self.source.registry_hash()
        write_user_registry(self.h5, self.source)
        attrs["n_pairs"] = int(kept.size)
        attrs["n_pairs_kept"] = int(kept.sum())
        attrs["n_tasks_generated"] = int(len(self.config.futures) * kept.size)
        attrs["n_tasks_kept"] = int(len(self.config.futures) * kept.sum())

    def _close(self) -> None:
        """Close the HDF5 file (never fails: HDF5 sees no write errors) and the descriptor."""
        self._stop_pool()
        try:
            self.h5.close()
        finally:
            self.guard.close()

    def _stop_pool(self) -> None:
        if getattr(self, "chunks", None) is not None:
            self.chunks.cancel()  # (written chunks are all there is after an error)
        pool = getattr(self, "pool", None)
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self._close()
            return
        try:
            self._finish()
            self.h5.attrs["complete"] = True  # the last write: only a whole file carries it
        except BaseException:
            self._close()
            raise
        self._stop_pool()
        try:
            self.h5.close()
        finally:
            self.guard.finish()  # fsync; raises the first failed write (full disk)


# the arrays a /pairs offset column points into, by the column's name without "_offset"
OFFSET_COLUMNS = {
    "event": "events/start",
    "factor": "events/factors",
    "kfactor": "futures/replay_factors",
    **{name: f"data/{name}" for name in DATA_DATASETS},
}


@dataclass
class TargetRows:
    """What one target's pairs add to the file besides their task arrays: ``columns`` (a list
    per ``/pairs`` column, a value per pair), ``events`` (``start``, ``direction``, ``ratio``:
    a value per event), ``factors`` (an (E*K,) array per pair, row-major),
    ``future_factors`` (``replay``, ``novel``: a (K,) array per pair) and ``sizes``: the
    values they add to each array of ``OFFSET_COLUMNS`` (the data arrays: kept pairs only)."""

    columns: dict[str, list]
    events: dict[str, list]
    factors: list[np.ndarray]
    future_factors: dict[str, list[np.ndarray]]
    sizes: dict[str, int]


def target_rows(
    results: list[PairResult], reasons: list[str], starts: dict[str, int]
) -> TargetRows:
    """The rows of ``results`` (one target's pairs, in order; ``reasons`` their drop reasons,
    ``""``: kept) when their offsets start at ``starts`` (keys as ``OFFSET_COLUMNS``). A
    dropped pair's task-array offsets are -1. The writer appends them; ``whatif verify``
    compares a stored target's rows with them."""
    recipes = [result.recipe for result in results]
    keys = [recipe.key for recipe in recipes]
    layouts = [recipe.layout for recipe in recipes]
    kept = [not reason for reason in reasons]
    k = [key.k for key in keys]
    context = [layout.context for layout in layouts]
    prediction = [layout.prediction for layout in layouts]
    n_events = [recipe.n_events for recipe in recipes]
    factor_sizes = [recipe.factors.size for recipe in recipes]
    columns: dict[str, list] = {
        "pair_id": [key.pair_id for key in keys],
        "simulator": [key.simulator for key in keys],
        "target": [key.target for key in keys],
        "c_label": [key.c_label for key in keys],
        "e_setting": [key.e_setting for key in keys],
        "k": k,
        "event_length": [key.event_length for key in keys],
        "n_events": n_events,
        "context": context,
        "prediction": prediction,
        "window_start": [recipe.window_start for recipe in recipes],
        "replay_source": [recipe.replay_source for recipe in recipes],
        "kept": kept,
        "drop_reason": list(reasons),
        "min_history_ratio": [float(result.history_ratios.min()) for result in results],
        "replay_ratio": [result.replay_ratio for result in results],
        "novel_ratio": [result.novel_ratio for result in results],
    }
    sizes = {
        "event": n_events,
        "factor": factor_sizes,
        "kfactor": k,
        "history_target": context,
        "history_covariates": [n * c for n, c in zip(k, context, strict=True)],
        "future_target": [2 * p for p in prediction],
        "future_covariates": [2 * n * p for n, p in zip(k, prediction, strict=True)],
    }
    totals = {}
    for name, item_sizes in sizes.items():
        if name in DATA_DATASETS:
            item_sizes = [size if keep else 0 for size, keep in zip(item_sizes, kept, strict=True)]
        offsets = _running(starts[name], item_sizes)
        if name in DATA_DATASETS:
            offsets = [o if keep else -1 for o, keep in zip(offsets, kept, strict=True)]
        columns[f"{name}_offset"] = offsets
        totals[name] = sum(item_sizes)
    events: dict[str, list] = {"start": [], "direction": [], "ratio": []}
    for recipe, result in zip(recipes, results, strict=True):
        events["start"].extend(recipe.layout.starts)
        events["direction"].extend(recipe.directions.tolist())
        events["ratio"].extend(result.history_ratios.tolist())
    return TargetRows(
        columns,
        events,
        [recipe.factors.reshape(-1) for recipe in recipes],
        {
            "replay": [recipe.replay_factors for recipe in recipes],
            "novel": [recipe.novel_factors for recipe in recipes],
        },
        totals,
    )


def _running(start: int, sizes: list[int]) -> list[int]:
    """Each item's offset when items of ``sizes`` follow one another from ``start``."""
    return list(itertools.accumulate(sizes[:-1], initial=start)) if sizes else []
