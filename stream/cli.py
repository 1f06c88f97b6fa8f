"""``whatif stream``: write a seeded stream of fresh training tasks as Parquet or HDF5 shards."""

from __future__ import annotations

import argparse

from whatif_bench.cli_cluster import add_cluster_arguments, cluster_from_args, jobs_of
from whatif_bench.cli_lists import add_list_option
from whatif_bench.cli_types import MAX_SHARD_SIZE, count_int, seed_int, shard_size_int


def add_arguments(subparsers) -> None:
    from whatif_bench.simulators.world_defaults import CACHE_ENV, DEFAULT_CACHE
    from whatif_bench.stream.shards import FORMATS, SHARD_SIZE

    parser = subparsers.add_parser(
        "stream", help="write fresh training tasks (held apart from the benchmark) as shards"
    )
    parser.add_argument(
        "--seed", type=seed_int, required=True, help="seed of the stream (required)"
    )
    parser.add_argument(
        "--count",
        type=count_int,
        required=True,
        help="number of tasks to write, 1 to 2**63 - 1 (slots are signed 64-bit numbers; "
        "shards are planned lazily, so a large count costs no memory up front) (required)",
    )
    parser.add_argument(
        "--out",
        required=True,
        help="folder to write; finished only once it holds manifest.json (required)",
    )
    parser.add_argument(
        "--format",
        choices=list(FORMATS),
        default="parquet",
        help="shard format: parquet (the export's columns) or hdf5 (docs/STREAM_FORMAT.md; "
        "default: parquet)",
    )
    parser.add_argument(
        "--shard-size",
        type=shard_size_int,
        default=SHARD_SIZE,
        help=f"tasks per shard file, 1 to {MAX_SHARD_SIZE:,} (a shard is made whole in memory) "
        "(default: %(default)s)",
    )
    add_list_option(
        parser,
        "--simulators",
        "--simulator",
        metavar="SIM",
        help="only these simulators (default: every simulator with a training world)",
    )
    add_list_option(
        parser,
        "--worlds",
        "--world",
        metavar="NAME",
        help="only these training worlds, see 'whatif worlds list' (default: all)",
    )
    parser.add_argument(
        "--include-benchmark",
        action="store_true",
        help="also cut windows from the benchmark's baselines (default: off, held apart)",
    )
    parser.add_argument(
        "--cache",
        help=f"training-world cache folder (default: ${CACHE_ENV}, else {DEFAULT_CACHE})",
    )
    add_cluster_arguments(parser, jobs_help="worker processes making shards")
    parser.add_argument(
        "--overwrite", action="store_true", help="replace an existing --out (default: off)"
    )
    parser.set_defaults(handler=_stream, interrupt_note="no shards were kept; --out is unchanged")


def _stream(args: argparse.Namespace) -> int:
    from whatif_bench.outputs import refuse_empty
    from whatif_bench.stream.shards import write_shards
    from whatif_bench.stream.task_stream import TaskStream

    if args.cache is not None:  # "" is not the default cache: it would be the current folder
        refuse_empty(args.cache, "--cache")
    cluster = cluster_from_args(args)
    stream = TaskStream(
        args.seed,
        count=args.count,
        simulators=args.simulators or None,
        worlds=args.worlds or None,
        holdout=not args.include_benchmark,
        cache=args.cache,
    )
    out = write_shards(
        stream,
        args.out,
        shard_size=args.shard_size,
        jobs=jobs_of(args),
        overwrite=args.overwrite,
        cluster=cluster,
        format=args.format,
    )
    print(f"wrote {args.count} tasks to {out} (seed {stream.seed})")
    return 0
