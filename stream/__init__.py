"""A training-data environment: an endless, seeded stream of fresh tasks apart from the benchmark.

``TaskStream(seed)`` yields verified tasks cut from training worlds (real simulator runs the
benchmark never uses); ``whatif stream`` writes a counted stream as Parquet or HDF5 shards
(docs/STREAM_FORMAT.md). With the ``train`` extra, ``StreamDataset``/``CorpusDataset`` and
``collate_tasks`` (or, faster, ``PaddedBatches``) feed PyTorch, and ``ForecastEnv``
(``whatif/Forecast-v0``) is a one-step Gymnasium environment. See docs/TRAINING.md.
"""

from typing import TYPE_CHECKING

from whatif_bench._lazy import lazy_exports

if TYPE_CHECKING:
    from whatif_bench.stream.batches import PaddedBatches, as_made, pad_tasks
    from whatif_bench.stream.distribution import AxisDistribution, DistributionError
    from whatif_bench.stream.gym_env import ENV_ID, EnvError, ForecastEnv, register_envs
    from whatif_bench.stream.h5shard import read_shard
    from whatif_bench.stream.items import task_item
    from whatif_bench.stream.seeding import SeedError, resolve_seed
    from whatif_bench.stream.shards import write_shards
    from whatif_bench.stream.sources import SourceError, WorldSource
    from whatif_bench.stream.task_stream import StreamError, StreamStats, TaskStream
    from whatif_bench.stream.torch_data import CorpusDataset, StreamDataset, collate_tasks

# Imported on first use (see whatif_bench._lazy), so the command line stays light.
_EXPORTS = {
    "PaddedBatches": "whatif_bench.stream.batches",
    "pad_tasks": "whatif_bench.stream.batches",
    "as_made": "whatif_bench.stream.batches",
    "AxisDistribution": "whatif_bench.stream.distribution",
    "DistributionError": "whatif_bench.stream.distribution",
    "ENV_ID": "whatif_bench.stream.gym_env",
    "EnvError": "whatif_bench.stream.gym_env",
    "ForecastEnv": "whatif_bench.stream.gym_env",
    "register_envs": "whatif_bench.stream.gym_env",
    "read_shard": "whatif_bench.stream.h5shard",
    "task_item": "whatif_bench.stream.items",
    "SeedError": "whatif_bench.stream.seeding",
    "resolve_seed": "whatif_bench.stream.seeding",
    "write_shards": "whatif_bench.stream.shards",
    "SourceError": "whatif_bench.stream.sources",
    "WorldSource": "whatif_bench.stream.sources",
    "StreamError": "whatif_bench.stream.task_stream",
    "StreamStats": "whatif_bench.stream.task_stream",
    "TaskStream": "whatif_bench.stream.task_stream",
    "CorpusDataset": "whatif_bench.stream.torch_data",
    "StreamDataset": "whatif_bench.stream.torch_data",
    "collate_tasks": "whatif_bench.stream.torch_data",
}
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)

__all__ = [
    "ENV_ID",
    "AxisDistribution",
    "CorpusDataset",
    "DistributionError",
    "EnvError",
    "ForecastEnv",
    "PaddedBatches",
    "SeedError",
    "SourceError",
    "StreamDataset",
    "StreamError",
    "StreamStats",
    "TaskStream",
    "WorldSource",
    "as_made",
    "collate_tasks",
    "pad_tasks",
    "read_shard",
    "register_envs",
    "resolve_seed",
    "task_item",
    "write_shards",
]
