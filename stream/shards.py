"""``whatif stream``: a seeded stream written as fixed-size Parquet shards for offline training.

Shard ``i`` holds slots ``i * size`` .. ``(i + 1) * size - 1`` of the stream (the last may be
shorter), in the parquet export's columns (``whatif_bench.export.parquet``); the world, slot and
seed of each task are in its ``recipe`` JSON. Shards are made in parallel (local processes or a
dask cluster) and written in order into a temporary folder that is renamed to ``out`` only once
``manifest.json`` is in it, so the files are the same for any number of jobs or workers and a
killed run never leaves a complete-looking folder.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

from whatif_bench import __version__
from whatif_bench.outputs import OutputError, check_output_path, output_lock, temporary_path

SHARD_SIZE = 4096  # tasks per shard file
MANIFEST = "manifest.json"


def _shard_table(stream, first: int, last: int):
    """The Arrow table of slots ``first`` .. ``last - 1`` (run in a worker), with the stats."""
    from whatif_bench.export.parquet import table
    from whatif_bench.stream.task_stream import StreamStats

    own = copy.copy(stream)  # its own counts, whether in a worker or in this process
    own.stats = StreamStats()
    tasks = list(own.tasks(range(first, last)))  # one kernel batch per shard
    return table(tasks), own.stats.as_dict()


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
) -> Path:
    """Write the ``count`` tasks of ``stream`` (a counted ``TaskStream``) as shards in ``out``.

    ``cluster`` (a ``whatif_bench.cluster.DaskCluster`` or a connected ``distributed.Client``)
    makes the shards on a dask cluster instead of ``jobs`` local processes: it is connected
    before any world is read or anything written; the stream is sent to the workers once with
    its worlds in it (they need no world cache); the files are the same as a local run's.
    """
    from whatif_bench.cluster import open_pool
    from whatif_bench.export.api import _check_out

    if stream.count is None:
        raise OutputError("an endless stream cannot be written; give a count")
    if isinstance(shard_size, bool) or not isinstance(shard_size, int) or shard_size < 1:
        raise OutputError(f"the shard size must be a positive integer, got {shard_size!r}")
    if cluster is not None and jobs != 1:
        raise OutputError(f"give jobs ({jobs} local processes) or a cluster, not both")
    out = Path(os.path.abspath(check_output_path(out, inputs=[], folder=True)))
    if out.parent == out:
        raise OutputError(f"{out}: cannot write to the root folder; give a folder inside it")
    _check_out(out, overwrite)
    with open_pool(jobs, cluster) as pool:
        return _write(stream, out, shard_size, overwrite, progress, pool)


def _write(stream, out: Path, shard_size: int, overwrite: bool, progress: bool, pool) -> Path:
    """``write_shards`` once the output is checked and the pool is ready."""
    import pyarrow.parquet as pq
    from tqdm import tqdm

    from whatif_bench.export.api import _check_out, _file_hashes, _remove, _stale
    from whatif_bench.export.parquet import COMPRESSION, COMPRESSION_LEVEL
    from whatif_bench.generator.writer import registry_hash

    sources = stream.world_sources()  # builds or reads the worlds once, before any worker
    stream.entries()
    bounds = [
        (first, min(first + shard_size, stream.count))
        for first in range(0, stream.count, shard_size)
    ]
    stats: dict[str, Any] = {"drawn": 0, "kept": 0, "rejected": {}}
    with output_lock(out):
        _check_out(out, overwrite)
        for stale in _stale(out):
            _remove(stale)
        tmp = temporary_path(out)
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        try:
            (tmp / "data").mkdir(parents=True)
            shipped = stream.with_sources() if pool.distributed else stream
            results = pool.ordered(_shard_table, bounds, shared=(shipped,))
            bar = tqdm(total=stream.count, unit="task", disable=not progress, desc="stream")
            for index, ((first, last), (arrow, part)) in enumerate(
                zip(bounds, results, strict=True)
            ):
                pq.write_table(
                    arrow,
                    tmp / "data" / f"shard-{index:05d}.parquet",
                    compression=COMPRESSION,
                    compression_level=COMPRESSION_LEVEL,
                )
                _merge(stats, part)
                bar.update(last - first)
            bar.close()
            manifest = {
                "toolkit_version": __version__,
                "format": "parquet",
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
                "files": _file_hashes(tmp),
            }
            text = json.dumps(manifest, indent=2, sort_keys=True, allow_nan=False) + "\n"
            with open(tmp / MANIFEST, "w", encoding="utf-8") as handle:
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())
            if out.exists():
                os.replace(out, old)
            os.replace(tmp, out)
        except OSError as exc:
            raise OutputError(f"{out}: {exc.strerror or exc}") from None
        finally:
            if tmp.exists():
                _remove(tmp)
            if old.exists() and out.exists():
                _remove(old)
            elif old.exists():  # the new folder could not be renamed in: put the old one back
                os.replace(old, out)
    return out
