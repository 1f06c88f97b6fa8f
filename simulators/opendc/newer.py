"""The ``cli`` and ``container`` backends: the newer OpenDC's command-line tool.

The newer OpenDC (the one the paper ran, after 2.x) is a JVM program with a command line,
``opendc run experiment.json``; no package index serves it. This backend writes its documented
inputs (a topology of one cluster of four hosts, an experiment file, a workload of tasks and
fragments in Parquet), runs ``opendc`` (``$OPENDC_BIN`` or on PATH) or a Docker image the user
names (``--image``), and parses ``host.parquet`` and ``task.parquet`` into the 22 targets. It
is kept as an alternative to the ``library`` backend: it cannot be run or checked here, and it
places VMs with the newer OpenDC's own allocation policy, so the paper's placement is not
enforced.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np

from whatif_bench.simulators.base import SimulatorError, SimulatorUnavailable
from whatif_bench.simulators.opendc.rack import (
    HOST_TARGET_FIELDS,
    INTERVAL_S,
    TARGET_HOSTS,
    UNITS,
    VM_TARGET_FIELDS,
    HostSetting,
)
from whatif_bench.simulators.opendc.traces import TraceVM

HOW_TO_GET_OPENDC = (
    "the newer OpenDC is a JVM program that no package index serves: build or download it "
    "(then put `opendc` on PATH or set OPENDC_BIN), or pass --image with a Docker image that "
    "runs it"
)


def find_command(image: str | None = None) -> list[str]:
    """The command prefix that runs the newer OpenDC: ``$OPENDC_BIN``, ``opendc`` on PATH, or
    ``docker run IMAGE`` when ``image`` is given."""
    if image:
        if shutil.which("docker") is None:
            raise SimulatorUnavailable(f"--image {image} needs a Docker client on PATH")
        return ["docker", "run", "--rm", "-v", "{workdir}:/work", "-w", "/work", image, "run"]
    binary = os.environ.get("OPENDC_BIN") or shutil.which("opendc")
    if binary:
        return [binary, "run"]
    raise SimulatorUnavailable(f"no `opendc` command found: {HOW_TO_GET_OPENDC}")


def topology(hosts: tuple[HostSetting, ...]) -> dict:
    """The topology in the newer OpenDC's JSON layout: one cluster of identical hosts, which
    OpenDC names host-0, host-1, ..."""
    if (
        len(
            {
                (h.core_count, h.core_speed_mhz, h.memory_gib, h.idle_power_w, h.max_power_w)
                for h in hosts
            }
        )
        != 1
    ):
        raise SimulatorError("the newer OpenDC's topology here holds identical hosts only")
    host = hosts[0]
    return {
        "clusters": [
            {
                "name": "C01",
                "hosts": [
                    {
                        "name": "host",
                        "count": len(hosts),
                        "cpu": {"coreCount": host.core_count, "coreSpeed": host.core_speed_mhz},
                        "memory": {"memorySize": int(host.memory_gib * 2**30)},
                        "cpuPowerModel": {
                            "modelType": "linear",
                            "idlePower": host.idle_power_w,
                            "maxPower": host.max_power_w,
                        },
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


def write_workload(
    vms: list[TraceVM], folder: Path, length_ms: int, core_speed_mhz: float
) -> tuple[Path, Path]:
    """``tasks.parquet`` and ``fragments.parquet`` in the newer OpenDC's schema, every VM's
    fragments cut at ``length_ms``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    tasks: list[dict[str, object]] = []
    fragments: list[dict[str, object]] = []
    for vm in vms:
        durations, usage = vm.cut(length_ms)
        tasks.append(
            {
                "id": vm.vm_id,
                "submission_time": vm.submission_ms,
                "duration": int(durations.sum()),
                "cpu_count": vm.cores,
                "cpu_capacity": vm.capacity_mhz or vm.cores * core_speed_mhz,
                "mem_capacity": vm.memory_mb * 1000,  # KB
            }
        )
        fragments.extend(
            {"id": vm.vm_id, "duration": int(d), "cpu_count": vm.cores, "cpu_usage": float(u)}
            for d, u in zip(durations.tolist(), usage.tolist(), strict=True)
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


def _regular(frame, key: str, name: str, field: str, n_steps: int) -> np.ndarray:
    """One entity's column on the 300 s grid (timestamps are ms since the start)."""
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
    vms: dict[str, str],
    n_steps: int | None = None,
) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """The 22 targets from ``host.parquet`` and ``task.parquet``; ``vms`` maps each target VM
    slot to the trace VM that filled it."""
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
    for host in TARGET_HOSTS:
        for field in HOST_TARGET_FIELDS:
            series[f"{field}_{host}"] = _regular(hosts, "host_name", host, field, n_steps)
            units[f"{field}_{host}"] = UNITS[field]
    for slot, vm in vms.items():
        for field in VM_TARGET_FIELDS:
            series[f"{field}_{slot}"] = _regular(tasks, "task_name", vm, field, n_steps)
            units[f"{field}_{slot}"] = UNITS[field]
    return series, units


def run_newer(
    command: list[str],
    folder: Path,
    hosts: tuple[HostSetting, ...],
    vms: list[TraceVM],
    slots: dict[str, str],
    windows: int,
) -> tuple[dict[str, np.ndarray], dict[str, str], dict[str, str]]:
    """Write the inputs in ``folder``, run the newer OpenDC and parse its output: (series,
    units, the input files' texts)."""
    (folder / "topology.json").write_text(json.dumps(topology(hosts), indent=2))
    (folder / "experiment.json").write_text(json.dumps(experiment(), indent=2))
    write_workload(vms, folder / "workload", windows * INTERVAL_S * 1000, hosts[0].core_speed_mhz)
    full = [part.replace("{workdir}", str(folder)) for part in command] + ["experiment.json"]
    try:
        result = subprocess.run(full, cwd=folder, capture_output=True, text=True, check=False)
    except OSError as exc:
        raise SimulatorError(f"cannot start OpenDC ({full[0]}): {exc}") from None
    if result.returncode != 0:
        tail = (result.stderr.strip().splitlines() or ["no message"])[-1]
        raise SimulatorError(f"OpenDC failed (exit {result.returncode}): {tail[:500]}")
    host_files = sorted(folder.glob("output/**/host.parquet"))
    task_files = sorted(folder.glob("output/**/task.parquet"))
    if not host_files or not task_files:
        raise SimulatorError("OpenDC finished but wrote no host.parquet/task.parquet under output/")
    series, units = parse_outputs(host_files[0], task_files[0], slots, windows)
    inputs = {name: (folder / name).read_text() for name in ("topology.json", "experiment.json")}
    return series, units, inputs
