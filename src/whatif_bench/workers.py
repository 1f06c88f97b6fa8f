"""Worker processes that end with their parent.

joblib's loky workers outlive a parent that is killed (``kill -9``, SIGTERM, the OOM killer):
they wait for work for minutes, holding their memory. ``parallel`` returns a ``joblib.Parallel``
whose workers end as soon as the process that started them is gone:

- on Linux, each worker asks the kernel for SIGKILL when its parent dies
  (``prctl(PR_SET_PDEATHSIG)``);
- everywhere, a daemon thread in each worker checks once a second that its parent is alive
  (this also covers a parent that died before the worker got to ``prctl``).

Usage::

    from joblib import delayed
    from whatif_bench.workers import parallel

    for result in parallel(jobs, return_as="generator")(delayed(f)(x) for x in items):
        ...
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
import threading
import time

PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
WATCH_INTERVAL_S = 1.0


def default_jobs() -> int:
    """The number of cores this process may run on (at least 1)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def _ask_kernel_for_death_signal() -> None:
    """Linux only: get SIGKILL when the parent ends; silently nothing elsewhere."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # the watch thread still ends the worker


def _watch_parent(parent_pid: int) -> None:
    """End this process (at once, like the kernel would) once ``parent_pid`` is no longer its
    parent: after the parent dies the worker is adopted by another process."""
    while True:
        if os.getppid() != parent_pid:
            os._exit(1)
        time.sleep(WATCH_INTERVAL_S)


def end_with_parent(parent_pid: int) -> None:
    """Worker initializer: make this process end when ``parent_pid`` (its parent) ends."""
    _ask_kernel_for_death_signal()
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)
    threading.Thread(
        target=_watch_parent, args=(parent_pid,), name="whatif-parent-watch", daemon=True
    ).start()


def prepare_worker(parent_pid: int) -> None:
    """Initializer of ``parallel``'s workers: end with ``parent_pid`` (``end_with_parent``)
    and give progress bars a lock of this process alone (``_bars_lock_within_the_process``)."""
    end_with_parent(parent_pid)
    _bars_lock_within_the_process()


def _bars_lock_within_the_process() -> None:
    """Give tqdm a thread lock before it makes its own for its first bar here.

    tqdm's own lock holds a multiprocessing lock. In a loky worker (start method ``loky``)
    that is a named semaphore registered with the resource tracker, and a worker ended by
    ``stop_workers`` never unregisters it: every command that ran such workers ended with
    "resource_tracker: There appear to be 2 leaked semaphore objects". Each worker made its
    own, shared with no other process, so a thread lock guards exactly as much.
    """
    from tqdm import tqdm

    tqdm.set_lock(threading.RLock())


def stop_workers() -> None:
    """End this process's loky workers at once, if it started any.

    For a process about to exit (the ``whatif`` command, ``cli.entry``), when nothing waits
    for them: loky's own exit hands each worker a sentinel and waits for it to wind down,
    which took 0.5 s to 0.8 s at the end of every command that used workers here. A process
    that goes on (a notebook) keeps them: loky reuses them for its next run.
    """
    module = sys.modules.get("joblib.externals.loky.reusable_executor")
    executor = getattr(module, "_executor", None)
    if executor is not None:
        executor.shutdown(wait=True, kill_workers=True)


def parallel(n_jobs: int, **kwargs):
    """A ``joblib.Parallel`` over ``n_jobs`` loky worker processes that end with this process.

    ``n_jobs`` must be a positive integer (1 runs in this process, no workers); ``kwargs`` go
    to ``joblib.Parallel`` (e.g. ``return_as="generator"``, ``batch_size=1``).
    """
    from joblib import Parallel
    from joblib._parallel_backends import LokyBackend

    if isinstance(n_jobs, bool) or not isinstance(n_jobs, int) or n_jobs < 1:
        raise ValueError(f"the number of jobs must be a positive integer, got {n_jobs!r}")
    backend = LokyBackend(initializer=prepare_worker, initargs=(os.getpid(),))
    return Parallel(n_jobs=n_jobs, backend=backend, **kwargs)
