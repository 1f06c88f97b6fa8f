"""Writing HDF5 files so that a full disk is an ordinary error, not a crash.

When a write fails inside HDF5 (no space left, file size limit), h5py reports it only from
object destructors ("Exception ignored"), the file is left in a state HDF5 cannot close, and
the process may die with SIGSEGV at exit. ``GuardedFile`` sits between HDF5 and the disk (h5py's
``fileobj`` driver): the first failed write is remembered and that write and every later one go
to memory instead, so HDF5 never sees an error and can always close the file. The caller asks
``check()`` after each block of work (and ``finish()`` at the end) and gets the ``OSError``.
After a failure, only what HDF5 still writes before the caller stops is held in memory.

``finish`` makes the file durable with ``fsync``. So that it does not wait for the whole file
then (about 0.35 s for the default corpus's 158 MB on this project's machines), every
``SYNC_BEHIND`` bytes written start an ``fdatasync`` in a thread, which waits for the disk
without Python's lock while the writing goes on; a failure there is remembered as a failed
write is.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

SYNC_BEHIND = 32 * 2**20  # bytes written between two background syncs (module doc)
_datasync = getattr(os, "fdatasync", os.fsync)  # (macOS has no fdatasync)


class GuardedFile:
    """A binary file for h5py's ``fileobj`` driver that never fails a write (see module doc).

    Positions and sizes are in bytes. ``error`` is the first ``OSError`` of a write (or of a
    background sync), or None.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        self.position = 0
        self.size = 0
        self.error: OSError | None = None
        self.overflow: dict[int, bytes] = {}  # offset -> bytes written after a failure
        self.unsynced = 0  # bytes written since the last background sync started
        self.syncing: threading.Thread | None = None

    # ---- the file protocol h5py uses ------------------------------------------------------
    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        if whence == os.SEEK_SET:
            self.position = offset
        elif whence == os.SEEK_CUR:
            self.position += offset
        else:
            self.position = self.size + offset
        return self.position

    def tell(self) -> int:
        return self.position

    def write(self, data) -> int:
        view = memoryview(data)  # h5py's buffer: valid only during this call
        view = view.cast("B") if view.c_contiguous else memoryview(bytes(view))
        size = view.nbytes
        if self.error is None:
            try:
                done = 0
                while done < size:
                    done += os.pwrite(self.fd, view[done:], self.position + done)
            except OSError as exc:
                self.error = exc
            self.unsynced += size
            if self.unsynced >= SYNC_BEHIND:
                self._sync_behind()
        if self.error is not None:
            self.overflow.pop(self.position, None)  # re-inserted last: the newest wins
            self.overflow[self.position] = bytes(view)  # a copy: the buffer is h5py's
        self.position += size
        self.size = max(self.size, self.position)
        return size

    def read(self, size: int = -1) -> bytes:
        if size < 0:
            size = max(0, self.size - self.position)
        buffer = bytearray(os.pread(self.fd, size, self.position))
        buffer.extend(b"\0" * (size - len(buffer)))
        for offset, data in self.overflow.items():  # in write order
            start, end = max(offset, self.position), min(offset + len(data), self.position + size)
            if start < end:
                buffer[start - self.position : end - self.position] = data[
                    start - offset : end - offset
                ]
        self.position += size
        return bytes(buffer)

    def truncate(self, size: int | None = None) -> int:
        size = self.position if size is None else size
        if self.error is None:
            try:
                os.ftruncate(self.fd, size)
            except OSError as exc:
                self.error = exc
        self.size = size
        return size

    def flush(self) -> None:
        pass

    # ---- syncing behind the writes ---------------------------------------------------------
    def _sync_behind(self) -> None:
        """Start an ``fdatasync`` of what is written so far in a thread, unless one is running
        (or no thread can be started: then the closing ``fsync`` does it all)."""
        if self.syncing is not None and self.syncing.is_alive():
            return
        self.unsynced = 0
        thread = threading.Thread(target=self._sync, name="whatif-sync-behind", daemon=True)
        try:
            thread.start()
        except RuntimeError:  # no thread to be had (a process limit, or the interpreter exiting)
            return
        self.syncing = thread

    def _sync(self) -> None:
        try:
            _datasync(self.fd)
        except OSError as exc:
            if self.error is None:
                self.error = exc

    def _wait_for_sync(self) -> None:
        """Wait for the background sync (before the descriptor is synced or closed)."""
        if self.syncing is not None:
            self.syncing.join()
            self.syncing = None

    # ---- for the caller --------------------------------------------------------------------
    def check(self) -> None:
        """Raise the first write error, if any."""
        if self.error is not None:
            raise self.error

    def finish(self) -> None:
        """Make the written bytes durable (``fsync``, where a full disk may show only now),
        close the descriptor, then raise the first write error, if any."""
        try:
            self._wait_for_sync()
            if self.error is None:
                try:
                    os.fsync(self.fd)
                except OSError as exc:
                    self.error = exc
        finally:
            self.close()
        self.check()

    def close(self) -> None:
        self._wait_for_sync()
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


@contextlib.contextmanager
def guarded_h5(path: str | os.PathLike, **options: Any) -> Iterator[Any]:
    """An ``h5py.File`` opened for writing through a ``GuardedFile`` at ``path``.

    On a normal exit the file is closed, made durable and the first failed write (full disk,
    file size limit) is raised as ``OSError``; on an exception the file is closed quietly and
    the exception goes on. ``options`` go to ``h5py.File`` (e.g. ``track_order=True``).
    """
    import h5py

    guard = GuardedFile(path)
    try:
        h5 = h5py.File(guard, "w", **options)
    except BaseException:
        guard.close()
        raise
    try:
        yield h5
    except BaseException:
        try:
            h5.close()
        finally:
            guard.close()
        raise
    try:
        h5.close()
    finally:
        guard.finish()
