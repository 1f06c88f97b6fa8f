"""A training-data environment: an endless, seeded stream of fresh tasks apart from the benchmark.

See ``TaskStream`` and README's "Training forecasters" section.
"""

from whatif_bench.stream.distribution import AxisDistribution, DistributionError
from whatif_bench.stream.seeding import SeedError, resolve_seed
from whatif_bench.stream.sources import SourceError, WorldSource
from whatif_bench.stream.task_stream import StreamError, StreamStats, TaskStream

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
]
