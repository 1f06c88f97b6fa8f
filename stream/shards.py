"""``whatif stream``: a seeded stream written as fixed-size shards (Parquet or HDF5) for offline
training.

Shard ``i`` holds slots ``i * size`` .. ``(i + 1) * size - 1`` of the stream (the last may be
shorter). ``parquet`` shards are the task table of ``whatif_bench.corpus.columns`` (the parquet
export's columns), the world, slot and seed of each task in its ``recipe`` JSON; ``hdf5``
shards are ``whatif-stream-shard`` files (``stream.h5shard``, docs/STREAM_FORMAT.md) that read
back as the stream's ``Task`` objects. Shards are made in parallel (local processes or a dask
cluster) and written in order into a temporary folder that is renamed to ``out`` only once
``manifest.json`` is in it (``outputs.write_folder``, as ``whatif export``), so the files are the
same for any number of jobs or workers and a killed run never leaves a complete-looking folder.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from whatif_bench import __version__
from whatif_bench.cli_types import MAX_COUNT, MAX_SHARD_SIZE
from whatif_bench.outputs import OutputError, check_folder_output, check_output_path, write_folder

KIND = "stream"

SHARD_SIZE = 4096  # tasks per shard file
PIECE = 256  # slots per unit of work: a shard is made of pieces, and the bar moves per piece
FORMATS = {"parquet": "parquet", "hdf5": "h5"}  # format -> file extension
WHAT = "whatif stream"


def shard_bounds(count: int, shard_size: int) -> Iterator[tuple[int, int]]:
    """``(first, last)`` slots of each shard, in order, generated lazily: a ``count`` up to
    ``MAX_COUNT`` (2**63 - 1) costs no memory up front (nothing is built per shard in advance)."""
    for first in range(0, count, shard_size):
        yield first, min(first + shard_size, count)


def piece_bounds(count: int, shard_size: int, piece: int = PIECE) -> Iterator[tuple[int, int]]:
    """``(first, last)`` slots of each piece of work, in order: every shard of ``shard_bounds``
    cut into runs of at most ``piece`` slots (a piece never spans two shards); lazy, as
    ``shard_bounds``."""
    for first, last in shard_bounds(count, shard_size):
        for start in range(first, last, piece):
            yield start, min(start + piece, last)


# The stream of the run in progress, in each process that makes pieces, with its worlds, entries
# and kernel plan built: a piece arrives with a fresh copy of the stream (as the pool sends it),
# and building those again for every piece would cost more than the piece itself.
_PREPARED: dict[str, Any] = {}


def _prepared(stream, key: str):
    """The stream of run ``key`` as this process first received it, built once
    (``TaskStream.entries`` and ``plan``); the stream of an earlier run is dropped."""
    prepared = _PREPARED.get(key)
    if prepared is None:
        stream.entries()
        stream.plan()
        _PREPARED.clear()
        _PREPARED[key] = prepared = stream
    return prepared


def _shard(stream, format: str, key: str, first: int, last: int):
    """Slots ``first`` .. ``last - 1`` (a piece of a shard, run in a worker) as what the main
    process writes (the Arrow task table of ``corpus.columns``, or ``h5shard.shard_columns``),
    with the stats; ``_join`` makes a shard of its pieces. ``key`` names the run's stream
    (``_prepared``)."""
    own = _prepared(stream, key).counted_apart()  # its own counts, in a worker or here
    tasks = list(own.tasks(range(first, last)))
    if format == "parquet":
        from whatif_bench.corpus.columns import table

        return table(tasks), own.stats.as_dict()
    from whatif_bench.stream.h5shard import shard_columns

    return shard_columns(tasks), own.stats.as_dict()


def _join(format: str, parts: list[Any]) -> Any:
    """One shard's columns from those of its pieces, in slot order: the same values as the
    shard made in one piece, so the same file bytes (tests/test_stream_cli.py)."""
    if len(parts) == 1:
        return parts[0]
    if format == "parquet":
        import pyarrow as pa

        return pa.concat_tables(parts).combine_chunks()
    from whatif_bench.stream.h5shard import join_columns

    return join_columns(parts)


def _merge(total: dict, part: dict) -> None:
    total["drawn"] += part["drawn"]
    total["kept"] += part["kept"]
    for reason, n in part["rejected"].items():
        total["rejected"][reason] = total["rejected"].get(reason, 0) + n


def write_shards(
    stream,
    out: str | os.PathLike,
    shard_size: int = SHARD_SIZE,
    jobs: int = 1,
    overwrite: bool = False,
    progress: bool = True,
    cluster=None,
    format: str = "parquet",
) -> Path:
    """Write the ``count`` tasks of ``stream`` (a counted ``TaskStream``) as shards in ``out``.

    ``format`` is ``parquet`` or ``hdf5`` (module doc). ``cluster`` (a
    ``whatif_bench.cluster.DaskCluster`` or a connected ``distributed.Client``) makes the
    shards on a dask cluster instead of ``jobs`` local processes: it is connected before any
    world is read or anything written; the stream is sent to the workers once with its worlds
    in it (they need no world cache); the files are the same as a local run's.
    """
    from whatif_bench.cluster import open_pool

    if format not in FORMATS:
        raise OutputError(f"unknown shard format {format!r}; expected one of {list(FORMATS)}")
    if stream.count is None:
        raise OutputError("an endless stream cannot be written; give a count")
    if (
        isinstance(shard_size, bool)
        or not isinstance(shard_size, int)
        or not 1 <= shard_size <= MAX_SHARD_SIZE
    ):
        raise OutputError(
            f"the shard size must be an integer in 1..{MAX_SHARD_SIZE:,} (a shard is made whole "
            f"in memory), got {shard_size!r}"
        )
    if stream.count > MAX_COUNT:
        raise OutputError(f"the count must be at most 2**63 - 1, got {stream.count}")
    if cluster is not None and jobs != 1:
        raise OutputError(f"give jobs ({jobs} local processes) or a cluster, not both")
    inputs = stream_inputs(stream)
    out = Path(os.path.abspath(check_output_path(out, inputs=inputs, folder=True)))
    if out.parent == out:
        raise OutputError(f"{out}: cannot write to the root folder; give a folder inside it")
    check_folder_output(out, overwrite, WHAT, KIND, inputs)
    with open_pool(jobs, cluster) as pool:
        return _write(stream, out, shard_size, overwrite, progress, pool, format, inputs)


def stream_inputs(stream) -> list[Path]:
    """The inputs of a run that ``--out`` must never replace or hold: the training-world
    cache folder (given or default), when the stream reads worlds from one."""
    if getattr(stream, "_sources", None) is not None:
        return []
    from whatif_bench.simulators.worlds import WorldCache

    return [WorldCache(getattr(stream, "cache", None)).folder]


def _write(
    stream, out: Path, shard_size, overwrite, progress, pool, format: str, inputs=()
) -> Path:
    """``write_shards`` once the output is checked and the pool is ready."""
    from tqdm import tqdm

    from whatif_bench.corpus import random_twin, registry_hash
    from whatif_bench.jit_cache import announce_first_compilation
    from whatif_bench.relationships import kernels

    sources = stream.world_sources()  # builds or reads the worlds once, before any worker
    stream.entries()
    announce_first_compilation(
        "stream and relationship kernels", random_twin, kernels, enabled=progress
    )

    def fill(tmp: Path) -> dict[str, Any]:
        stats: dict[str, Any] = {"drawn": 0, "kept": 0, "rejected": {}}
        (tmp / "data").mkdir()
        shipped = stream.with_sources() if pool.distributed else stream
        key = uuid.uuid4().hex  # this run's stream, as the processes that make pieces keep it
        # lazy passes over the same bounds: the pieces feed the pool, the shards name the files
        results = iter(
            pool.ordered(
                _shard,
                piece_bounds(stream.count, shard_size, PIECE),
                shared=(shipped, format, key),
            )
        )
        bar = tqdm(total=stream.count, unit="task", disable=not progress, desc="stream")
        try:
            for index, (first, last) in enumerate(shard_bounds(stream.count, shard_size)):
                parts = []
                for start, end in piece_bounds(last - first, shard_size, PIECE):
                    part, counts = next(results)
                    parts.append(part)
                    _merge(stats, counts)
                    bar.update(end - start)
                path = tmp / "data" / f"shard-{index:05d}.{FORMATS[format]}"
                _write_file(format, path, _join(format, parts), stream.seed, first, last)
        finally:
            bar.close()
            _PREPARED.pop(key, None)  # in this process (--jobs 1): the caller's stream
        return {
            "toolkit_version": __version__,
            "format": format,
            "seed": stream.seed,
            "count": stream.count,
            "shard_size": shard_size,
            "holdout": stream.holdout,
            "distribution": stream.distribution.as_dict(),
            "worlds": {
                s.name: {"simulator": s.simulator, "content_hash": s.baselines.content_hash()}
                for s in sources
            },
            "registry_hash": registry_hash(),
            "stats": stats,
        }

    return write_folder(out, overwrite, fill, WHAT, KIND, inputs)


def _write_file(format: str, path: Path, part, seed: int, first: int, last: int) -> None:
    if format == "parquet":
        import pyarrow.parquet as pq

        from whatif_bench.corpus.columns import COMPRESSION, COMPRESSION_LEVEL

        pq.write_table(part, path, compression=COMPRESSION, compression_level=COMPRESSION_LEVEL)
    else:
        from whatif_bench.stream.h5shard import write_shard

        write_shard(path, part, {"seed": seed, "first_slot": first, "n_tasks": last - first})
