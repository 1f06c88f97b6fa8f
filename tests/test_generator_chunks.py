"""``ChunkAppender`` and ``ChunkQueue`` write the chunks HDF5's own shuffle and gzip filters
write, in any parts, with or without a thread pool, and the same file whatever the pool."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from whatif_bench.generator.chunks import (
    ChunkAppender,
    ChunkQueue,
    create_task_array,
    shuffled,
    shuffled_reference,
)

CHUNK = 64  # small chunks: many whole ones and an edge one in a few hundred values


def new_dataset(h5: h5py.File, name: str) -> h5py.Dataset:
    """A dataset made as the corpus writer makes its task arrays."""
    return create_task_array(h5, name, CHUNK)


def raw_chunks(dataset: h5py.Dataset) -> list[tuple[int, bytes]]:
    """Every stored chunk's filter mask and bytes, in order."""
    n_chunks = -(-dataset.shape[0] // CHUNK)
    return [dataset.id.read_direct_chunk((i * CHUNK,)) for i in range(n_chunks)]


def write(path: Path, parts: list[np.ndarray], threads: int) -> list[tuple[int, bytes]]:
    pool = ThreadPoolExecutor(threads) if threads > 1 else None
    try:
        with h5py.File(path, "w") as h5:
            queue = ChunkQueue(pool)
            appender = ChunkAppender(new_dataset(h5, "values"), CHUNK, queue)
            other = ChunkAppender(new_dataset(h5, "other"), CHUNK, queue)
            for part in parts:  # one block of work per part, written a block late
                queue.next_block()
                appender.append([part[: part.size // 2], part[part.size // 2 :]])
                other.append([part[::-1]])
                queue.write_before(queue.mark)
            appender.finish()
            other.finish()
            queue.write_all()
    finally:
        if pool is not None:
            pool.shutdown()
    with h5py.File(path, "r") as h5:
        values = h5["values"][()]
        assert np.array_equal(values.view(np.uint32), np.concatenate(parts).view(np.uint32))
        reversed_parts = np.concatenate([part[::-1] for part in parts])
        assert np.array_equal(h5["other"][()].view(np.uint32), reversed_parts.view(np.uint32))
        return raw_chunks(h5["values"])


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    # up to 46 whole chunks a part: several groups (chunks.GROUP) in one append
    sizes=st.lists(st.integers(0, 3000), min_size=1, max_size=6),
    seed=st.integers(0, 2**32 - 1),
    scale=st.sampled_from([0.0, 1.0, 1e30]),
    threads=st.sampled_from([1, 2, 3]),
)
def test_appended_chunks_are_the_ones_hdf5_writes_itself(tmp_path, sizes, seed, scale, threads):
    rng = np.random.default_rng(seed)  # data only
    arrays = [(rng.normal(size=n) * scale).astype(np.float32) for n in sizes]
    mine = write(tmp_path / f"appended-{threads}.h5", arrays, threads)
    with h5py.File(tmp_path / "hdf5.h5", "w") as h5:  # HDF5 filters the same values itself
        dataset = new_dataset(h5, "values")
        everything = np.concatenate(arrays)
        dataset.resize((everything.size,))
        if everything.size:
            dataset[:] = everything
    with h5py.File(tmp_path / "hdf5.h5", "r") as h5:
        assert mine == raw_chunks(h5["values"])


def test_the_thread_count_does_not_change_the_file(tmp_path):
    rng = np.random.default_rng(3)  # data only
    parts = [rng.normal(size=n).astype(np.float32) for n in (5, 700, 64, 1, 333)]
    digests = set()
    for threads in (1, 2, 4):
        path = tmp_path / f"{threads}.h5"
        write(path, parts, threads)
        digests.add(path.read_bytes())
    assert len(digests) == 1


@given(
    words=st.lists(st.integers(0, 2**32 - 1), max_size=300),
    dtype=st.sampled_from(["<f4", ">f4", "<u4", "<i4", "<f8", "<u2", "|u1"]),
    step=st.sampled_from([1, 2]),
)
def test_the_shuffle_kernel_is_its_numpy_twin(words, dtype, step):
    """Every bit pattern (NaNs, infinities, subnormals among the float32 ones), any length, a
    strided view, either byte order; sizes other than 4 bytes are the twin's own (checked
    against the filter's definition only for 4 bytes)."""
    raw = np.array(words, dtype="<u4").view(np.uint8)
    size = np.dtype(dtype).itemsize
    chunk = raw[: raw.size - raw.size % size].view(dtype)[::step]
    made = shuffled(chunk)
    assert made.dtype == np.uint8 and made.shape == (chunk.size * chunk.itemsize,)
    assert np.array_equal(made, shuffled_reference(chunk))
    if chunk.itemsize == 4:  # the bytes HDF5's shuffle filter defines, written out
        table = chunk.tobytes()
        expected = bytes(table[i * 4 + b] for b in range(4) for i in range(chunk.size))
        assert made.tobytes() == expected


@pytest.mark.parametrize("shape", [(2, 8), (0, 4), ()])
def test_the_shuffle_takes_one_dimensional_chunks_only(shape):
    with pytest.raises(ValueError, match="one-dimensional"):
        shuffled(np.zeros(shape, dtype=np.float32))
