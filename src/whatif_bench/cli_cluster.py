"""The options that say where ``generate``, ``evaluate`` and ``stream`` run: ``--jobs`` local
processes, ``--dask-scheduler ADDRESS`` or ``--dask-local N`` (one of them), ``--dask-timeout``.

add_cluster_arguments(parser, jobs_help="worker processes (default: 1)")
cluster = cluster_from_args(args)  # a DaskCluster, or None for local processes (args.jobs)
"""

from __future__ import annotations

import argparse

from whatif_bench.cli_types import MAX_WAIT_S, jobs_bound_help, jobs_int, seconds_float
from whatif_bench.cluster import DEFAULT_CONNECT_TIMEOUT_S, DaskCluster


def add_cluster_arguments(parser: argparse.ArgumentParser, jobs_help: str) -> None:
    """``--jobs`` (default None: the command's own default, named in ``jobs_help``), and the
    dask options; argparse refuses any two of ``--jobs``, ``--dask-scheduler``, ``--dask-local``."""
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--jobs", type=jobs_int, help=f"{jobs_help}; {jobs_bound_help()}")
    where.add_argument(
        "--dask-scheduler",
        metavar="ADDRESS",
        help="run on the dask.distributed cluster of this scheduler, e.g. tcp://host:8786; "
        "every worker needs this whatif-bench version (default: off, local processes)",
    )
    where.add_argument(
        "--dask-local",
        type=jobs_int,
        metavar="N",
        help="run on a local dask cluster of N worker processes, started for this run "
        f"(default: off); {jobs_bound_help()}",
    )
    parser.add_argument(
        "--dask-timeout",
        type=seconds_float,
        default=DEFAULT_CONNECT_TIMEOUT_S,
        metavar="SECONDS",
        help="how long to wait for --dask-scheduler to answer before giving up, at most "
        f"{MAX_WAIT_S:g} (one day) (default: %(default)s)",
    )


def cluster_from_args(args: argparse.Namespace) -> DaskCluster | None:
    """The dask cluster the options name, or None to run in local processes."""
    if args.dask_scheduler is not None:
        return DaskCluster(scheduler=args.dask_scheduler, timeout_s=args.dask_timeout)
    if args.dask_local is not None:
        return DaskCluster(local_workers=args.dask_local, timeout_s=args.dask_timeout)
    return None
