"""Writing an export's files in a background thread while the next rows are being built.

Compressing and writing a Parquet row group (pyarrow) lets go of Python's lock, and building
the next batch of rows (reading tasks, describing them, making Arrow arrays) holds it: with one
writer thread the two overlap on two cores. ``OrderedWriter`` runs the calls it is given in
one thread, in the order given (a ``ParquetWriter`` is used by that thread alone), keeps at
most ``depth`` calls waiting so that finished tables do not pile up in memory, and raises a
call's error in the caller at the next ``submit`` or at ``finish``; the calls queued after a
failed one do not run.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from types import TracebackType
from typing import Any

DEPTH = 2  # calls waiting or running at most (each holds one batch's table)


class OrderedWriter:
    """Runs calls one after another in one background thread; a context manager.

    Leaving the ``with`` block normally waits for every call (and raises the first error);
    leaving it with an error cancels the calls not started and waits for the running one, so
    no file is written after the caller has given up.
    """

    def __init__(self, depth: int = DEPTH) -> None:
        if depth < 1:
            raise ValueError(f"depth must be at least 1, got {depth}")
        self.depth = depth
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="whatif-export-writer")
        self._pending: deque[Future] = deque()
        self._failed = False  # set in the thread by a failed call: later calls are skipped

    def submit(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        """Queue ``call(*args, **kwargs)`` after the calls queued before it; first wait while
        ``depth`` calls are queued, raising the error of any that failed."""
        while len(self._pending) >= self.depth:
            self._pending.popleft().result()
        self._pending.append(self._pool.submit(self._run, call, args, kwargs))

    def _run(self, call: Callable[..., Any], args: tuple, kwargs: dict[str, Any]) -> None:
        """``call`` in the writer thread, unless an earlier call failed."""
        if self._failed:
            return
        try:
            call(*args, **kwargs)
        except BaseException:
            self._failed = True
            raise

    def finish(self) -> None:
        """Wait for every queued call, in order; raise the first error."""
        while self._pending:
            self._pending.popleft().result()

    def abandon(self) -> None:
        """Cancel the calls not started and wait for the running one, ignoring errors."""
        for future in self._pending:
            future.cancel()
        self._pending.clear()
        self._pool.shutdown(wait=True)

    def __enter__(self) -> OrderedWriter:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if kind is not None:
            self.abandon()
            return
        try:
            self.finish()
        except BaseException:
            self.abandon()
            raise
        self._pool.shutdown(wait=True)
