"""Appending to the corpus's flat float32 arrays with the compression done by threads.

HDF5 compresses a chunked dataset's chunks itself, one at a time, in the thread that writes
(and holds Python's lock meanwhile): in a one-process writer, deflating the corpus's 1 GB of
task arrays is most of the generation's time. ``ChunkAppender`` cuts the values it is given
into whole chunks, has each one shuffled and deflated by ``zlib`` in a thread pool (``zlib``
lets go of Python's lock while it works), and writes the finished chunks in order with
``write_direct_chunk``. The chunks are exactly those HDF5's own filters (shuffle, then gzip at
``LEVEL``) make, so any HDF5 reader reads them as usual (tests/test_generator_chunks.py
compares them with HDF5's). The last, partial chunk is padded with zeros, as HDF5 stores an
edge chunk.
"""

from __future__ import annotations

import zlib
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor, Future

import numpy as np

LEVEL = 1  # gzip level of the corpus's task arrays (docs/CORPUS_FORMAT.md)


def shuffle_and_deflate(chunk: np.ndarray) -> bytes:
    """One chunk (CHUNK,) float32 as HDF5's shuffle then deflate filters store it: the values'
    first bytes, then their second bytes ..., deflated at ``LEVEL`` (zlib format)."""
    shuffled = np.ascontiguousarray(chunk.view(np.uint8).reshape(-1, chunk.itemsize).T)
    return zlib.compress(shuffled, LEVEL)


class ChunkAppender:
    """Appends float32 values to one 1-D dataset chunked by ``chunk`` values, with shuffle and
    gzip ``LEVEL``; ``pool`` (None: this thread) compresses whole chunks. ``finish`` writes
    the last, partial chunk. Chunks are written in order, so the file does not depend on
    the pool's size."""

    def __init__(self, dataset, chunk: int, pool: Executor | None = None, ahead: int = 16) -> None:
        self.dataset = dataset
        self.chunk = chunk
        self.pool = pool
        self.ahead = ahead  # chunks compressed ahead of the writes, at most, per append
        self.pending = np.empty(0, dtype=np.float32)  # values past the last whole chunk
        self.size = 0  # values appended
        self.next_chunk = 0  # index of the next chunk to write
        self.compressing: deque[Future] = deque()

    def append(self, parts: list[np.ndarray]) -> None:
        """Append the values of ``parts`` (float32 arrays, flattened, in order); their whole
        chunks are written before returning."""
        values = np.concatenate(
            [self.pending, *(np.asarray(p, np.float32).reshape(-1) for p in parts)]
        )
        whole = values.size - values.size % self.chunk
        self.size += values.size - self.pending.size
        self.dataset.resize((self.size,))
        compress = self._compressor()
        for start in range(0, whole, self.chunk):
            self.compressing.append(compress(values[start : start + self.chunk]))
            if len(self.compressing) > self.ahead:
                self._write(self.compressing.popleft())
        while self.compressing:
            self._write(self.compressing.popleft())
        self.pending = values[whole:].copy()

    def finish(self) -> None:
        """Write the last, partial chunk (padded with zeros, as HDF5 stores an edge chunk)."""
        if self.pending.size:
            padded = np.zeros(self.chunk, dtype=np.float32)
            padded[: self.pending.size] = self.pending
            self._write(self._compressor()(padded))
            self.pending = padded[:0]

    def _compressor(self) -> Callable[[np.ndarray], Future]:
        if self.pool is not None:
            return lambda chunk: self.pool.submit(shuffle_and_deflate, chunk)  # type: ignore[union-attr]

        def now(chunk: np.ndarray) -> Future:
            done: Future = Future()
            done.set_result(shuffle_and_deflate(chunk))
            return done

        return now

    def _write(self, compressed: Future) -> None:
        offset = self.next_chunk * self.chunk
        self.dataset.id.write_direct_chunk((offset,), compressed.result(), filter_mask=0)
        self.next_chunk += 1
