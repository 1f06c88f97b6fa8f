"""A streamed slot's block and ``place_blocks``: the kernel writes what its numpy twin writes, every
cell of the rows it is given and no other; the blocks a packed kernel call makes are the
per-slot blocks; bad arguments are refused before the kernel runs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from whatif_bench.stream import TaskStream
from whatif_bench.stream.plan import make_batch
from whatif_bench.stream.slot_blocks import (
    BATCH_ARRAYS,
    COVARIATE_ARRAYS,
    HISTORY_ARRAYS,
    block_arrays,
    block_size,
    place_blocks,
    place_blocks_reference,
)
from whatif_bench.stream.sources import benchmark_sources


def empty_batch(size: int, k_max: int, c_max: int, h_max: int) -> dict[str, np.ndarray]:
    """A batch's float arrays, every cell NaN (so a cell left unwritten shows)."""
    shapes = {
        name: (
            size,
            *((k_max,) if name in COVARIATE_ARRAYS else ()),
            c_max if name in HISTORY_ARRAYS else h_max,
        )
        for name in BATCH_ARRAYS
    }
    return {name: np.full(shape, np.nan, dtype=np.float32) for name, shape in shapes.items()}


@st.composite
def placements(draw):
    """Blocks of random K, C and H packed one after another (with gaps), random values, and
    the batch rows they go to (distinct; some rows get none)."""
    k_max, c_max, h_max = (
        draw(st.integers(1, 5)),
        draw(st.integers(1, 40)),
        draw(st.integers(1, 12)),
    )
    size = draw(st.integers(1, 6))
    rows = draw(st.lists(st.integers(0, size - 1), min_size=0, max_size=size, unique=True))
    shapes = [
        (draw(st.integers(0, k_max)), draw(st.integers(0, c_max)), draw(st.integers(0, h_max)))
        for _ in rows
    ]
    starts, at = [], draw(st.integers(0, 3))
    for k, c, h in shapes:
        starts.append(at)
        at += block_size(k, c, h) + draw(st.integers(0, 3))
    values = st.floats(width=32, allow_nan=False)
    flat = np.array(draw(st.lists(values, min_size=at, max_size=at)), dtype=np.float32)
    return flat, starts, shapes, rows, (size, k_max, c_max, h_max)


def placed(place, flat, starts, shapes, rows, dims, zero_padding=True) -> dict[str, np.ndarray]:
    out = empty_batch(*dims)
    ks, contexts, horizons = (np.array([s[i] for s in shapes], dtype=np.int64) for i in range(3))
    place(
        flat,
        np.array(starts, dtype=np.int64),
        ks,
        contexts,
        horizons,
        np.array(rows),
        out,
        zero_padding,
    )
    return out


@settings(max_examples=200, deadline=None, derandomize=True)
@given(placements())
def test_the_kernel_places_what_its_numpy_twin_places_and_every_cell_of_its_rows(case):
    made = placed(place_blocks, *case)
    wanted = placed(place_blocks_reference, *case)
    flat, starts, shapes, rows, dims = case
    for name in BATCH_ARRAYS:
        assert made[name].tobytes() == wanted[name].tobytes(), name
        for row in range(dims[0]):  # given rows written whole, the others untouched
            assert np.isnan(made[name][row]).any() == (row not in rows), (name, row)
    # without the padding's zeros: the same values, and the padding's cells as they were
    bare = placed(place_blocks, *case, zero_padding=False)
    assert_same_bytes(bare, placed(place_blocks_reference, *case, zero_padding=False))
    for name in BATCH_ARRAYS:
        kept = ~np.isnan(bare[name])
        assert np.array_equal(bare[name][kept], made[name][kept]), name
        padding = np.isnan(bare[name]) & ~np.isnan(made[name])
        assert not made[name][padding].any(), name  # only zeros were left out
    for start, (k, c, h), row in zip(starts, shapes, rows, strict=True):
        # the twin itself: each array where collate_tasks pads it, zeros around it
        arrays = block_arrays(flat[start:], k, c, h)
        for name in BATCH_ARRAYS:
            cells = wanted[name][row]
            values = arrays[name]
            steps = values.shape[-1]
            if name in COVARIATE_ARRAYS:
                assert not cells[k:].any(), name
                cells = cells[:k]
            end = cells.shape[-1] - steps if name in HISTORY_ARRAYS else steps
            real, zeros = (
                (cells[..., end:], cells[..., :end])
                if name in HISTORY_ARRAYS
                else (cells[..., :end], cells[..., end:])
            )
            assert np.array_equal(real, values) and not zeros.any(), name


def assert_same_bytes(made: dict, wanted: dict) -> None:
    assert list(made) == list(wanted)
    for name, array in made.items():
        assert array.tobytes() == wanted[name].tobytes(), name


@pytest.fixture(scope="module")
def stream():
    return TaskStream(3, sources=benchmark_sources(["epanet", "gridlabd"]))


def test_a_packed_kernel_call_makes_the_per_slot_blocks(stream):
    plan = stream.plan()
    apart = make_batch(plan, stream.seed, range(100, 170), 1000)
    packed = make_batch(plan, stream.seed, range(100, 170), 1000, packed=True)
    assert apart.rows == packed.rows
    assert isinstance(apart.blocks, list) and not isinstance(packed.blocks, list)
    for i in range(70):
        assert packed.block(i).tobytes() == apart.block(i).tobytes()
        if apart.status(i) == 0:
            assert packed.block(i).size == block_size(*_shape(apart, i)) > 0
    assert packed.blocks.offsets[-1] == packed.blocks.flat.size


def _shape(batch, i) -> tuple[int, int, int]:
    arrays = batch.task_arrays(i)
    k, context = arrays["history_covariates"].shape
    return k, context, arrays["future_target"].size


def _arguments(**changes):
    """Good place_blocks arguments (two blocks into a batch of 3), with ``changes``."""
    out = empty_batch(3, 2, 10, 4)
    arguments = {
        "flat": np.zeros(200, dtype=np.float32),
        "starts": np.array([0, 60]),
        "ks": np.array([2, 1]),
        "contexts": np.array([10, 7]),
        "horizons": np.array([4, 3]),
        "rows": np.array([2, 0]),
        "out": out,
    }
    for name, value in changes.items():
        if name in BATCH_ARRAYS:
            arguments["out"] = {**out, name: value}
        else:
            arguments[name] = value
    return arguments


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"flat": np.zeros(200)}, "flat must be a 1-D float32 array"),
        ({"flat": np.zeros((2, 100), dtype=np.float32)}, "flat must be a 1-D float32 array"),
        ({"starts": np.array([0, 171])}, "outside flat"),
        ({"starts": np.array([-1, 60])}, "outside flat"),
        ({"starts": np.array([0.0, 60.0])}, "must be integers"),
        ({"rows": np.array([True, False])}, "must be integers"),
        ({"ks": np.array([3, 1])}, "does not fit its row of the batch: K beyond it"),
        ({"contexts": np.array([11, 7])}, "of the batch: C beyond it"),
        ({"horizons": np.array([4, 5])}, "of the batch: H beyond it"),
        ({"ks": np.array([2, -1])}, "of the batch: K beyond it"),
        ({"rows": np.array([3, 0])}, "of the batch: row beyond it"),
        ({"rows": np.array([2])}, "must have one length"),
        ({"history_target": np.zeros((3, 10))}, "history_target must be a C-contiguous float32"),
        (
            {"future_covariates": np.zeros((3, 4, 2), dtype=np.float32).transpose(0, 2, 1)},
            "future_covariates must be a C-contiguous float32",
        ),
        (
            {"history_covariates": np.zeros((3, 10), dtype=np.float32)},
            "must be \\(B, K_max, C_max\\)",
        ),
        ({"future_target": np.zeros((2, 4), dtype=np.float32)}, "arrays .* must be .* got"),
        ({"counterfactual_history": np.zeros((3, 9), dtype=np.float32)}, "must be .* got"),
        ({"future_covariates": np.zeros((3, 3, 4), dtype=np.float32)}, "must be .* got"),
    ],
)
def test_bad_placements_are_refused_before_anything_is_written(changes, message):
    arguments = _arguments(**changes)
    before = {name: array.copy() for name, array in arguments["out"].items()}
    with pytest.raises(ValueError, match=message):
        place_blocks(**arguments)
    for name, array in arguments["out"].items():
        assert array.tobytes() == before[name].tobytes(), name
