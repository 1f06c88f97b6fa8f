"""PyTorch datasets of tasks: sharding over real DataLoader workers and ranks, the padding
collate, the corpus dataset, and bad input.

The stream draws from the shipped EPANET and GridLAB-D baselines given as explicit sources (as
tests/test_stream.py does); the corpus is a small one generated from the shipped baselines.
"""

# ruff: noqa: E402  (the train extra is checked for before the imports that need it)
from __future__ import annotations

import itertools
import pickle
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

# the train extra (in .venv); .venv-export only collects this module (its tests are not gluonts)
torch = pytest.importorskip("torch", reason="needs the train extra (torch)")
from torch.utils.data import DataLoader

from tests.conftest import small_corpus
from whatif_bench.generator import Corpus
from whatif_bench.generator.corpus import CorpusError
from whatif_bench.stream import (
    CorpusDataset,
    SeedError,
    StreamDataset,
    StreamError,
    TaskStream,
    collate_tasks,
    task_item,
    torch_data,
)
from whatif_bench.stream.items import FUTURE_ARRAYS, HISTORY_ARRAYS, INT_FIELDS, TEXT_FIELDS
from whatif_bench.stream.sources import benchmark_sources

ARRAYS = (*HISTORY_ARRAYS, *FUTURE_ARRAYS)
SEED = 5


@pytest.fixture(scope="module")
def sources():
    return benchmark_sources(["epanet", "gridlabd"])


@pytest.fixture(scope="module")
def whole(sources) -> dict[int, tuple]:
    """Fingerprints of the first 24 slots of the stream, made in one process without torch."""
    return {
        slot: fingerprint(task_item(task, slot))
        for slot, task in enumerate(TaskStream(SEED, count=24, sources=sources))
    }


@pytest.fixture(scope="module")
def corpus_path(tmp_path_factory):
    return small_corpus(tmp_path_factory.mktemp("corpus"), ("epanet/pressure_10",))


def fingerprint(item: dict) -> tuple:
    return (item["task_id"], *(np.asarray(item[name]).tobytes() for name in ARRAYS))


def uncollate(batch: dict) -> list[dict]:
    """The unpadded items of a collated batch, found through its masks alone."""
    items = []
    for row in range(len(batch["task_id"])):
        history = batch["history_mask"][row].numpy()
        future = batch["future_mask"][row].numpy()
        covariates = batch["covariate_mask"][row].numpy()
        item = {name: batch[name][row] for name in (*INT_FIELDS, *TEXT_FIELDS)}
        item.update({name: value.item() for name, value in item.items() if torch.is_tensor(value)})
        for name in ARRAYS:
            values = batch[name][row].numpy()
            steps = history if name in HISTORY_ARRAYS else future
            item[name] = values[covariates][:, steps] if values.ndim == 2 else values[steps]
        items.append(item)
    return items


def loader(dataset, workers: int, **kwargs) -> DataLoader:
    return DataLoader(dataset, num_workers=workers, batch_size=None, **kwargs)


def test_two_workers_make_every_slot_once_with_the_single_process_streams_bytes(sources, whole):
    dataset = StreamDataset(TaskStream(SEED, count=24, sources=sources))
    first = [(item["index"], fingerprint(item)) for item in loader(dataset, 2)]
    again = [(item["index"], fingerprint(item)) for item in loader(dataset, 2)]
    assert sorted(index for index, _ in first) == list(range(24))  # each slot once
    assert dict(first) == whole  # the same tasks, byte for byte
    assert first == again  # and the same order


def test_two_ranks_of_two_workers_share_out_every_slot_once(sources, whole):
    stream = TaskStream(SEED, count=22, sources=sources)  # not a multiple of the 4 shards
    seen = {}
    for rank in (0, 1):
        dataset = StreamDataset(stream, rank=rank, world_size=2)
        batches = DataLoader(dataset, num_workers=2, batch_size=3, collate_fn=collate_tasks)
        for batch in batches:
            for item in uncollate(batch):
                index = item["index"]
                assert index % 4 in (2 * rank, 2 * rank + 1)  # shard rank * 2 + worker, of 4
                assert index not in seen
                seen[index] = fingerprint(item)
    assert sorted(seen) == list(range(22))
    assert seen == {slot: whole[slot] for slot in range(22)}


def test_an_endless_stream_still_shards_over_workers_and_ranks(sources, whole):
    dataset = StreamDataset(TaskStream(SEED, sources=sources), rank=1, world_size=2)
    iterator = iter(loader(dataset, 2))
    made = [fingerprint(item) for item in itertools.islice(iterator, 6)]
    del iterator  # stops the workers of the endless loader
    assert made == [whole[slot] for slot in (2, 3, 6, 7, 10, 11)]


def test_an_epoch_of_a_counted_stream_makes_the_next_slots(sources, whole):
    dataset = StreamDataset(TaskStream(SEED, count=8, sources=sources))
    dataset.set_epoch(2)
    assert [fingerprint(item) for item in dataset] == [whole[slot] for slot in range(16, 24)]
    dataset.set_epoch(0)
    assert [item["index"] for item in dataset] == list(range(8))


def test_ranks_default_to_torch_distributed_when_it_is_initialised(sources, monkeypatch):
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.distributed, "get_rank", lambda: 2)
    monkeypatch.setattr(torch.distributed, "get_world_size", lambda: 3)
    dataset = StreamDataset(TaskStream(SEED, count=9, sources=sources))
    assert (dataset.rank, dataset.world_size) == (2, 3)
    assert [item["index"] for item in dataset] == [2, 5, 8]
    assert StreamDataset(TaskStream(SEED, sources=sources), rank=0, world_size=1).rank == 0


# ---- collate ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def pool(sources) -> list[dict]:
    """Twelve streamed items with mixed K, context and prediction lengths."""
    items = [
        task_item(task, slot) for slot, task in enumerate(TaskStream(8, count=12, sources=sources))
    ]
    for name in ("k", "context_length", "prediction_length"):
        assert len({item[name] for item in items}) >= 2, name
    return items


def check_batch(batch: dict, items: list[dict], context_max: int, horizon_max: int) -> None:
    """The batch's shapes and masks, its padding all zeros, and its items as they went in."""
    size, k_max = batch["covariate_mask"].shape
    assert size == len(items)
    assert batch["history_covariates"].shape == (size, k_max, context_max)
    assert batch["future_covariates"].shape == (size, k_max, horizon_max)
    history, future = batch["history_mask"], batch["future_mask"]
    covariates = batch["covariate_mask"]
    for row, item in enumerate(items):
        c = min(item["context_length"], context_max)
        assert history[row].sum() == c and history[row, -c:].all()  # the last steps align
        assert future[row].sum() == item["prediction_length"]
        assert future[row, : item["prediction_length"]].all()
        assert covariates[row].sum() == item["k"] and covariates[row, : item["k"]].all()
    padding = {
        "history_target": ~history,
        "counterfactual_history": ~history,
        "future_target": ~future,
        "counterfactual_future": ~future,
        "history_covariates": ~(covariates[:, :, None] & history[:, None, :]),
        "future_covariates": ~(covariates[:, :, None] & future[:, None, :]),
    }
    for name, where in padding.items():
        assert batch[name].dtype == torch.float32
        assert not batch[name][where].any(), name
    for item, back in zip(items, uncollate(batch), strict=True):
        cropped = {name: item[name][..., -context_max:] for name in HISTORY_ARRAYS}
        assert fingerprint(back) == fingerprint({**item, **cropped})
        assert {n: back[n] for n in (*INT_FIELDS, *TEXT_FIELDS)} == {
            n: item[n] for n in (*INT_FIELDS, *TEXT_FIELDS)
        }


@settings(max_examples=25, deadline=None, derandomize=True)
@given(picks=st.lists(st.integers(0, 11), min_size=1, max_size=6), crop=st.integers(0, 2))
def test_collate_pads_and_masks_so_the_unpadded_arrays_come_back(pool, picks, crop):
    items = [pool[i] for i in picks]
    longest = max(item["context_length"] for item in items)
    context_max = [None, longest + 7, max(longest // 3, 1)][crop]  # default, wider, cropping
    batch = collate_tasks(items, context_max=context_max)
    horizon_max = max(item["prediction_length"] for item in items)
    check_batch(batch, items, context_max or longest, horizon_max)
    assert batch["covariate_mask"].shape[1] == max(item["k"] for item in items)


def test_collate_keeps_one_storage_per_dtype(pool):
    batch = collate_tasks(pool[:5])
    storages = {}
    for value in batch.values():
        if torch.is_tensor(value):
            storages.setdefault(value.dtype, set()).add(value.untyped_storage().data_ptr())
    assert {dtype: len(ptrs) for dtype, ptrs in storages.items()} == {
        torch.float32: 1,
        torch.bool: 1,
        torch.int64: 1,
    }


def test_collate_to_fixed_shapes_and_refuses_what_does_not_fit(pool):
    batch = collate_tasks(pool[:4], k_max=5, context_max=9000, horizon_max=1000)
    assert batch["history_covariates"].shape == (4, 5, 9000)
    check_batch(batch, pool[:4], 9000, 1000)
    short = min(item["prediction_length"] for item in pool) - 1
    longest = max(pool, key=lambda item: item["prediction_length"])
    with pytest.raises(StreamError, match=f"does not fit in {short} steps"):
        collate_tasks([longest], horizon_max=short)
    several = max(pool, key=lambda item: item["k"])
    with pytest.raises(StreamError, match="covariates do not fit in 1 rows"):
        collate_tasks([several], k_max=1)


# ---- the corpus -------------------------------------------------------------------------------
def test_a_shuffled_corpus_over_two_workers_gives_each_task_once_as_corpus_reads_it(corpus_path):
    dataset = CorpusDataset(corpus_path, shuffle=True, seed=3)
    made = list(loader(dataset, 2))
    ids = [item["task_id"] for item in made]
    with Corpus(corpus_path) as corpus:
        assert sorted(ids) == sorted(corpus.task_ids())  # every task once
        assert ids == [dataset.task_ids[p] for p in dataset.order()]  # the seeded order
        assert ids != corpus.task_ids()
        for item in made:
            assert fingerprint(item) == fingerprint(task_item(corpus[item["task_id"]], 0))
    dataset.set_epoch(1)
    assert not np.array_equal(
        dataset.order(), CorpusDataset(corpus_path, shuffle=True, seed=3).order()
    )
    assert np.array_equal(dataset.order(), dataset.order())


def test_a_corpus_view_is_dealt_by_rank_in_its_own_order(corpus_path):
    with Corpus(corpus_path) as corpus:
        wanted = corpus.filter(future="novel", C=["C1", "C2"]).task_ids()
    parts = [
        [
            item["task_id"]
            for item in CorpusDataset(
                corpus_path, future="novel", C=["C1", "C2"], rank=r, world_size=3
            )
        ]
        for r in range(3)
    ]
    assert [wanted[r::3] for r in range(3)] == parts
    with pytest.raises(CorpusError, match="unknown future"):
        CorpusDataset(corpus_path, future="someday")


def test_both_datasets_survive_pickling_as_spawned_workers_receive_them(sources, corpus_path):
    stream = StreamDataset(TaskStream(SEED, count=3, sources=sources), rank=0, world_size=1)
    corpus = CorpusDataset(corpus_path, future="replay", K=1, shuffle=True, seed=4)
    for dataset in (stream, corpus):
        clone = pickle.loads(pickle.dumps(dataset))
        assert [fingerprint(item) for item in clone] == [fingerprint(item) for item in dataset]


# ---- bad input -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"rank": -1, "world_size": 2}, StreamError, "rank must be a non-negative integer"),
        ({"rank": 1.0, "world_size": 2}, StreamError, "rank must be a non-negative integer"),
        ({"rank": 2, "world_size": 2}, StreamError, "rank must be below the world size 2, got 2"),
        ({"rank": 1}, StreamError, "rank must be below the world size 1"),
        ({"world_size": 0}, StreamError, "world_size must be a positive integer"),
        ({"world_size": True}, StreamError, "world_size must be a positive integer"),
    ],
)
def test_bad_ranks_are_refused_by_both_datasets(sources, corpus_path, kwargs, error, message):
    with pytest.raises(error, match=message):
        StreamDataset(TaskStream(0, sources=sources), **kwargs)
    with pytest.raises(error, match=message):
        CorpusDataset(corpus_path, **kwargs)


def test_bad_dataset_arguments_are_refused(sources, corpus_path, tmp_path):
    with pytest.raises(SeedError, match="non-negative integer"):
        CorpusDataset(corpus_path, shuffle=True, seed=1.5)
    with pytest.raises(SeedError, match="between 0 and 2"):
        CorpusDataset(corpus_path, seed=-3)
    with pytest.raises(CorpusError, match="no such corpus file"):
        CorpusDataset(tmp_path / "missing.h5")
    with pytest.raises(StreamError, match="needs a TaskStream"):
        StreamDataset([1, 2, 3])
    with pytest.raises(StreamError, match="shard 1 of 2"):
        StreamDataset(TaskStream(0, sources=sources, shard=1, num_shards=2))
    with pytest.raises(StreamError, match="epoch must be"):
        StreamDataset(TaskStream(0, sources=sources)).set_epoch(-1)
    with pytest.raises(StreamError, match="empty batch"):
        collate_tasks([])
    with pytest.raises(StreamError, match="context_max must be a positive integer"):
        collate_tasks([{}], context_max=0)


def test_without_torch_the_datasets_say_which_extra_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.delitem(sys.modules, torch_data.__name__)
    with pytest.raises(ImportError, match=r"pip install 'whatif-bench\[train\]'"):
        __import__(torch_data.__name__)
