"""OpenDC (a JVM data-centre simulator) wrapper: real inputs, a real run, real output parsing.

OpenDC is not served by any package registry this project can use, so the wrapper never
simulates anything itself. It writes OpenDC's documented inputs -- a topology of one cluster of
four hosts (16 cores at 3000 MHz, 64 GiB, a linear CPU power model idling at 105.5 W), an
experiment file, and a workload of tasks and fragments in Parquet built from a Bitbrains trace
the user supplies -- runs ``opendc`` (``$OPENDC_BIN`` or on PATH) or a Docker image the user
names, and parses ``host.parquet`` and ``task.parquet`` into its 22 targets (listed in docs/RELATIONSHIPS.md).
Without a backend it raises ``SimulatorUnavailable`` saying how to get OpenDC.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from whatif_bench.simulators.base import Baselines, SimulatorError, SimulatorUnavailable

NAME = "opendc"
INTERVAL_S = 300
DEFAULT_DAYS = 30
HOSTS = ("host-0", "host-1")
PAPER_VMS = ("1019", "1023", "1026")
HOST_SETTINGS = {"count": 4, "coreCount": 16, "coreSpeed": 3000.0, "memory_gib": 64}
POWER_MODEL = {"modelType": "linear", "idlePower": 105.5, "maxPower": 250.0}
HOST_TARGET_FIELDS = ("cpu_demand", "cpu_usage", "cpu_utilization", "cpu_time_active", "power_draw")
VM_TARGET_FIELDS = ("cpu_demand", "cpu_usage", "cpu_time_active", "cpu_time_idle")
UNITS = {
    "cpu_demand": "MHz",
    "cpu_usage": "MHz",
    "cpu_utilization": "fraction",
    "cpu_time_active": "ms",
    "cpu_time_idle": "ms",
    "power_draw": "W",
}
HOW_TO_GET_OPENDC = (
    "OpenDC is a JVM program that no package index serves. Build or download it from "
    "https://opendc.org (then put `opendc` on PATH or set OPENDC_BIN), or pass --image with a "
    "Docker image that runs it (see docker/opendc/Dockerfile)."
)


@dataclass(frozen=True)
class BitbrainsVM:
    """One VM of a Bitbrains trace: 300 s samples of provisioned and used CPU and memory."""

    vm_id: str
    timestamps_s: np.ndarray  # (n,) seconds since the epoch
    cpu_cores: int
    cpu_capacity_mhz: float
    cpu_usage_mhz: np.ndarray  # (n,)
    memory_capacity_mb: int


def read_bitbrains_vm(path: str | os.PathLike) -> BitbrainsVM:
    """Read one Bitbrains ``<vm>.csv`` (semicolon-separated, GWA-T-12 layout)."""
    import pandas as pd

    path = Path(path)
    try:
        frame = pd.read_csv(path, sep=r";\s*", engine="python")
    except (OSError, ValueError) as exc:
        raise SimulatorError(f"{path}: cannot read Bitbrains trace: {exc}") from None
    columns = {c.strip().split(" [")[0].lower(): c for c in frame.columns}
    needed = [
        "timestamp",
        "cpu cores",
        "cpu capacity provisioned",
        "cpu usage",
        "memory capacity provisioned",
    ]
    missing = [n for n in needed if n not in columns]
    if missing:
        raise SimulatorError(f"{path}: not a Bitbrains trace, missing column(s) {missing}")
    if frame.empty:
        raise SimulatorError(f"{path}: the trace has no samples")
    usage_column = next(c for c in frame.columns if c.strip().lower().startswith("cpu usage [mhz"))
    return BitbrainsVM(
        vm_id=path.stem,
        timestamps_s=frame[columns["timestamp"]].to_numpy(dtype=np.int64),
        cpu_cores=int(frame[columns["cpu cores"]].max()),
        cpu_capacity_mhz=float(frame[columns["cpu capacity provisioned"]].max()),
        cpu_usage_mhz=frame[usage_column].to_numpy(dtype=np.float64),
        memory_capacity_mb=int(np.ceil(frame[columns["memory capacity provisioned"]].max() / 1024)),
    )


def select_vms(trace: str | os.PathLike, vms: tuple[str, ...] | None = None) -> list[Path]:
    """The trace files to run: the paper's three VMs plus the first other VM of the folder."""
    folder = Path(trace)
    if not folder.is_dir():
        raise SimulatorError(f"{folder}: Bitbrains trace folder not found")
    available = {p.stem: p for p in sorted(folder.glob("*.csv"))}
    wanted = list(vms) if vms else [*PAPER_VMS, *[v for v in available if v not in PAPER_VMS][:1]]
    missing = [v for v in wanted if v not in available]
    if missing:
        raise SimulatorError(f"{folder}: no trace file for VM(s) {missing}")
    return [available[v] for v in wanted]


def topology() -> dict:
    """The topology in OpenDC's documented JSON layout (one cluster, four identical hosts)."""
    return {
        "clusters": [
            {
                "name": "C01",
                "hosts": [
                    {
                        "name": "host",
                        "count": HOST_SETTINGS["count"],
                        "cpu": {
                            "coreCount": HOST_SETTINGS["coreCount"],
                            "coreSpeed": HOST_SETTINGS["coreSpeed"],
                        },
                        "memory": {"memorySize": HOST_SETTINGS["memory_gib"] * 2**30},
                        "cpuPowerModel": dict(POWER_MODEL),
                    }
                ],
            }
        ]
    }


def experiment() -> dict:
    """The experiment file: one scenario, the topology and workload above, 300 s exports."""
    return {
        "name": "whatif-base",
        "outputFolder": "output",
        "initialSeed": 0,
        "runs": 1,
        "topologies": [{"pathToFile": "topology.json"}],
        "workloads": [{"pathToFile": "workload", "type": "ComputeWorkload"}],
        "allocationPolicies": [{"policyType": "Mem"}],
        "exportModels": [{"exportInterval": INTERVAL_S}],
    }


def trace_start(vms: list[BitbrainsVM]) -> str:
    """The run's start: the trace's first sample, an ISO 8601 UTC instant.

    Bitbrains timestamps are seconds since the Unix epoch (the GWA-T-12 header says ``[ms]``,
    the values are seconds); the workload is submitted relative to this instant, so OpenDC's
    output step ``i`` (``timestamp`` in ms since the start) is ``start + (i + 1) * 300 s``.
    """
    if not vms:
        raise SimulatorError("OpenDC needs at least one trace VM")
    first = min(int(vm.timestamps_s[0]) for vm in vms)
    return datetime.fromtimestamp(first, tz=UTC).isoformat()


def write_workload(
    vms: list[BitbrainsVM], folder: str | os.PathLike, days: float
) -> tuple[Path, Path]:
    """Write ``tasks.parquet`` and ``fragments.parquet`` in OpenDC's documented schema."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    start = min(int(vm.timestamps_s[0]) for vm in vms)
    limit_s = int(days * 86400)
    tasks: list[dict] = []
    fragments: list[dict] = []
    for vm in vms:
        keep = (vm.timestamps_s - start) < limit_s
        samples = vm.cpu_usage_mhz[keep]
        if samples.size == 0:
            raise SimulatorError(f"VM {vm.vm_id}: no samples within the first {days} days")
        tasks.append(
            {
                "id": vm.vm_id,
                "submission_time": int(vm.timestamps_s[keep][0]) * 1000,
                "duration": int(samples.size * INTERVAL_S * 1000),
                "cpu_count": vm.cpu_cores,
                "cpu_capacity": vm.cpu_capacity_mhz,
                "mem_capacity": vm.memory_capacity_mb,
            }
        )
        fragments.extend(
            {
                "id": vm.vm_id,
                "duration": INTERVAL_S * 1000,
                "cpu_count": vm.cpu_cores,
                "cpu_usage": float(u),
            }
            for u in samples
        )
    task_schema = pa.schema(
        [
            ("id", pa.string()),
            ("submission_time", pa.int64()),
            ("duration", pa.int64()),
            ("cpu_count", pa.int32()),
            ("cpu_capacity", pa.float64()),
            ("mem_capacity", pa.int64()),
        ]
    )
    fragment_schema = pa.schema(
        [
            ("id", pa.string()),
            ("duration", pa.int64()),
            ("cpu_count", pa.int32()),
            ("cpu_usage", pa.float64()),
        ]
    )
    tasks_path, fragments_path = folder / "tasks.parquet", folder / "fragments.parquet"
    pq.write_table(pa.Table.from_pylist(tasks, schema=task_schema), tasks_path)
    pq.write_table(pa.Table.from_pylist(fragments, schema=fragment_schema), fragments_path)
    return tasks_path, fragments_path


def find_backend(image: str | None = None) -> list[str]:
    """The command prefix that runs OpenDC: ``$OPENDC_BIN``, ``opendc`` on PATH, or Docker."""
    binary = os.environ.get("OPENDC_BIN") or shutil.which("opendc")
    if binary:
        return [binary, "run"]
    if image:
        if shutil.which("docker") is None:
            raise SimulatorUnavailable(
                f"--image {image} needs a Docker client on PATH. {HOW_TO_GET_OPENDC}"
            )
        return ["docker", "run", "--rm", "-v", "{workdir}:/work", "-w", "/work", image, "run"]
    raise SimulatorUnavailable(f"no OpenDC backend found. {HOW_TO_GET_OPENDC}")


def _regular(frame, key: str, name: str, field: str, n_steps: int) -> np.ndarray:
    """One entity's column on the 300 s grid (OpenDC timestamps are ms since the start)."""
    rows = frame[frame[key] == name]
    if rows.empty:
        raise SimulatorError(f"OpenDC output has no rows for {key} = {name!r}")
    steps = (
        np.round(rows["timestamp"].to_numpy(dtype=np.float64) / (INTERVAL_S * 1000)).astype(int) - 1
    )
    values = np.full(n_steps, np.nan)
    inside = (steps >= 0) & (steps < n_steps)
    values[steps[inside]] = rows[field].to_numpy(dtype=np.float64)[inside]
    if np.isnan(values).any():
        missing = int(np.isnan(values).sum())
        raise SimulatorError(
            f"OpenDC output for {name}/{field} misses {missing} of {n_steps} samples"
        )
    return values


def parse_outputs(
    host_parquet: str | os.PathLike,
    task_parquet: str | os.PathLike,
    vms: tuple[str, ...] = PAPER_VMS,
    n_steps: int | None = None,
) -> tuple[dict, dict]:
    """The 22 targets from OpenDC's ``host.parquet`` and ``task.parquet``."""
    import pandas as pd

    hosts = pd.read_parquet(host_parquet)
    tasks = pd.read_parquet(task_parquet)
    for frame, key, fields, label in (
        (hosts, "host_name", HOST_TARGET_FIELDS, "host.parquet"),
        (tasks, "task_name", VM_TARGET_FIELDS, "task.parquet"),
    ):
        missing = sorted({"timestamp", key, *fields} - set(frame.columns))
        if missing:
            raise SimulatorError(f"{label} lacks OpenDC column(s) {missing}")
    if n_steps is None:
        n_steps = int(
            min(hosts["timestamp"].max(), tasks["timestamp"].max()) // (INTERVAL_S * 1000)
        )
    series, units = {}, {}
    for host in HOSTS:
        for field in HOST_TARGET_FIELDS:
            series[f"{field}_{host}"] = _regular(hosts, "host_name", host, field, n_steps)
            units[f"{field}_{host}"] = UNITS[field]
    for vm in vms:
        for field in VM_TARGET_FIELDS:
            series[f"{field}_{vm}"] = _regular(tasks, "task_name", vm, field, n_steps)
            units[f"{field}_{vm}"] = UNITS[field]
    return series, units


def run(
    days: float = DEFAULT_DAYS,
    workdir: str | os.PathLike | None = None,
    trace: str | None = None,
    image: str | None = None,
    vms: tuple[str, ...] | None = None,
) -> Baselines:
    """Write the inputs, run OpenDC and return its 22 targets at 300 s."""
    command = find_backend(image)
    if trace is None:
        raise SimulatorError(
            "OpenDC needs a Bitbrains trace folder (--trace DIR with <vm>.csv files)"
        )
    files = select_vms(trace, vms)
    traces = [read_bitbrains_vm(p) for p in files]
    n_steps = int(round(days * 86400 / INTERVAL_S))
    with tempfile.TemporaryDirectory(prefix="whatif-opendc-", dir=workdir) as tmp:
        folder = Path(tmp)
        (folder / "topology.json").write_text(json.dumps(topology(), indent=2))
        (folder / "experiment.json").write_text(json.dumps(experiment(), indent=2))
        write_workload(traces, folder / "workload", days)
        full = [part.replace("{workdir}", str(folder)) for part in command] + ["experiment.json"]
        result = subprocess.run(full, cwd=folder, capture_output=True, text=True)
        if result.returncode != 0:
            raise SimulatorError(
                f"OpenDC failed (exit {result.returncode}): {result.stderr[-2000:]}"
            )
        host_files = sorted(folder.glob("output/**/host.parquet"))
        task_files = sorted(folder.glob("output/**/task.parquet"))
        if not host_files or not task_files:
            raise SimulatorError(
                "OpenDC finished but wrote no host.parquet/task.parquet under output/"
            )
        series, units = parse_outputs(host_files[0], task_files[0], PAPER_VMS, n_steps)
        inputs = {
            name: (folder / name).read_text() for name in ("topology.json", "experiment.json")
        }
    return Baselines(
        simulator=NAME,
        simulator_version="OpenDC (" + " ".join(command[:1]) + ")",
        interval_s=INTERVAL_S,
        start=trace_start(traces),
        series=series,
        units=units,
        covariate_base_values={
            **{f"coreCount_{h}": float(HOST_SETTINGS["coreCount"]) for h in HOSTS},
            **{f"coreSpeed_{h}": HOST_SETTINGS["coreSpeed"] for h in HOSTS},
            **{f"memorySize_{h}": float(HOST_SETTINGS["memory_gib"]) for h in HOSTS},
        },
        inputs={**inputs, "trace": ", ".join(p.name for p in files)},
        notes="Bitbrains VMs " + ", ".join(p.stem for p in files),
    )
