"""The results folder of an evaluation, as a resumable store of chunks: identity record, lock,
``manifest.json``, a folder per model with its fingerprint, chunk files, and what a resumed run
finds already done. It knows the chunks' columns, not how they are scored.

Layout of ``<out>/``::

    .whatif-output.json              identity record, kind ``evaluation`` (``outputs``)
    .evaluation.lock                 held by the run writing into the folder
    manifest.json                    the corpus and task selection the folder belongs to
    per_task/<model>/model.json      the model's fingerprint (``forecasters.fingerprint``)
    per_task/<model>/chunk-NNNNN.parquet         a chunk of the tasks' pass, one model's rows
    per_task/<model>/chunk-relational-NNNNN.parquet   the same of the relational pass
    per_task.parquet, relational.parquet, ...    the tables of a finished run (``write_table``)

A chunk already on disk is not computed again; a model whose fingerprint changed has its chunks
deleted; a chunk that cannot be read (truncated, empty), holds other ids or another model, or
has failed rows is computed again; a chunk of an older format (``ChunkLayout.legacy_columns``)
is read with its missing columns filled in, and a note says so.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from whatif_bench.evaluation.errors import EvaluationError
from whatif_bench.evaluation.forecast_checks import one_line
from whatif_bench.evaluation.forecasters import Forecaster, fingerprint
from whatif_bench.outputs import (
    IDENTITY,
    OutputError,
    OutputLockedError,
    atomic_output,
    check_folder_kind,
    check_output_path,
    lock_path,
    make_folder,
    os_error,
    output_lock,
    read_identity,
    write_identity,
    write_text_atomic,
)

EVALUATION = "evaluation"  # the kind of an evaluation folder's identity record (outputs)
LOCK_NAME = lock_path(Path("evaluation")).name  # what ``lock_folder`` leaves in the folder
NEW_FOLDER = "choose a new or empty folder (or an earlier whatif evaluate's, to resume it)"
MANIFEST = "manifest.json"


def chunk_name(index: int, kind: str = "") -> str:
    """The file name of chunk ``index`` of a pass: ``chunk-00003.parquet`` (the tasks' pass,
    ``kind`` empty) or ``chunk-relational-00003.parquet`` (``kind`` ``"relational"``)."""
    return f"chunk-{kind + '-' if kind else ''}{index:05d}.parquet"


@dataclass(frozen=True)
class ChunkLayout:
    """What a pass's chunk files hold: ``columns`` (the first the unit's id, then ``model``; a
    ``failed`` column, empty when scored), their ``dtypes`` (others as pandas infers them),
    the ``kind`` in the file names (``chunk_name``), and an older format still read:
    ``legacy_columns``, completed with ``legacy_fill`` (column -> value)."""

    kind: str
    columns: tuple[str, ...]
    dtypes: Mapping[str, Any] = field(default_factory=dict)
    legacy_columns: tuple[str, ...] | None = None
    legacy_fill: Mapping[str, Any] = field(default_factory=dict)

    def frame(self, rows: list[dict[str, Any]]) -> pd.DataFrame:
        """Rows (dicts with ``columns``) as a chunk's frame, with the column types.

        Built column by column, each typed column made as its type: casting a frame of the
        rows (``astype``) cost about 4 ms a chunk, more than scoring a chunk of ``naive``."""
        return pd.DataFrame(
            {
                name: (
                    np.array([row[name] for row in rows], dtype=self.dtypes[name])
                    if name in self.dtypes
                    else [row[name] for row in rows]
                )
                for name in self.columns
            }
        )


class PendingChunk(NamedTuple):
    """A chunk some models still need: its ``number`` (the index of the chunk in the pass),
    its units' ``ids`` and ``pending``, the ``(model, label)`` of each model without a saved
    result of it."""

    number: int
    ids: list[str]
    pending: list[tuple[Forecaster | str, str]]

    @property
    def models(self) -> list[Forecaster | str]:
        """The models of ``pending``."""
        return [model for model, _ in self.pending]


def manifest(
    corpus_path: Path, attrs: dict, tasks: pd.DataFrame, subset: float | None, seed: int
) -> dict[str, Any]:
    """What ties a results folder to one evaluation: the corpus (its resolved path, hashes and
    seed, from its file attributes ``attrs``) and the task selection (``subset``, its ``seed``,
    the number and SHA-256 of the selected ``tasks``' ids)."""
    digest = hashlib.sha256("\n".join(tasks["task_id"]).encode()).hexdigest()
    return {
        "corpus": str(corpus_path.resolve()),
        "corpus_baselines_hash": attrs.get("baselines_hash"),
        "corpus_registry_hash": attrs.get("registry_hash"),
        "corpus_seed": attrs.get("master_seed"),
        "subset": subset,
        "subset_seed": seed,
        "tasks": len(tasks),
        "tasks_hash": digest,
    }


def read_manifest(path: Path) -> dict:
    """A JSON object from ``path``, or ``EvaluationError`` naming the file."""
    try:
        value = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        why = "empty" if path.is_file() and path.stat().st_size == 0 else one_line(exc, 120)
        raise EvaluationError(
            f"{path}: not a readable evaluation manifest ({why}); delete it or use a new --out"
        ) from None
    if not isinstance(value, dict):
        raise EvaluationError(
            f"{path}: not an evaluation manifest (a JSON object); delete it or use a new --out"
        )
    return value


def check_out_folder(
    out: str | os.PathLike, corpus_path: str | os.PathLike, create: bool = True
) -> Path:
    """``out`` as a folder that exists and can be written, or a clear ``OutputError``;
    ``create=False`` checks it without creating anything.

    An existing folder must be empty (but for the lock file ``lock_folder`` leaves) or hold
    this toolkit's identity record of kind ``evaluation`` (``outputs.read_identity``: an
    evaluation to resume); a folder of anyone else's, or another whatif output (an export, a
    stream, a diagnosis), is refused before anything is written in it. A folder without the
    record gets it when it is created (``create``), so other commands never replace it.
    """
    if str(out).strip() == "":
        raise OutputError("the output folder (--out) is empty; give a folder for the results")
    out = check_output_path(out, inputs=[corpus_path], folder=True)
    if out.is_dir():
        check_folder_kind(out, "whatif evaluate", EVALUATION, "write into", [LOCK_NAME], NEW_FOLDER)
    if not create:
        return out
    make_folder(out)
    if read_identity(out) is None:
        try:
            write_identity(out, EVALUATION)
        except OSError as exc:
            raise os_error(exc, out) from None
    return out


def new_folders(out: str | os.PathLike) -> list[Path]:
    """``out`` and those of its parents that do not exist yet, deepest first: the folders
    ``check_out_folder`` is about to make."""
    made = []
    for folder in (Path(out), *Path(out).parents):
        if os.path.lexists(folder):
            break
        made.append(folder)
    return made


def remove_unused(out: Path, made: list[Path]) -> bool:
    """Remove the folders ``made`` by this run (``new_folders``) while ``out`` holds nothing
    but its identity record and lock file; a folder holding anything else is kept. Returns
    False (an exit callback that never swallows the exception)."""
    if not made:
        return False
    try:
        names = {entry.name for entry in out.iterdir()}
    except OSError:
        return False
    if not names <= {IDENTITY, LOCK_NAME}:
        return False
    for name in names:
        with contextlib.suppress(OSError):
            (out / name).unlink()
    for folder in made:
        try:
            folder.rmdir()  # only ever an empty folder
        except OSError:
            break
    return False


@contextlib.contextmanager
def lock_folder(out: Path) -> Iterator[None]:
    """Hold ``out/.evaluation.lock`` so two evaluations never write the same folder."""
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(output_lock(out / "evaluation"))
        except OutputLockedError:
            raise OutputLockedError(
                f"{out}: another whatif evaluate is writing into this folder; wait for it to "
                "finish or choose another --out"
            ) from None
        yield


@contextlib.contextmanager
def open_store(
    out: str | os.PathLike, corpus_path: str | os.PathLike, note: Callable[[str], None]
) -> Iterator[ChunkStore]:
    """The store of the folder ``out`` (made if need be, ``check_out_folder``), locked while
    it is open (``lock_folder``). A run that fails before anything but the identity record is
    written in it removes the folders it made (only those: ``remove_unused``). ``note``
    receives why saved chunks are not used (``ChunkStore``)."""
    made = new_folders(out)
    folder = check_out_folder(out, corpus_path)
    with contextlib.ExitStack() as stack:
        stack.push(lambda failed, *_: failed is not None and remove_unused(folder, made))
        stack.enter_context(lock_folder(folder))
        yield ChunkStore(folder, note)


class ChunkStore:
    """The chunks of one evaluation in the folder ``out`` (checked and locked by
    ``open_store``), for every pass (``ChunkLayout``) and model: what is saved, what is left,
    and writing them. ``note`` receives why a saved chunk is computed again, or read in an
    older format."""

    def __init__(self, out: Path, note: Callable[[str], None]) -> None:
        self.out = out
        self.note = note

    def claim(self, manifest: dict[str, Any]) -> None:
        """Tie the folder to the evaluation of ``manifest`` (``manifest``): write it into a new
        folder; a folder of another evaluation (corpus or selection differ) is an
        ``EvaluationError``."""
        path = self.out / MANIFEST
        if path.exists():
            if read_manifest(path) != manifest:
                raise EvaluationError(
                    f"{self.out} holds results of another evaluation (corpus or selection "
                    "differ); use a new --out"
                )
        else:
            write_text_atomic(path, json.dumps(manifest, indent=1), lock=False)

    def folder(self, label: str) -> Path:
        """The folder of the model named ``label``: ``per_task/<label>``."""
        return self.out / "per_task" / label

    def chunk_path(self, label: str, index: int, layout: ChunkLayout) -> Path:
        """The file of chunk ``index`` of model ``label`` in the pass of ``layout``."""
        return self.folder(label) / chunk_name(index, layout.kind)

    def prepare_models(self, models: Sequence[Forecaster | str], labels: Sequence[str]) -> None:
        """Make each model's folder hold results of this very model: a changed fingerprint
        deletes its old chunks of every pass (they were scored by another version of it)."""
        for model, label in zip(models, labels, strict=True):
            self._prepare_model(model, label)

    def _prepare_model(self, model: Forecaster | str, label: str) -> None:
        folder = self.folder(label)
        make_folder(folder)
        current = fingerprint(model)
        meta = folder / "model.json"
        try:
            stored = json.loads(meta.read_text())
        except (OSError, ValueError):
            stored = None
        if isinstance(stored, dict) and stored.get("id") == current["id"]:
            return
        old = sorted(folder.glob("chunk-*.parquet"))
        if old:
            was = stored.get("id") if isinstance(stored, dict) else "unknown"
            self.note(
                f"model {label!r} changed since its results in {folder} were written "
                f"(fingerprint {was} -> {current['id']}); recomputing them"
            )
            for path in old:
                path.unlink()
        write_text_atomic(meta, json.dumps(current, indent=1) + "\n", lock=False)

    def read(
        self, label: str, index: int, ids: list[str], layout: ChunkLayout
    ) -> tuple[pd.DataFrame | None, str | None, bool]:
        """Chunk ``index`` of model ``label`` if it is on disk, complete and clean (its ids are
        ``ids``, in order; no failed row); else None (compute it) and why, if notable; and
        whether it is of the older format (``layout.legacy_columns``, read with
        ``legacy_fill``: the same scores as a new run's)."""
        path = self.chunk_path(label, index, layout)
        if not path.exists():
            return None, None, False
        try:
            frame = pd.read_parquet(path)
        except Exception as exc:  # truncated, empty or not parquet at all
            return None, f"{path}: unreadable ({one_line(exc, 120)}); recomputing it", False
        legacy = layout.legacy_columns is not None and list(frame.columns) == list(
            layout.legacy_columns
        )
        if legacy:
            fill = layout.legacy_fill
            frame = frame.assign(**fill).astype({name: layout.dtypes[name] for name in fill})
        if (
            list(frame.columns) != list(layout.columns)
            or frame[layout.columns[0]].tolist() != ids
            or set(frame["model"]) != {label}
        ):
            return None, f"{path}: does not hold this chunk's results; recomputing it", False
        if (frame["failed"] != "").any():
            return None, None, False  # failed tasks are retried
        return frame, None, legacy

    def resume(
        self,
        layout: ChunkLayout,
        chunks: list[list[str]],
        models: Sequence[Forecaster | str],
        labels: Sequence[str],
    ) -> tuple[dict[tuple[str, int], pd.DataFrame], list[PendingChunk]]:
        """The chunks of the pass of ``layout`` already saved (``(label, index) -> frame``) and
        the work left: a ``PendingChunk`` for every chunk (its ids ``chunks[index]``) some
        model still needs, in chunk order."""
        done: dict[tuple[str, int], pd.DataFrame] = {}
        todo = []
        legacy: dict[str, int] = {}  # label -> chunks of the older format
        for index, chunk in enumerate(chunks):
            pending = []
            for model, label in zip(models, labels, strict=True):
                frame, why, old = self.read(label, index, chunk, layout)
                if why:
                    self.note(why)
                if frame is None:
                    pending.append((model, label))
                else:
                    done[label, index] = frame
                    legacy[label] = legacy.get(label, 0) + old
            if pending:
                todo.append(PendingChunk(index, chunk, pending))
        for label, count in legacy.items():
            if count:
                self.note(
                    f"model {label!r}: {count:,} saved chunk(s) in {self.folder(label)} "
                    "predate per-task timings; their tasks are kept with seconds NaN (left out "
                    "of seconds_per_task) and imputed False"
                )
        return done, todo

    def write(self, label: str, index: int, layout: ChunkLayout, frame: pd.DataFrame) -> None:
        """Write chunk ``index`` of model ``label`` atomically (no lock of its own: the folder
        lock is already held)."""
        with atomic_output(self.chunk_path(label, index, layout), lock=False) as tmp:
            frame.to_parquet(tmp, index=False)

    def write_table(self, name: str, frame: pd.DataFrame) -> None:
        """Write a finished table ``<out>/<name>`` (Parquet) atomically."""
        with atomic_output(self.out / name, lock=False) as tmp:
            frame.to_parquet(tmp, index=False)
