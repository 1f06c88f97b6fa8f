"""Padded batches made straight from tasks, without an item per task: a faster way to feed a
DataLoader.

``DataLoader(dataset, batch_size=B, collate_fn=collate_tasks)`` turns each task into a
``task_item`` dict, then checks each item's arrays as it copies them into the padded batch.
``PaddedBatches(dataset, B).loader(num_workers=W)`` (a ``DataLoader`` with ``batch_size=None``
and ``collate_fn=as_made``) copies each task's arrays into the batch with neither, and takes a
streamed task from the stream's kernel batch without making its ``Task``: the same batches,
tensor for tensor, about a tenth faster over the stream (``benchmarks/bench_dataloader.py``). With
``by_context=True`` each batch holds tasks of one context label (C1..C4), whose histories are
of nearly one length, so a batch is mostly tasks rather than padding. Needs the ``train``
extra.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from typing import NamedTuple

import numpy as np

from whatif_bench.corpus import Task
from whatif_bench.stream._kernels import SlotBlocks
from whatif_bench.stream.distribution import CONTEXT_LABELS
from whatif_bench.stream.items import (
    INT_FIELDS,
    TEXT_FIELDS,
    task_fields,
)
from whatif_bench.stream.slot_blocks import BATCH_ARRAYS, block_arrays, place_blocks
from whatif_bench.stream.task_stream import StreamError

# torch through torch_data, which names the extra to install when it is missing
from whatif_bench.stream.torch_data import (
    CorpusDataset,
    DataLoader,
    IterableDataset,
    StreamDataset,
    batch_arrays,
    batch_limits,
    check_limits,
    completed_batch,
    padded_batch,
)


def pad_tasks(
    tasks: Sequence[Task],
    indices: Sequence[int],
    *,
    k_max: int | None = None,
    context_max: int | None = None,
    horizon_max: int | None = None,
) -> dict:
    """The batch ``collate_tasks`` makes of ``[task_item(task, index) ...]``, tensor for tensor,
    made from the tasks' own arrays (copied into the batch, cast to float32 if they are not).

    Parameters
    ----------
    tasks : sequence of Task
        B streamed or corpus tasks, B >= 1.
    indices : sequence of int
        Their B ``index`` values (stream slots, or places in a corpus view's ``task_ids()``).
    k_max, context_max, horizon_max : int or None
        Fixed shapes, as ``collate_tasks`` takes them; by default the batch's largest.

    Returns
    -------
    dict
        What ``collate_tasks`` returns for ``task_item`` dicts: float32 tensors
        ``history_target`` (B, C_max), ``history_covariates`` (B, K_max, C_max), ...; bool masks;
        int64 tensors (B,) of ``INT_FIELDS``; lists (B,) of ``TEXT_FIELDS``.
    """
    if not tasks:
        raise StreamError("cannot collate an empty batch")
    if len(indices) != len(tasks):
        raise StreamError(f"{len(tasks)} tasks need {len(tasks)} indices, got {len(indices)}")
    limits = check_limits(k_max, context_max, horizon_max)
    parts = [
        (_arrays_of(task), task_fields(task, index))
        for task, index in zip(tasks, indices, strict=True)
    ]
    return _pad_parts(parts, limits)


ITEM_ARRAYS = BATCH_ARRAYS  # a batch's arrays, in collate_tasks' order


class PackedSlot(NamedTuple):
    """A streamed slot's block in its kernel call's one array (``make_batch(packed=True)``)."""

    blocks: SlotBlocks
    i: int


# a task in a batch: its arrays by name (as Task's fields) or its packed block, and its item
# fields (task_fields)
Part = tuple[Mapping[str, np.ndarray] | PackedSlot, dict]


def _arrays_of(task: Task) -> dict[str, np.ndarray]:
    return {name: getattr(task, name) for name in ITEM_ARRAYS}


def _part_arrays(source: Mapping[str, np.ndarray] | PackedSlot, fields: dict) -> Mapping:
    """A part's arrays by name (views of a packed block)."""
    if not isinstance(source, PackedSlot):
        return source
    block = source.blocks.block(source.i)
    return block_arrays(block, fields["k"], fields["context_length"], fields["prediction_length"])


def _pad_parts(parts: Sequence[Part], limits: tuple) -> dict:
    """The padded batch of ``parts`` (B >= 1), ``limits`` checked (``check_limits``). When
    every part is a packed block that fits the batch's shape whole, the blocks are placed by
    ``place_blocks`` (one kernel call per kernel batch they came from) into a batch not zeroed
    first, the kernel writing the padding's zeros, or in a DataLoader worker into new shared
    memory, which holds zeros already; otherwise row by row, as ``collate_tasks`` places them."""
    numbers = {name: [fields[name] for _, fields in parts] for name in INT_FIELDS}
    texts = {name: [fields[name] for _, fields in parts] for name in TEXT_FIELDS}
    shape = batch_limits(numbers, *limits)
    largest = (max(numbers[name]) for name in ("k", "context_length", "prediction_length"))
    packed = [source for source, _ in parts if isinstance(source, PackedSlot)]
    if len(packed) < len(parts) or any(
        most > limit for most, limit in zip(largest, shape, strict=True)
    ):
        arrays = [_part_arrays(source, fields) for source, fields in parts]
        return padded_batch(
            {name: [row[name] for row in arrays] for name in ITEM_ARRAYS},
            numbers,
            texts,
            *limits,
        )
    batch, zeros = batch_arrays(ITEM_ARRAYS, len(parts), shape, zeroed=False)
    out = {name: batch[name].numpy() for name in ITEM_ARRAYS}
    rows_of: dict[int, tuple[SlotBlocks, list[int], list[int]]] = {}  # by kernel call
    for row, source in enumerate(packed):
        blocks, rows, slots = rows_of.setdefault(id(source.blocks), (source.blocks, [], []))
        rows.append(row)
        slots.append(source.i)
    columns = {
        name: np.asarray(numbers[name]) for name in ("k", "context_length", "prediction_length")
    }
    for blocks, rows, slots in rows_of.values():
        place_blocks(
            blocks.flat,
            blocks.offsets[slots],
            columns["k"][rows],
            columns["context_length"][rows],
            columns["prediction_length"][rows],
            np.asarray(rows),
            out,
            zero_padding=not zeros,
        )
    return completed_batch(batch, numbers, texts, shape)


def as_made(batch: dict) -> dict:
    """The ``collate_fn`` for ``PaddedBatches``: its batch as it is. ``DataLoader``'s own for
    ``batch_size=None`` (``default_convert``) walks every text of the batch and turns tuples into
    lists: 1.2 ms a batch of 32 tasks here, about half what making the batch costs."""
    return batch


class PaddedBatches(IterableDataset):
    """A ``StreamDataset``'s or ``CorpusDataset``'s tasks in padded batches of ``batch_size``:
    ``PaddedBatches(dataset, B).loader(num_workers=W)``, or ``DataLoader(PaddedBatches(dataset,
    B), batch_size=None, collate_fn=as_made, ...)``.

    Parameters
    ----------
    dataset : StreamDataset or CorpusDataset
        Its sharding over workers and ranks, epochs and order are kept.
    batch_size : int
        Tasks per batch (B >= 1).
    drop_last : bool
        Leave out a worker's last batch when it has fewer than B tasks (``DataLoader``'s
        ``drop_last``); with ``by_context``, every label's last one: up to 4 (B - 1) tasks a
        worker an epoch.
    by_context : bool
        Batch tasks of one context label (C1..C4) together: each worker keeps up to B - 1 tasks
        of each label waiting and yields a label's batch when it has B, in the order they fill;
        at the end of the worker's tasks, the partial batches in C1..C4 order.
    k_max, context_max, horizon_max : int or None
        Fixed shapes, as ``collate_tasks`` takes them; by default each batch's largest.

    Without ``by_context`` the batches are the ones ``DataLoader(dataset, batch_size=B,
    collate_fn=collate_tasks, drop_last=drop_last)`` makes, for any number of workers, tensor for
    tensor (each worker batches its own tasks in both). ``len()`` is what a DataLoader counts
    for the same dataset and batch size (a ``CorpusDataset``, without ``by_context``): exact
    with no workers; with W workers each makes its own last batch, so up to W - 1 more come
    (PyTorch warns of it, as it does for the DataLoader).
    """

    def __init__(
        self,
        dataset: StreamDataset | CorpusDataset,
        batch_size: int,
        *,
        drop_last: bool = False,
        by_context: bool = False,
        k_max: int | None = None,
        context_max: int | None = None,
        horizon_max: int | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(dataset, (StreamDataset, CorpusDataset)):
            raise StreamError(
                f"PaddedBatches needs a StreamDataset or a CorpusDataset, got {type(dataset).__name__}"
            )
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise StreamError(f"batch_size must be a positive integer, got {batch_size!r}")
        self.dataset = dataset
        self.batch_size = batch_size
        self.drop_last = bool(drop_last)
        self.by_context = bool(by_context)
        limits = check_limits(k_max, context_max, horizon_max)
        self.limits = dict(zip(("k_max", "context_max", "horizon_max"), limits, strict=True))

    def set_epoch(self, epoch: int) -> None:
        """The dataset's ``set_epoch``: call it before the DataLoader starts its workers."""
        self.dataset.set_epoch(epoch)

    def loader(self, **options) -> DataLoader:
        """A ``DataLoader`` of these batches: ``batch_size=None`` (they come batched) and
        ``collate_fn=as_made``; ``options`` are the DataLoader's others (``num_workers``,
        ``pin_memory``, ``prefetch_factor`` ...)."""
        return DataLoader(self, batch_size=None, collate_fn=as_made, **options)

    def __len__(self) -> int:
        if self.by_context or not isinstance(self.dataset, CorpusDataset):
            raise TypeError(
                "PaddedBatches has a length only over a CorpusDataset without by_context"
            )
        tasks, size = len(self.dataset), self.batch_size
        return tasks // size if self.drop_last else -(-tasks // size)

    def __iter__(self) -> Iterator[dict]:
        limits = tuple(self.limits.values())
        parts = _parts(self.dataset)
        groups = (
            _by_context(parts, self.batch_size)
            if self.by_context
            else _in_order(parts, self.batch_size)
        )
        for group in groups:
            if len(group) == self.batch_size or not self.drop_last:
                yield _pad_parts(group, limits)


def _parts(dataset: StreamDataset | CorpusDataset) -> Iterator[tuple[str, Part]]:
    """``(context label, part)`` of each task the calling worker makes, in order. A streamed
    task's part is its block in its kernel call's one array (``PackedSlot``) and its item
    fields (``SlotBatch.task_fields``), without its ``Task``: a ``Task`` and its item fields
    cost about as much as batching."""
    if isinstance(dataset, CorpusDataset):
        for index, task in dataset.indexed_tasks():
            yield task.c_label, (_arrays_of(task), task_fields(task, index))
        return
    for slot, made in dataset.indexed_drawn(packed=True):
        if isinstance(made, Task):  # a slot the reference made
            yield made.c_label, (_arrays_of(made), task_fields(made, slot))
        else:
            batch, i = made
            if not isinstance(batch.blocks, SlotBlocks):
                raise TypeError("indexed_drawn(packed=True) gave a batch of separate blocks")
            yield batch.c_label(i), (PackedSlot(batch.blocks, i), batch.task_fields(i, slot))


def _in_order(parts: Iterator[tuple[str, Part]], size: int) -> Iterator[list[Part]]:
    """Consecutive groups of ``size`` parts (their labels dropped); the last may be shorter."""
    unlabelled = (part for _, part in parts)
    while group := list(itertools.islice(unlabelled, size)):
        yield group


SHARED_CALLS = 2  # kernel calls whose one array parts waiting for their label may share


def _by_context(parts: Iterator[tuple[str, Part]], size: int) -> Iterator[list[Part]]:
    """Groups of ``size`` parts of one context label, each as soon as it is full; then the
    unfilled groups in ``CONTEXT_LABELS`` order.

    A waiting packed part would keep its whole kernel call's array alive (64 slots' blocks)
    until its label's group fills: for a rare label, many calls' arrays. Parts may share the
    arrays of the latest ``SHARED_CALLS`` calls; when a part of a newer call comes, those of
    older calls still waiting are copied together into an array of their own (``_compacted``),
    so what waits holds about its own blocks' bytes."""
    waiting: dict[str, list[Part]] = {label: [] for label in CONTEXT_LABELS}
    shared: list[SlotBlocks] = []  # the latest calls' arrays, oldest first
    for label, part in parts:
        source = part[0]
        if isinstance(source, PackedSlot) and (not shared or source.blocks is not shared[-1]):
            shared.append(source.blocks)
            if len(shared) > SHARED_CALLS:
                _compact(waiting, shared.pop(0))
        group = waiting.setdefault(label, [])
        group.append(part)
        if len(group) == size:
            yield group
            waiting[label] = []
    yield from (group for group in waiting.values() if group)


def _compact(waiting: dict[str, list[Part]], blocks: SlotBlocks) -> None:
    """The waiting parts whose block is in ``blocks`` moved, in place, to one new array of
    their blocks alone."""
    places = [
        (group, position, source.i)
        for group in waiting.values()
        for position, (source, _) in enumerate(group)
        if isinstance(source, PackedSlot) and source.blocks is blocks
    ]
    if not places:
        return
    kept = [blocks.block(i) for _, _, i in places]
    offsets = np.zeros(len(kept) + 1, dtype=np.int64)
    np.cumsum([block.size for block in kept], out=offsets[1:])
    compacted = SlotBlocks(np.concatenate(kept), offsets)
    for j, (group, position, _) in enumerate(places):
        group[position] = (PackedSlot(compacted, j), group[position][1])
