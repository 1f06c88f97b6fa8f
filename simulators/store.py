"""The baselines store: one HDF5 file holding every simulator's baseline series.

Layout (format ``whatif-baselines`` version 1)::

    /                      attrs: format, format_version, toolkit_version, content_hash
    /<simulator>/          attrs: simulator_version, interval_s, start, n_steps, notes,
                                  content_hash, covariate_base_values (JSON)
    /<simulator>/time_s            int64 (n_steps,): seconds since ``start`` of each step
    /<simulator>/series/<target>   float64 (n_steps,), attrs: unit
    /<simulator>/inputs/<file>     the exact text of each input file of the base setting

Files are written to a temporary name and renamed when complete; reading checks every
attribute and dataset and re-computes every content hash, so a truncated, altered or
hand-made file is reported (naming file, simulator and field) instead of used.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Iterable
from datetime import datetime
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from whatif_bench._version import __version__
from whatif_bench.h5write import guarded_h5
from whatif_bench.outputs import (
    BASELINES,
    atomic_output,
    check_file_kind,
    input_problem,
    is_safe_name,
    refuse_empty,
    safe_name,
)
from whatif_bench.simulators.base import (
    MAX_INTERVAL_S,
    Baselines,
    BaselinesFileError,
    SimulatorError,
)
from whatif_bench.simulators.tabular import is_tabular, read_table_baselines

FORMAT = f"whatif-{BASELINES}"  # "whatif-baselines": outputs.file_kind reads the kind in it
FORMAT_VERSION = 1


def combine_hashes(hashes: dict[str, str]) -> str:
    """One hash over simulator name -> content hash (sorted by simulator name)."""
    digest = hashlib.sha256()
    for simulator in sorted(hashes):
        digest.update(f"{simulator}:{hashes[simulator]}\n".encode())
    return digest.hexdigest()


def combined_hash(baselines: Iterable[Baselines]) -> str:
    """One hash over every simulator's content hash (sorted by simulator name)."""
    return combine_hashes({item.simulator: item.content_hash() for item in baselines})


def series_hash(
    simulator: str, target: str, unit: str, interval_s: int, start: str, values: np.ndarray
) -> str:
    """SHA-256 of one target's baseline: its identity, unit, timing and float64 values.

    A corpus embeds one such slice per target (a simulator's ``content_hash`` covers all its
    targets and input files, so it cannot be recomputed from the slice); ``whatif verify``
    recomputes this one.
    """
    digest = hashlib.sha256()
    header = {
        "simulator": simulator,
        "target": target,
        "unit": unit,
        "interval_s": int(interval_s),
        "start": start,
    }
    digest.update(json.dumps(header, sort_keys=True).encode())
    digest.update(np.ascontiguousarray(values, dtype="<f8").tobytes())
    return digest.hexdigest()


def check_store_path(path: str | os.PathLike) -> None:
    """Refuse ``path`` as the store a command names (``--out``), before its work: a name the
    reader would take for a table (``_check_store_name``), or an existing file that is not a
    baselines store this toolkit wrote (``outputs.check_file_kind``: its ``format`` attribute;
    the file of anyone else is never replaced)."""
    _check_store_name(path)
    check_file_kind(path, BASELINES)


def _check_store_name(path: str | os.PathLike) -> None:
    """A store is HDF5: refuse a name the reader would take for a table (``.csv``, ``.parquet``,
    ``.pq``), which could not be read back."""
    if is_tabular(path):
        raise BaselinesFileError(
            f"{path}: a baselines store is HDF5; name it .h5 (.csv, .parquet and .pq name the "
            "table layout, which whatif reads but does not write)"
        )


def write_baselines(
    path: str | os.PathLike,
    baselines: Iterable[Baselines],
    inputs: Iterable[str] = (),
    lock: bool = True,
) -> Path:
    """Write the store atomically (``outputs.atomic_output``: locked, temporary file, rename,
    a killed run's temporary removed); ``inputs`` are paths the output must not replace.
    Returns the path.

    ``lock=False``: the caller already holds ``outputs.output_lock(path)`` for its whole run
    (``whatif simulate`` takes it before the simulations) and has removed the stale temporaries
    under it; locking again here would fail against the caller's own lock.

    An existing file at ``path`` is replaced whatever it is (a world cache rebuilds a damaged
    file of its own): a command writing to a path the user named checks it first with
    ``check_store_path``.
    """
    import h5py

    _check_store_name(path)
    items = list(baselines)
    names = [b.simulator for b in items]
    if len(set(names)) != len(names):
        raise BaselinesFileError(f"each simulator may appear once, got {names}")
    for name in names:
        safe_name(name, "simulator name")
    for item in items:
        _check_storable_text(path, item)
    with atomic_output(path, inputs, lock=lock) as tmp, guarded_h5(tmp, track_order=True) as h5:
        h5.attrs["format"] = FORMAT
        h5.attrs["format_version"] = FORMAT_VERSION
        h5.attrs["toolkit_version"] = __version__
        h5.attrs["content_hash"] = combined_hash(items)
        for item in sorted(items, key=lambda b: b.simulator):
            group = h5.create_group(item.simulator, track_order=True)
            group.attrs["simulator_version"] = item.simulator_version
            group.attrs["interval_s"] = item.interval_s
            group.attrs["start"] = item.start
            group.attrs["n_steps"] = item.n_steps
            group.attrs["notes"] = item.notes
            group.attrs["content_hash"] = item.content_hash()
            group.attrs["covariate_base_values"] = json.dumps(item.covariate_base_values)
            group.create_dataset("time_s", data=item.time_s())
            series = group.create_group("series", track_order=True)
            for name, values in item.series.items():
                dataset = series.create_dataset(
                    name, data=values, compression="gzip", compression_opts=4, shuffle=True
                )
                dataset.attrs["unit"] = item.units[name]
            inputs_group = group.create_group("inputs", track_order=True)
            for name, text in item.inputs.items():
                inputs_group.create_dataset(name, data=text, dtype=h5py.string_dtype("utf-8"))
    return Path(path)


def _check_storable_text(path: str | os.PathLike, item: Baselines) -> None:
    """HDF5 text (attributes and string datasets) cannot hold NUL: refuse it before anything
    is written, naming the simulator and the field, instead of h5py's ValueError midway."""
    fields = {
        "attribute 'simulator_version'": item.simulator_version,
        "attribute 'start'": item.start,
        "attribute 'notes'": item.notes,
        **{f"series {name!r}: attribute 'unit'": unit for name, unit in item.units.items()},
        **{f"input {name!r}": text for name, text in item.inputs.items()},
    }
    for field, text in fields.items():
        if isinstance(text, str) and "\x00" in text:
            raise BaselinesFileError(
                f"{path}: simulator {item.simulator!r}: {field}: contains the control character "
                "U+0000 (NUL), which HDF5 text cannot hold"
            )


def read_baselines(path: str | os.PathLike, verify: bool = True) -> dict[str, Baselines]:
    """Read every simulator's baselines; with ``verify`` the content hashes must match.

    ``*.csv``, ``*.parquet`` and ``*.pq`` files are read in the table layout of
    ``simulators.tabular`` (one simulator each, no recorded hash); any other file is a store.

    Every problem is a ``BaselinesFileError`` naming the file, the simulator and the field; a
    path that is empty, a FIFO, a device, a socket, a symbolic link loop or a folder is named as
    such before anything is opened.
    """
    import h5py

    path = Path(refuse_empty(path, "baselines file", BaselinesFileError))
    problem = input_problem(path, "baselines file")  # never opened: a FIFO would block
    if problem is not None:
        raise BaselinesFileError(problem)
    if path.is_dir():
        raise BaselinesFileError(f"{path}: is a folder, not a baselines file")
    if not path.is_file():
        raise BaselinesFileError(f"{path}: no such baselines file")
    if is_tabular(path):
        try:
            return read_table_baselines(path)
        except SimulatorError as exc:  # Baselines' own checks, with the file named
            raise BaselinesFileError(f"{path}: {exc}") from None
    try:
        h5 = h5py.File(path, "r")
    except OSError as exc:
        raise BaselinesFileError(f"{path}: not a readable HDF5 file ({exc})") from None
    try:
        with h5:
            return _read_file(path, h5, verify)
    except BaselinesFileError:
        raise
    except (KeyError, OSError, ValueError, TypeError, RuntimeError, SimulatorError) as exc:
        # h5py reports a damaged file from wherever it notices: attributes, links, chunks
        raise BaselinesFileError(f"{path}: damaged baselines file ({exc})") from None


def _read_file(path: Path, h5: Any, verify: bool) -> dict[str, Baselines]:
    """Every simulator of an open baselines file, checked (see ``read_baselines``)."""
    if h5.attrs.get("format") != FORMAT:
        raise BaselinesFileError(f"{path}: not a WhatIf-Bench baselines file")
    version = h5.attrs.get("format_version", -1)
    if not isinstance(version, int | np.integer) or int(version) != FORMAT_VERSION:
        raise BaselinesFileError(
            f"{path}: format version {version} is not supported (expected {FORMAT_VERSION})"
        )
    out = {
        simulator: _read_simulator(path, simulator, group, verify)
        for simulator, group in h5.items()
    }
    if not out:
        raise BaselinesFileError(f"{path}: holds no simulator")
    if verify and combined_hash(out.values()) != h5.attrs.get("content_hash"):
        raise BaselinesFileError(f"{path}: file-level content hash does not match")
    return out


def _read_simulator(path: Path, simulator: str, group: Any, verify: bool) -> Baselines:
    """One simulator's group, every attribute and dataset checked."""
    import h5py

    def fail(field: str, message: str) -> BaselinesFileError:
        return BaselinesFileError(f"{path}: simulator {simulator!r}: {field}: {message}")

    if not is_safe_name(simulator):
        raise BaselinesFileError(f"{path}: simulator name {simulator!r} is not a valid name")
    if not isinstance(group, h5py.Group):
        raise BaselinesFileError(f"{path}: simulator {simulator!r}: is not a group")

    def attr(name: str) -> Any:
        if name not in group.attrs:
            raise fail(f"attribute {name!r}", "is missing")
        value = group.attrs[name]
        return value.decode("utf-8", "replace") if isinstance(value, bytes) else value

    def text(name: str) -> str:
        value = attr(name)
        if not isinstance(value, str):
            raise fail(f"attribute {name!r}", f"expected text, got {type(value).__name__}")
        if "\x00" in value:  # only a fixed-length attribute can hold one; no writer makes it
            raise fail(f"attribute {name!r}", "contains the control character U+0000 (NUL)")
        return value

    def child(name: str, kind: type) -> Any:
        if name not in group:
            raise fail(f"{'group' if kind is h5py.Group else 'dataset'} {name!r}", "is missing")
        value = group[name]
        if not isinstance(value, kind):
            raise fail(name, f"expected a{' group' if kind is h5py.Group else ' dataset'}")
        return value

    interval = attr("interval_s")
    if isinstance(interval, bool | np.bool_) or not isinstance(interval, int | np.integer):
        raise fail("attribute 'interval_s'", f"expected a whole number of seconds, got {interval}")
    if not 1 <= int(interval) <= MAX_INTERVAL_S:
        raise fail("attribute 'interval_s'", f"must be in 1..{MAX_INTERVAL_S} s, got {interval}")
    start = text("start")
    try:
        datetime.fromisoformat(start)
    except ValueError:
        raise fail("attribute 'start'", f"not an ISO date and time: {start!r}") from None
    try:
        base_values = json.loads(text("covariate_base_values"))
    except json.JSONDecodeError:
        raise fail("attribute 'covariate_base_values'", "is not valid JSON") from None
    if not isinstance(base_values, dict) or not all(
        isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
        for v in base_values.values()
    ):
        raise fail("attribute 'covariate_base_values'", "expected finite numbers by name")

    series: dict[str, np.ndarray] = {}
    units: dict[str, str] = {}
    for name, dataset in child("series", h5py.Group).items():
        field = f"series {name!r}"
        if not isinstance(dataset, h5py.Dataset) or dataset.ndim != 1:
            raise fail(field, "expected a one-dimensional dataset")
        if dataset.dtype.kind not in "fiu":
            raise fail(field, f"expected numbers, got dtype {dataset.dtype}")
        values = np.asarray(dataset[()], dtype=np.float64)
        if not np.all(np.isfinite(values)):
            bad = int(np.flatnonzero(~np.isfinite(values))[0])
            # the same words as ``Baselines`` itself uses for a series: "<sim>/<target>: ..."
            raise fail(
                f"series {simulator}/{name}", f"non-finite value {values[bad]} at step {bad}"
            )
        if "unit" not in dataset.attrs:
            raise fail(field, "attribute 'unit' is missing")
        series[name] = values
        units[name] = str(dataset.attrs["unit"])
    if not series:
        raise fail("group 'series'", "holds no series")
    if len({len(v) for v in series.values()}) > 1:
        raise fail("group 'series'", "series have different lengths")
    n_steps = attr("n_steps")
    length = len(next(iter(series.values())))
    if not isinstance(n_steps, int | np.integer) or int(n_steps) != length:
        raise fail("attribute 'n_steps'", f"is {n_steps} but the series have {length} steps")
    inputs: dict[str, str] = {}
    for name, dataset in child("inputs", h5py.Group).items():
        raw = dataset[()] if isinstance(dataset, h5py.Dataset) else None
        if not isinstance(raw, bytes | str):
            raise fail(f"input {name!r}", "expected a text dataset")
        inputs[name] = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    item = Baselines(
        simulator=simulator,
        simulator_version=text("simulator_version"),
        interval_s=int(interval),
        start=start,
        series=series,
        units=units,
        covariate_base_values=base_values,
        inputs=inputs,
        notes=text("notes"),
    )
    if not np.array_equal(child("time_s", h5py.Dataset)[()], item.time_s()):
        raise BaselinesFileError(f"{path}: simulator {simulator!r}: timestamps are inconsistent")
    if verify and item.content_hash() != text("content_hash"):
        raise BaselinesFileError(
            f"{path}: simulator {simulator!r}: content does not match its recorded hash "
            "(the file is corrupted or was edited)"
        )
    return item


def shipped_baselines_path() -> Path:
    """The baselines shipped inside the package (EPANET, GridLAB-D and SUMO)."""
    return Path(str(resources.files("whatif_bench.simulators") / "data" / "baselines.h5"))


SHIPPED_NAME = "the shipped baselines"


def baselines_name(path: str | os.PathLike) -> str:
    """``path`` as an error names it: "the shipped baselines" for the package's own file (its
    path inside an install says nothing to a user), else the path as given."""
    try:
        if Path(path).resolve() == shipped_baselines_path().resolve():
            return SHIPPED_NAME
    except (OSError, RuntimeError):  # an unreadable or looping path: name it as given
        pass
    return str(path)
