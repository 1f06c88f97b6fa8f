"""Worker processes that end with their parent.

joblib's loky workers outlive a parent killed by ``kill -9`` or SIGTERM for minutes (until
their idle timeout), each holding hundreds of MB. ``parallel`` gives a ``joblib.Parallel``
whose loky workers run ``_die_with_parent`` first: on Linux it asks the kernel
(``prctl(PR_SET_PDEATHSIG, SIGKILL)``) to kill the worker when its parent dies, then checks
the parent is still the one that started it (it may have died before the ``prctl``).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def _die_with_parent(parent_pid: int) -> None:
    """Loky worker initializer: SIGKILL this process when its parent ends (Linux only)."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died before the prctl took effect
        os.kill(os.getpid(), signal.SIGKILL)


def parallel(n_jobs: int, **kwargs):
    """A ``joblib.Parallel`` over ``n_jobs`` loky workers that die with this process.

    ``kwargs`` go to ``joblib.Parallel`` (e.g. ``return_as="generator"``, ``batch_size=1``).
    """
    from joblib import Parallel
    from joblib._parallel_backends import LokyBackend

    backend = LokyBackend(initializer=_die_with_parent, initargs=(os.getpid(),))
    return Parallel(n_jobs=n_jobs, backend=backend, **kwargs)
