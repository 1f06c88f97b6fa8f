"""Where the work of ``generate``, ``evaluate`` and ``stream`` runs: in this process, in local
worker processes (joblib) or threads, or on a ``dask.distributed`` cluster; results in
submission order.

Local threads (``open_pool(jobs, threads=True)``) suit work that lets go of Python's lock for
most of its time (numba kernels compiled with ``nogil``, zlib): ``generate`` runs its targets
so, with no worker start-up (imports, numba's cache) and no results copied between processes.

``open_pool(jobs, cluster)`` connects first (and fails at once, before any output exists, if it
cannot), then gives a ``WorkPool`` whose ``ordered(function, calls)`` yields
``function(*shared, *call)`` for each call, in the order of ``calls``, whichever worker ran it.
At most a bounded number of calls is in flight, so neither this process nor the cluster holds
more than a few results at a time. A local worker process that dies (the OOM killer, a kill) is
a ``WorkerDied`` saying how; the caller may call ``ordered`` again for the calls not yielded.

A cluster is a ``DaskCluster``: the address of a running scheduler, or a number of local worker
processes (a ``LocalCluster`` started here and closed at the end, also after an error or a
Ctrl-C); a connected ``distributed.Client`` works too (it is left open). Before any work, every
worker must import ``whatif_bench`` at this very version.

Usage::

    with open_pool(jobs=1, cluster=DaskCluster(scheduler="tcp://host:8786")) as pool:
        for result in pool.ordered(work, [(1,), (2,)]):
            ...
"""

from __future__ import annotations

import collections
import contextlib
import math
import re
import signal
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from whatif_bench._version import __version__
from whatif_bench.errors import WhatIfError

DEFAULT_CONNECT_TIMEOUT_S = 5.0
IN_FLIGHT_PER_THREAD = 2  # calls submitted ahead per worker thread (keeps every worker busy)
INSTALL_HINT = "install whatif-bench[dask] (pip install 'whatif-bench[dask]')"


class ClusterError(WhatIfError):
    """The dask cluster cannot be used: not installed, unreachable, no workers, wrong version."""


WORKER_DIED = "the worker process died"  # how every ``WorkerDied.reason`` starts


class WorkerDied(WhatIfError):
    """A local worker process died while the pool ran calls (the OOM killer, a kill, a crash
    in native code): the calls in flight are lost, the results yielded before stand, and a
    new ``ordered`` call starts fresh workers. ``reason`` says how, in words."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"{reason}; the calls it was running are lost")
        self.reason = reason


@dataclass(frozen=True)
class DaskCluster:
    """A dask cluster to run on: a running scheduler, or ``local_workers`` local processes.

    Parameters
    ----------
    scheduler : str or None
        The scheduler's address, e.g. ``tcp://host:8786``.
    local_workers : int or None
        Start a ``LocalCluster`` of this many worker processes (one thread each) instead.
    timeout_s : float
        Seconds to wait for the scheduler to answer (and for a first worker), in seconds.
    """

    scheduler: str | None = None
    local_workers: int | None = None
    timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S

    def __post_init__(self) -> None:
        if (self.scheduler is None) == (self.local_workers is None):
            raise ClusterError("give either a scheduler address or a number of local workers")
        if self.scheduler is not None and (
            not isinstance(self.scheduler, str) or not self.scheduler.strip()
        ):
            raise ClusterError(
                f"the scheduler address must be a non-empty string, got {self.scheduler!r}"
            )
        workers = self.local_workers
        if workers is not None and (
            isinstance(workers, bool) or not isinstance(workers, int) or workers < 1
        ):
            raise ClusterError(
                f"the number of local workers must be a positive integer, got {workers!r}"
            )
        timeout = self.timeout_s
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not math.isfinite(timeout)
            or timeout <= 0
        ):
            raise ClusterError(
                f"the connect timeout must be a finite number of seconds > 0, got {timeout!r}"
            )

    def describe(self) -> str:
        """Where it runs, for messages: the address, or the local cluster's size."""
        if self.scheduler is not None:
            return f"the dask scheduler at {self.scheduler}"
        return f"a local dask cluster of {self.local_workers} worker processes"


class WorkPool:
    """Runs calls of one function and yields their results in submission order.

    ``client`` is a connected ``distributed.Client``, or None for local processes (``jobs``
    of them; 1 runs in this process), or local threads with ``threads``."""

    def __init__(
        self, jobs: int = 1, client: Any = None, where: str = "", threads: bool = False
    ) -> None:
        if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
            raise ValueError(f"the number of jobs must be a positive integer, got {jobs!r}")
        self.jobs = jobs
        self.client = client
        self.where = where
        self.threads = threads

    @property
    def distributed(self) -> bool:
        """True on a dask cluster: workers may be other machines, without this one's files."""
        return self.client is not None

    def ordered(
        self, function: Callable, calls: Iterable[tuple], shared: tuple = ()
    ) -> Iterator[Any]:
        """``function(*shared, *call)`` for every call, yielded in the order of ``calls``.

        ``shared`` arguments are the same for every call; on a dask cluster they are sent once
        (not with every call). ``calls`` is consumed lazily, a few ahead of the results."""
        if self.client is not None:
            return self._dask(function, calls, shared)
        if self.jobs == 1:
            return (function(*shared, *call) for call in calls)
        if self.threads:
            return self._threaded(function, calls, shared)
        return self._local(function, calls, shared)

    def _threaded(self, function: Callable, calls: Iterable[tuple], shared: tuple) -> Iterator[Any]:
        """``ordered`` on ``jobs`` threads of this process, ``IN_FLIGHT_PER_THREAD`` calls each
        submitted ahead; calls not started when the caller stops are cancelled."""
        from concurrent.futures import ThreadPoolExecutor

        window = IN_FLIGHT_PER_THREAD * self.jobs
        pending: collections.deque = collections.deque()
        with ThreadPoolExecutor(self.jobs, thread_name_prefix="whatif-worker") as executor:
            try:
                for call in calls:
                    pending.append(executor.submit(function, *shared, *call))
                    if len(pending) >= window:
                        yield pending.popleft().result()
                while pending:
                    yield pending.popleft().result()
            finally:
                for future in pending:
                    future.cancel()

    def _local(self, function: Callable, calls: Iterable[tuple], shared: tuple) -> Iterator[Any]:
        """``ordered`` on ``jobs`` local (loky) processes; a worker that dies is ``WorkerDied``."""
        from concurrent.futures.process import BrokenProcessPool  # loky's derive from it

        from joblib import delayed

        from whatif_bench.workers import parallel

        results = parallel(self.jobs, return_as="generator", batch_size=1)(
            delayed(function)(*shared, *call) for call in calls
        )
        try:
            yield from results
        except BrokenProcessPool as exc:
            raise WorkerDied(worker_death(exc)) from None

    def _dask(self, function: Callable, calls: Iterable[tuple], shared: tuple) -> Iterator[Any]:
        import dask
        from distributed import CancelledError, KilledWorker

        client = self.client
        threads = sum(client.nthreads().values())
        window = max(2, IN_FLIGHT_PER_THREAD * threads)
        pending: collections.deque = collections.deque()
        shipped = [client.scatter([value], hash=False)[0] for value in shared]
        try:
            for call in calls:
                # A call's own arguments (a chunk of tasks) may pass dask's "large graph"
                # warning size; they are sent once and dropped when done, as intended here.
                with dask.config.set({"distributed.admin.large-graph-warning-threshold": "1 TiB"}):
                    future = client.submit(function, *shipped, *call, pure=False)
                pending.append(future)
                if len(pending) >= window:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        except KilledWorker as exc:
            raise ClusterError(
                f"dask workers of {self.where} died running {_name(function)} (out of memory, "
                f"or killed): {exc}"
            ) from None
        except CancelledError:
            raise ClusterError(
                f"lost {self.where} while running {_name(function)}; nothing of the run was kept"
            ) from None
        finally:
            with contextlib.suppress(Exception):
                client.cancel([*pending, *shipped])


def worker_death(exc: BaseException) -> str:
    """How a loky worker died, from the error its pool raised: ``the worker process died
    (killed by signal 9 SIGKILL: out of memory, or killed)``, or ``(exit status 3)``."""
    found = re.search(r"exit codes of the workers are \{[A-Z_]*\((-?\d+)\)", str(exc))
    if found is None:
        return WORKER_DIED
    code = int(found.group(1))
    if code >= 0:
        return f"{WORKER_DIED} (exit status {code})"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = "signal"
    why = ": out of memory, or killed" if -code == signal.SIGKILL else ""
    return f"{WORKER_DIED} (killed by signal {-code} {name}{why})"


def _name(function: Callable) -> str:
    return getattr(function, "__qualname__", repr(function))


def toolkit_version() -> str:
    """This process's ``whatif_bench.__version__`` (run on each worker to compare)."""
    return __version__


@contextlib.contextmanager
def open_pool(
    jobs: int = 1, cluster: DaskCluster | Any | None = None, threads: bool = False
) -> Iterator[WorkPool]:
    """A ``WorkPool`` over ``jobs`` local processes (threads with ``threads``), or over
    ``cluster`` (a ``DaskCluster`` or a connected ``distributed.Client``), ready to run:
    connected, with workers of this toolkit version. Everything it started is closed on
    leaving, whatever happened."""
    if cluster is None:
        yield WorkPool(jobs, threads=threads)
        return
    if isinstance(cluster, DaskCluster):
        with _connect(cluster) as client:
            where = cluster.describe()
            check_workers(client, where)
            yield WorkPool(client=client, where=where)
        return
    if not callable(getattr(cluster, "submit", None)):
        raise ClusterError(
            f"cluster must be a DaskCluster or a distributed.Client, got {type(cluster).__name__}"
        )
    where = f"the dask scheduler at {cluster.scheduler.address}"
    check_workers(cluster, where)
    yield WorkPool(client=cluster, where=where)


def _import_distributed():
    try:
        import distributed
    except ImportError:
        raise ClusterError(
            f"running on a dask cluster needs dask.distributed: {INSTALL_HINT}"
        ) from None
    return distributed


@contextlib.contextmanager
def _connect(cluster: DaskCluster) -> Iterator[Any]:
    """A ``distributed.Client`` of ``cluster``; closed (and a local cluster shut down) on exit."""
    import logging

    distributed = _import_distributed()
    with contextlib.ExitStack() as stack:
        if cluster.local_workers is not None:
            with warnings.catch_warnings():  # its HTTP server moves off a taken port by itself
                warnings.filterwarnings("ignore", message="Port .* is already in use")
                local = distributed.LocalCluster(
                    n_workers=cluster.local_workers,
                    threads_per_worker=1,
                    processes=True,
                    dashboard_address=None,
                    # CRITICAL: at shutdown a worker whose heartbeat crosses the closing
                    # scheduler logs an ERROR with a traceback (a known race of distributed);
                    # the run's own failures reach us as exceptions of its futures instead
                    silence_logs=logging.CRITICAL,
                )
            stack.callback(local.close)
            address = local.scheduler_address
        else:
            assert cluster.scheduler is not None  # a DaskCluster has a scheduler or local workers
            address = cluster.scheduler.strip()
            probe_scheduler(address, cluster.timeout_s)
        try:
            client = distributed.Client(address, timeout=cluster.timeout_s, set_as_default=False)
        except Exception as exc:
            raise ClusterError(
                f"cannot connect to {cluster.describe()}: {_reason(exc)} (waited up to "
                f"{cluster.timeout_s:g} s; --dask-timeout sets the wait)"
            ) from None
        stack.callback(client.close)
        try:
            client.wait_for_workers(1, timeout=cluster.timeout_s)
        except Exception:
            raise ClusterError(
                f"{cluster.describe()} has no worker (none joined within "
                f"{cluster.timeout_s:g} s); start 'dask worker {address}' on each machine"
            ) from None
        yield client


def probe_scheduler(address: str, timeout_s: float) -> None:
    """Check that ``address`` answers like a dask scheduler within ``timeout_s`` seconds;
    a ``ClusterError`` naming the address if not (no client is left behind either way)."""
    import asyncio
    import concurrent.futures

    from distributed.core import rpc
    from distributed.security import Security

    # the TLS settings of dask's configuration, if any, as distributed.Client uses them
    connection_args = Security().get_connection_args("client")

    async def identity() -> dict:
        scheduler = rpc(address, timeout=timeout_s, connection_args=connection_args)
        try:
            return await asyncio.wait_for(scheduler.identity(), timeout_s)
        finally:
            await scheduler.close_rpc()

    try:  # in a thread of its own: this process may already run an event loop (Jupyter)
        with concurrent.futures.ThreadPoolExecutor(1) as thread:
            answer = thread.submit(asyncio.run, identity()).result()
    except ValueError as exc:
        raise ClusterError(
            f"{address!r} is not a dask scheduler address ({_reason(exc)})"
        ) from None
    except Exception as exc:  # refused, timed out, or a service that is not dask
        raise ClusterError(
            f"cannot reach the dask scheduler at {address}: {_reason(exc)}; is 'dask scheduler' "
            f"running there? (waited up to {timeout_s:g} s; --dask-timeout sets the wait)"
        ) from None
    if not isinstance(answer, dict) or answer.get("type") != "Scheduler":
        kind = answer.get("type") if isinstance(answer, dict) else type(answer).__name__
        raise ClusterError(f"{address} is not a dask scheduler (it says it is a {kind})")


def _reason(exc: BaseException) -> str:
    """Why connecting failed, in a few words."""
    text = " ".join(str(exc).split())
    if isinstance(exc, TimeoutError) or text.startswith("Timed out"):  # asyncio's too
        return "no answer"
    if isinstance(exc, MemoryError):
        return "the answer is not a dask message (another kind of server?)"
    return text or type(exc).__name__


def check_workers(client: Any, where: str) -> None:
    """Refuse a cluster whose workers cannot import ``whatif_bench`` or run another version."""
    found = client.run(toolkit_version, on_error="return")
    if not found:
        raise ClusterError(f"{where} has no worker; start 'dask worker ADDRESS' on each machine")
    wrong = {worker: version for worker, version in sorted(found.items()) if version != __version__}
    if not wrong:
        return
    listed = "; ".join(
        f"{worker}: {_reason(v) if isinstance(v, BaseException) else 'whatif-bench ' + str(v)}"
        for worker, v in list(wrong.items())[:3]
    )
    more = f" and {len(wrong) - 3} more" if len(wrong) > 3 else ""
    raise ClusterError(
        f"{len(wrong)} of {len(found)} dask workers of {where} do not run whatif-bench "
        f"{__version__} as this process does ({listed}{more}); install the same version on "
        "every worker"
    )
