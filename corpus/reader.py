"""Reading a corpus: filter by axes, iterate, or fetch one task by id in O(1).

A task id is ``<simulator>/<target>/K<k>-<C>-L<l>-<E>/<future>``, e.g.
``sumo/flow_loop_e_0_near/K3-C2-L128-Emax/novel``. All task arrays are float32; the exact
float64 baselines are in the file too.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from whatif_bench.corpus import axes
from whatif_bench.corpus.axes import FUTURES, HistoryLayout
from whatif_bench.corpus.fileformat import (
    FORMAT,
    FORMAT_VERSION,
    PAIR_COLUMNS,
    READABLE_VERSIONS,
    REQUIRED,
)
from whatif_bench.corpus.task import Task, TaskInput, window_start_time
from whatif_bench.errors import WhatIfError

if TYPE_CHECKING:
    from whatif_bench.corpus.recipe import Recipe

# the hidden per-process name ``whatif generate`` writes before renaming (outputs.temporary_path)
_TEMPORARY_NAME = re.compile(r"\..+\.partial(-\d+)?")


def recipe_record(recipe: Recipe, future: str, shapes: list[str], base_values: list[float]) -> dict:
    """A task's recipe as plain JSON-able values (``Task.recipe``).

    ``shapes`` and ``base_values`` are those of the task's K covariates, in order.
    """
    return {
        "window_start": recipe.window_start,
        "event_starts": list(recipe.layout.starts),
        "event_length": recipe.layout.event_length,
        # the future event's own length (a Novel one lasts at most 2 H; docs/METHOD.md, section 5)
        "future_event_length": recipe.layout.future_event_length(future),
        "directions": recipe.directions.tolist(),
        "factors": recipe.factors.tolist(),
        "replay_source": recipe.replay_source,
        "future_factors": (
            recipe.replay_factors.tolist()
            if future == "replay"
            else recipe.novel_factors.tolist()
            if future == "novel"
            else [1.0] * len(shapes)  # Restraint: every factor 1
        ),
        "shapes": list(shapes),
        "base_values": list(base_values),
    }


# the array datasets of /data a task reads its slices of
TASK_ARRAYS = ("history_target", "history_covariates", "future_target", "future_covariates")
# tasks read together when a view is iterated: at most about 10 MiB of arrays (64 tasks of
# 8,000 history steps and 5 covariates)
ITER_CHUNK = 64


def _own(values: np.ndarray) -> np.ndarray:
    """``values`` itself when it owns its memory, else a copy (a task never keeps a block of
    its neighbours' arrays alive)."""
    return values if values.base is None else values.copy()


class CorpusError(WhatIfError):
    """A corpus file is missing, incomplete, of another format, or damaged."""


def check_corpus_file(path: str | os.PathLike) -> Path:
    """``path`` as a Path if it names a regular file, else the ``CorpusError`` saying why:
    an empty path (never taken for the current folder), a FIFO, a device, a socket or a
    symbolic link loop (``outputs.input_problem``, found without opening it: a FIFO would
    block), a folder, or nothing there."""
    from whatif_bench.outputs import input_problem, refuse_empty

    path = Path(refuse_empty(path, "corpus file", CorpusError))
    problem = input_problem(path, "corpus")
    if problem is not None:
        raise CorpusError(problem)
    if path.is_dir():
        raise CorpusError(f"{path}: is a folder, not a corpus file")
    if not path.is_file():
        raise CorpusError(f"{path}: no such corpus file")
    return path


class Corpus:
    """A corpus file, or a filtered view of one."""

    def __init__(
        self,
        path: str | os.PathLike,
        _index: pd.DataFrame | None = None,
        _futures: tuple[str, ...] | None = None,
        _file=None,
    ) -> None:
        import h5py

        self.path = Path(path)
        if _file is None:
            if _TEMPORARY_NAME.fullmatch(self.path.name):
                raise CorpusError(
                    f"{self.path}: the temporary file of an unfinished whatif generate run, "
                    "not a corpus"
                )
            check_corpus_file(path)
            try:
                _file = h5py.File(self.path, "r")
            except OSError as exc:
                raise CorpusError(f"{self.path}: not a readable HDF5 file ({exc})") from None
        self._h5 = _file
        if _index is None:
            try:
                _index = self._read("its file attributes and index", self._open_checks)
            except BaseException:
                _file.close()
                raise
        self.pairs = _index
        # the file's future types (Replay, Novel and any optional ones it was generated with)
        self.futures = self._stored_futures() if _futures is None else _futures
        # pair id -> row (numpy strings: iterating the pandas column costs ten times more)
        self._rows = {pid: i for i, pid in enumerate(self.pairs["pair_id"].to_numpy().tolist())}
        self._relationships: dict[tuple[str, str], dict] = {}
        self._recipe_arrays: tuple[dict, dict] | None = None
        self._baselines: dict[tuple[str, str], np.ndarray] = {}
        self._datasets: dict[str, tuple[Any, int]] = {}  # name -> (dataset, length)
        self._infos: dict[tuple[str, str], dict] = {}
        self._columns: dict[str, np.ndarray] = {}  # pair columns as numpy (_pair_columns)

    # ---- layout ----------------------------------------------------------------------
    def _damaged(self, what: str) -> CorpusError:
        return CorpusError(f"{self.path}: damaged corpus, {what}")

    def _open_checks(self) -> pd.DataFrame:
        """Format, completeness and layout of a newly opened file; returns its index."""
        if self._h5.attrs.get("format") != FORMAT:
            raise CorpusError(f"{self.path}: not a WhatIf-Bench corpus")
        self._check_version()
        if not bool(self._h5.attrs.get("complete", False)):
            raise CorpusError(
                f"{self.path}: incomplete corpus (an interrupted run?); generate it again"
            )
        self._check_layout()
        return self._read_index()

    def _check_version(self) -> None:
        """The file's ``format_version`` is one this reader reads (``READABLE_VERSIONS``)."""
        readable = " or ".join(str(v) for v in READABLE_VERSIONS)
        if "format_version" not in self._h5.attrs:
            raise CorpusError(
                f"{self.path}: corpus without a format version (file attribute 'format_version'); "
                f"this toolkit reads format version {readable}"
            )
        version = self._h5.attrs["format_version"]
        if (
            isinstance(version, np.integer | int)
            and not isinstance(version, bool | np.bool_)
            and int(version) in READABLE_VERSIONS
        ):
            return
        shown = version.item() if isinstance(version, np.generic) else version
        if isinstance(shown, bytes):
            shown = shown.decode(errors="replace")
        newer = isinstance(shown, int) and shown > FORMAT_VERSION
        older = isinstance(shown, int) and 0 < shown < FORMAT_VERSION
        hint = (
            "; a newer whatif-bench wrote it: upgrade the toolkit, or generate the corpus again"
            if newer
            else "; an older whatif-bench made it by an earlier method (docs/METHOD.md): "
            "generate the corpus again"
            if older
            else "; generate the corpus again"
        )
        raise CorpusError(
            f"{self.path}: corpus format version {shown!r}, but this toolkit reads format "
            f"version {readable}{hint}"
        )

    def _check_layout(self) -> None:
        """Every group, dataset and attribute the reader needs exists (names only: cheap)."""
        h5 = self._h5
        if "master_seed" not in h5.attrs:
            raise self._damaged("missing file attribute 'master_seed'")
        for group in ("pairs", "baselines", *REQUIRED):
            if group not in h5:
                raise self._damaged(f"missing group /{group}")
        for column in PAIR_COLUMNS:
            if column not in h5["pairs"]:
                raise self._damaged(f"missing dataset /pairs/{column}")
        for group, names in REQUIRED.items():
            for name in names:
                if name not in h5[group]:
                    raise self._damaged(f"missing dataset /{group}/{name}")

    def _check_targets(self, pairs: pd.DataFrame) -> None:
        """Every target of the index has its embedded baseline and attributes.

        Each simulator's group is listed once and the targets' attributes are looked up by
        name (``h5a.exists``): opening each target's dataset object to read its ``attrs``
        cost about 0.15-0.25 ms a target, a fifth of the default corpus's opening."""
        import h5py

        baselines = self._h5["baselines"]
        groups: dict[str, tuple[Any, set[str]]] = {}
        for simulator, target in (
            pairs[["simulator", "target"]].drop_duplicates().itertuples(index=False)
        ):
            where = f"/baselines/{simulator}"
            if simulator not in groups:
                if simulator not in baselines:
                    raise self._damaged(f"missing group {where}")
                group = baselines[simulator]
                for attr in ("interval_s", "start"):
                    if attr not in group.attrs:
                        raise self._damaged(f"missing attribute {attr!r} of {where}")
                groups[simulator] = (group, set(group))
            group, members = groups[simulator]
            if target not in members:
                raise self._damaged(f"missing dataset {where}/{target}")
            for attr in ("unit", "relationship"):
                if not h5py.h5a.exists(group.id, attr.encode(), obj_name=target.encode()):
                    raise self._damaged(f"missing attribute {attr!r} of {where}/{target}")

    def _stored_futures(self) -> tuple[str, ...]:
        """The future types the file lists in its ``axes`` attribute (default: the table's);
        one this toolkit does not know is a ``CorpusError``."""
        text = self._h5.attrs.get("axes")
        try:
            listed = json.loads(text).get("futures") if isinstance(text, str | bytes) else None
        except (ValueError, AttributeError):
            listed = None
        if not listed:
            return FUTURES
        unknown = [f for f in listed if f not in axes.future_choices()]
        if unknown or not set(FUTURES) <= set(listed):
            raise self._damaged(f"the axes attribute lists future types {listed}")
        return tuple(f for f in axes.future_choices() if f in listed)

    # ---- index ---------------------------------------------------------------------
    def _read_index(self) -> pd.DataFrame:
        try:
            group = self._h5["pairs"]
            columns = {}
            for name, dataset in group.items():
                values = dataset[()]
                if values.dtype.kind == "O":
                    values = values.astype(str)
                columns[name] = values
        except KeyError as exc:
            raise self._damaged(f"missing {exc}") from None
        except OSError as exc:
            raise self._damaged(f"cannot read /pairs ({exc})") from None
        lengths = {len(np.atleast_1d(values)) for values in columns.values()}
        if len(lengths) > 1:
            raise self._damaged("the /pairs columns have different lengths")
        frame = pd.DataFrame(columns)
        repeated = frame["pair_id"][frame["pair_id"].duplicated()]
        if len(repeated):
            raise self._damaged(f"pair id {repeated.iloc[0]!r} appears more than once")
        self._check_targets(frame)
        frame.insert(0, "row", np.arange(len(frame)))
        return frame

    @property
    def attrs(self) -> dict:
        """File-level provenance: version, config, seed, baselines and registry hashes."""
        return self._read(
            "its file attributes",
            lambda: {k: (v.item() if hasattr(v, "item") else v) for k, v in self._h5.attrs.items()},
        )

    def tasks_frame(self) -> pd.DataFrame:
        """One row per kept task of this view (a pandas view of the index)."""
        kept = self.pairs[self.pairs["kept"]]
        frames = []
        for future in self.futures:
            frame = kept.copy()
            frame.insert(0, "future", future)
            frame.insert(0, "task_id", frame["pair_id"] + "/" + future)
            frames.append(frame)
        return pd.concat(frames, ignore_index=True) if frames else kept.iloc[0:0]

    def filter(self, target=None, **values) -> Corpus:
        """A view restricted to the given values (each a value or a list of values) of the
        target and of the axes, named as in the axis table: ``simulator``, ``future``, ``K``,
        ``C``, ``ell``, ``E``. An unknown axis or future type is a ``CorpusError``."""

        def as_list(value):
            return (
                None
                if value is None
                else (list(value) if isinstance(value, list | tuple | set) else [value])
            )

        known = axes.axis_columns()
        wrong = sorted(set(values) - set(known))
        if wrong:
            raise CorpusError(f"unknown axis {wrong}; filter by target or {list(known)}")
        pairs = self.pairs
        wanted = [("target", target)] + [
            (a.column, values.get(a.name)) for a in axes.table() if a.per_pair
        ]
        for column, value in wanted:
            chosen = as_list(value)
            if chosen is not None:
                pairs = pairs[pairs[column].isin(chosen)]
        future = values.get("future")
        futures = (
            self.futures
            if future is None
            else tuple(f for f in self.futures if f in as_list(future))
        )
        known_futures = self._stored_futures()
        unknown = set(as_list(future) or []) - set(known_futures)
        if unknown:
            raise CorpusError(
                f"unknown future type(s) {sorted(unknown)}; this corpus holds {list(known_futures)}"
            )
        return Corpus(self.path, pairs.reset_index(drop=True), futures, self._h5)

    def __len__(self) -> int:
        return int(self.pairs["kept"].sum()) * len(self.futures)

    def task_ids(self) -> list[str]:
        return self.tasks_frame()["task_id"].tolist()

    def __iter__(self) -> Iterator[Task]:
        """The view's tasks in ``task_ids()`` order, each as ``self[task_id]`` gives it
        (``tasks``)."""
        return self.tasks(self.task_ids())

    def tasks(self, task_ids: Sequence[str]) -> Iterator[Task]:
        """``self[task_id]`` for each of ``task_ids`` in their order, read as iterating reads.

        ``ITER_CHUNK`` tasks are read together: one read per array dataset when they lie close
        in the file (``_slices``), then each task gets its own copy of its arrays. An unknown
        or dropped task is the ``KeyError`` ``self[task_id]`` raises, when its chunk is
        reached."""
        columns = self._pair_columns()
        ids = list(task_ids)
        for first in range(0, len(ids), ITER_CHUNK):
            chunk = ids[first : first + ITER_CHUNK]
            places = self._locate(chunk)
            rows = [{name: values[row] for name, values in columns.items()} for row, _ in places]
            futures = [task_id.rpartition("/")[2] for task_id in chunk]
            spans = [
                self._array_places(row, future) for row, future in zip(rows, futures, strict=True)
            ]
            read = {
                name: self._slices(name, [s[name][0] for s in spans], [s[name][1] for s in spans])
                for name in TASK_ARRAYS
            }
            for i, (row, future) in enumerate(zip(rows, futures, strict=True)):
                arrays = {name: _own(read[name][i]) for name in TASK_ARRAYS}
                yield self._task(row, future, arrays)

    # ---- one task ----------------------------------------------------------------------
    def __getitem__(self, task_id: str) -> Task:
        pair_id, _, future = task_id.rpartition("/")
        if future not in self.futures or pair_id not in self._rows:
            raise KeyError(f"no task {task_id!r} in this corpus view")
        position = self._rows[pair_id]
        row = {name: values[position] for name, values in self._pair_columns().items()}
        if not row["kept"]:
            raise KeyError(f"task {task_id!r} was dropped by verification ({row['drop_reason']})")
        return self._task(row, future)

    # ---- what a model may see, and the truth (fev's get_input_data / get_ground_truth) -----
    def task_inputs(
        self,
        task_ids: Sequence[str],
        covariate_units: dict[tuple[str, str], dict[str, str]] | None = None,
    ) -> list[TaskInput]:
        """``[self[i].input_data(units) for i in task_ids]``, read without the ground truth,
        the counterfactual or the recipe.

        ``covariate_units`` maps (simulator, target) to the units of its covariates by name
        (the file stores only the target's; see ``evaluation.runner.covariate_units``).
        An unknown or dropped task is a ``KeyError``, as ``corpus[task_id]`` raises. A Restraint
        task's future covariates are each covariate's base value (``restraint_inputs``)."""
        places = self._locate(task_ids)
        inputs = self._inputs(task_ids, places, covariate_units)
        for index, (row, future) in enumerate(places):
            if future == len(FUTURES):  # restraint: nothing stored, derived from the pair
                inputs[index] = self._restraint(inputs[index], row)
        return inputs

    def _inputs(
        self,
        task_ids: Sequence[str],
        places: list[tuple[int, int]],
        covariate_units: dict[tuple[str, str], dict[str, str]] | None,
    ) -> list[TaskInput]:
        """The stored inputs at ``places`` (``_locate``; a Restraint place reads Replay's)."""
        columns = self._pair_columns()
        names = ("history_target", "history_covariates", "future_covariates")
        offsets: dict[str, list[int]] = {name: [] for name in names}
        sizes: dict[str, list[int]] = {name: [] for name in names}
        shapes = []  # (K, C, H) of each task
        for row, future in places:
            k, context = int(columns["k"][row]), int(columns["context"][row])
            prediction = int(columns["prediction"][row])
            shapes.append((k, context, prediction))
            for name, offset, size in (
                ("history_target", 0, context),
                ("history_covariates", 0, k * context),
                ("future_covariates", (future % len(FUTURES)) * k * prediction, k * prediction),
            ):
                offsets[name].append(int(columns[f"{name}_offset"][row]) + offset)
                sizes[name].append(size)
        arrays = {name: self._slices(name, offsets[name], sizes[name]) for name in names}
        units = covariate_units or {}
        inputs = []
        for index, (task_id, (row, _)) in enumerate(zip(task_ids, places, strict=True)):
            simulator, target = str(columns["simulator"][row]), str(columns["target"][row])
            k, context, prediction = shapes[index]
            info = self._target_info(simulator, target)
            summary = self._relationship_summary(simulator, target)
            inputs.append(
                TaskInput.from_parts(
                    arrays["history_target"][index],
                    arrays["history_covariates"][index].reshape(k, context),
                    arrays["future_covariates"][index].reshape(k, prediction),
                    task_id=task_id,
                    start=window_start_time(
                        info["start"], int(columns["window_start"][row]), info["interval_s"]
                    ),
                    interval_s=info["interval_s"],
                    covariates=tuple(summary["covariates"][:k]),
                    covariate_units=units.get((simulator, target)),
                    target=target,
                    target_unit=info["unit"],
                )
            )
        return inputs

    def ground_truths(self, task_ids: Sequence[str]) -> list[np.ndarray]:
        """``[self[i].ground_truth() for i in task_ids]``: each task's future target (H,)
        float32, read alone."""
        columns = self._pair_columns()
        offsets, sizes, places = [], [], self._locate(task_ids)
        stored = [(row, future) for row, future in places if future < len(FUTURES)]
        for row, future in stored:
            prediction = int(columns["prediction"][row])
            offsets.append(int(columns["future_target_offset"][row]) + future * prediction)
            sizes.append(prediction)
        read = iter(self._slices("future_target", offsets, sizes))
        # a Restraint task's truth is its counterfactual: the embedded baseline
        return [
            next(read) if future < len(FUTURES) else self._counterfactual(row)
            for row, future in places
        ]

    # ---- the Restraint future: no covariate moves (derived, nothing stored) ----------------
    def restraint_inputs(
        self,
        pair_ids: Sequence[str],
        covariate_units: dict[tuple[str, str], dict[str, str]] | None = None,
    ) -> list[TaskInput]:
        """The Restraint input of each pair, whether or not the corpus lists Restraint tasks:
        its history, with every future covariate at its base value over the horizon (float32,
        as stored covariates are), task id ``<pair id>/restraint``. An unknown or dropped pair
        is a ``KeyError``."""
        places = self._pair_places(pair_ids)
        ids = [f"{p}/{axes.RESTRAINT}" for p in pair_ids]
        inputs = self._inputs(ids, places, covariate_units)
        return [self._restraint(given, row) for given, (row, _) in zip(inputs, places, strict=True)]

    def _restraint(self, given: TaskInput, row: int) -> TaskInput:
        """``given`` (a pair's stored input) with every future covariate at its base value."""
        columns = self._pair_columns()
        simulator, target = str(columns["simulator"][row]), str(columns["target"][row])
        base = self._relationship_summary(simulator, target)["base_value"]
        values = np.array([base[name] for name in given.covariate_names], dtype=np.float64)
        future = np.repeat(values[:, None], given.prediction_length, axis=1)
        return dataclasses.replace(given, future_covariates=future.astype(np.float32))

    def counterfactual_futures(self, pair_ids: Sequence[str]) -> list[np.ndarray]:
        """Each pair's target over the horizon with no future event (H,) float32: the embedded
        baseline there, the Restraint future's truth (``Task.counterfactual_future``)."""
        return [self._counterfactual(row) for row, _ in self._pair_places(pair_ids)]

    def _counterfactual(self, row: int) -> np.ndarray:
        columns = self._pair_columns()
        simulator, target = str(columns["simulator"][row]), str(columns["target"][row])
        begin = int(columns["window_start"][row]) + int(columns["context"][row])
        baseline = self._baseline_cached(simulator, target)
        return baseline[begin : begin + int(columns["prediction"][row])].astype(np.float32)

    def _pair_places(self, pair_ids: Sequence[str]) -> list[tuple[int, int]]:
        """(row, Restraint's place) of each pair, whatever the view's future types."""
        kept = self._pair_columns()["kept"]
        places = []
        for pair_id in pair_ids:
            if pair_id not in self._rows:
                raise KeyError(f"no pair {pair_id!r} in this corpus view")
            row = self._rows[pair_id]
            if not kept[row]:
                reason = self.pairs["drop_reason"].iloc[row]
                raise KeyError(f"pair {pair_id!r} was dropped by verification ({reason})")
            places.append((row, len(FUTURES)))
        return places

    def _locate(self, task_ids: Sequence[str]) -> list[tuple[int, int]]:
        """(row of ``pairs``, index of the future in ``FUTURES``, ``len(FUTURES)`` for
        Restraint) of each task id."""
        kept = self._pair_columns()["kept"]
        places = []
        for task_id in task_ids:
            pair_id, _, future = task_id.rpartition("/")
            if future not in self.futures or pair_id not in self._rows:
                raise KeyError(f"no task {task_id!r} in this corpus view")
            row = self._rows[pair_id]
            if not kept[row]:
                reason = self.pairs["drop_reason"].iloc[row]
                raise KeyError(f"task {task_id!r} was dropped by verification ({reason})")
            places.append((row, axes.future_choices().index(future)))
        return places

    def _pair_columns(self) -> dict[str, np.ndarray]:
        """Every column of ``pairs`` as a numpy array (read once). A row of them holds the
        values ``pairs.iloc[row]`` holds (numpy scalars, ``str``): about 20 µs per task on the
        default corpus, against about 1 ms for the pandas row and its lookups, which cost more
        than reading the task's arrays."""
        if not self._columns:
            self._columns = {name: self.pairs[name].to_numpy() for name in self.pairs.columns}
        return self._columns

    def _read(self, what: str, read):
        """``read()``, with a missing or unreadable part of the file as a ``CorpusError``."""
        try:
            return read()
        except KeyError as exc:
            raise self._damaged(f"missing {what} ({exc})") from None
        except (OSError, ValueError, TypeError, RuntimeError) as exc:
            # h5py reports damage from wherever it notices: headers, attributes, chunks
            raise self._damaged(f"cannot read {what} ({exc})") from None

    def _relationship_summary(self, simulator: str, target: str) -> dict:
        key = (simulator, target)
        if key not in self._relationships:
            self._relationships[key] = self._read(
                f"the relationship of /baselines/{simulator}/{target}",
                lambda: json.loads(self._h5["baselines"][simulator][target].attrs["relationship"]),
            )
        return self._relationships[key]

    def _recipes(self) -> tuple[dict, dict]:
        """The (small) recipe arrays, read once and kept in memory."""
        if self._recipe_arrays is None:
            self._recipe_arrays = self._read(
                "the recipe arrays /events, /futures",
                lambda: (
                    {name: self._h5["events"][name][()] for name in REQUIRED["events"]},
                    {name: self._h5["futures"][name][()] for name in REQUIRED["futures"]},
                ),
            )
        return self._recipe_arrays

    def _baseline_cached(self, simulator: str, target: str) -> np.ndarray:
        key = (simulator, target)
        if key not in self._baselines:
            self._baselines[key] = self.baseline(simulator, target)
        return self._baselines[key]

    def baseline(self, simulator: str, target: str) -> np.ndarray:
        """The full float64 baseline series the corpus was built from."""
        return self._read(
            f"/baselines/{simulator}/{target}",
            lambda: self._h5["baselines"][simulator][target][()],
        )

    def _dataset(self, name: str) -> tuple[Any, int]:
        """The dataset ``/data/<name>`` and its length (looked up once)."""
        if name not in self._datasets:  # h5py's lookups (names, shapes) cost more than reads
            dataset = self._read(f"/data/{name}", lambda: self._h5["data"][name])
            self._datasets[name] = (dataset, dataset.shape[0])
        return self._datasets[name]

    def _slice(self, name: str, offset: int, size: int) -> np.ndarray:
        dataset, length = self._dataset(name)
        if offset < 0 or offset + size > length:
            raise self._damaged(
                f"/data/{name}[{offset}:{offset + size}] is outside its {length} values"
            )
        return self._read(f"/data/{name}", lambda: dataset[offset : offset + size])

    def _slices(self, name: str, offsets: list[int], sizes: list[int]) -> list[np.ndarray]:
        """``[_slice(name, o, n) ...]``; when the slices cover at least half of the range they
        span (a chunk of neighbouring tasks), that range is read once and cut in memory."""
        if not offsets:
            return []
        low = min(offsets)
        high = max(o + n for o, n in zip(offsets, sizes, strict=True))
        _, length = self._dataset(name)
        if low < 0 or high > length or 2 * sum(sizes) < high - low:
            return [self._slice(name, o, n) for o, n in zip(offsets, sizes, strict=True)]
        block = self._slice(name, low, high - low)
        return [block[o - low : o - low + n] for o, n in zip(offsets, sizes, strict=True)]

    def _target_info(self, simulator: str, target: str) -> dict:
        """Unit, interval and start of one target's baseline (read once)."""
        key = (simulator, target)
        if key not in self._infos:
            group = self._read(f"/baselines/{simulator}", lambda: self._h5["baselines"][simulator])
            self._infos[key] = self._read(
                f"the unit, interval_s or start of /baselines/{simulator}/{target}",
                lambda: {
                    "unit": str(group[target].attrs["unit"]),
                    "interval_s": int(group.attrs["interval_s"]),
                    "start": str(group.attrs["start"]),
                },
            )
        return self._infos[key]

    @staticmethod
    def _array_places(row, future: str) -> dict[str, tuple[int, int]]:
        """``/data/<name>`` -> (offset, size) of one task's slice of each of ``TASK_ARRAYS``:
        only its own future of the pair's two (a Restraint task reads Replay's, unused)."""
        k, context, prediction = int(row["k"]), int(row["context"]), int(row["prediction"])
        index = 0 if future == axes.RESTRAINT else FUTURES.index(future)
        return {
            "history_target": (int(row["history_target_offset"]), context),
            "history_covariates": (int(row["history_covariates_offset"]), k * context),
            "future_target": (int(row["future_target_offset"]) + index * prediction, prediction),
            "future_covariates": (
                int(row["future_covariates_offset"]) + index * k * prediction,
                k * prediction,
            ),
        }

    def _task(self, row, future: str, arrays: dict[str, np.ndarray] | None = None) -> Task:
        """The task of one ``pairs`` row and future; ``arrays`` are its flat slices of
        ``TASK_ARRAYS`` when already read (else they are read here)."""
        k, context, prediction = int(row["k"]), int(row["context"]), int(row["prediction"])
        restraint = future == axes.RESTRAINT
        if arrays is None:
            arrays = {
                name: self._slice(name, offset, size)
                for name, (offset, size) in self._array_places(row, future).items()
            }
        history_target = arrays["history_target"]
        history_covariates = arrays["history_covariates"].reshape(k, context)
        future_target = arrays["future_target"]
        future_covariates_of = arrays["future_covariates"].reshape(k, prediction)
        start = int(row["window_start"])
        baseline = self._baseline_cached(row["simulator"], row["target"])
        window = baseline[start : start + context + prediction].astype(np.float32)
        summary = self._relationship_summary(row["simulator"], row["target"])
        covariates = tuple(summary["covariates"][:k])
        info = self._target_info(row["simulator"], row["target"])
        units = {row["target"]: info["unit"]}
        recipe = self.recipe(row)
        if restraint:  # nothing moves: base covariates, and the counterfactual as the truth
            bases = [summary["base_value"][c] for c in covariates]
            future_covariates_of = np.repeat(
                np.array(bases, dtype=np.float64)[:, None], prediction, axis=1
            ).astype(np.float32)
            future_target = window[context:]
        return Task(
            task_id=f"{row['pair_id']}/{future}",
            future=future,
            target=row["target"],
            **recipe.key.axis_values(),
            covariates=covariates,
            units=units,
            interval_s=info["interval_s"],
            baseline_start=info["start"],
            start_step=start,
            history_target=history_target,
            history_covariates=history_covariates,
            future_covariates=future_covariates_of,
            future_target=future_target,
            counterfactual_history=window[:context],
            counterfactual_future=window[context:],
            recipe=recipe_record(
                recipe,
                future,
                [summary["shape"][c] for c in covariates],
                [summary["base_value"][c] for c in covariates],
            ),
        )

    def recipe(self, row) -> Recipe:
        """The stored recipe of one pair (a row of ``pairs``)."""
        # imported here: the recipe module brings numba (the seeds' kernels), which a reader
        # that only reads tasks (an evaluation worker, export, show) does not need
        from whatif_bench.corpus.recipe import PairKey, Recipe

        k, n_events = int(row["k"]), int(row["n_events"])
        e0, f0, k0 = int(row["event_offset"]), int(row["factor_offset"]), int(row["kfactor_offset"])
        events, futures = self._recipes()
        layout = HistoryLayout(
            int(row["context"]),
            int(row["prediction"]),
            int(row["event_length"]),
            tuple(events["start"][e0 : e0 + n_events].tolist()),  # Python ints
        )
        key = PairKey.from_values(row["target"], row)
        return Recipe(
            key=key,
            layout=layout,
            window_start=int(row["window_start"]),
            directions=events["direction"][e0 : e0 + n_events].astype(np.int8),
            factors=events["factors"][f0 : f0 + n_events * k].reshape(n_events, k),
            replay_source=int(row["replay_source"]),
            replay_factors=futures["replay_factors"][k0 : k0 + k],
            novel_factors=futures["novel_factors"][k0 : k0 + k],
        )

    def close(self) -> None:
        self._h5.close()

    def __enter__(self) -> Corpus:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
