"""Running a pass's pending chunks on a work pool (``cluster.WorkPool``), each result saved as
it comes; a local worker process that dies loses nothing saved (docs/RELIABILITY.md).

Where the chunks run is decided once per evaluation (``runner``): the pool's ``function`` and
the arguments of each chunk's call make a ``ChunkJobs``; the same code here runs both passes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from whatif_bench.cluster import WorkerDied, WorkPool
from whatif_bench.evaluation.chunk_store import ChunkStore, PendingChunk
from whatif_bench.evaluation.model_calls import fatal
from whatif_bench.evaluation.scoring import ScoringPass

MAX_WORKER_DEATHS = 3  # deaths of a worker of the full pool; then one chunk at a time


@dataclass(frozen=True)
class ChunkJobs:
    """How the chunks of a pass run: ``function(*call_of(chunk))`` on ``pool``, one frame per
    pending model of the chunk (``PendingChunk.pending``) for each chunk, in order."""

    pool: WorkPool
    function: Callable[..., list[pd.DataFrame]]
    call_of: Callable[[PendingChunk], tuple]

    def run(self, chunks: list[PendingChunk]) -> Iterator[list[pd.DataFrame]]:
        """The frames of each chunk, in the order of ``chunks``; the calls are made lazily, a
        few ahead of the results (a ``WorkerDied`` loses the calls in flight)."""
        return self.pool.ordered(self.function, (self.call_of(chunk) for chunk in chunks))


@dataclass
class PassState:
    """One pass over chunks as it is saved: each model's frame of a chunk goes to ``store``
    (in the pass's ``scoring.layout``) and into ``done``; ``given_up`` (label -> reason) holds
    the models not called again (``model_calls.fatal``), shared by the passes of a run; ``bar``
    counts the units (tasks, histories) of the chunks finished; notes go to ``store.note``."""

    scoring: ScoringPass
    store: ChunkStore
    done: dict[tuple[str, int], pd.DataFrame]
    given_up: dict[str, str]
    bar: Any
    left: dict[int, int] = field(default_factory=dict)  # chunk index -> models not saved yet

    def save(self, chunk: PendingChunk, frames: list[pd.DataFrame]) -> None:
        """Write the frames of ``chunk`` (a pending model's frame each); a model with a fatal
        failure enters ``given_up``."""
        index, _, pending = chunk
        for (_, label), frame in zip(pending, frames, strict=True):
            self.store.write(label, index, self.scoring.layout, frame)
            self.done[label, index] = frame
            if label not in self.given_up:
                reasons = [reason for reason in frame["failed"] if reason and fatal(reason)]
                if reasons:
                    self.given_up[label] = f"{reasons[0]} (on an earlier batch; not called again)"
        self.left[index] -= len(pending)
        if self.left[index] == 0:
            self.bar.update(len(chunk.ids))

    def fail(self, chunk: PendingChunk, reason: str) -> None:
        """Save every unit of ``chunk`` as failed with ``reason``, for its pending models."""
        index, ids, pending = chunk
        self.save(chunk, [self.scoring.failed_frame(ids, label, reason) for _, label in pending])

    def frames(self, labels: list[str], n_chunks: int) -> list[pd.DataFrame]:
        """Every chunk's frame, model by model and chunk by chunk (all saved by now)."""
        return [self.done[label, index] for label in labels for index in range(n_chunks)]


def save_all(jobs: ChunkJobs, todo: list[PendingChunk], state: PassState) -> None:
    """Compute the chunks of ``todo`` (``ChunkStore.resume``) with ``jobs``, each result saved
    as it comes (``state.save``; ``run_chunks``), then close the progress bar. A model that
    ran out of time or killed its worker (``fatal``) enters ``state.given_up``: the chunks
    sent out after this are not given to it."""
    state.left = {index: len(pending) for index, _, pending in todo}
    run_chunks(jobs, todo, state)
    state.bar.close()


def run_chunks(jobs: ChunkJobs, todo: list[PendingChunk], state: PassState) -> None:
    """Run every chunk of ``todo`` and save its result, in order.

    A local worker process that dies (``WorkerDied``: the OOM killer, a kill, a model run in
    the worker itself that ends or crashes it) loses the calls in flight, never what was
    saved. The rest runs again in new worker processes, the first chunk not saved alone
    first (``run_alone``: a model whose run alone kills its worker fails there and is given
    up); a death that does not repeat loses nothing. After ``MAX_WORKER_DEATHS`` deaths of
    a worker of the full pool, the rest runs one chunk at a time. A Ctrl-C stops it all."""
    queue = list(todo)
    deaths = 0
    while queue:
        if deaths >= MAX_WORKER_DEATHS:
            run_alone(jobs, queue.pop(0), state)
            continue
        batch, saved = list(queue), 0
        try:
            for frames in jobs.run(batch):
                state.save(batch[saved], frames)
                saved += 1
            return
        except WorkerDied as died:
            del queue[:saved]
            deaths += 1
            state.store.note(
                f"{died.reason}; chunk {queue[0][0]} and the ones after it run again in new "
                "worker processes, that chunk alone first"
                + ("; the rest one at a time" if deaths == MAX_WORKER_DEATHS else "")
            )
            run_alone(jobs, queue.pop(0), state)


def run_alone(jobs: ChunkJobs, chunk: PendingChunk, state: PassState) -> None:
    """Run ``chunk`` by itself in a worker process; if that dies too, each of its models by
    itself: a model whose run kills its worker then fails the chunk with the reason (and is
    not called again)."""
    try:
        run_one(jobs, chunk, state)
        return
    except WorkerDied as died:
        if len(chunk.pending) == 1:
            blame(chunk, died.reason, state)
            return
    index, ids, pending = chunk
    for model_and_label in pending:
        single = PendingChunk(index, ids, [model_and_label])
        try:
            run_one(jobs, single, state)
        except WorkerDied as died:
            blame(single, died.reason, state)


def run_one(jobs: ChunkJobs, chunk: PendingChunk, state: PassState) -> None:
    """Run ``chunk`` alone on the pool and save its result."""
    for frames in jobs.run([chunk]):
        state.save(chunk, frames)


def blame(chunk: PendingChunk, reason: str, state: PassState) -> None:
    """Fail the one model of ``chunk``, whose run alone killed its worker process."""
    index, _, [(_, label)] = chunk
    state.store.note(
        f"model {label!r} killed its worker process again when chunk {index} ran it alone: "
        f"{reason}; its tasks there fail and it is not called again"
    )
    state.fail(chunk, reason)
