"""A training-data environment: an endless, seeded stream of fresh tasks apart from the benchmark.

``TaskStream(seed)`` yields verified tasks cut from training worlds (real simulator runs the
benchmark never uses); ``whatif stream`` writes a counted stream as Parquet shards. See README,
"Training forecasters".
"""

from typing import TYPE_CHECKING

from whatif_bench._lazy import lazy_exports

if TYPE_CHECKING:
    from whatif_bench.stream.distribution import AxisDistribution, DistributionError
    from whatif_bench.stream.seeding import SeedError, resolve_seed
    from whatif_bench.stream.shards import write_shards
    from whatif_bench.stream.sources import SourceError, WorldSource
    from whatif_bench.stream.task_stream import StreamError, StreamStats, TaskStream

# Imported on first use (see whatif_bench._lazy), so the command line stays light.
_EXPORTS = {
    "AxisDistribution": "whatif_bench.stream.distribution",
    "DistributionError": "whatif_bench.stream.distribution",
    "SeedError": "whatif_bench.stream.seeding",
    "resolve_seed": "whatif_bench.stream.seeding",
    "write_shards": "whatif_bench.stream.shards",
    "SourceError": "whatif_bench.stream.sources",
    "WorldSource": "whatif_bench.stream.sources",
    "StreamError": "whatif_bench.stream.task_stream",
    "StreamStats": "whatif_bench.stream.task_stream",
    "TaskStream": "whatif_bench.stream.task_stream",
}
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)

__all__ = [
    "AxisDistribution",
    "DistributionError",
    "SeedError",
    "SourceError",
    "StreamError",
    "StreamStats",
    "TaskStream",
    "WorldSource",
    "resolve_seed",
    "write_shards",
]
