"""The options that say where ``generate``, ``evaluate`` and ``stream`` run: ``--jobs`` local
processes, ``--dask-scheduler ADDRESS`` or ``--dask-local N`` (one of them), ``--dask-timeout``.

add_cluster_arguments(parser, jobs_help="worker processes")
cluster = cluster_from_args(args)  # a DaskCluster, or None for local processes
jobs = jobs_of(args)  # --jobs, or the one default of every command: all cores

Every command's ``--jobs`` defaults to all the cores this process may use: each command's
output is the same whatever the number of workers, so more only makes it sooner (a model that
holds much memory is loaded in every worker: give ``--jobs 1`` for one process).
"""

from __future__ import annotations

import argparse

from whatif_bench.cli_types import MAX_WAIT_S, jobs_bound_help, jobs_int, seconds_float
from whatif_bench.cluster import DEFAULT_CONNECT_TIMEOUT_S, DaskCluster
from whatif_bench.workers import default_jobs


def jobs_help_text(what: str) -> str:
    """The help of a ``--jobs`` option: what the workers do, its bound, the one default."""
    return (
        f"{what}, >= 1; {jobs_bound_help()} (default: all {default_jobs()} cores; the output "
        "is the same whatever the number)"
    )


def jobs_of(args: argparse.Namespace) -> int:
    """``--jobs``, or the one default: all cores; 1 when a dask option gives the workers."""
    if getattr(args, "dask_scheduler", None) or getattr(args, "dask_local", None):
        return 1
    return default_jobs() if args.jobs is None else args.jobs


def add_cluster_arguments(parser: argparse.ArgumentParser, jobs_help: str) -> None:
    """``--jobs`` (``jobs_help`` says what the workers do; default None, read with
    ``jobs_of``: all cores), and the dask options; argparse refuses any two of ``--jobs``,
    ``--dask-scheduler``, ``--dask-local``."""
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--jobs", type=jobs_int, help=jobs_help_text(jobs_help))
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
