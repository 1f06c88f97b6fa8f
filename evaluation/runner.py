"""Running forecasters over a corpus: per-task errors (resumable), then aggregates and reports.

Per-task results are written in chunks of at most ``CHUNK`` tasks per model (``chunk_size``) under
``<out>/per_task/<model>/``; a chunk already on disk is not computed again, so an interrupted
evaluation resumes where it stopped. A ``manifest.json`` ties the folder to one corpus and one
task selection; each model folder's ``model.json`` holds the model's fingerprint, and a model
whose fingerprint changed has its chunks deleted and recomputed. A chunk that cannot be read
(truncated, empty) is recomputed, and so is a chunk with failed tasks (a retry). A chunk of the
format before per-task timings (no ``seconds`` and ``imputed`` columns) is read, not recomputed:
its tasks get ``seconds`` NaN (not measured) and ``imputed`` False (that format had no imputed
forecasts), and a note says so (``ChunkStore.read``).

Each task's row also holds ``seconds``, the model's inference time for it (``scoring.task_row``),
and ``imputed`` (``Forecast.imputed``). ``seconds`` is a measurement: it is the one output that
differs between two runs of the same evaluation (``TIMING_COLUMNS``; docs/METHOD.md, section 8).

A model that fails (``predict`` raises, returns None or the wrong number of forecasts, a
forecast of the wrong shape or with NaN/inf) fails only the tasks concerned: they are kept in
``per_task.parquet`` with the reason in the ``failed`` column (empty when scored) and NaN
errors, and are left out of that model's aggregates. ``EvaluationResult.failures`` lists them.

Models cannot harm each other or the run (``evaluate``; docs/RELIABILITY.md): read-only inputs;
a model of the user runs ``predict`` in a forked child process with a time limit per batch, so
an endless loop, ``exit()``, ``os._exit`` or a crash fails that model's tasks with the reason;
a worker process that dies is replaced and its chunks run again (``dispatch.run_chunks``).

This module orchestrates; the parts are modules of their own:

- ``forecast_checks``: a model's forecasts checked against their tasks (the reasons);
- ``model_calls``: one model called on one batch (read-only inputs, child process, time limit);
- ``corpus_ref``: the corpus as one reference (``CorpusRef``) and each process's reader of it;
- ``chunk_store``: the results folder (manifest, lock, model folders, chunks, resume);
- ``scoring`` and ``relational``: the two passes, ``TASKS`` and ``RELATIONAL`` (``ScoringPass``);
- ``dispatch``: a pass's chunks run on the pool and saved as they come, through worker deaths.

Where the chunks run (this process, local worker processes or a dask cluster) is decided once,
for both passes, by ``_jobs``.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from whatif_bench.corpus import covariate_units as covariate_units  # for callers of the runner
from whatif_bench.corpus import select_tasks
from whatif_bench.corpus.axes import strata
from whatif_bench.evaluation.chunk_store import (
    ChunkStore,
    PendingChunk,
    check_out_folder,
    manifest,
    open_store,
)
from whatif_bench.evaluation.corpus_ref import (
    READER,
    CorpusRef,
    close_corpus_reader,
    open_reader,
)
from whatif_bench.evaluation.dispatch import ChunkJobs, PassState, save_all
from whatif_bench.evaluation.errors import EvaluationError
from whatif_bench.evaluation.forecast_checks import one_line
from whatif_bench.evaluation.forecasters import Forecaster, ModelError, TaskInput, make_forecaster
from whatif_bench.evaluation.model_calls import DEFAULT_MODEL_TIMEOUT_S, ModelCalls
from whatif_bench.evaluation.relational import RELATIONAL
from whatif_bench.evaluation.relational import relational_parts as relational_parts
from whatif_bench.evaluation.scoring import TASKS, ScoringPass
from whatif_bench.outputs import safe_name

if TYPE_CHECKING:
    from whatif_bench.cluster import WorkPool

CHUNK = 256  # the most tasks in a chunk of the tasks' pass (read when a run starts)
RELATIONAL_CHUNK = CHUNK // 2  # the most histories in a relational chunk: three inputs each
MIN_CHUNK = 16  # the fewest units in a chunk of a pass cut smaller than its largest chunks
CHUNKS_WANTED = 64  # a smaller run's pass is cut into about this many chunks (chunk_size)
STRATA = strata()  # import-time copy, for callers; select_tasks reads ``strata()``

# Measured, not computed: the only columns of the outputs that differ between two runs of the
# same evaluation (per_task.parquet's ``seconds``, leaderboard.{md,csv}'s ``seconds_per_task``).
# Everything else is the same bit for bit; ``without_timings`` drops them for a comparison.
TIMING_COLUMNS = ("seconds", "seconds_per_task")

# Names of the runner's internals before its parts became modules, kept for their callers
_open_corpus = READER  # this thread's open corpus reader (``corpus_ref.READER``)
_corpus_reader = open_reader  # (path, identity=None) -> (reader, covariate units, identity)


def without_timings(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` without the measured columns (``TIMING_COLUMNS``), which two runs of the same
    evaluation cannot reproduce; what is left is reproducible bit for bit."""
    return frame.drop(columns=[c for c in TIMING_COLUMNS if c in frame.columns])


@dataclass
class EvaluationResult:
    """Per-task errors of every model, and the overall leaderboard."""

    per_task: pd.DataFrame
    leaderboard: pd.DataFrame
    reference: str
    out: Path
    notes: list[str] = field(default_factory=list)
    relational: pd.DataFrame | None = None  # per history and model (``relational=True`` only)

    @property
    def failures(self) -> pd.DataFrame:
        """The failed (task, model) rows: task_id, model and the reason in ``failed``."""
        failed = self.per_task[self.per_task["failed"] != ""]
        return failed[["task_id", "model", "failed"]].reset_index(drop=True)

    def failure_summary(self) -> list[str]:
        """One line per model that failed on some task: count, first task and its reason."""
        lines = []
        total = self.per_task["task_id"].nunique()
        for model, rows in self.failures.groupby("model", sort=False):
            first = rows.iloc[0]
            line = (
                f"model {model!r} failed on {len(rows):,} of {total:,} tasks (first: "
                f"{first['task_id']}: {first['failed']}); it is scored on the other "
                f"{total - len(rows):,}"
            )
            if model == self.reference:
                line += "; as the reference, it leaves those tasks out of every skill score"
            lines.append(line)
        if self.relational is not None:
            failed = self.relational[self.relational["failed"] != ""]
            total = self.relational["pair_id"].nunique()
            for model, rows in failed.groupby("model", sort=False):
                first = rows.iloc[0]
                lines.append(
                    f"model {model!r} failed on {len(rows):,} of {total:,} histories of the "
                    f"relational scores (first: {first['pair_id']}: {first['failed']}); they are "
                    "left out of its relational scores"
                )
        return lines

    def imputed_summary(self) -> list[str]:
        """One line per model with imputed forecasts (``Forecast.imputed``): count and first
        task. Imputed tasks are scored as the model's forecasts; they are not failures."""
        lines = []
        total = self.per_task["task_id"].nunique()
        imputed = self.per_task[self.per_task["imputed"]]
        for model, rows in imputed.groupby("model", sort=False):
            lines.append(
                f"model {model!r} imputed {len(rows):,} of {total:,} forecasts (first: "
                f"{rows.iloc[0]['task_id']}); they are scored as its own (num_imputed in the "
                "leaderboard)"
            )
        return lines


def check_task_ids(task_ids: Sequence[str] | None, subset: float | None) -> list[str] | None:
    """``evaluate``'s ``task_ids`` as a list (None: no restriction), or an ``EvaluationError``:
    not a collection of strings (a bare string is refused), empty, with repeats, or given
    together with ``subset``."""
    if task_ids is None:
        return None
    if isinstance(task_ids, str | bytes | dict) or not isinstance(task_ids, Iterable):
        raise EvaluationError(
            f"task_ids must be a list of task ids, got a {type(task_ids).__name__}"
        )
    ids = list(task_ids)  # a list, tuple, array or Series of ids: the order does not matter
    if subset is not None:
        raise EvaluationError(
            f"give subset ({subset!r}) or task_ids ({len(ids):,} ids), not both: task_ids "
            "selects exactly the tasks to score"
        )
    if not ids:
        raise EvaluationError("task_ids is empty; give at least one task id (None: all tasks)")
    wrong = [i for i in ids if not isinstance(i, str)]
    if wrong:
        raise EvaluationError(f"task_ids must be strings, got {one_line(repr(wrong[0]), 80)}")
    repeated = sorted({i for i in ids if ids.count(i) > 1}) if len(set(ids)) < len(ids) else []
    if repeated:
        raise EvaluationError(f"task_ids lists {repeated[:5]} more than once")
    return ids


def tasks_with_ids(frame: pd.DataFrame, task_ids: list[str], corpus: object) -> pd.DataFrame:
    """The rows of ``frame`` (the corpus's tasks) with these ids, in the corpus's order (so the
    chunks do not depend on the order given); an id the corpus does not hold is an
    ``EvaluationError`` naming it (``corpus``: the file, for the message)."""
    known = frame["task_id"].isin(task_ids)
    missing = sorted(set(task_ids) - set(frame.loc[known, "task_id"]))
    if missing:
        more = f" (and {len(missing) - 1:,} more of the {len(task_ids):,} given)"
        raise EvaluationError(
            f"{corpus} holds no task {missing[0]!r}{more if len(missing) > 1 else ''}; "
            "task_ids must name tasks of the corpus evaluated (kept pairs only)"
        )
    return frame[known].reset_index(drop=True)


def _class_name(model: object) -> str:
    return f"{type(model).__module__}.{type(model).__qualname__}"


def check_models(models: list[Forecaster | str]) -> list[str]:
    """The models' names, once each is known to be usable; a clear error naming the model if
    not (unknown baseline, name missing, not a string or not a safe file name, no predict)."""
    if not isinstance(models, list | tuple) or not models:
        raise ModelError(f"give a non-empty list of models, got {models!r}")
    labels = []
    for model in models:
        if isinstance(model, str):
            make_forecaster(model)  # unknown names fail before any work
            labels.append(model)
            continue
        klass = _class_name(model)
        if not hasattr(model, "name"):
            raise ModelError(f"model {klass} has no name attribute")
        if not isinstance(model.name, str):
            raise ModelError(f"model {klass}: name must be a string, got {model.name!r}")
        labels.append(safe_name(model.name, f"model {klass}: its name"))
        if not callable(getattr(model, "predict", None)):
            raise ModelError(f"model {model.name!r} ({klass}) has no predict method")
    duplicates = sorted({label for label in labels if labels.count(label) > 1})
    if duplicates:
        raise EvaluationError(f"model names must be unique, got {duplicates} twice or more")
    return labels


@dataclass(frozen=True)
class EvaluationRun:
    """The settings of one evaluation, as ``evaluate`` checked them (see there): the corpus
    file, the models and their labels (names in the results), the output folder, the task
    selection (``subset`` and its ``seed``, or ``task_ids``), the ``reference`` model, whether
    the ``relational`` pass runs, the ``model_timeout`` (s per batch; None: no limit), and how
    the run reports (``progress`` bars, ``log`` of its notes)."""

    corpus_path: Path
    models: tuple[Forecaster | str, ...]
    labels: tuple[str, ...]
    out: str | os.PathLike
    subset: float | None = None
    seed: int = 0
    reference: str = "naive"
    task_ids: tuple[str, ...] | None = None
    relational: bool = False
    model_timeout: float | None = DEFAULT_MODEL_TIMEOUT_S
    progress: bool = True
    log: Callable[[str], None] | None = None


def evaluate(
    corpus_path: str | os.PathLike,
    models: list[Forecaster | str],
    out: str | os.PathLike,
    subset: float | None = None,
    jobs: int = 1,
    reference: str = "naive",
    seed: int = 0,
    progress: bool = True,
    log: Callable[[str], None] | None = None,
    cluster=None,
    relational: bool = False,
    model_timeout: float | None = DEFAULT_MODEL_TIMEOUT_S,
    task_ids: Sequence[str] | None = None,
) -> EvaluationResult:
    """Score every model on the corpus (or a stratified subset, or the tasks ``task_ids``) and
    write the reports to ``out``.

    ``task_ids`` restricts the evaluation to exactly these tasks of the corpus (scored in the
    corpus's order, whatever the order given), instead of ``subset``: giving both, an empty
    list, repeats or an id the corpus does not hold (a dropped pair's, another corpus's) is an
    ``EvaluationError`` naming it. The manifest of ``out`` records the selection (its tasks'
    hash), so a folder is resumed only by the same selection.

    Each task's row holds the model's inference ``seconds`` and whether its forecast is
    ``imputed`` (``Forecast``); the leaderboard has their summaries ``seconds_per_task`` and
    ``num_imputed`` next to ``num_tasks`` and ``num_failed``. An imputed forecast is scored as
    the model's own: it is not a failure. ``seconds`` is measured, so it differs from run to
    run; every other output is the same bit for bit for the same corpus, models and options
    (``TIMING_COLUMNS``).

    ``log`` receives notes as they happen (a changed model or an unreadable chunk recomputed);
    they are also in ``result.notes``. Model failures do not raise: see ``result.failures``.
    ``cluster`` (a ``whatif_bench.cluster.DaskCluster`` or a connected ``distributed.Client``)
    scores the chunks on a dask cluster instead of ``jobs`` local processes: it is connected
    before ``out`` is created; this process reads the tasks' inputs and truths and sends them
    with each chunk, so the workers need no access to the corpus file. Local worker processes
    open the corpus once each and read only the inputs and truths of their chunks. The results
    are the same either way.

    ``relational=True`` also scores every history of the selection (a pair with a selected
    task) on the relational scores (docs/RELATIONAL.md): each model forecasts the history's
    Replay, Novel and Restraint inputs in one batch; ``relational.parquet`` holds a row per
    history and model, and the leaderboard and ``slices/relational_<axis>`` their summaries.

    Models cannot harm each other or the run (docs/RELIABILITY.md, section "Models cannot harm
    each other"): every model gets read-only input arrays (a write is a ValueError that fails
    that model's batch). A model that is not a shipped baseline runs each batch's ``predict``
    in a forked child process, killed after ``model_timeout`` seconds (default
    ``DEFAULT_MODEL_TIMEOUT_S``): then that batch and the model's later ones fail with
    "predict took longer than N s". A model that calls ``exit()``, ``os._exit`` or crashes
    its process (a segfault, a kill) fails that batch with the reason; the others go on.
    ``model_timeout=None`` runs every model in the worker process itself, without a limit
    (for a model that cannot run in a forked process, e.g. one that has initialised CUDA).

    A local worker process (``jobs`` > 1) that dies (the OOM killer, a kill, a model run in
    the worker itself that ends or crashes it) stops nothing: the chunks scored are kept and
    the rest runs again in new workers, the first chunk not scored alone first, then, if that
    dies too, each of its models alone. A model whose run alone kills its worker fails that
    chunk's tasks with the reason ("the worker process died (killed by signal 9 SIGKILL: out
    of memory, or killed)") and is not called again; a death that does not repeat loses
    nothing. After ``dispatch.MAX_WORKER_DEATHS`` deaths the rest runs one chunk at a time.
    Each death is a note. A Ctrl-C stops the whole run; the chunks scored are kept.
    """
    from whatif_bench.cluster import open_pool

    if model_timeout is not None and (
        isinstance(model_timeout, bool)
        or not isinstance(model_timeout, int | float)
        or not math.isfinite(model_timeout)
        or model_timeout <= 0
    ):
        raise EvaluationError(
            f"model_timeout must be a finite number of seconds > 0 (or None: no limit), got "
            f"{model_timeout!r}"
        )

    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise EvaluationError(f"jobs must be a positive integer, got {jobs!r}")
    if cluster is not None and jobs != 1:
        raise EvaluationError(f"give jobs ({jobs} local processes) or a cluster, not both")
    labels = check_models(models)
    if reference not in labels:
        raise EvaluationError(
            f"the reference model {reference!r} must be one of the models {labels}"
        )
    ids = check_task_ids(task_ids, subset)
    check_out_folder(out, corpus_path, create=False)
    run = EvaluationRun(
        corpus_path=Path(corpus_path),
        models=tuple(models),
        labels=tuple(labels),
        out=out,
        subset=subset,
        seed=seed,
        reference=reference,
        task_ids=None if ids is None else tuple(ids),
        relational=relational,
        model_timeout=model_timeout,
        progress=progress,
        log=log,
    )
    with open_pool(jobs, cluster) as pool:
        return _run_evaluation(run, pool)


@dataclass
class _Session:
    """What the passes of one evaluation share: its settings, the pool, the results folder,
    the corpus, and the models given up so far (label -> reason, ``model_calls.fatal``): a
    model given up in the tasks' pass is not called in the relational pass either."""

    run: EvaluationRun
    pool: WorkPool
    store: ChunkStore
    corpus: CorpusRef
    given_up: dict[str, str] = field(default_factory=dict)


def _run_evaluation(run: EvaluationRun, pool: WorkPool) -> EvaluationResult:
    """``evaluate`` once the settings are checked (``run``) and the pool is ready."""
    from whatif_bench.evaluation.report import write_reports

    notes: list[str] = []

    def note(message: str) -> None:
        notes.append(message)
        if run.log is not None:
            run.log(message)

    with contextlib.ExitStack() as stack:
        # this process's reader: the index here, and the chunks when they run in this process;
        # opened before the folder is made, so a corpus that cannot be read leaves nothing
        stack.callback(close_corpus_reader)
        corpus = CorpusRef.start(str(run.corpus_path))
        reader, _ = corpus.open()
        # a run that fails before writing anything removes the folders it made (only those)
        store = stack.enter_context(open_store(run.out, run.corpus_path, note))
        frame, attrs = reader.tasks_frame(), reader.attrs
        if frame.empty:
            raise EvaluationError(f"{run.corpus_path} holds no tasks")
        if run.task_ids is None:
            tasks = select_tasks(frame, run.subset, run.seed)
        else:
            tasks = tasks_with_ids(frame, list(run.task_ids), run.corpus_path)
        if run.subset is not None and run.log is not None:
            # said, but not a note of the result: nothing went wrong
            run.log(subset_words(run.subset, len(tasks), len(frame)))
        store.claim(manifest(run.corpus_path, attrs, tasks, run.subset, run.seed))
        store.prepare_models(run.models, run.labels)
        session = _Session(run, pool, store, corpus)
        per_task = _run_pass(session, TASKS, tasks, CHUNK)
        per_history = None
        if run.relational:
            per_history = _run_pass(session, RELATIONAL, tasks, RELATIONAL_CHUNK)
        board = write_reports(per_task, run.reference, store.out, per_history)
    return EvaluationResult(per_task, board, run.reference, store.out, notes, per_history)


def subset_words(subset: float, selected: int, total: int) -> str:
    """What ``--subset`` selected, and, when it is not every task, why its leaderboard is not
    the whole corpus's (each stratum keeps at least one task, so small strata weigh more)."""
    words = (
        f"--subset {subset:g} selects {selected:,} of {total:,} tasks "
        f"({selected / total:.1%}): ceil({subset:g} x size) of each stratum"
    )
    if selected < total:
        words += (
            "; at least one of every stratum, so small strata weigh more than in the whole "
            "corpus: compare its leaderboard with other runs of this --subset, not with the "
            "whole corpus's"
        )
    return words


def chunk_size(units: int, largest: int) -> int:
    """How many of a pass's ``units`` (tasks, or histories) make one chunk: ``largest`` for a
    run of many (the whole corpus), else about ``units / CHUNKS_WANTED`` but at least
    ``MIN_CHUNK``, so that a small run (a ``--subset``) is still cut into enough chunks for its
    progress bar to move while it works. A chunk is one ``predict`` batch of each model, and the
    unit of resuming; its size depends only on the selection, so a resumed run finds the same
    chunks."""
    return min(largest, max(MIN_CHUNK, math.ceil(units / CHUNKS_WANTED)))


def _run_pass(
    session: _Session, scoring: ScoringPass, tasks: pd.DataFrame, largest: int
) -> pd.DataFrame:
    """Run the pass ``scoring`` over its units of the selected ``tasks``, in chunks of at most
    ``largest`` units (``chunk_size``), resuming from the chunks saved (``ChunkStore.resume``);
    its table (one row per unit and model, joined with the units' columns) is written to the
    folder and returned. Its progress bar counts units, a chunk's worth at a time."""
    from tqdm import tqdm

    run, store = session.run, session.store
    units = scoring.units(tasks)
    ids = units[scoring.key].tolist()
    size = chunk_size(len(ids), largest)
    chunks = [ids[i : i + size] for i in range(0, len(ids), size)]
    done, todo = store.resume(scoring.layout, chunks, run.models, run.labels)
    bar = tqdm(
        total=sum(len(chunk.ids) for chunk in todo),
        desc=scoring.title,
        unit=scoring.unit,
        disable=not run.progress,
    )
    state = PassState(scoring, store, done, session.given_up, bar)
    save_all(_jobs(session, scoring), todo, state)
    parts = state.frames(list(run.labels), len(chunks))
    table = pd.concat(parts, ignore_index=True).merge(units, on=scoring.key, how="inner")
    store.write_table(scoring.table, table)
    return table


def _jobs(session: _Session, scoring: ScoringPass) -> ChunkJobs:
    """Where the chunks of ``scoring`` run, decided here for both passes.

    On a dask cluster (the workers may not see the corpus file) this process reads each
    chunk's inputs and truths, a few chunks ahead of the workers, and sends them with it
    (``_score_tasks``). Otherwise the chunk's ids go to this process (``jobs`` 1) or a local
    worker process, which reads them through its own reader of the corpus (``_score_chunk``).
    Each call carries the models given up when it is made (the calls are made lazily)."""
    run, given_up, corpus = session.run, session.given_up, session.corpus

    def calls() -> ModelCalls:
        return ModelCalls(run.model_timeout, dict(given_up))

    if session.pool.distributed:
        reader, units = corpus.open()

        def read_here(chunk: PendingChunk) -> tuple:
            inputs, truths = scoring.read(reader, chunk.ids, units)
            return (inputs, truths, chunk.models, calls(), scoring)

        return ChunkJobs(session.pool, _score_tasks, read_here)

    def by_ids(chunk: PendingChunk) -> tuple:
        return (corpus, chunk.ids, chunk.models, calls(), scoring)

    return ChunkJobs(session.pool, _score_chunk, by_ids)


def _score_chunk(
    corpus: CorpusRef,
    ids: list[str],
    models: list[Forecaster | str],
    calls: ModelCalls | None = None,
    scoring: ScoringPass = TASKS,
) -> list[pd.DataFrame]:
    """A local job: the chunk of units ``ids`` of ``scoring`` (default the tasks' pass) read
    through this process's reader of the ``corpus`` and scored with each model
    (``ScoringPass.score_chunk``): one frame of the pass's columns per model. The reference
    carries the covariate units found at the start, so a worker never loads the relationship
    registry to find them."""
    return scoring.score_chunk(corpus, ids, models, calls)


def _score_tasks(
    inputs: list[TaskInput],
    truths: list[Any],
    models: list[Forecaster | str],
    calls: ModelCalls | None = None,
    scoring: ScoringPass = TASKS,
) -> list[pd.DataFrame]:
    """A dask job: a chunk of ``scoring`` (default the tasks' pass) already read by the
    evaluation, scored with each model (``ScoringPass.score``)."""
    return scoring.score(inputs, truths, models, calls)
