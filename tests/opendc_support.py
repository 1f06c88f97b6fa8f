"""Where the OpenDC tests find the shared Bitbrains trace and OpenDC 2.0 Maven repository, and
small helpers to write trace folders (never copied into the repository; read in place)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

# $WHATIF_SHARED_DATA names the shared data folder when the clone is not beside it.
SHARED = Path(__file__).resolve().parents[2] / "shared"
SHARED_DATA = Path(os.environ.get("WHATIF_SHARED_DATA", SHARED / "data"))
SHARED_TRACE = SHARED_DATA / "opendc-bitbrains-small"
TRACE_2_0 = SHARED_TRACE / "opendc-2.0"
TRACE_CURRENT = SHARED_TRACE / "current"
# `bash dev test` sets $WHATIF_OPENDC_MAVEN_REPO to ../shared/opendc-maven when it exists
MAVEN_REPO = Path(os.environ.get("WHATIF_OPENDC_MAVEN_REPO") or SHARED / "opendc-maven")

GWA_HEADER = (
    "Timestamp [ms];\tCPU cores;\tCPU capacity provisioned [MHZ];\tCPU usage [MHZ];\tCPU usage [%];\t"
    "Memory capacity provisioned [KB];\tMemory usage [KB];\tDisk read throughput [KB/s];\t"
    "Disk write throughput [KB/s];\tNetwork received throughput [KB/s];\tNetwork transmitted throughput [KB/s]"
)


def need_trace() -> Path:
    if not (TRACE_2_0 / "trace.parquet").is_file():
        pytest.skip(f"the shared Bitbrains trace is not at {SHARED_TRACE}")
    return TRACE_2_0


def need_jvm() -> None:
    """Skip (saying why) unless java and mvn are on PATH and the OpenDC repository is there."""
    missing = [tool for tool in ("java", "mvn") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"the OpenDC library backend needs {' and '.join(missing)} on PATH")
    if not (MAVEN_REPO / "org" / "opendc").is_dir():
        pytest.skip(f"no OpenDC 2.0 Maven repository at {MAVEN_REPO}")
    need_trace()


def write_gwa_csv(
    folder: Path,
    vm: str,
    usage,
    cores=1,
    capacity=2926.0,
    start_s=1376314546,
    memory_kb=262144,
    step_s=300,
) -> Path:
    """One GWA-T-12 ``<vm>.csv`` with one row per 300 s sample of ``usage`` (MHz)."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = [GWA_HEADER]
    for i, u in enumerate(np.asarray(usage, dtype=float).tolist()):
        lines.append(
            f"{start_s + step_s * i};\t{cores};\t{capacity};\t{u!r};\t{100 * u / capacity};\t"
            f"{memory_kb};\t0;\t0;\t0;\t0;\t0"
        )
    path = folder / f"{vm}.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def gwa_folder_from_2_0(folder: Path, vms=("1019", "1023", "1026", "1129")) -> Path:
    """GWA-T-12 files of the shared 2.0 trace's VMs: every fragment expanded back into its 300 s
    samples (OpenDC's converter merged runs of zero usage into longer fragments)."""
    from whatif_bench.simulators.opendc.traces import read_trace

    trace = read_trace(need_trace(), vms)
    for vm in vms:
        item = trace.vms[vm]
        usage = np.repeat(item.usage_mhz, item.durations_ms // 300_000)
        write_gwa_csv(
            folder,
            vm,
            usage,
            cores=item.cores,
            start_s=item.submission_ms // 1000,
            memory_kb=item.memory_mb * 1000,
        )
    return folder
