"""OpenDC (a JVM data-centre simulator): its 22 targets from a real run on a Bitbrains trace.

Three backends run OpenDC; none is imitated and no output is made up:

- ``library`` (the default where ``java`` and ``mvn`` are on PATH): OpenDC 2.0's published
  libraries (``org.opendc:*:2.0``) through a small Kotlin driver built with Maven on first use
  (``library.py``, sources in ``driver/``);
- ``cli``: the newer OpenDC's ``opendc`` command (``$OPENDC_BIN`` or PATH; ``newer.py``);
- ``container``: the same command inside a Docker image the user names (``image``).

The base setting (``rack.py``): four hosts of 16 cores at 3000 MHz, 64 GiB and a linear power
model (105.5 W idle, 250 W at full load); Bitbrains VMs 1019 and 1023 on host-0, 1026 on host-1
and 1129 on host-2, placed by OpenDC's ``ReplayScheduler``. The trace (``traces.py``) is read
from ``trace`` or ``$WHATIF_OPENDC_TRACE``, in OpenDC 2.0's, the newer OpenDC's or the raw
GWA-T-12 layout.

Series are means over 300 s windows from the VMs' start (window k replays each VM's k-th
5-minute sample). The run lasts ``days`` or until the first of the three target VMs' traces
ends, whichever is sooner: the trace has no samples beyond that, and none are invented.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from whatif_bench.simulators.base import Baselines, SimulatorError, SimulatorUnavailable
from whatif_bench.simulators.opendc import library, newer
from whatif_bench.simulators.opendc.rack import (
    BASE_HOSTS,
    FOURTH_VM,
    HOST_TARGET_FIELDS,
    INTERVAL_S,
    NAME,
    PAPER_VMS,
    SLOT_HOSTS,
    TARGET_HOSTS,
    UNITS,
    VM_SLOTS,
    VM_TARGET_FIELDS,
    WINDOW_MS,
    HostSetting,
    check_hosts,
    check_vms,
    covariate_base_values,
)
from whatif_bench.simulators.opendc.traces import (
    WHERE_TO_GET,
    Trace,
    TraceError,
    TraceVM,
    read_trace,
)
from whatif_bench.simulators.opendc_settings import TRACE_ENV, trace_setting

DEFAULT_DAYS = 30
BACKENDS = ("auto", "library", "cli", "container")
SETTING_INPUT = "setting.json"

__all__ = [
    "BACKENDS",
    "BASE_HOSTS",
    "DEFAULT_DAYS",
    "FOURTH_VM",
    "HOST_TARGET_FIELDS",
    "INTERVAL_S",
    "NAME",
    "PAPER_VMS",
    "TARGET_HOSTS",
    "TRACE_ENV",
    "UNITS",
    "VM_SLOTS",
    "VM_TARGET_FIELDS",
    "HostSetting",
    "TraceError",
    "choose_backend",
    "plan_windows",
    "run",
]


def choose_backend(backend: str = "auto", image: str | None = None) -> str:
    """The backend to use: ``auto`` takes ``library`` when java and mvn are on PATH, else
    ``cli`` when an ``opendc`` command exists, else ``container`` when ``image`` is given.
    Without any, ``SimulatorUnavailable`` names what each one needs."""
    if backend not in BACKENDS:
        raise SimulatorError(f"unknown OpenDC backend {backend!r}; expected one of {BACKENDS}")
    if image and backend not in ("auto", "container"):
        raise SimulatorError(f"--image names a container; it does not go with --backend {backend}")
    if backend == "library":
        library.find_toolchain()
        return backend
    if backend == "cli":
        newer.find_command()
        return backend
    if backend == "container":
        if not image:
            raise SimulatorError("--backend container needs --image (an image running `opendc`)")
        newer.find_command(image)
        return backend
    if image:
        newer.find_command(image)
        return "container"
    reasons = []
    for name, probe in (("library", library.find_toolchain), ("cli", newer.find_command)):
        try:
            probe()
            return name
        except SimulatorUnavailable as exc:
            reasons.append(f"{name}: {exc}")
    raise SimulatorUnavailable(
        "no OpenDC backend can run here (" + "; ".join(reasons) + "; container: needs --image)"
    )


def trace_folder(trace: str | os.PathLike | None) -> Path:
    """``trace``, else ``$WHATIF_OPENDC_TRACE``; without either, ``SimulatorUnavailable``."""
    value = trace_setting(trace)
    if value is None:
        raise SimulatorUnavailable(
            f"OpenDC needs a Bitbrains trace: pass --trace DIR or set {TRACE_ENV}. {WHERE_TO_GET}"
        )
    return Path(value).expanduser()


def requested_windows(days: float) -> int:
    """Whole 300 s windows in ``days``."""
    return int(round(days * 86400 / INTERVAL_S))


def plan_windows(days: float, loaded: Trace, vms: tuple[str, ...]) -> int:
    """How many 300 s windows the run has: ``days`` of them, or fewer where a target VM's
    trace ends sooner (OpenDC replays a trace's fragments back to back; past their end a VM
    has terminated)."""
    requested = requested_windows(days)
    if requested < 2:
        raise SimulatorError(f"OpenDC: {days} days gives fewer than 2 windows of {INTERVAL_S} s")
    starts = {loaded.vms[vm].submission_ms for vm in vms}
    if len(starts) != 1:
        when = {vm: loaded.vms[vm].submission_ms for vm in vms}
        raise TraceError(
            f"{loaded.folder}: the run's VMs must be submitted together (ms since the epoch: "
            f"{when})"
        )
    available = min(loaded.vms[vm].replayed_ms // WINDOW_MS for vm in vms[: len(PAPER_VMS)])
    if available < 2:
        raise TraceError(f"{loaded.folder}: the target VMs' traces hold under 2 windows")
    return min(requested, int(available))


def run(
    *,
    days: float = DEFAULT_DAYS,
    workdir: str | os.PathLike | None = None,
    trace: str | os.PathLike | None = None,
    image: str | None = None,
    vms: tuple[str, ...] | None = None,
    backend: str = "auto",
    maven_repo: str | os.PathLike | None = None,
    hosts: tuple[HostSetting, ...] | None = None,
) -> Baselines:
    """Run OpenDC on the rack for ``days`` and return its 22 targets at 300 s.

    ``vms`` fill the VM slots (1019, 1023, 1026, 1129; default: those VMs themselves),
    ``hosts`` replaces the four hosts' settings, ``maven_repo`` adds a Maven repository for
    the library backend's build (default ``$WHATIF_OPENDC_MAVEN_REPO``).
    """
    rack = check_hosts(BASE_HOSTS if hosts is None else hosts)
    chosen = check_vms(vms)
    kind = choose_backend(backend, image)
    folder = trace_folder(trace)
    loaded = read_trace(folder, chosen)
    windows = plan_windows(days, loaded, chosen)
    slots = dict(zip(PAPER_VMS, chosen, strict=False))
    vm_list = [loaded.vms[vm] for vm in chosen]
    start = datetime.fromtimestamp(vm_list[0].submission_ms / 1000, tz=UTC).isoformat()
    requested = requested_windows(days)
    cut = (
        f" The run has {windows} windows, not {requested}: VM "
        f"{min(chosen[:3], key=lambda v: loaded.vms[v].replayed_ms)}'s trace ends there."
        if windows < requested
        else ""
    )
    notes = (
        f"Bitbrains VMs {', '.join(chosen)} (slots {', '.join(VM_SLOTS)}) on "
        f"{', '.join(SLOT_HOSTS)}; trace layout {loaded.layout}.{cut}"
    )
    with tempfile.TemporaryDirectory(prefix="whatif-opendc-", dir=workdir) as tmp:
        if kind == "library":
            series, units, inputs, version = _run_library(
                Path(tmp), rack, vm_list, slots, windows, maven_repo
            )
        else:
            command = newer.find_command(image if kind == "container" else None)
            series, units, inputs = newer.run_newer(
                command, Path(tmp), rack, vm_list, slots, windows
            )
            version = f"newer OpenDC ({' '.join(command[:1])}, {kind} backend)"
    setting = {
        "backend": kind,
        "trace": {"layout": loaded.layout, "files_sha256": loaded.files},
        "vms": {slot: vm for slot, vm in zip(VM_SLOTS, chosen, strict=True)},
        "placement": (
            dict(zip(chosen, SLOT_HOSTS, strict=True))
            if kind == "library"
            else "the newer OpenDC's Mem allocation policy (not enforced)"
        ),
        "windows": windows,
        "window_s": INTERVAL_S,
    }
    return Baselines(
        simulator=NAME,
        simulator_version=version,
        interval_s=INTERVAL_S,
        start=start,
        series=series,
        units=units,
        covariate_base_values=covariate_base_values(rack),
        inputs={**inputs, SETTING_INPUT: json.dumps(setting, indent=2, sort_keys=True)},
        notes=notes,
    )


def _run_library(
    folder: Path,
    hosts: tuple[HostSetting, ...],
    vms: list[TraceVM],
    slots: dict[str, str],
    windows: int,
    maven_repo: str | os.PathLike | None,
) -> tuple[dict[str, np.ndarray], dict[str, str], dict[str, str], str]:
    """The library backend: build (once) and run the driver, derive the 22 series."""
    from tqdm import tqdm

    toolchain = library.find_toolchain()
    jar = library.build_driver(toolchain, maven_repo)
    placement = [
        (vm.vm_id, vm.cores, vm.memory_mb, host) for vm, host in zip(vms, SLOT_HOSTS, strict=True)
    ]
    length_ms = windows * WINDOW_MS
    fragments = {vm.vm_id: (*vm.cut(length_ms), vm.cores) for vm in vms}
    inputs_dir, outputs_dir = folder / "in", folder / "out"
    inputs_dir.mkdir()
    texts = library.write_inputs(inputs_dir, hosts, placement, fragments)
    with tqdm(
        total=windows, desc="OpenDC 2.0", unit="window", file=sys.stderr, leave=False, disable=None
    ) as bar:

        def advance(done: int) -> None:
            bar.update(done - bar.n)

        library.run_driver(toolchain, jar, inputs_dir, outputs_dir, windows, on_progress=advance)
        bar.set_description("OpenDC 2.0: reading its output")
        output = library.read_output(
            outputs_dir, [h.name for h in hosts], [vm.vm_id for vm in vms], windows
        )
    for vm, host in zip(vms, SLOT_HOSTS, strict=True):
        if output.run.get(f"placement.{vm.vm_id}") != host:
            raise SimulatorError(f"OpenDC placed VM {vm.vm_id} elsewhere than on {host}")
    series: dict[str, np.ndarray] = {}
    for host in TARGET_HOSTS:
        values = output.hosts[host]
        series[f"cpu_demand_{host}"] = values["cpu_demand_mhz"]
        series[f"cpu_usage_{host}"] = values["cpu_usage_mhz"]
        series[f"cpu_utilization_{host}"] = values["cpu_utilization"]
        # the time the host's cores were busy in the window: utilisation x window length
        series[f"cpu_time_active_{host}"] = values["cpu_utilization"] * WINDOW_MS
        series[f"power_draw_{host}"] = values["power_draw_w"]
    for slot, vm_id in slots.items():
        values = output.vms[vm_id]
        active = values["cpu_usage_mhz"] / output.capacity_mhz[vm_id] * WINDOW_MS
        series[f"cpu_demand_{slot}"] = values["cpu_demand_mhz"]
        series[f"cpu_usage_{slot}"] = values["cpu_usage_mhz"]
        series[f"cpu_time_active_{slot}"] = active
        series[f"cpu_time_idle_{slot}"] = WINDOW_MS - active
    units = {name: UNITS[name.rsplit("_", 1)[0]] for name in series}
    versions = library.declared_versions()
    source = library.build_repository(jar)
    version = (
        f"OpenDC {versions['opendc']} libraries (org.opendc:*:{versions['opendc']} from "
        f"{'Maven Central and ' + source if source else 'Maven Central'}) via the "
        f"whatif-opendc driver {library.driver_hash()[:12]} (Kotlin {versions['kotlin']}, "
        f"kotlinx-coroutines {versions['coroutines']}, OpenTelemetry metrics "
        f"{versions['otel.metrics']}), Java {toolchain.java_version}"
    )
    inputs = {"hosts.csv": texts["hosts.csv"], "vms.csv": texts["vms.csv"]}
    inputs["fragments.sha256"] = library.sha256_text(texts["fragments.csv"])
    return series, units, inputs, version
