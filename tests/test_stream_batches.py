"""PaddedBatches and pad_tasks: the batches ``collate_tasks`` makes of items, made straight from
the tasks, over real DataLoader workers; grouping by context label; bad arguments.

The stream draws from the shipped EPANET and GridLAB-D baselines given as explicit sources (as
tests/test_stream_torch.py does); the corpus is a small one generated from the shipped
baselines.
"""

from __future__ import annotations

import functools
import pickle
import sys
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import small_corpus
from tests.lazy_modules import importorskip_lazily
from whatif_bench.generator import Corpus
from whatif_bench.stream import (
    CorpusDataset,
    StreamDataset,
    StreamError,
    TaskStream,
    collate_tasks,
    task_item,
)
from whatif_bench.stream.distribution import CONTEXT_LABELS
from whatif_bench.stream.items import task_fields
from whatif_bench.stream.sources import benchmark_sources

torch = importorskip_lazily("torch", reason="needs the train extra (torch)")
from whatif_bench.stream import batches  # noqa: E402 - after the skip: it imports torch
from whatif_bench.stream.batches import PaddedBatches, as_made, pad_tasks  # noqa: E402

SEED = 11


@pytest.fixture(scope="module")
def sources():
    return benchmark_sources(["epanet", "gridlabd"])


@pytest.fixture(scope="module")
def corpus_path(tmp_path_factory):
    return small_corpus(tmp_path_factory.mktemp("corpus"), ("epanet/pressure_10",))


@pytest.fixture(scope="module")
def tasks(sources, corpus_path) -> list:
    """Streamed and corpus tasks with mixed K, context and prediction lengths."""
    streamed = list(TaskStream(SEED, count=10, sources=sources))
    with Corpus(corpus_path) as corpus:
        read = [corpus[task_id] for task_id in corpus.task_ids()[::97]]
    for name in ("k", "context_length", "prediction_length"):
        assert len({getattr(task, name) for task in streamed + read}) >= 2, name
    return streamed + read


def assert_same_batch(made: dict, wanted: dict) -> None:
    """Every key, tensor for tensor (dtype, shape and each value, the padding's zeros too)."""
    assert list(made) == list(wanted)
    for name, value in wanted.items():
        if torch.is_tensor(value):
            assert made[name].dtype == value.dtype, name
            assert torch.equal(made[name], value), name
        else:
            assert made[name] == value, name


@settings(max_examples=30, deadline=None, derandomize=True)
@given(
    picks=st.lists(st.integers(0, 200), min_size=1, max_size=7),
    crop=st.integers(0, 2),
)
def test_pad_tasks_is_collate_tasks_of_the_tasks_items(tasks, picks, crop):
    chosen = [tasks[pick % len(tasks)] for pick in picks]
    indices = [3 * pick + 1 for pick in picks]
    longest = max(task.context_length for task in chosen)
    context_max = [None, longest + 5, max(longest // 4, 1)][crop]  # default, wider, cropping
    wanted = collate_tasks(
        [task_item(task, index) for task, index in zip(chosen, indices, strict=True)],
        context_max=context_max,
    )
    assert_same_batch(pad_tasks(chosen, indices, context_max=context_max), wanted)


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("drop_last", [False, True])
def test_stream_batches_are_the_dataloaders_collated_batches(sources, workers, drop_last):
    # 150 slots, batches of 10: slots 60-69 and 120-129 come from two of the stream's kernel
    # calls (64 slots each)
    dataset = StreamDataset(TaskStream(SEED, count=150, sources=sources))
    wanted = torch.utils.data.DataLoader(
        dataset,
        batch_size=10,
        num_workers=workers,
        collate_fn=collate_tasks,
        drop_last=drop_last,
    )
    made = list(PaddedBatches(dataset, 10, drop_last=drop_last).loader(num_workers=workers))
    wanted_batches = list(wanted)
    # 15 full batches; over two workers 75 slots each: 7 full batches and a rest of 5 each
    expected = {(0, False): 15, (0, True): 15, (2, False): 16, (2, True): 14}[workers, drop_last]
    assert len(made) == len(wanted_batches) == expected
    for batch, wanted_batch in zip(made, wanted_batches, strict=True):
        assert_same_batch(batch, wanted_batch)


@pytest.mark.parametrize(
    "limits",
    [
        {"k_max": 5, "context_max": 9000, "horizon_max": 1000},  # wider: placed by the kernel
        {"context_max": 1500},  # cropping C4 and C3 histories: placed row by row
        {"horizon_max": 100},  # shorter than every future: refused as collate_tasks refuses
    ],
)
@pytest.mark.parametrize("by_context", [False, True])
def test_stream_batches_to_fixed_shapes_are_the_collated_batches(sources, limits, by_context):
    dataset = StreamDataset(TaskStream(SEED, count=70, sources=sources))
    made = PaddedBatches(dataset, 8, by_context=by_context, **limits)
    if "horizon_max" in limits and limits["horizon_max"] < 128:
        with pytest.raises(StreamError) as refused:
            list(made)
        with pytest.raises(StreamError) as wanted_error:
            collate_tasks(
                [task_item(task, slot) for slot, task in dataset.indexed_tasks()], **limits
            )
        assert str(refused.value) == str(wanted_error.value)
        return
    items = {slot: task_item(task, slot) for slot, task in dataset.indexed_tasks()}
    batches_made = list(made)
    assert sum(len(batch["index"]) for batch in batches_made) == 70
    for batch in batches_made:
        wanted = collate_tasks([items[int(slot)] for slot in batch["index"]], **limits)
        assert_same_batch(batch, wanted)


def test_batches_of_packed_slots_are_placed_by_the_kernel_unless_they_do_not_fit(
    sources, monkeypatch
):
    calls = Counter()
    for name in ("place_blocks", "padded_batch"):
        monkeypatch.setattr(batches, name, counted(getattr(batches, name), calls, name))
    dataset = StreamDataset(TaskStream(SEED, count=70, sources=sources))
    list(PaddedBatches(dataset, 8))
    list(PaddedBatches(dataset, 8, k_max=5, context_max=9000, horizon_max=1000))
    assert calls["place_blocks"] >= 18 and calls["padded_batch"] == 0
    list(PaddedBatches(dataset, 8, by_context=True, context_max=1500))  # crops C3 and C4
    assert calls["padded_batch"] >= 2


def counted(function, calls: Counter, name: str):
    def counting(*args, **kwargs):
        calls[name] += 1
        return function(*args, **kwargs)

    return counting


def test_parts_waiting_for_a_rare_label_hold_their_own_blocks_not_their_kernel_calls():
    """A label seen once a kernel call waits many calls for its group: what waits keeps at
    most ``SHARED_CALLS`` calls' arrays alive, and every part its own values."""
    import weakref

    import numpy as np

    from whatif_bench.stream._kernels import SlotBlocks

    alive, values = [], {}

    def parts():
        for call in range(40):
            flat = np.arange(call * 1000, call * 1000 + 80, dtype=np.float32)
            blocks = SlotBlocks(flat, np.arange(0, 81, 10))
            alive.append(weakref.ref(flat))
            for i in range(8):
                label = "C4" if i == 3 else "C1"
                values[(call, i)] = blocks.block(i).copy()
                yield label, (batches.PackedSlot(blocks, i), {"key": (call, i)})
            del flat, blocks

    seen = []
    for group in batches._by_context(parts(), 16):
        held = sum(ref() is not None for ref in alive)
        # + the call whose parts are coming; far fewer than the 16 calls a C4 group spans
        assert held <= batches.SHARED_CALLS + 1 <= 4, held
        for source, fields in group:
            assert source.blocks.block(source.i).tobytes() == values[fields["key"]].tobytes()
            seen.append(fields["key"])
    assert sorted(seen) == sorted(values)
    assert [key for key in seen if key[1] == 3][:16] == [(call, 3) for call in range(16)]


def test_a_batch_of_packed_slots_and_other_tasks_is_the_collated_batch(sources, tasks):
    """A slot the reference made, or a corpus task, among packed slots: the batch is placed row
    by row, as collate_tasks places it."""
    parts = [
        part
        for _, part in batches._parts(StreamDataset(TaskStream(SEED, count=9, sources=sources)))
    ]
    assert all(isinstance(source, batches.PackedSlot) for source, _ in parts)
    other = tasks[-1]  # a corpus task
    mixed = [*parts[:4], (batches._arrays_of(other), task_fields(other, 99)), *parts[4:]]
    items = [
        task_item(task, slot)
        for slot, task in StreamDataset(TaskStream(SEED, count=9, sources=sources)).indexed_tasks()
    ]
    wanted = collate_tasks([*items[:4], task_item(other, 99), *items[4:]])
    assert_same_batch(batches._pad_parts(mixed, (None, None, None)), wanted)


@pytest.fixture(scope="module")
def every_world():
    return benchmark_sources(None)


@settings(max_examples=12, deadline=None, derandomize=True)
@given(first=st.integers(0, 10**9), seed=st.integers(0, 2**32), packed=st.booleans())
def test_a_slot_batch_gives_each_tasks_item_fields_and_arrays(every_world, first, seed, packed):
    """What ``PaddedBatches`` takes of a streamed slot without its ``Task`` is the ``Task`` the
    reference path makes of the slot (``_reference_task``: the benchmark's functions, no
    kernel): ``task_fields`` (values, types, order) and each array (dtype, shape, bytes),
    every simulator's worlds, each slot's block apart or all packed in one array."""
    stream = TaskStream(seed, sources=every_world)
    slots = list(range(first, first + 24))
    drawn = list(stream.drawn(slots, packed=packed))
    assert all(isinstance(made, tuple) for made in drawn)  # no slot went to the reference
    for slot, (batch, i) in zip(slots, drawn, strict=True):
        task = stream._reference_task(slot)
        wanted = task_fields(task, slot)
        made = batch.task_fields(i, slot)
        assert list(made.items()) == list(wanted.items())
        assert [type(value) for value in made.values()] == [type(v) for v in wanted.values()]
        assert batch.c_label(i) == task.c_label
        arrays = batch.task_arrays(i)
        assert sorted(arrays) == sorted(batches.ITEM_ARRAYS)
        for name, values in arrays.items():
            expected = getattr(task, name)
            assert (values.dtype, values.shape) == (expected.dtype, expected.shape), name
            assert values.tobytes() == expected.tobytes(), name


@pytest.mark.parametrize("by_context", [False, True])
def test_batches_drawn_ahead_are_the_batches_drawn_in_turn(sources, by_context):
    made = [
        list(
            PaddedBatches(
                StreamDataset(TaskStream(SEED, count=140, sources=sources), draw_ahead=ahead),
                16,
                by_context=by_context,
            )
        )
        for ahead in (True, False)
    ]
    assert len(made[0]) == len(made[1]) >= 9
    for batch, wanted in zip(*made, strict=True):
        assert_same_batch(batch, wanted)


def test_by_context_batches_of_a_rare_label_are_the_reference_streams(sources, monkeypatch):
    """C4 one slot in ten, batches of 16: a C4 group spans about 160 slots, so its parts wait
    across kernel calls (64 slots) and are moved out of them."""
    from whatif_bench.stream.distribution import AxisDistribution

    moved = Counter()
    compact = batches._compact

    def counting_moves(waiting, blocks):
        for group in waiting.values():
            for source, _ in group:
                moved["parts"] += isinstance(source, batches.PackedSlot) and source.blocks is blocks
        compact(waiting, blocks)

    monkeypatch.setattr(batches, "_compact", counting_moves)

    rare = AxisDistribution(contexts={"C1": 0.9, "C4": 0.1})
    made = [
        list(
            PaddedBatches(
                StreamDataset(
                    TaskStream(SEED, count=400, sources=sources, distribution=rare, fast=fast)
                ),
                16,
                by_context=True,
            )
        )
        for fast in (True, False)
    ]
    assert [batch["c_label"][0] for batch in made[0]].count("C4") >= 2
    assert moved["parts"] >= 3
    assert len(made[0]) == len(made[1])
    for batch, wanted in zip(*made, strict=True):
        assert_same_batch(batch, wanted)


@pytest.mark.parametrize("by_context", [False, True])
def test_a_reference_streams_batches_are_the_fast_ones(sources, by_context):
    """A stream without the kernels (``fast=False``) hands ``PaddedBatches`` its ``Task``s:
    the same batches as the kernels' slots give."""
    made = [
        list(
            PaddedBatches(
                StreamDataset(TaskStream(SEED, count=30, sources=sources, fast=fast)),
                4,
                by_context=by_context,
            )
        )
        for fast in (True, False)
    ]
    assert len(made[0]) == len(made[1]) >= 8
    for batch, wanted in zip(*made, strict=True):
        assert_same_batch(batch, wanted)


@pytest.mark.parametrize("workers", [0, 2])
def test_corpus_batches_are_the_dataloaders_to_fixed_shapes_over_epochs(corpus_path, workers):
    dataset = CorpusDataset(corpus_path, shuffle=True, seed=4, C=["C1", "C4"])
    limits = {"k_max": 5, "context_max": 3000, "horizon_max": 1000}
    padded = PaddedBatches(dataset, 9, **limits)
    assert len(padded) == len(torch.utils.data.DataLoader(dataset, batch_size=9))
    for epoch in (0, 1):
        padded.set_epoch(epoch)
        assert dataset.epoch == epoch
        wanted = torch.utils.data.DataLoader(
            dataset,
            batch_size=9,
            num_workers=workers,
            collate_fn=functools.partial(collate_tasks, **limits),
        )
        made = list(padded.loader(num_workers=workers))
        if workers == 0:
            assert len(made) == len(padded)  # exact with no workers
        assert {batch["history_target"].shape[1] for batch in made} == {3000}
        assert any((batch["history_mask"].sum(1) == 3000).any() for batch in made)  # cropped
        for batch, wanted_batch in zip(made, wanted, strict=True):
            assert_same_batch(batch, wanted_batch)


def by_context_model(labels: list[str], size: int) -> list[list[int]]:
    """The positions of each batch ``by_context`` makes from tasks of these labels, in plain
    Python: a label's batch as soon as it holds ``size``, then the rest in C1..C4 order."""
    waiting: dict[str, list[int]] = {label: [] for label in CONTEXT_LABELS}
    out = []
    for position, label in enumerate(labels):
        waiting[label].append(position)
        if len(waiting[label]) == size:
            out.append(waiting[label])
            waiting[label] = []
    return out + [group for group in waiting.values() if group]


@pytest.mark.parametrize("size", [1, 6, 64])
@pytest.mark.parametrize("drop_last", [False, True])
def test_by_context_batches_hold_one_label_and_every_task_once(sources, size, drop_last):
    stream = TaskStream(SEED, count=90, sources=sources)
    labels = [task.c_label for task in stream]
    made = list(
        PaddedBatches(StreamDataset(stream), size, by_context=True, drop_last=drop_last).loader()
    )
    groups = [g for g in by_context_model(labels, size) if len(g) == size or not drop_last]
    assert len(made) == len(groups)
    for batch, group in zip(made, groups, strict=True):
        assert batch["index"].tolist() == group  # the slots, in the order the model gives
        assert len(set(batch["c_label"])) == 1
        wanted = collate_tasks([task_item(stream.task(slot), slot) for slot in group])
        assert_same_batch(batch, wanted)
    if not drop_last:
        assert sorted(i for batch in made for i in batch["index"].tolist()) == list(range(90))
    # one label per batch pads less: the histories hold more real steps than in plain batches
    if size == 6:
        plain = list(PaddedBatches(StreamDataset(stream), size).loader())
        assert real_share(made) > 0.9 > real_share(plain)


def real_share(made: list[dict]) -> float:
    """The share of the batches' history cells that hold real steps, not padding."""
    masks = [batch["history_mask"] for batch in made]
    return sum(int(mask.sum()) for mask in masks) / sum(mask.numel() for mask in masks)


def test_by_context_over_two_workers_gives_every_slot_once(sources):
    dataset = StreamDataset(TaskStream(SEED, count=70, sources=sources))
    made = list(PaddedBatches(dataset, 8, by_context=True).loader(num_workers=2))
    slots = [slot for batch in made for slot in batch["index"].tolist()]
    assert sorted(slots) == list(range(70))
    assert all(len(set(batch["c_label"])) == 1 for batch in made)
    sizes = Counter(len(batch["task_id"]) for batch in made)
    assert sizes[8] >= 4 and sum(count for size, count in sizes.items() if size < 8) <= 8


def test_as_made_passes_the_batch_through_and_the_loader_uses_it(sources):
    batch = {"history_target": torch.zeros(2, 3), "covariates": [("a",), ("b", "c")]}
    assert as_made(batch) is batch
    loader = PaddedBatches(StreamDataset(TaskStream(SEED, count=3, sources=sources)), 2).loader(
        num_workers=0
    )
    assert loader.batch_size is None and loader.collate_fn is as_made
    first = next(iter(loader))
    assert all(isinstance(names, tuple) for names in first["covariates"])  # not made lists


def test_a_stream_or_grouped_batches_have_no_length(sources, corpus_path):
    stream = StreamDataset(TaskStream(SEED, count=30, sources=sources))
    with pytest.raises(TypeError, match="only over a CorpusDataset without by_context"):
        len(PaddedBatches(stream, 4))
    with pytest.raises(TypeError, match="only over a CorpusDataset without by_context"):
        len(PaddedBatches(CorpusDataset(corpus_path), 4, by_context=True))
    dataset = CorpusDataset(corpus_path)
    for drop_last in (False, True):
        padded = PaddedBatches(dataset, 7, drop_last=drop_last)
        assert len(padded) == len(list(padded))  # what the batches come to, 0 workers
    assert len(dataset) % 7  # a last, partial batch: the two lengths differ


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"batch_size": 0}, "batch_size must be a positive integer, got 0"),
        ({"batch_size": -3}, "batch_size must be a positive integer, got -3"),
        ({"batch_size": True}, "batch_size must be a positive integer, got True"),
        ({"batch_size": 2.0}, "batch_size must be a positive integer, got 2.0"),
        ({"batch_size": "8"}, "batch_size must be a positive integer, got '8'"),
        ({"batch_size": 4, "k_max": 0}, "k_max must be a positive integer or None, got 0"),
        ({"batch_size": 4, "context_max": 1.5}, "context_max must be a positive integer or None"),
        ({"batch_size": 4, "horizon_max": False}, "horizon_max must be a positive integer or"),
    ],
)
def test_bad_batch_arguments_are_refused(sources, kwargs, message):
    dataset = StreamDataset(TaskStream(SEED, count=4, sources=sources))
    with pytest.raises(StreamError, match=message):
        PaddedBatches(dataset, **kwargs)


def test_what_is_not_a_task_dataset_or_a_batch_is_refused(tasks):
    with pytest.raises(StreamError, match="needs a StreamDataset or a CorpusDataset, got list"):
        PaddedBatches([task_item(tasks[0], 0)], 4)  # type: ignore[arg-type]
    with pytest.raises(StreamError, match="cannot collate an empty batch"):
        pad_tasks([], [])
    with pytest.raises(StreamError, match="2 tasks need 2 indices, got 1"):
        pad_tasks(tasks[:2], [0])
    short = min(task.prediction_length for task in tasks) - 1
    longest = max(tasks, key=lambda task: task.prediction_length)
    with pytest.raises(StreamError, match=f"does not fit in {short} steps"):
        pad_tasks([longest], [0], horizon_max=short)


def test_batches_survive_pickling_as_spawned_workers_receive_them(sources, corpus_path):
    for dataset in (
        StreamDataset(TaskStream(SEED, count=20, sources=sources)),
        CorpusDataset(corpus_path, shuffle=True, seed=2),
    ):
        padded = PaddedBatches(dataset, 7, by_context=True, k_max=5)
        again = pickle.loads(pickle.dumps(padded))
        for batch, wanted in zip(again, padded, strict=True):
            assert_same_batch(batch, wanted)


@pytest.mark.slow  # a spawned worker imports torch and the toolkit: a few seconds
def test_a_spawned_worker_makes_the_same_batches(sources):
    dataset = StreamDataset(TaskStream(SEED, count=12, sources=sources))
    padded = PaddedBatches(dataset, 5, by_context=True)
    made = list(padded.loader(num_workers=1, multiprocessing_context="spawn"))
    assert len(made) == len(list(padded))
    for batch, wanted in zip(made, padded, strict=True):
        assert_same_batch(batch, wanted)


def test_one_worker_hands_over_the_batch_the_main_process_makes(sources):
    dataset = StreamDataset(TaskStream(SEED, count=8, sources=sources))
    (batch,) = list(PaddedBatches(dataset, 8).loader(num_workers=1))
    wanted = collate_tasks([task_item(task, slot) for slot, task in enumerate(dataset.stream)])
    assert_same_batch(batch, wanted)


def test_without_torch_the_batches_say_which_extra_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    for name in (batches.__name__, "whatif_bench.stream.torch_data"):
        monkeypatch.delitem(sys.modules, name)
    with pytest.raises(ImportError, match=r"pip install 'whatif-bench\[train\]'"):
        __import__(batches.__name__)
