"""Bitbrains VM traces as OpenDC replays them, read from any of three folder layouts.

- ``opendc-2.0``: OpenDC 2.0's ``meta.parquet`` (``id`` like ``"1019.csv"``, ``submissionTime``
  in ms since the epoch, ``maxCores``, ``requiredMemory`` in MB) and ``trace.parquet`` (``id``,
  ``time`` in ms, ``duration`` in ms, ``cores``, ``cpuUsage`` in MHz), as in OpenDC's repository
  at tag v2.0 (``traces/bitbrains-small``); a VM's ``time`` must increase from fragment to
  fragment, and ``endTime`` (meta) and ``flops`` (trace), which the wrapper does not use, are
  checked where present: an end before the submission and negative flops are refused;
- ``opendc-current``: the newer OpenDC workload, ``tasks.parquet`` (``id`` int, ``submission_time``
  in ms, ``cpu_count``, ``mem_capacity`` in KB) and ``fragments.parquet`` (``id``, ``duration`` in
  ms, ``cpu_usage`` in MHz);
- ``bitbrains-csv``: the Grid Workloads Archive's GWA-T-12 files, one ``<vm>.csv`` per VM
  (semicolon-separated, a sample every 300 s; ``Timestamp [ms]`` holds seconds).

Values are taken as the trace gives them. A fragment is a span of constant CPU usage (MHz, the
VM's total over its cores); OpenDC replays a VM's fragments back to back from its start and
ignores their timestamps, and so does the wrapper. A GWA-T-12 sample becomes one 300 s
fragment, as OpenDC's own converter made them. Nothing is interpolated or filled in.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from whatif_bench.simulators.base import SimulatorError

if TYPE_CHECKING:
    import pandas as pd

SAMPLE_MS = 300_000  # one Bitbrains sample (and one baseline window) in ms
LAYOUTS = {
    "opendc-2.0": ("meta.parquet", "trace.parquet"),
    "opendc-current": ("tasks.parquet", "fragments.parquet"),
}
CSV_LAYOUT = "bitbrains-csv"
WHERE_TO_GET = (
    "OpenDC's Bitbrains trace is the folder traces/bitbrains-small (meta.parquet, "
    "trace.parquet) of OpenDC's public repository (atlarge-research/opendc) at tag v2.0; the "
    "raw GWA-T-12 Bitbrains CSV files come from the Grid Workloads Archive"
)


class TraceError(SimulatorError):
    """A trace folder is missing, unreadable or lacks what the run needs."""


@dataclass(frozen=True)
class TraceVM:
    """One VM as OpenDC replays it.

    ``durations_ms`` (n,) int64, each > 0 and a whole number of seconds; ``usage_mhz`` (n,)
    float64 >= 0, the VM's total CPU usage over its ``cores`` during each fragment;
    ``memory_mb`` the provisioned memory; ``submission_ms`` ms since the epoch;
    ``capacity_mhz`` the provisioned CPU capacity where the layout records one (OpenDC 2.0's
    does not: OpenDC 2.0 gives a VM its host's core speed per core).
    """

    vm_id: str
    cores: int
    memory_mb: int
    submission_ms: int
    durations_ms: np.ndarray
    usage_mhz: np.ndarray
    capacity_mhz: float | None = None

    @property
    def replayed_ms(self) -> int:
        """How long OpenDC replays the VM: the sum of its fragments' durations (ms)."""
        return int(self.durations_ms.sum())

    def cut(self, length_ms: int) -> tuple[np.ndarray, np.ndarray]:
        """The fragments replayed in the first ``length_ms`` ms: (durations, usage), the last
        fragment shortened to end there."""
        ends = np.cumsum(self.durations_ms)
        keep = min(int(np.searchsorted(ends, length_ms, side="left")) + 1, ends.size)
        durations = self.durations_ms[:keep].copy()
        if keep and ends[keep - 1] > length_ms:
            durations[-1] -= ends[keep - 1] - length_ms
        return durations, self.usage_mhz[:keep].copy()


@dataclass(frozen=True)
class Trace:
    """The VMs a run needs, read from ``folder`` in ``layout``; ``files`` maps each file read
    to its SHA-256."""

    layout: str
    folder: Path
    files: dict[str, str]
    vms: dict[str, TraceVM]


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def detect_layout(folder: Path) -> str:
    """Which of the three layouts ``folder`` holds; the error says what a trace folder is."""
    if not folder.is_dir():
        raise TraceError(f"{folder}: trace folder not found. {WHERE_TO_GET}")
    for layout, names in LAYOUTS.items():
        if all((folder / name).is_file() for name in names):
            return layout
    if any(folder.glob("*.csv")):
        return CSV_LAYOUT
    inside = sorted(sub.name for sub in folder.iterdir() if sub.is_dir() and _holds_a_trace(sub))
    hint = f" (its subfolder(s) {inside} do: name one of them)" if inside else ""
    raise TraceError(
        f"{folder}: holds no trace: expected meta.parquet + trace.parquet (OpenDC 2.0), "
        f"tasks.parquet + fragments.parquet (newer OpenDC) or <vm>.csv files (GWA-T-12){hint}"
    )


def _holds_a_trace(folder: Path) -> bool:
    return any(all((folder / n).is_file() for n in names) for names in LAYOUTS.values()) or any(
        folder.glob("*.csv")
    )


def read_trace(folder: str | os.PathLike, vm_ids: Sequence[str]) -> Trace:
    """The VMs ``vm_ids`` of the trace in ``folder`` (any of the three layouts)."""
    path = Path(folder)
    layout = detect_layout(path)
    wanted = list(dict.fromkeys(str(v) for v in vm_ids))
    if layout == "opendc-2.0":
        vms, files = _read_opendc_2(path, wanted)
    elif layout == "opendc-current":
        vms, files = _read_opendc_current(path, wanted)
    else:
        vms, files = _read_csv_folder(path, wanted)
    for vm in vms.values():
        _check_vm(path, vm)
    return Trace(layout, path, {name: file_sha256(path / name) for name in files}, vms)


def _read_parquet(
    path: Path,
    columns: list[str],
    filters: list[tuple[str, str, object]] | None = None,
    optional: Sequence[str] = (),
) -> pd.DataFrame:
    """``columns`` of a Parquet file, and those of ``optional`` it has (rows matching
    ``filters``), with no empty cell."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        names = pq.read_schema(path).names
    except (OSError, pa.ArrowException, ValueError) as exc:
        raise TraceError(f"{path}: not a readable Parquet file ({exc})") from None
    missing = [c for c in columns if c not in names]
    if missing:
        raise TraceError(f"{path}: lacks column(s) {missing} (has {names})")
    columns = [*columns, *(c for c in optional if c in names and c not in columns)]
    try:
        table = pq.read_table(path, columns=columns, filters=filters)
    except (OSError, pa.ArrowException, ValueError) as exc:
        raise TraceError(f"{path}: not a readable Parquet file ({exc})") from None
    for name in columns:
        nulls = table.column(name).null_count
        if nulls:
            raise TraceError(f"{path}: column {name!r} has {nulls} empty cell(s)")
    return table.to_pandas()


def _missing(folder: Path, wanted: list[str], found: Sequence[str]) -> None:
    missing = [v for v in wanted if v not in set(found)]
    if missing:
        raise TraceError(f"{folder}: the trace has no VM(s) {missing}")


def _one(rows: pd.DataFrame, what: str, path: Path, vm: str) -> pd.Series:
    if len(rows) != 1:
        raise TraceError(f"{path}: VM {vm} has {len(rows)} {what} rows (expected 1)")
    return rows.iloc[0]


def _file_row(path: Path, key: str, index: int) -> int:
    """The row of the Parquet file ``path`` (0-based, file order) holding the ``index``-th row
    of id ``key`` (the rows were read filtered, which loses their place in the file)."""
    import pyarrow.parquet as pq

    ids = pq.read_table(path, columns=["id"]).column("id").to_numpy(zero_copy_only=False)
    return int(np.flatnonzero(ids == key)[index])


def _check_opendc_2(
    meta_path: Path, trace_path: Path, vm: str, key: str, row: pd.Series, rows: pd.DataFrame
) -> None:
    """What OpenDC 2.0's files say beyond what the wrapper replays: the meta row's ``endTime``
    is not before its ``submissionTime``, the fragments' ``time`` increases and their ``flops``
    are >= 0 (``endTime`` and ``flops`` where the files have them)."""
    if "endTime" in row.index and int(row["endTime"]) < int(row["submissionTime"]):
        raise TraceError(
            f"{meta_path}: VM {vm}, row {row.name}: endTime {int(row['endTime'])} ms is before "
            f"submissionTime {int(row['submissionTime'])} ms"
        )
    times = rows["time"].to_numpy(dtype=np.int64)
    back = np.flatnonzero(np.diff(times) <= 0)
    if back.size:
        i = int(back[0]) + 1
        raise TraceError(
            f"{trace_path}: VM {vm}, row {_file_row(trace_path, key, i)}: time {times[i]} ms is "
            f"not after the VM's previous fragment's {times[i - 1]} ms"
        )
    if "flops" in rows.columns:
        flops = rows["flops"].to_numpy()
        negative = np.flatnonzero(flops < 0)
        if negative.size:
            i = int(negative[0])
            raise TraceError(
                f"{trace_path}: VM {vm}, row {_file_row(trace_path, key, i)}: negative flops "
                f"{flops[i]}"
            )


def _read_opendc_2(folder: Path, wanted: list[str]) -> tuple[dict[str, TraceVM], list[str]]:
    meta_path, trace_path = folder / "meta.parquet", folder / "trace.parquet"
    meta = _read_parquet(
        meta_path, ["id", "submissionTime", "maxCores", "requiredMemory"], optional=["endTime"]
    )
    ids = [f"{vm}.csv" for vm in wanted]
    _missing(folder, wanted, [str(i).removesuffix(".csv") for i in meta["id"]])
    trace = _read_parquet(
        trace_path,
        ["id", "time", "duration", "cores", "cpuUsage"],
        filters=[("id", "in", ids)],
        optional=["flops"],
    )
    vms = {}
    for vm, key in zip(wanted, ids, strict=True):
        row = _one(meta[meta["id"] == key], "meta", meta_path, vm)  # its name: the file row
        rows = trace[trace["id"] == key]  # replay order is file order, as OpenDC reads it
        if rows.empty:
            raise TraceError(f"{trace_path}: VM {vm} has no fragments")
        _check_opendc_2(meta_path, trace_path, vm, key, row, rows)
        # a fragment of zero usage may name 0 cores (OpenDC idles through it either way)
        busy = rows["cpuUsage"].to_numpy() > 0
        cores = {int(c) for c in rows["cores"].to_numpy()[busy]}
        if cores - {int(row["maxCores"])}:
            raise TraceError(
                f"{trace_path}: VM {vm}'s fragments use {sorted(cores)} cores, its meta row "
                f"{int(row['maxCores'])}"
            )
        vms[vm] = TraceVM(
            vm_id=vm,
            cores=int(row["maxCores"]),
            memory_mb=int(row["requiredMemory"]),
            submission_ms=int(row["submissionTime"]),
            durations_ms=rows["duration"].to_numpy(dtype=np.int64),
            usage_mhz=rows["cpuUsage"].to_numpy(dtype=np.float64),
        )
    return vms, ["meta.parquet", "trace.parquet"]


def _read_opendc_current(folder: Path, wanted: list[str]) -> tuple[dict[str, TraceVM], list[str]]:
    tasks_path, fragments_path = folder / "tasks.parquet", folder / "fragments.parquet"
    tasks = _read_parquet(
        tasks_path, ["id", "submission_time", "cpu_count", "cpu_capacity", "mem_capacity"]
    )
    _missing(folder, wanted, [str(i) for i in tasks["id"]])
    fragments = _read_parquet(fragments_path, ["id", "duration", "cpu_usage"])
    fragment_ids = fragments["id"].astype(str)
    vms = {}
    for vm in wanted:
        row = _one(tasks[tasks["id"].astype(str) == vm], "task", tasks_path, vm)
        rows = fragments[fragment_ids == vm]  # replay order is file order
        if rows.empty:
            raise TraceError(f"{fragments_path}: VM {vm} has no fragments")
        vms[vm] = TraceVM(
            vm_id=vm,
            cores=int(row["cpu_count"]),
            memory_mb=int(row["mem_capacity"]) // 1000,  # KB -> MB, as OpenDC 2.0's converter
            submission_ms=int(row["submission_time"]),
            durations_ms=rows["duration"].to_numpy(dtype=np.int64),
            usage_mhz=rows["cpu_usage"].to_numpy(dtype=np.float64),
            capacity_mhz=float(row["cpu_capacity"]),
        )
    return vms, ["tasks.parquet", "fragments.parquet"]


_CSV_COLUMNS = (
    "timestamp",
    "cpu cores",
    "cpu capacity provisioned [mhz]",
    "cpu usage [mhz]",
    "memory capacity provisioned [kb]",
)


def _read_csv_folder(folder: Path, wanted: list[str]) -> tuple[dict[str, TraceVM], list[str]]:
    available = {p.stem for p in folder.glob("*.csv")}
    _missing(folder, wanted, sorted(available))
    return {vm: read_bitbrains_csv(folder / f"{vm}.csv") for vm in wanted}, [
        f"{vm}.csv" for vm in wanted
    ]


def read_bitbrains_csv(path: str | os.PathLike) -> TraceVM:
    """One GWA-T-12 ``<vm>.csv``: every sample is a 300 s fragment of its ``CPU usage [MHZ]``."""
    import pandas as pd

    path = Path(path)
    try:
        frame = pd.read_csv(path, sep=r";\s*", engine="python")
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise TraceError(f"{path}: cannot read the Bitbrains CSV ({exc})") from None
    columns = {str(c).strip().lower().removesuffix(" [ms]"): c for c in frame.columns}
    missing = [c for c in _CSV_COLUMNS if c not in columns]
    if missing:
        raise TraceError(f"{path}: not a GWA-T-12 Bitbrains file, missing column(s) {missing}")
    if frame.empty:
        raise TraceError(f"{path}: the trace has no samples")
    if frame.isna().to_numpy().any():
        row, _ = (int(i[0]) for i in np.nonzero(frame.isna().to_numpy()))
        raise TraceError(f"{path}: row {row} has an empty or non-numeric cell")
    try:
        stamps = frame[columns["timestamp"]].to_numpy(dtype=np.int64)
        cores = frame[columns["cpu cores"]].to_numpy(dtype=np.int64)
        usage = frame[columns["cpu usage [mhz]"]].to_numpy(dtype=np.float64)
        capacity = frame[columns["cpu capacity provisioned [mhz]"]].to_numpy(dtype=np.float64)
        memory_kb = frame[columns["memory capacity provisioned [kb]"]].to_numpy(dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TraceError(f"{path}: a column holds something other than numbers ({exc})") from None
    if np.any(np.diff(stamps) <= 0):
        row = int(np.flatnonzero(np.diff(stamps) <= 0)[0]) + 1
        raise TraceError(f"{path}: timestamps do not increase at row {row}")
    if len(set(cores.tolist())) != 1:
        raise TraceError(f"{path}: the VM's core count changes ({sorted(set(cores.tolist()))})")
    if not np.all(np.isfinite(memory_kb)) or memory_kb.min() < 0:
        raise TraceError(f"{path}: memory capacity must be finite and >= 0")
    return TraceVM(
        vm_id=path.stem,
        cores=int(cores[0]),
        memory_mb=int(memory_kb.max()) // 1000,
        submission_ms=int(stamps[0]) * 1000,  # the column says [ms]; its values are seconds
        durations_ms=np.full(usage.shape, SAMPLE_MS, dtype=np.int64),
        usage_mhz=usage,
        capacity_mhz=float(capacity.max()),
    )


def _check_vm(folder: Path, vm: TraceVM) -> None:
    where = f"{folder}: VM {vm.vm_id}"
    if vm.cores < 1:
        raise TraceError(f"{where}: {vm.cores} cores")
    if vm.memory_mb < 0:
        raise TraceError(f"{where}: negative memory {vm.memory_mb} MB")
    bad = ~np.isfinite(vm.usage_mhz) | (vm.usage_mhz < 0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise TraceError(f"{where}: CPU usage {vm.usage_mhz[i]} MHz at fragment {i}")
    bad = (vm.durations_ms <= 0) | (vm.durations_ms % 1000 != 0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise TraceError(
            f"{where}: fragment {i} lasts {vm.durations_ms[i]} ms (expected whole seconds > 0)"
        )
