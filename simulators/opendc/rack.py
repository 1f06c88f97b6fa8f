"""The base setting of the OpenDC benchmark: one rack of four hosts and four trace VMs.

Each host has 16 cores at 3000 MHz, 64 GiB of memory and OpenDC's linear CPU power model from
105.5 W idle to 250 W at full load. VMs 1019 and 1023 run on host-0 and VM 1026 on host-1 (the
paper's placement); the fourth VM, 1129, runs on host-2, which no target reads, so the paper's
hosts carry exactly the paper's VMs. Targets read host-0, host-1 and the three paper VMs; the
names of the VM targets are those of the VM *slots* (``cpu_usage_1019`` is the VM in slot 1019,
which a training world may fill with another trace VM).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

from whatif_bench.simulators.base import SimulatorError

NAME = "opendc"
INTERVAL_S = 300
WINDOW_MS = INTERVAL_S * 1000
TARGET_HOSTS = ("host-0", "host-1")
PAPER_VMS = ("1019", "1023", "1026")
FOURTH_VM = "1129"
VM_SLOTS = (*PAPER_VMS, FOURTH_VM)
SLOT_HOSTS = ("host-0", "host-0", "host-1", "host-2")  # where each slot's VM runs
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


@dataclass(frozen=True)
class HostSetting:
    """One host: ``core_count`` cores at ``core_speed_mhz``, ``memory_gib`` of memory and a
    linear power model from ``idle_power_w`` to ``max_power_w`` (OpenDC's LinearPowerModel)."""

    name: str
    core_count: int = 16
    core_speed_mhz: float = 3000.0
    memory_gib: float = 64.0
    idle_power_w: float = 105.5
    max_power_w: float = 250.0

    def __post_init__(self) -> None:
        if isinstance(self.core_count, bool) or not isinstance(self.core_count, numbers.Integral):
            raise SimulatorError(f"OpenDC host {self.name}: core count must be a whole number")
        object.__setattr__(self, "core_count", int(self.core_count))
        values = (self.core_speed_mhz, self.memory_gib, self.idle_power_w, self.max_power_w)
        if not all(
            isinstance(v, numbers.Real)
            and not isinstance(v, bool)
            and math.isfinite(v)
            and abs(v) < 1e12
            for v in values
        ):
            raise SimulatorError(f"OpenDC host {self.name}: settings must be finite numbers")
        if self.core_count < 1 or self.core_speed_mhz <= 0 or self.memory_mb < 1:
            raise SimulatorError(
                f"OpenDC host {self.name}: needs at least 1 core, a core speed > 0 and 1 MB "
                f"of memory, got {self.core_count} x {self.core_speed_mhz} MHz, "
                f"{self.memory_gib} GiB"
            )
        if not 0 <= self.idle_power_w <= self.max_power_w:
            raise SimulatorError(
                f"OpenDC host {self.name}: power must satisfy 0 <= idle <= max, got idle "
                f"{self.idle_power_w} W, max {self.max_power_w} W"
            )

    @property
    def memory_mb(self) -> int:
        """Memory in MB as OpenDC's ``MemoryUnit`` takes it (1 GiB = 1024 MB)."""
        return int(round(self.memory_gib * 1024))

    @property
    def capacity_mhz(self) -> float:
        """The host's CPU capacity: cores x core speed (MHz)."""
        return self.core_count * self.core_speed_mhz


BASE_HOSTS = tuple(HostSetting(f"host-{i}") for i in range(4))


def covariate_base_values(hosts: tuple[HostSetting, ...]) -> dict[str, float]:
    """The six covariates' values in the setting that was run (the spec's units)."""
    by_name = {h.name: h for h in hosts}
    values: dict[str, float] = {}
    for name in TARGET_HOSTS:
        host = by_name[name]
        values[f"coreCount_{name}"] = float(host.core_count)
        values[f"coreSpeed_{name}"] = float(host.core_speed_mhz)
        values[f"memorySize_{name}"] = float(host.memory_gib)
    return values


def check_hosts(hosts: tuple[HostSetting, ...]) -> tuple[HostSetting, ...]:
    """The rack's hosts: host-0 .. host-3 in order, each a ``HostSetting``."""
    hosts = tuple(hosts)
    if not all(isinstance(h, HostSetting) for h in hosts):
        raise SimulatorError("OpenDC hosts must be HostSetting records")
    names = tuple(h.name for h in hosts)
    expected = tuple(h.name for h in BASE_HOSTS)
    if names != expected:
        raise SimulatorError(f"OpenDC rack: expected hosts {list(expected)}, got {list(names)}")
    return hosts


def check_vms(vms: tuple[str, ...] | None) -> tuple[str, ...]:
    """The trace VMs filling the four slots (default: the benchmark's 1019, 1023, 1026, 1129)."""
    if vms is None:
        return VM_SLOTS
    vms = tuple(str(v) for v in vms)
    if len(vms) != len(VM_SLOTS) or len(set(vms)) != len(vms):
        raise SimulatorError(
            f"OpenDC needs {len(VM_SLOTS)} different trace VMs for the slots {list(VM_SLOTS)}, "
            f"got {list(vms)}"
        )
    return vms
