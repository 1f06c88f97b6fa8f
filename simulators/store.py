"""The baselines store: one HDF5 file holding every simulator's baseline series.

Layout (format ``whatif-baselines`` version 1)::

    /                      attrs: format, format_version, toolkit_version, content_hash
    /<simulator>/          attrs: simulator_version, interval_s, start, n_steps, notes,
                                  content_hash, covariate_base_values (JSON)
    /<simulator>/time_s            int64 (n_steps,): seconds since ``start`` of each step
    /<simulator>/series/<target>   float64 (n_steps,), attrs: unit
    /<simulator>/inputs/<file>     the exact text of each input file of the base setting

Files are written to a temporary name and renamed when complete; reading re-computes every
content hash, so a truncated or altered file is reported instead of used.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from importlib import resources
from pathlib import Path

import numpy as np

from whatif_bench._version import __version__
from whatif_bench.errors import WhatIfError
from whatif_bench.simulators.base import Baselines, SimulatorError

FORMAT = "whatif-baselines"
FORMAT_VERSION = 1


class BaselinesFileError(WhatIfError):
    """A baselines file is missing, unreadable, of the wrong format or corrupted."""


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


def write_baselines(path: str | os.PathLike, baselines: Iterable[Baselines]) -> Path:
    """Write the store atomically (temporary file, then rename); returns the path."""
    import h5py

    items = list(baselines)
    names = [b.simulator for b in items]
    if len(set(names)) != len(names):
        raise BaselinesFileError(f"each simulator may appear once, got {names}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.partial-{os.getpid()}")
    try:
        with h5py.File(tmp, "w", track_order=True) as h5:
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
                inputs = group.create_group("inputs", track_order=True)
                for name, text in item.inputs.items():
                    inputs.create_dataset(name, data=text, dtype=h5py.string_dtype("utf-8"))
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


def read_baselines(path: str | os.PathLike, verify: bool = True) -> dict[str, Baselines]:
    """Read every simulator's baselines; with ``verify`` the content hashes must match."""
    import h5py

    path = Path(path)
    if not path.is_file():
        raise BaselinesFileError(f"{path}: no such baselines file")
    try:
        h5 = h5py.File(path, "r")
    except OSError as exc:
        raise BaselinesFileError(f"{path}: not a readable HDF5 file ({exc})") from None
    out: dict[str, Baselines] = {}
    with h5:
        if h5.attrs.get("format") != FORMAT:
            raise BaselinesFileError(f"{path}: not a WhatIf-Bench baselines file")
        if int(h5.attrs.get("format_version", -1)) != FORMAT_VERSION:
            raise BaselinesFileError(
                f"{path}: format version {h5.attrs.get('format_version')} is not supported "
                f"(expected {FORMAT_VERSION})"
            )
        try:
            for simulator, group in h5.items():
                series = {
                    name: np.asarray(d[()], dtype=np.float64) for name, d in group["series"].items()
                }
                units = {name: str(d.attrs["unit"]) for name, d in group["series"].items()}
                inputs = {name: d[()].decode("utf-8") for name, d in group["inputs"].items()}
                item = Baselines(
                    simulator=simulator,
                    simulator_version=str(group.attrs["simulator_version"]),
                    interval_s=int(group.attrs["interval_s"]),
                    start=str(group.attrs["start"]),
                    series=series,
                    units=units,
                    covariate_base_values=json.loads(group.attrs["covariate_base_values"]),
                    inputs=inputs,
                    notes=str(group.attrs["notes"]),
                )
                if not np.array_equal(group["time_s"][()], item.time_s()):
                    raise BaselinesFileError(
                        f"{path}: simulator {simulator!r}: timestamps are inconsistent"
                    )
                if verify and item.content_hash() != group.attrs["content_hash"]:
                    raise BaselinesFileError(
                        f"{path}: simulator {simulator!r}: content does not match its recorded hash "
                        "(the file is corrupted or was edited)"
                    )
                out[simulator] = item
        except (KeyError, OSError, ValueError, SimulatorError) as exc:
            raise BaselinesFileError(f"{path}: damaged baselines file ({exc})") from None
        if verify and combined_hash(out.values()) != h5.attrs.get("content_hash"):
            raise BaselinesFileError(f"{path}: file-level content hash does not match")
    return out


def shipped_baselines_path() -> Path:
    """The baselines shipped inside the package (EPANET, GridLAB-D and SUMO)."""
    return Path(str(resources.files("whatif_bench.simulators") / "data" / "baselines.h5"))
