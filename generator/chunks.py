"""Appending to the corpus's flat float32 arrays with the compression done by threads.

HDF5 compresses a chunked dataset's chunks itself, one at a time, in the thread that writes
(and holds Python's lock meanwhile): in a one-process writer, deflating the corpus's 1 GB of
task arrays is most of the generation's time. Here each dataset's ``ChunkAppender`` cuts the
values it is given into whole chunks and hands them to a ``ChunkQueue``, whose thread pool
shuffles (a numba kernel) and deflates them with ``zlib``, both letting go of Python's lock; the
queue writes the finished chunks with ``write_direct_chunk``. The chunks are exactly those
HDF5's own filters (shuffle, then gzip at ``LEVEL``) make, so any HDF5 reader reads them as
usual (tests/test_generator_chunks.py compares them with HDF5's). The last, partial chunk is
padded with zeros, as HDF5 stores an edge chunk.

The file must not depend on the pool's size or on timing, so the queue makes the same HDF5
calls in the same order whatever the threads do: the caller appends a block of work (a target),
then asks the queue to write everything submitted before that block (``write_before``), in
submission order, waiting for each chunk as needed; meanwhile the block just submitted is
being compressed, side by side with whatever else the process does.
"""

from __future__ import annotations

import sys
import zlib
from collections import deque
from concurrent.futures import Executor, Future

import numba
import numpy as np

from whatif_bench.relationships.kernels import JIT_OPTIONS, JitFlags

LEVEL = 1  # gzip level of the corpus's task arrays (docs/CORPUS_FORMAT.md)
GROUP = 16  # consecutive chunks of one dataset compressed as one piece of the pool's work
SHUFFLE_OPTIONS: JitFlags = {**JIT_OPTIONS, "nogil": True}  # the compressing threads run it


def create_task_array(group, name: str, chunk: int):
    """An empty, growable 1-D float32 dataset ``name`` in ``group``, chunked by ``chunk`` values,
    with shuffle and gzip at ``LEVEL``: how the corpus's task arrays are made, and what the
    chunks ``ChunkAppender`` writes must decode as."""
    return group.create_dataset(
        name,
        shape=(0,),
        maxshape=(None,),
        dtype=np.float32,
        chunks=(chunk,),
        compression="gzip",
        compression_opts=LEVEL,
        shuffle=True,
        track_times=False,
    )


def shuffle_and_deflate(chunk: np.ndarray) -> bytes:
    """One chunk (CHUNK,) float32 as HDF5's shuffle then deflate filters store it: the values'
    first bytes, then their second bytes ..., deflated at ``LEVEL`` (zlib format). Both steps
    let go of Python's lock (``shuffled``, ``zlib.compress``)."""
    return zlib.compress(shuffled(chunk).data, LEVEL)


def shuffled(chunk: np.ndarray) -> np.ndarray:
    """HDF5's shuffle of a 1-D array (n,) of ``itemsize``-byte values: (n * itemsize,) uint8,
    every value's byte 0, then every value's byte 1, ... For 4-byte values (the corpus's
    float32) made by ``_shuffle_kernel``, which lets go of Python's lock: numpy's transpose
    copy holds it, about 85 µs a chunk of 16,384 float32, so the compressing threads took
    turns for it. ``shuffled_reference`` is its twin (and makes the other cases)."""
    if chunk.ndim != 1:
        raise ValueError(f"a chunk is one-dimensional, got shape {chunk.shape}")
    if chunk.itemsize != 4 or sys.byteorder != "little":  # the kernel reads bytes by shifts
        return shuffled_reference(chunk)
    out = np.empty(chunk.size * 4, dtype=np.uint8)
    _shuffle_kernel(np.ascontiguousarray(chunk).view(np.uint32), out)
    return out


def shuffled_reference(chunk: np.ndarray) -> np.ndarray:
    """``shuffled`` in numpy: the bytes as an (n, itemsize) table, read column by column."""
    table = np.ascontiguousarray(chunk).view(np.uint8).reshape(-1, chunk.itemsize)
    return np.ascontiguousarray(table.T).reshape(-1)


@numba.njit(**SHUFFLE_OPTIONS)
def _shuffle_kernel(words: np.ndarray, out: np.ndarray) -> None:
    """Byte b of ``words[i]`` ((n,) uint32, little-endian order of bytes) to ``out[b * n + i]``
    ((4 n,) uint8)."""
    n = words.size
    for i in range(n):
        word = words[i]
        out[i] = word & 0xFF
        out[n + i] = (word >> 8) & 0xFF
        out[2 * n + i] = (word >> 16) & 0xFF
        out[3 * n + i] = word >> 24


def deflate_all(chunks: list[np.ndarray]) -> list[bytes]:
    """``shuffle_and_deflate`` of each chunk, in order."""
    return [shuffle_and_deflate(chunk) for chunk in chunks]


class ChunkQueue:
    """Compresses chunks in ``pool`` (None: at once, in this thread) and writes them in the
    order they were submitted. Chunks come in groups of consecutive chunks of one dataset, each
    group one piece of the pool's work (a future a chunk cost the submitting thread about as
    much as writing the chunk)."""

    def __init__(self, pool: Executor | None = None) -> None:
        self.pool = pool
        self.waiting: deque[tuple[int, ChunkAppender, int, Future]] = deque()
        self.mark = 0  # the number of the current block of work

    def submit(self, appender: ChunkAppender, index: int, chunks: list[np.ndarray]) -> None:
        """Queue chunks ``index``, ``index + 1``, ... (each (CHUNK,) float32) of
        ``appender``'s dataset."""
        if self.pool is None:
            future: Future = Future()
            future.set_result(deflate_all(chunks))
        else:
            future = self.pool.submit(deflate_all, chunks)
        self.waiting.append((self.mark, appender, index, future))

    def next_block(self) -> None:
        """Start a new block of work: what is submitted from now on belongs to it."""
        self.mark += 1

    def write_before(self, mark: int) -> None:
        """Write every chunk submitted before block ``mark``, in order."""
        while self.waiting and self.waiting[0][0] < mark:
            _, appender, index, future = self.waiting.popleft()
            for number, compressed in enumerate(future.result()):
                appender.write(index + number, compressed)

    def write_all(self) -> None:
        self.write_before(self.mark + 1)

    def cancel(self) -> None:
        """Drop what is not written (after an error: nothing more is written)."""
        for *_, future in self.waiting:
            future.cancel()
        self.waiting.clear()


class ChunkAppender:
    """Appends float32 values to one 1-D dataset chunked by ``chunk`` values, with shuffle and
    gzip ``LEVEL``, through ``queue``; ``finish`` queues the last, partial chunk."""

    def __init__(self, dataset, chunk: int, queue: ChunkQueue) -> None:
        self.dataset = dataset
        self.chunk = chunk
        self.queue = queue
        self.pending = np.empty(0, dtype=np.float32)  # values past the last whole chunk
        self.size = 0  # values appended
        self.next_chunk = 0  # index of the next chunk to queue

    def append(self, parts: list[np.ndarray]) -> None:
        """Append the values of ``parts`` (float32 arrays, flattened, in order): the dataset
        grows now, its whole chunks are queued."""
        values = np.concatenate(
            [self.pending, *(np.asarray(p, np.float32).reshape(-1) for p in parts)]
        )
        whole = values.size - values.size % self.chunk
        self.size += values.size - self.pending.size
        self.dataset.resize((self.size,))
        starts = range(0, whole, self.chunk)
        for first in range(0, len(starts), GROUP):
            group = [values[start : start + self.chunk] for start in starts[first : first + GROUP]]
            self.queue.submit(self, self.next_chunk, group)
            self.next_chunk += len(group)
        self.pending = values[whole:].copy()

    def finish(self) -> None:
        """Queue the last, partial chunk (padded with zeros, as HDF5 stores an edge chunk)."""
        if self.pending.size:
            padded = np.zeros(self.chunk, dtype=np.float32)
            padded[: self.pending.size] = self.pending
            self.queue.submit(self, self.next_chunk, [padded])
            self.next_chunk += 1
            self.pending = padded[:0]

    def write(self, index: int, compressed: bytes) -> None:
        self.dataset.id.write_direct_chunk((index * self.chunk,), compressed, filter_mask=0)
