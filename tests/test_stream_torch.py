"""PyTorch datasets of tasks: sharding over real DataLoader workers and ranks, the padding
collate, the corpus dataset, and bad input.

The stream draws from the shipped EPANET and GridLAB-D baselines given as explicit sources (as
tests/test_stream.py does); the corpus is a small one generated from the shipped baselines.
"""

from __future__ import annotations

import itertools
import math
import pickle
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import small_corpus
from tests.lazy_modules import importorskip_lazily
from whatif_bench.corpus.reader import CorpusError
from whatif_bench.generator import Corpus
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

# the train extra (in .venv); .venv-export only collects this module (its tests are not gluonts)
torch = importorskip_lazily("torch", reason="needs the train extra (torch)")

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


def loader(dataset, workers: int, **kwargs) -> torch.utils.data.DataLoader:
    return torch.utils.data.DataLoader(dataset, num_workers=workers, batch_size=None, **kwargs)


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
        batches = torch.utils.data.DataLoader(
            dataset, num_workers=2, batch_size=3, collate_fn=collate_tasks
        )
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


def collate_noting_shared(items: list[dict]) -> tuple[dict, dict]:
    """``collate_tasks``'s batch and, per tensor, whether it was in shared memory when made
    (in a DataLoader worker: before the queue would copy it into a segment)."""
    batch = collate_tasks(items)
    return batch, {
        name: value.is_shared() for name, value in batch.items() if torch.is_tensor(value)
    }


@pytest.mark.parametrize("workers", [0, 1])
def test_a_worker_collates_straight_into_shared_memory_the_same_batch(pool, workers):
    loader = torch.utils.data.DataLoader(
        pool[:12], batch_size=5, num_workers=workers, collate_fn=collate_noting_shared
    )
    made = list(loader)
    assert len(made) == 3
    for number, (batch, shared) in enumerate(made):
        # a worker's batch is made in shared memory; the main process's in its own
        assert set(shared.values()) == {workers > 0}
        wanted = collate_tasks(pool[5 * number : 5 * number + 5])
        assert batch.keys() == wanted.keys()
        for name, value in wanted.items():  # every value, the padding's zeros included
            if torch.is_tensor(value):
                assert torch.equal(batch[name], value), name
            else:
                assert batch[name] == value, name


def test_shared_zeros_are_zeros_even_where_an_earlier_segment_was_written():
    for _ in range(20):
        for dtype, torch_dtype in ((np.float32, torch.float32), (np.bool_, torch.bool)):
            zeros = torch_data._shared_zeros(300_001, dtype)
            assert zeros.dtype == torch_dtype and zeros.shape == (300_001,)
            assert zeros.is_shared() and not zeros.any()
            zeros.fill_(1)  # dirty the pages before they are freed


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
@pytest.mark.slow  # about 2 s
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


def test_a_corpus_dataset_whose_file_lost_a_task_names_it(corpus_path):
    dataset = CorpusDataset(corpus_path)
    dataset.task_ids[70] = "gone/pair/replay"  # as if the file had changed since
    made = []
    with pytest.raises(CorpusError) as raised:
        made.extend(item["task_id"] for item in dataset)
    assert str(raised.value) == (
        f"{corpus_path}: no task 'gone/pair/replay' in this corpus view; the file changed after "
        "the dataset was made"
    )
    assert made == dataset.task_ids[:64]  # the chunks before the one that holds it


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
    for slots in ([True], [1.5], [-1]):
        with pytest.raises(StreamError, match="slot must be a non-negative integer"):
            TaskStream(0, sources=sources).draw_batch(slots)
    for draw_ahead in (1, "yes", 0.0):
        with pytest.raises(StreamError, match="draw_ahead must be True, False or None"):
            StreamDataset(TaskStream(0, sources=sources), draw_ahead=draw_ahead)
    with pytest.raises(StreamError, match="empty batch"):
        collate_tasks([])
    with pytest.raises(StreamError, match="context_max must be a positive integer"):
        collate_tasks([{}], context_max=0)


def test_without_torch_the_datasets_say_which_extra_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.delitem(sys.modules, torch_data.__name__)
    with pytest.raises(ImportError, match=r"pip install 'whatif-bench\[train\]'"):
        __import__(torch_data.__name__)


# ---- the length of a corpus dataset ------------------------------------------------------------
@pytest.mark.parametrize("workers", [0, 1, 2])
@pytest.mark.one_quick  # about 2 s over all its cases
def test_a_corpus_datasets_len_is_what_its_ranks_loader_yields_for_any_worker_count(
    corpus_path, workers
):
    view = {"future": "novel", "C": ["C1", "C2"]}
    with Corpus(corpus_path) as corpus:
        wanted = corpus.filter(**view).task_ids()
    assert len(wanted) % 3 != 0 and len(wanted) % 6 != 0  # ranks and shards are uneven
    made = []
    for rank in range(3):
        dataset = CorpusDataset(corpus_path, **view, shuffle=True, seed=2, rank=rank, world_size=3)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # torch warns when a loader yields more than len()
            ids = [item["task_id"] for item in loader(dataset, workers)]
        assert len(dataset) == len(ids) == len(range(rank, len(wanted), 3))
        assert sorted(ids) == sorted(dataset.task_ids[p] for p in dataset.order()[rank::3])
        batches = torch.utils.data.DataLoader(
            dataset, batch_size=7, num_workers=workers, collate_fn=collate_tasks
        )
        assert len(batches) == math.ceil(len(dataset) / 7)
        made += ids
    assert sorted(made) == sorted(wanted)  # every task once over the three ranks
    assert len(CorpusDataset(corpus_path, **view)) == len(wanted)


# ---- collate of rows of the parquet export and of parquet stream shards -----------------------
# what a batch of export or stream-shard rows holds (collate_tasks' docstring)
ROW_BATCH_KEYS = {
    *(name for name in ARRAYS if name != "counterfactual_history"),
    "history_mask",
    "future_mask",
    "covariate_mask",
    "k",
    "context_length",
    "prediction_length",
    "event_length",
    "interval_s",
    *("task_id", "simulator", "target", "future", "c_label", "e_setting", "start", "covariates"),
}
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


@pytest.fixture(scope="module")
def hf_export(corpus_path, tmp_path_factory):
    from whatif_bench.export import export_corpus

    return export_corpus(
        corpus_path, "parquet", tmp_path_factory.mktemp("e") / "hf", progress=False
    )


@pytest.fixture(scope="module")
def corpus_items(corpus_path) -> dict[str, dict]:
    """Every task of the corpus as a ``task_item``, by task id."""
    with Corpus(corpus_path) as corpus:
        return {task_id: task_item(corpus[task_id], 0) for task_id in corpus.task_ids()}


@pytest.fixture(scope="module")
def stream_shards(sources, tmp_path_factory):
    """Ten stream slots written as parquet shards of four (the ``whatif stream`` writer)."""
    from whatif_bench.stream import write_shards

    out = tmp_path_factory.mktemp("shards") / "out" / "stream"  # where docs/STREAM_FORMAT.md reads
    out.parent.mkdir()
    stream = TaskStream(SEED, count=10, sources=sources)
    write_shards(stream, out, shard_size=4, progress=False, format="parquet")
    return out


def assert_same_batch(got: dict, want: dict) -> None:
    """``got`` has exactly the keys of a batch of rows, each equal to ``want``'s."""
    assert set(got) == ROW_BATCH_KEYS
    for name in ROW_BATCH_KEYS:
        if torch.is_tensor(want[name]):
            assert got[name].dtype == want[name].dtype, name
            assert torch.equal(got[name], want[name]), name
        elif name == "covariates":  # tuples in items, lists in rows
            assert [list(c) for c in got[name]] == [list(c) for c in want[name]]
        else:
            assert got[name] == want[name], name


def python_block(text: str, containing: str) -> str:
    """The ``python`` code block of a Markdown text that contains ``containing``."""
    blocks = [b.split("```", 1)[0] for b in text.split("```python\n")[1:]]
    (block,) = [b for b in blocks if containing in b]
    return block


def run_snippet(code: str, folder, monkeypatch) -> dict:
    """Execute documentation code in ``folder`` (offline) and return its variables."""
    for name, value in OFFLINE.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(folder)
    scope: dict = {}
    exec(compile(code, "snippet", "exec"), scope)
    return scope


def test_the_export_cards_torch_example_runs_in_the_export_folder(
    hf_export, corpus_items, monkeypatch
):
    from whatif_bench.export.parquet import CARD_EXAMPLE, SPLIT

    card = (hf_export / "README.md").read_text()
    assert python_block(card, "load_dataset") == CARD_EXAMPLE
    scope = run_snippet(CARD_EXAMPLE, hf_export, monkeypatch)
    tasks, row, batch = scope["tasks"], scope["row"], scope["batch"]
    assert str(tasks.split) == SPLIT == "test" and tasks.num_rows == len(corpus_items)
    assert row["history_covariates"].dtype == torch.float32 and row["k"].dtype == torch.int64
    assert row["history_covariates"].shape == (int(row["k"]), int(row["context_length"]))
    assert isinstance(row["start"], str) and row["start"] == corpus_items[row["task_id"]]["start"]
    want = collate_tasks([corpus_items[task_id] for task_id in tasks["task_id"][:8]])
    assert_same_batch(batch, want)


def test_the_export_pages_example_runs(hf_export, corpus_items, tmp_path, monkeypatch):
    page = (Path(__file__).parents[1] / "docs" / "EXPORT.md").read_text()
    code = python_block(page, 'load_dataset("out/hf/"')
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "hf").symlink_to(hf_export)
    scope = run_snippet(code, tmp_path, monkeypatch)
    assert str(scope["tasks"].split) == "test" and scope["tasks"].num_rows == len(corpus_items)
    ids = scope["tasks"]["task_id"][:32]
    assert_same_batch(scope["batch"], collate_tasks([corpus_items[i] for i in ids]))


@pytest.mark.parametrize("reader", ["datasets", "datasets torch", "pyarrow"])
def test_collate_takes_export_rows_as_each_reader_gives_them(hf_export, corpus_items, reader):
    import pyarrow.parquet as pq
    from datasets import load_dataset

    files = sorted(str(p) for p in (hf_export / "data").glob("*.parquet"))
    if reader == "pyarrow":
        rows = [row for f in files for row in pq.read_table(f).to_pylist()]
    else:
        tasks = load_dataset("parquet", data_files={"test": files}, split="test")
        rows = tasks.with_format("torch") if reader == "datasets torch" else tasks
    picks = [0, 7, 51, 122, 200, 301, len(corpus_items) - 1]
    chosen = [rows[i] for i in picks]
    items = [corpus_items[row["task_id"]] for row in chosen]
    for key in ("k", "context_length", "prediction_length"):
        assert len({item[key] for item in items}) >= 3, key  # a batch that really pads
    assert_same_batch(collate_tasks(chosen), collate_tasks(items))
    fixed = {"k_max": 5, "context_max": 1500, "horizon_max": 1000}  # crops the longer histories
    assert_same_batch(collate_tasks(chosen, **fixed), collate_tasks(items, **fixed))


def test_collate_takes_parquet_stream_shard_rows_as_the_docs_read_them(
    stream_shards, sources, monkeypatch
):
    import pyarrow.parquet as pq

    doc = (Path(__file__).parents[1] / "docs" / "STREAM_FORMAT.md").read_text()
    folder = stream_shards.parents[1]
    scope = run_snippet(python_block(doc, "collate_tasks"), folder, monkeypatch)
    assert str(scope["shards"].split) == "train" and scope["shards"].num_rows == 10
    items = [
        task_item(task, slot)
        for slot, task in enumerate(TaskStream(SEED, count=10, sources=sources))
    ]
    assert_same_batch(scope["batch"], collate_tasks(items))
    rows = pq.read_table(stream_shards / "data" / "shard-00001.parquet").to_pylist()
    assert_same_batch(collate_tasks(rows), collate_tasks(items[4:8]))


def _row(corpus_items) -> dict:
    """A row of the parquet export, rebuilt from an item (plain lists, as ``datasets`` gives)."""
    item = next(iter(corpus_items.values()))
    row = {name: item[name] for name in ROW_BATCH_KEYS if name in item}
    row.update({name: item[name].tolist() for name in ARRAYS if name != "counterfactual_history"})
    return row


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda r: r.pop("history_covariates"), "item 1 of the batch has no history_covariates"),
        (
            lambda r: (r.pop("k"), r.pop("future_target")),
            "item 1 of the batch has no future_target, k .every item needs history_target",
        ),
        (lambda r: r.pop("prediction_length"), "item 1 of the batch has no prediction_length"),
        (lambda r: r.update(k=2.0), "k must be a whole number, got 2.0"),
        (lambda r: r.update(context_length="1024"), "context_length must be a whole number"),
        (lambda r: r.update(k=True), "k must be a whole number, got True"),
        (
            lambda r: r.update(history_covariates=r["history_target"]),
            r"history_covariates is not a \(K, T\) array of numbers",
        ),
        (
            lambda r: r.update(future_target=[[1.0], [2.0, 3.0]]),
            r"future_target is not a \(T,\) array of numbers",
        ),
        (lambda r: r.update(history_target=["a", "b"]), "history_target is not a"),
    ],
)
def test_collate_names_what_a_row_lacks_or_gets_wrong(corpus_items, change, message):
    row = _row(corpus_items)
    change(row)
    with pytest.raises(StreamError, match=f"cannot collate: {message}"):
        collate_tasks([_row(corpus_items), row])  # the second row is the bad one


def test_collate_refuses_a_batch_mixing_items_and_rows(corpus_items):
    item = next(iter(corpus_items.values()))
    with pytest.raises(StreamError, match="some items of the batch have counterfactual_history"):
        collate_tasks([item, _row(corpus_items)])
    assert set(collate_tasks([_row(corpus_items)])) == ROW_BATCH_KEYS


# ---- drawing ahead ----------------------------------------------------------------------------
def _drawing_log(monkeypatch) -> list:
    """Records ``("draw", first slot)`` at each kernel call and ``("yield", slot)`` at each
    slot ``TaskStream.drawn_from`` yields, in the order they happen. Before yielding slot 0
    it gives the next call, if another thread makes it, up to 2 s to be recorded (one
    drawing ahead starts within milliseconds; without, it comes after)."""
    import time

    log: list = []
    draw_batch, drawn_from = TaskStream._draw_batch, TaskStream.drawn_from

    def logged_draw(self, slots, packed):
        log.append(("draw", slots[0]))
        return draw_batch(self, slots, packed)

    def logged_drawn_from(self, slots, batch):
        for slot, made in zip(slots, drawn_from(self, slots, batch), strict=False):
            if slot == 0:
                deadline = time.monotonic() + 2
                while ("draw", slots[-1] + 1) not in log and time.monotonic() < deadline:
                    time.sleep(0.002)
            log.append(("yield", slot))
            yield made

    monkeypatch.setattr(TaskStream, "_draw_batch", logged_draw)
    monkeypatch.setattr(TaskStream, "drawn_from", logged_drawn_from)
    return log


@pytest.mark.parametrize("draw_ahead", [None, True, False])
def test_drawing_ahead_makes_the_same_items_and_counts(sources, draw_ahead, monkeypatch):
    """``draw_ahead`` (the default in the main process) draws the next 64 slots before the
    current ones are yielded; items, batches and the stream's counts are the same either
    way."""
    log = _drawing_log(monkeypatch)
    stream = TaskStream(SEED, count=150, sources=sources)
    items = [fingerprint(item) for item in StreamDataset(stream, draw_ahead=draw_ahead)]
    monkeypatch.undo()
    plain = TaskStream(SEED, count=150, sources=sources)
    assert items == [fingerprint(task_item(task, slot)) for slot, task in enumerate(plain)]
    assert (stream.stats.kept, stream.stats.rejected) == (plain.stats.kept, plain.stats.rejected)
    assert [event for event in log if event[0] == "draw"] == [
        ("draw", 0),
        ("draw", 64),
        ("draw", 128),
    ]
    first_yield = log.index(("yield", 0))
    drawn_before = [event for event in log[:first_yield] if event[0] == "draw"]
    assert drawn_before == ([("draw", 0)] if draw_ahead is False else [("draw", 0), ("draw", 64)])


def test_a_dataloader_worker_does_not_draw_ahead_unless_told(sources, monkeypatch):
    log = _drawing_log(monkeypatch)
    monkeypatch.setattr(torch_data, "get_worker_info", lambda: None)
    list(itertools.islice(StreamDataset(TaskStream(SEED, count=100, sources=sources)), 1))
    assert log[:2] == [("draw", 0), ("draw", 64)]
    log.clear()

    class Worker:  # what get_worker_info gives in worker 0 of 1
        id, num_workers = 0, 1

    monkeypatch.setattr(torch_data, "get_worker_info", lambda: Worker())
    list(itertools.islice(StreamDataset(TaskStream(SEED, count=100, sources=sources)), 1))
    assert log == [("draw", 0), ("yield", 0)]
    log.clear()
    dataset = StreamDataset(TaskStream(SEED, count=100, sources=sources), draw_ahead=True)
    list(itertools.islice(dataset, 1))
    assert log[:2] == [("draw", 0), ("draw", 64)]


def _draw_ahead_threads() -> list:
    import threading

    return [t for t in threading.enumerate() if t.name.startswith("whatif-draw-ahead")]


def test_stopping_early_or_failing_leaves_no_drawing_thread(sources, monkeypatch):
    dataset = StreamDataset(TaskStream(SEED, count=1000, sources=sources), draw_ahead=True)
    items = iter(dataset)
    next(items)
    assert len(_draw_ahead_threads()) == 1
    items.close()  # as a loop's break does once the iterator is dropped
    assert _draw_ahead_threads() == []

    calls = []

    def failing(self, slots, **options):
        calls.append(slots[0])
        if slots[0] >= 64:
            raise MemoryError("out of memory drawing")
        return draw_batch(self, slots, **options)

    draw_batch = TaskStream.draw_batch
    monkeypatch.setattr(TaskStream, "draw_batch", failing)
    made = []
    with pytest.raises(MemoryError, match="out of memory drawing"):
        for item in StreamDataset(TaskStream(SEED, count=1000, sources=sources), draw_ahead=True):
            made.append(item)
    assert len(made) == 64 and calls == [0, 64]  # the first call's slots, then its error
    assert _draw_ahead_threads() == []
