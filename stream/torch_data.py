"""PyTorch datasets of tasks: the training stream and the fixed corpus, and a padding collate.

Both datasets are iterable (``IterableDataset``) and shard themselves over DataLoader workers
*and* distributed ranks, with ``W`` workers per rank and ``R`` ranks. In the stream, worker
``w`` of rank ``r`` is shard ``r * W + w`` of ``R * W`` and makes the slots ``shard,
shard + R * W, ...``. The corpus deals by rank first: rank ``r`` has the tasks at places
``r, r + R, ...`` of the epoch's order (after an optional seeded shuffle), whatever ``W``, and its
worker ``w`` makes every ``W``-th of those from the ``w``-th (shard ``w * R + r``), so
``len(CorpusDataset)`` is what the rank's loader yields in an epoch. No task is made twice, and
for a given seed, worker count and world size every worker's tasks and their order are fixed.
A stream slot's task depends only on the seed, so the *set* of tasks is the same for any
layout.

Items are dicts of numpy float32 arrays and metadata (``whatif_bench.stream.items.task_item``);
``collate_tasks`` pads a batch of them, or of rows of the parquet export and parquet stream
shards, into torch tensors with masks. Needs the ``train`` extra.
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

try:
    import torch
    from torch.utils.data import DataLoader as DataLoader  # re-exported for stream/batches.py
    from torch.utils.data import IterableDataset, get_worker_info
except ImportError as exc:  # pragma: no cover - the test venv installs the extra
    raise ImportError(
        "install PyTorch to use the whatif_bench.stream datasets: pip install 'whatif-bench[train]'"
    ) from exc

from whatif_bench.corpus import Corpus, CorpusError, Task
from whatif_bench.seeding import rng, spawn_code
from whatif_bench.stream.items import (
    FUTURE_ARRAYS,
    HISTORY_ARRAYS,
    INT_FIELDS,
    ITEM_DTYPE,
    TEXT_FIELDS,
    place_future,
    place_history,
    task_item,
)
from whatif_bench.stream.plan import SlotBatch
from whatif_bench.stream.seeding import resolve_seed
from whatif_bench.stream.slot_blocks import COVARIATE_ARRAYS
from whatif_bench.stream.task_stream import BATCH_SLOTS, StreamError, TaskStream

# the domain of the corpus shuffle's seed sequence (apart from the stream's; whatif_bench.seeding)
SHUFFLE_DOMAIN = spawn_code("shuffle")  # 0x53485546, "SHUF"


def resolve_ranks(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """This process's rank and the world size: as given, else ``torch.distributed``'s when it is
    initialised, else ``(0, 1)``. Raises ``StreamError`` for a non-integer or negative rank, a
    world size below 1, or a rank not below the world size."""
    distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
    if world_size is None:
        world_size = torch.distributed.get_world_size() if distributed else 1
    if rank is None:
        rank = torch.distributed.get_rank() if distributed else 0
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise StreamError(f"world_size must be a positive integer, got {world_size!r}")
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
        raise StreamError(f"rank must be a non-negative integer, got {rank!r}")
    if rank >= world_size:
        raise StreamError(f"rank must be below the world size {world_size}, got {rank}")
    return rank, world_size


def worker_shard(rank: int, world_size: int) -> tuple[int, int]:
    """``(shard, num_shards)`` of the calling DataLoader worker (or of the main process when
    the loader has no workers): shard ``rank * num_workers + worker_id`` of
    ``world_size * num_workers``."""
    info = get_worker_info()
    worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
    return rank * workers + worker, world_size * workers


def _check_epoch(epoch: int) -> int:
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
        raise StreamError(f"epoch must be a non-negative integer, got {epoch!r}")
    return epoch


class StreamDataset(IterableDataset):
    """The tasks of a ``TaskStream`` as items, sharded over DataLoader workers and ranks.

    Parameters
    ----------
    stream : TaskStream
        An unsharded stream (``num_shards=1``); counted (``count``) or endless. An endless
        stream shards the same way and never stops: end training after a number of steps.
    rank, world_size : int or None
        This process's rank and the number of ranks; ``None`` takes them from
        ``torch.distributed`` when it is initialised (so build the dataset after
        ``init_process_group``), else rank 0 of 1.
    draw_ahead : bool or None
        Draw the stream's next ``BATCH_SLOTS`` slots in a background thread while the current
        ones are turned into items or batches (the kernel lets go of the GIL, so another core
        draws); the items are the same either way. ``None`` (default): in the main process
        only, not in DataLoader workers, whose processes keep the cores busy already.

    Epoch ``e`` (``set_epoch``) of a counted stream makes slots ``e * count`` ..
    ``(e + 1) * count - 1``: fresh tasks every epoch, replayable from the seed; epoch 0 (the
    default) is the stream's own slots. ``set_epoch`` must be called before the DataLoader
    starts its workers (so not with ``persistent_workers=True``).

    With ranks, slots are dealt in blocks of ``num_workers`` per rank, so ranks can get a
    different number of tasks unless ``count`` is a multiple of ``world_size * num_workers``;
    DDP needs equal step counts, so choose ``count`` so (or stop after a fixed number of steps).
    Each worker counts its own rejections in its copy of ``stream.stats``.
    """

    def __init__(
        self,
        stream: TaskStream,
        *,
        rank: int | None = None,
        world_size: int | None = None,
        draw_ahead: bool | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(stream, TaskStream):
            raise StreamError(f"StreamDataset needs a TaskStream, got {type(stream).__name__}")
        if draw_ahead is not None and not isinstance(draw_ahead, bool):
            raise StreamError(f"draw_ahead must be True, False or None, got {draw_ahead!r}")
        if stream.num_shards != 1:
            raise StreamError(
                "StreamDataset shards the stream itself; give it an unsharded TaskStream "
                f"(this one is shard {stream.shard} of {stream.num_shards})"
            )
        self.stream = stream
        self.rank, self.world_size = resolve_ranks(rank, world_size)
        self.draw_ahead = draw_ahead
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Make the slots of epoch ``epoch`` (a counted stream); no effect on an endless one."""
        self.epoch = _check_epoch(epoch)

    def slots(self, shard: int, num_shards: int) -> Iterator[int]:
        """The slots shard ``shard`` of ``num_shards`` makes this epoch, in order."""
        stream = self.stream
        if stream.count is None:
            return itertools.count(shard, num_shards)
        first = self.epoch * stream.count
        return iter(range(first + shard, first + stream.count, num_shards))

    def __iter__(self) -> Iterator[dict]:
        for slot, task in self.indexed_tasks():
            yield task_item(task, slot)

    def indexed_tasks(self) -> Iterator[tuple[int, Task]]:
        """``(slot, task)`` of each task the calling worker makes this epoch, in order: what
        ``__iter__`` makes its items of."""
        for slot, made in self.indexed_drawn():
            yield slot, made if isinstance(made, Task) else made[0].task(made[1])

    def indexed_drawn(
        self, *, packed: bool = False
    ) -> Iterator[tuple[int, Task | tuple[SlotBatch, int]]]:
        """``(slot, drawn)`` of each task the calling worker makes this epoch, in order, as
        ``TaskStream.drawn`` gives them (``PaddedBatches`` batches them without the ``Task``,
        ``packed``); the next kernel call drawn in a background thread (``draw_ahead``)."""
        shard, num_shards = worker_shard(self.rank, self.world_size)
        stream, slots = self.stream, self.slots(shard, num_shards)
        chunks = iter(lambda: list(itertools.islice(slots, BATCH_SLOTS)), [])  # a kernel call each
        ahead = get_worker_info() is None if self.draw_ahead is None else self.draw_ahead
        if not ahead:
            for chunk in chunks:
                yield from zip(chunk, stream.drawn(chunk, packed=packed), strict=True)
            return
        stream.plan()  # built here, once: the thread only draws
        with ThreadPoolExecutor(1, thread_name_prefix="whatif-draw-ahead") as pool:
            chunk = next(chunks, [])
            drawing = pool.submit(stream.draw_batch, chunk, packed=packed) if chunk else None
            while drawing is not None:
                current, following = drawing.result(), next(chunks, [])
                if following:  # the next call starts before this one's slots are used
                    drawing = pool.submit(stream.draw_batch, following, packed=packed)
                else:
                    drawing = None
                yield from zip(chunk, stream.drawn_from(chunk, current), strict=True)
                chunk = following


class CorpusDataset(IterableDataset):
    """The tasks of a corpus file (or a filtered view of it) as items, sharded over workers and
    ranks (rank first, module doc).

    Parameters
    ----------
    path : path of a corpus file
        Checked (and its view's task ids listed) here; every worker opens it once per epoch
        in ``__iter__`` (``Corpus`` holds an HDF5 handle and does not pickle).
    simulator, target, future, K, C, ell, E : value or list of values, optional
        The view, as ``Corpus.filter`` takes it.
    shuffle : bool
        Deal the tasks in a seeded random order, a new one every epoch (``set_epoch``);
        otherwise in the view's ``task_ids()`` order.
    seed : non-negative int or None
        The shuffle's seed; ``None`` draws fresh entropy (``self.seed`` records it).
    rank, world_size : int or None
        As for ``StreamDataset``.

    ``len()`` is the number of tasks this rank makes in one epoch, over all its DataLoader
    workers together (what ``len(DataLoader)`` counts): ``ceil((n - rank) / world_size)`` of the
    view's ``n`` tasks, the same for any number of workers, so ranks differ by one task at most.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        simulator=None,
        target=None,
        future=None,
        K=None,
        C=None,
        ell=None,
        E=None,
        shuffle: bool = False,
        seed: int | None = None,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        super().__init__()
        self.rank, self.world_size = resolve_ranks(rank, world_size)
        self.seed = resolve_seed(seed)
        self.shuffle = bool(shuffle)
        self.path = os.fspath(path)
        filters = {"simulator": simulator, "target": target, "future": future}
        filters.update(K=K, C=C, ell=ell, E=E)
        with Corpus(self.path) as corpus:
            self.task_ids: list[str] = corpus.filter(**filters).task_ids()
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Shuffle for epoch ``epoch`` (when ``shuffle``); call before the workers start."""
        self.epoch = _check_epoch(epoch)

    def order(self) -> np.ndarray:
        """(n,) int64: the positions in ``task_ids`` in this epoch's order, the same in every
        worker and rank (one seeded permutation, then dealt out by shard)."""
        n = len(self.task_ids)
        if not self.shuffle:
            return np.arange(n, dtype=np.int64)
        return rng("shuffle", self.seed, self.epoch).permutation(n)

    def __len__(self) -> int:
        return len(range(self.rank, len(self.task_ids), self.world_size))

    def positions(self, worker: int = 0, num_workers: int = 1) -> np.ndarray:
        """(m,) int64: the positions in ``task_ids`` that worker ``worker`` of ``num_workers``
        of this rank makes this epoch, in order (module doc: rank first, then worker)."""
        return self.order()[self.rank :: self.world_size][worker::num_workers]

    def __iter__(self) -> Iterator[dict]:
        for position, task in self.indexed_tasks():
            yield task_item(task, position)

    def indexed_tasks(self) -> Iterator[tuple[int, Task]]:
        """``(position, task)`` of each task the calling worker makes this epoch, in order (its
        place in ``task_ids``): what ``__iter__`` makes its items of."""
        info = get_worker_info()
        worker = (0, 1) if info is None else (info.id, info.num_workers)
        positions = self.positions(*worker).tolist()
        with Corpus(self.path) as corpus:
            # read a chunk of tasks at a time, as iterating a Corpus does
            tasks = corpus.tasks([self.task_ids[position] for position in positions])
            for position in positions:
                try:
                    task = next(tasks)
                except KeyError as exc:
                    raise CorpusError(
                        f"{self.path}: {exc.args[0]}; the file changed after the dataset was made"
                    ) from None
                yield position, task


# what a batch cannot do without: the arrays that are padded and the lengths that shape them
REQUIRED_ARRAYS = ("history_target", "history_covariates", "future_covariates", "future_target")
REQUIRED_INTS = ("k", "context_length", "prediction_length")
ROW_NDIM = {
    name: 2 if name in COVARIATE_ARRAYS else 1 for name in (*HISTORY_ARRAYS, *FUTURE_ARRAYS)
}


def collate_tasks(
    items: Sequence[Mapping],
    *,
    k_max: int | None = None,
    context_max: int | None = None,
    horizon_max: int | None = None,
) -> dict:
    """One batch of B items with different K, C and H as padded tensors.

    An item is a ``task_item`` dict (``StreamDataset``, ``CorpusDataset``) or a row of the
    parquet export or of parquet stream shards, as ``datasets`` yields it (plain lists, or
    tensors with ``with_format("torch")``) or as ``pyarrow``'s ``Table.to_pylist()`` does.
    Every item needs ``k``, ``context_length``, ``prediction_length`` and the arrays
    ``history_target`` (C,), ``history_covariates`` (K, C), ``future_covariates`` (K, H) and
    ``future_target`` (H,); a batch lacking any is a ``StreamError`` naming them. The other
    fields are optional: each is in the batch when every item has it and left out when none
    has (an item with a field the others lack is a ``StreamError``).

    Histories are left-padded with zeros so every history's last observed step is at index
    ``C_max - 1``; futures are right-padded so the first forecast step is at index 0; the K
    axis is padded with zero rows at the end. Give ``k_max``, ``context_max`` or
    ``horizon_max`` for fixed shapes (a longer history keeps its latest ``context_max`` steps;
    a longer future or more covariates is a ``StreamError``); by default each is the batch's
    largest. Use ``functools.partial`` to pass them through a DataLoader.

    The float32 tensors are views of one storage, as are the bool and the int64 ones, so a
    DataLoader worker hands a batch over in three shared-memory segments rather than 25; in a
    worker those storages are made in shared memory, so the batch is not copied to be handed
    over.

    Returns
    -------
    dict
        float32 tensors ``history_target`` (B, C_max), ``history_covariates``
        (B, K_max, C_max), ``counterfactual_history`` (B, C_max), ``future_covariates``
        (B, K_max, H_max), ``future_target`` (B, H_max), ``counterfactual_future``
        (B, H_max), in physical units, 0 where padded; bool tensors ``history_mask``
        (B, C_max), ``future_mask`` (B, H_max) and ``covariate_mask`` (B, K_max), ``True``
        where a value is real; int64 tensors (B,) of the items' ``INT_FIELDS`` (``k``,
        ``context_length``, ``prediction_length``, ...); lists (B,) of their ``TEXT_FIELDS``
        (``task_id``, ``simulator``, ...). That is every key for ``task_item`` dicts. Rows of
        the parquet export and of parquet stream shards have no ``counterfactual_history``,
        ``index``, ``start_step``, ``future_index``, ``c_index``, ``e_index``, ``unit`` (their
        ``target_unit`` is not collated) or ``world``, so their batch has the rest: the arrays
        but ``counterfactual_history``, the masks, ``k``, ``context_length``,
        ``prediction_length``, ``event_length``, ``interval_s`` and ``task_id``,
        ``simulator``, ``target``, ``future``, ``c_label``, ``e_setting``, ``start`` (ISO
        text), ``covariates``.
    """
    if not items:
        raise StreamError("cannot collate an empty batch")
    limits = check_limits(k_max, context_max, horizon_max)
    _require(items, (*REQUIRED_ARRAYS, *REQUIRED_INTS))
    arrays = _fields(items, (*HISTORY_ARRAYS, *FUTURE_ARRAYS))
    ints = _fields(items, INT_FIELDS)
    texts = _fields(items, TEXT_FIELDS)
    return padded_batch(
        {name: [_values(item[name], name) for item in items] for name in arrays},
        {name: _integers(items, name) for name in ints},
        {name: [item[name] for item in items] for name in texts},
        *limits,
    )


def check_limits(
    k_max: int | None, context_max: int | None, horizon_max: int | None
) -> tuple[int | None, int | None, int | None]:
    """The three limits as given; a ``StreamError`` for one that is neither ``None`` nor a
    positive integer."""
    limits = (k_max, context_max, horizon_max)
    for name, value in zip(("k_max", "context_max", "horizon_max"), limits, strict=True):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 1
        ):
            raise StreamError(f"{name} must be a positive integer or None, got {value!r}")
    return limits


def padded_batch(
    arrays: Mapping[str, Sequence[np.ndarray]],
    numbers: Mapping[str, Sequence[int]],
    texts: Mapping[str, Sequence],
    k_max: int | None,
    context_max: int | None,
    horizon_max: int | None,
) -> dict:
    """The batch ``collate_tasks`` returns, from its B rows' fields by name, already checked
    (``collate_tasks`` checks items; ``pad_tasks`` takes ``Task``s, checked when made): ``arrays``
    (B arrays of numbers each, (T,) or (K, T) as ``ROW_NDIM`` says; any float dtype, cast to
    float32 as they are placed), ``numbers`` (B ints each, ``k``, ``context_length`` and
    ``prediction_length`` among them) and ``texts`` (B values each)."""
    limits = batch_limits(numbers, k_max, context_max, horizon_max)
    batch, _ = batch_arrays(list(arrays), len(numbers["k"]), limits, zeroed=True)
    for name, rows in arrays.items():
        _place_rows(batch[name].numpy(), rows, name)
    return completed_batch(batch, numbers, texts, limits)


def batch_limits(
    numbers: Mapping[str, Sequence[int]],
    k_max: int | None,
    context_max: int | None,
    horizon_max: int | None,
) -> tuple[int, int, int]:
    """A batch's (K_max, C_max, H_max): each limit as given, or the rows' largest ``k``,
    ``context_length`` or ``prediction_length`` where it is ``None``."""
    return (
        max(numbers["k"]) if k_max is None else k_max,
        max(numbers["context_length"]) if context_max is None else context_max,
        max(numbers["prediction_length"]) if horizon_max is None else horizon_max,
    )


def batch_arrays(
    names: Sequence[str], size: int, limits: tuple[int, int, int], *, zeroed: bool
) -> tuple[dict[str, torch.Tensor], bool]:
    """The float32 tensors ``names`` of a batch of ``size`` rows, shaped by ``limits`` (K_max,
    C_max, H_max): (B, [K_max,] C_max) for ``HISTORY_ARRAYS``, (B, [K_max,] H_max) for the
    others, views of one storage (``_carve``), and whether they hold zeros. They do if
    ``zeroed``, and always in a DataLoader worker (a new shared-memory segment); otherwise the
    main process's are uninitialised, for a caller that writes every cell."""
    k_max, context_max, horizon_max = limits
    shapes = {
        name: (
            size,
            *((k_max,) if name in COVARIATE_ARRAYS else ()),
            context_max if name in HISTORY_ARRAYS else horizon_max,
        )
        for name in names
    }
    # one storage per dtype: a worker hands a batch over in 3 shared-memory segments, not 25
    return _carve(ITEM_DTYPE, shapes, zeroed=zeroed), zeroed or get_worker_info() is not None


def completed_batch(
    batch: dict[str, torch.Tensor],
    numbers: Mapping[str, Sequence[int]],
    texts: Mapping[str, Sequence],
    limits: tuple[int, int, int],
) -> dict:
    """``batch``'s placed float arrays with the masks, the ``numbers`` as one int64 tensor (B,)
    each and the ``texts`` as lists (B,): what ``collate_tasks`` returns."""
    k_max, context_max, horizon_max = limits
    size = len(numbers["k"])
    masks: dict[str, tuple[int, ...]] = {
        "history_mask": (size, context_max),
        "future_mask": (size, horizon_max),
        "covariate_mask": (size, k_max),
    }
    batch.update(_carve(np.bool_, masks))
    context = np.minimum(numbers["context_length"], context_max)
    batch["history_mask"].numpy()[...] = np.arange(context_max) >= context_max - context[:, None]
    horizon = np.asarray(numbers["prediction_length"])
    batch["future_mask"].numpy()[...] = np.arange(horizon_max) < horizon[:, None]
    k = np.asarray(numbers["k"])
    batch["covariate_mask"].numpy()[...] = np.arange(k_max) < k[:, None]
    # numpy builds the table from the lists several times faster than torch.tensor
    table = _in_batch_memory(np.array([numbers[name] for name in numbers], dtype=np.int64))
    batch.update(zip(numbers, table, strict=True))
    for name, column in texts.items():
        batch[name] = list(column)
    return batch


def _require(items: Sequence[Mapping], required: Sequence[str]) -> None:
    """A ``StreamError`` naming the ``required`` fields the first incomplete item lacks."""
    for row, item in enumerate(items):
        lacking = [name for name in required if name not in item]
        if lacking:
            raise StreamError(
                f"cannot collate: item {row} of the batch has no {', '.join(lacking)} (every "
                f"item needs {', '.join(required)})"
            )


def _fields(items: Sequence[Mapping], names: Sequence[str]) -> list[str]:
    """The ``names`` every item has, in order; a ``StreamError`` when some items have a field
    that others lack."""
    first = items[0].keys()
    if all(item.keys() == first for item in items):  # the usual batch: one kind of item
        return [name for name in names if name in first]
    missing = {name: [i for i, item in enumerate(items) if name not in item] for name in names}
    mixed = [name for name in names if 0 < len(missing[name]) < len(items)]
    if mixed:
        raise StreamError(
            f"cannot collate: some items of the batch have {', '.join(mixed)} and others do "
            f"not (item {missing[mixed[0]][0]} lacks {mixed[0]}); batch items of one kind"
        )
    return [name for name in names if not missing[name]]


def _place_rows(out: np.ndarray, rows: Sequence[np.ndarray], name: str) -> None:
    """Each of the B ``rows`` of array ``name`` into its row of the zeroed ``out`` (B, L) or
    (B, R, L), as ``place_history`` or ``place_future`` places one (they trim a long history or
    raise the error); the common case, an array that fits, is placed here without their
    per-call work."""
    place = place_history if name in HISTORY_ARRAYS else place_future
    history, length = place is place_history, out.shape[-1]
    for row, values in enumerate(rows):
        steps = values.shape[-1]
        if steps > length or (values.ndim == 2 and values.shape[0] > out.shape[1]):
            place(out[row], values)
        elif values.ndim == 1:
            if history:
                out[row, length - steps :] = values
            else:
                out[row, :steps] = values
        elif history:
            out[row, : values.shape[0], length - steps :] = values
        else:
            out[row, : values.shape[0], :steps] = values


def _values(value, name: str) -> np.ndarray:
    """An item's array as numpy float32, shaped as ``ROW_NDIM`` says: a numpy array, a
    (CPU) tensor, or nested lists as ``datasets`` and ``pyarrow`` give them."""
    if not (isinstance(value, np.ndarray) and value.dtype == ITEM_DTYPE):
        if isinstance(value, torch.Tensor):
            value = value.detach().cpu().numpy()
        try:
            value = np.asarray(value, dtype=ITEM_DTYPE)
        except (TypeError, ValueError):
            value = None
    ndim = ROW_NDIM[name]
    if value is None or value.ndim != ndim:
        shape = "(K, T)" if ndim == 2 else "(T,)"
        raise StreamError(f"cannot collate: {name} is not a {shape} array of numbers")
    return value


def _integers(items: Sequence[Mapping], name: str) -> list[int]:
    """The items' ``name`` values as ints (``_integer`` checks each unless all are ints)."""
    values = [item[name] for item in items]
    if all(type(value) is int for value in values):  # not bool: its type is bool
        return values
    return [_integer(value, name) for value in values]


def _integer(value, name: str) -> int:
    """A whole number given as an int, a numpy integer or a one-value integer tensor."""
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_floating_point():
        value = value.item()
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        return int(value)
    raise StreamError(f"cannot collate: {name} must be a whole number, got {value!r}")


def _carve(
    dtype: type, shapes: dict[str, tuple[int, ...]], *, zeroed: bool = True
) -> dict[str, torch.Tensor]:
    """Tensors shaped as ``shapes`` says, zeroed, consecutive views of one storage of the numpy
    ``dtype``: numpy's zeros in the main process (calloc'd, several times faster here than
    ``torch.zeros``), and in a DataLoader worker a new shared-memory segment (``_shared_zeros``),
    which the worker would otherwise copy the batch into to hand it over. Not ``zeroed``, the
    main process's storage is numpy's ``empty``: calloc zeroes reused memory by writing every
    byte (in a profile, 17 µs of the 69 µs a by-context stream task's batching took)."""
    total = sum(math.prod(shape) for shape in shapes.values())
    if get_worker_info() is not None:
        flat = _shared_zeros(total, dtype)
    else:
        flat = torch.from_numpy((np.zeros if zeroed else np.empty)(total, dtype=dtype))
    views, start = {}, 0
    for name, shape in shapes.items():
        views[name] = flat[start : start + math.prod(shape)].view(shape)
        start += math.prod(shape)
    return views


def _in_batch_memory(array: np.ndarray) -> torch.Tensor:
    """``array`` as a tensor where ``_carve`` puts a batch: its own memory in the main process,
    a copy in a new shared-memory segment in a DataLoader worker."""
    if get_worker_info() is None:
        return torch.from_numpy(array)
    shared = _shared_zeros(array.size, array.dtype.type).view(array.shape)
    shared.numpy()[...] = array
    return shared


def _shared_zeros(count: int, dtype: type) -> torch.Tensor:
    """(count,) zeros of the numpy ``dtype`` in a new shared-memory segment, as torch's own
    collate allocates a batch in a worker: the queue then passes the segment, where a tensor in
    private memory is first copied into one (the whole batch again: two workers' CPU for 20,000
    stream tasks in ``benchmarks/bench_dataloader.py`` went from 12.0 to 8.9 s). The segment
    is a new file that ``ftruncate`` sized, so its pages read as zeros until written (POSIX);
    nothing needs clearing."""
    like = torch.from_numpy(np.empty(0, dtype=dtype))
    storage = torch.UntypedStorage._new_shared(count * like.element_size())
    return like.new_empty(0).set_(storage, 0, (count,))
