"""The ``library`` backend: OpenDC 2.0's published libraries, through a small JVM driver.

The driver (``driver/``: a Maven project, ``pom.xml`` and the Kotlin sources in ``kotlin/``) declares OpenDC's
modules by their Maven Central coordinates ``org.opendc:*:2.0``. It is built with ``mvn`` on
first use into a cache folder outside the repository, keyed by a hash of its sources and POM
(``$WHATIF_OPENDC_CACHE``, default ``~/.cache/whatif-bench/opendc-driver``), and run with
``java -jar``. Where the Maven repositories this machine reaches lack OpenDC 2.0, one more
repository is added from a setting: ``$WHATIF_OPENDC_MAVEN_REPO`` or ``maven_repo`` (a folder
in Maven's layout, or a URL).

The driver reads three small CSV files (hosts, VMs with their placement, trace fragments),
runs OpenDC's compute service under its own simulated clock and writes window means
(``read_output``); every failure is one ``SimulatorError``.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from whatif_bench.simulators.base import SimulatorError, SimulatorUnavailable
from whatif_bench.simulators.opendc.rack import WINDOW_MS, HostSetting
from whatif_bench.simulators.opendc_settings import MAVEN_REPO_ENV, is_maven_repository

DRIVER_DIR = Path(__file__).parent / "driver"
JAR_NAME = "whatif-opendc-driver.jar"
BUILD_RECORD = "build.properties"  # beside the jar: which extra Maven repository it came from
DRIVER_VERSION = "1"  # the driver's output layout (run.properties driver_version)
CACHE_ENV = "WHATIF_OPENDC_CACHE"
DEFAULT_CACHE = Path("~/.cache/whatif-bench/opendc-driver")
MIN_JAVA = 8  # the driver's bytecode targets Java 8, as OpenDC 2.0's did
# Both JVMs this module starts are short-lived (Maven's build: about 10 s; a 30-day driver run:
# about 2 s), so they stop at the first JIT tier and collect garbage in one thread: the optimising
# compiler's and the parallel collector's threads cost more CPU than they save in runs this short.
# Measured on this two-core machine, idle: the build 28 -> 15 CPU s (15 -> 10.5 s wall), a 30-day
# run 2.8 -> 1.3 CPU s. The jar's classes and the runs' outputs came out the same to the byte
# (2- and 30-day runs; tests/test_opendc_library.py rebuilds the shipped baselines). Options a
# user sets in MAVEN_OPTS come after these, so theirs win.
SHORT_JVM_OPTIONS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")
HOW_TO_GET_JVM = (
    "the OpenDC 2.0 backend needs a JDK (java, version 8 or newer) and Maven (mvn) on PATH, "
    "e.g. Debian's openjdk-17-jdk-headless and maven packages"
)


@dataclass(frozen=True)
class Toolchain:
    """``java`` (checked) and ``mvn`` (None where the driver's jar is already built)."""

    java: str
    mvn: str | None
    java_version: str  # e.g. "17.0.15"


def find_toolchain(need_maven: bool | None = None) -> Toolchain:
    """``java`` and ``mvn`` from PATH, with Java's version checked. ``mvn`` is needed only to
    build the driver: by default only when the cache lacks the jar (a container image ships it
    built)."""
    if need_maven is None:
        need_maven = not built_jar().is_file()
    java, mvn = shutil.which("java"), shutil.which("mvn")
    wanted = (("java", java), ("mvn", mvn)) if need_maven else (("java", java),)
    missing = [name for name, path in wanted if path is None]
    if missing or java is None:
        raise SimulatorUnavailable(f"no {' or '.join(missing)} on PATH: {HOW_TO_GET_JVM}")
    try:
        probe = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SimulatorUnavailable(f"{java} -version failed ({exc}): {HOW_TO_GET_JVM}") from None
    match = re.search(r'version "([^"]+)"', probe.stderr + probe.stdout)
    if probe.returncode != 0 or match is None:
        raise SimulatorUnavailable(
            f"{java} -version printed no version (exit {probe.returncode}): {HOW_TO_GET_JVM}"
        )
    version = match.group(1)
    parts = version.split(".")
    major = (
        int(parts[1])
        if parts[0] == "1" and len(parts) > 1
        else int(re.sub(r"\D.*", "", parts[0]) or 0)
    )
    if major < MIN_JAVA:
        raise SimulatorUnavailable(
            f"{java} is Java {version}; the OpenDC 2.0 driver needs Java {MIN_JAVA} or newer"
        )
    return Toolchain(java, mvn, version)


def driver_files() -> dict[str, bytes]:
    """The driver's POM and sources by path relative to ``driver/``."""
    files = {"pom.xml": (DRIVER_DIR / "pom.xml").read_bytes()}
    for path in sorted((DRIVER_DIR / "kotlin").glob("*.kt")):
        files[path.relative_to(DRIVER_DIR).as_posix()] = path.read_bytes()
    return files


def driver_hash() -> str:
    """SHA-256 over the driver's POM and sources (names and bytes): the build cache key."""
    digest = hashlib.sha256()
    for name, data in sorted(driver_files().items()):
        digest.update(f"{name}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()


def declared_versions() -> dict[str, str]:
    """The versions the driver's POM pins (OpenDC, Kotlin, kotlinx-coroutines, OpenTelemetry)."""
    text = (DRIVER_DIR / "pom.xml").read_text()
    keys = ("opendc.version", "kotlin.version", "coroutines.version", "otel.metrics.version")
    found = {}
    for key in keys:
        match = re.search(rf"<{re.escape(key)}>([^<]+)</{re.escape(key)}>", text)
        found[key.removesuffix(".version")] = match.group(1) if match else "?"
    return found


def maven_repository(maven_repo: str | os.PathLike | None) -> str | None:
    """The extra Maven repository as a URL (``maven_repo``, else ``$WHATIF_OPENDC_MAVEN_REPO``,
    else none). A folder must exist and look like a Maven repository."""
    value = maven_repo if maven_repo is not None else os.environ.get(MAVEN_REPO_ENV) or None
    if value is None:
        return None
    text = str(value)
    if re.match(r"^[a-z][a-z0-9+.-]*://", text):
        return text
    folder = Path(text).expanduser().resolve()
    source = "--maven-repo" if maven_repo is not None else f"${MAVEN_REPO_ENV}"
    if not folder.is_dir():
        raise SimulatorError(f"{source} {text}: no such folder")
    if not is_maven_repository(folder):
        raise SimulatorError(
            f"{source} {text}: not a Maven repository (no org/ folder; expected org/opendc/...)"
        )
    return folder.as_uri()


def cache_folder() -> Path:
    return Path(os.environ.get(CACHE_ENV) or DEFAULT_CACHE).expanduser()


def built_jar(cache: Path | None = None) -> Path:
    """Where the jar of the current driver sources lives once built."""
    return (cache or cache_folder()) / driver_hash()[:16] / JAR_NAME


def build_driver(
    toolchain: Toolchain,
    maven_repo: str | os.PathLike | None = None,
    cache: str | os.PathLike | None = None,
    local_repository: str | os.PathLike | None = None,
    say: Callable[[str], None] = lambda line: print(line, file=sys.stderr),
) -> Path:
    """The driver's jar, built with Maven first if the cache lacks it.

    ``local_repository`` is Maven's local repository (default: Maven's own, ``~/.m2``). One
    process builds at a time (a lock beside the cache entry; others wait, then use its jar). The
    build runs in a temporary folder there; the jar appears in the cache only when complete.
    """
    folder = Path(cache) if cache is not None else cache_folder()
    jar = built_jar(folder.expanduser())
    if jar.is_file():
        return jar
    repository = maven_repository(maven_repo)
    if toolchain.mvn is None:
        raise SimulatorUnavailable(f"no mvn on PATH to build the OpenDC driver: {HOW_TO_GET_JVM}")
    with _build_lock(jar):
        if jar.is_file():  # another process built it while this one waited
            return jar
        _build(toolchain, jar, repository, local_repository, say)
    return jar


@contextlib.contextmanager
def _build_lock(jar: Path) -> Iterator[None]:
    """Hold the build lock of ``jar``'s cache entry, waiting while another process holds it."""
    from whatif_bench.outputs import OutputError, OutputLockedError, output_lock

    with contextlib.ExitStack() as stack:
        while True:
            try:
                stack.enter_context(output_lock(jar.parent / "build"))
                break
            except OutputLockedError:
                time.sleep(0.5)
            except OutputError as exc:
                raise SimulatorError(f"cannot lock the OpenDC driver cache: {exc}") from None
        yield


def _build(
    toolchain: Toolchain,
    jar: Path,
    repository: str | None,
    local_repository: str | os.PathLike | None,
    say: Callable[[str], None],
) -> None:
    """Run Maven on a copy of the driver's sources; move the jar into place when it exists."""
    assert toolchain.mvn is not None
    try:
        work = Path(tempfile.mkdtemp(prefix=".build-", dir=jar.parent))
    except OSError as exc:
        raise SimulatorError(f"cannot create the OpenDC driver cache {jar.parent}: {exc}") from None
    try:
        try:
            for name, data in driver_files().items():
                (work / name).parent.mkdir(parents=True, exist_ok=True)
                (work / name).write_bytes(data)
        except OSError as exc:
            raise SimulatorError(
                f"cannot write the OpenDC driver's sources to {work}: {exc}"
            ) from None
        command = [toolchain.mvn, "-B", "-q", "-ntp", "package"]
        if repository:
            command.insert(-1, f"-Dopendc.extra.repo={repository}")
        if local_repository is not None:
            command.insert(-1, f"-Dmaven.repo.local={Path(local_repository).resolve()}")
        say(
            "building the OpenDC 2.0 driver with Maven (first use only; about 10 s, longer "
            f"while Maven fetches its plugins) into {jar.parent}"
        )
        user_options = os.environ.get("MAVEN_OPTS", "")
        env = {**os.environ, "MAVEN_OPTS": " ".join([*SHORT_JVM_OPTIONS, user_options]).strip()}
        try:
            result = subprocess.run(
                command,
                cwd=work,
                env=env,
                capture_output=True,
                text=True,
                timeout=1800,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise SimulatorError("the OpenDC driver's Maven build took over 30 min") from None
        except OSError as exc:
            raise SimulatorError(f"cannot run Maven ({toolchain.mvn}): {exc}") from None
        built = work / "target" / "whatif-opendc-driver-1.jar"
        if result.returncode != 0 or not built.is_file():
            log = result.stdout + result.stderr
            message = _build_failure(log, repository)
            if UNRESOLVED.search(log):  # nothing this machine reaches serves OpenDC 2.0
                raise SimulatorUnavailable(message)
            raise SimulatorError(message)
        try:
            (work / BUILD_RECORD).write_text(f"extra_repository={repository or ''}\n")
            os.replace(work / BUILD_RECORD, jar.parent / BUILD_RECORD)
            os.replace(built, jar)
        except OSError as exc:
            raise SimulatorError(f"cannot put the OpenDC driver into {jar.parent}: {exc}") from None
    finally:
        shutil.rmtree(work, ignore_errors=True)


def build_repository(jar: Path) -> str:
    """The extra Maven repository ``jar`` was built with ("" for Maven Central alone; "?" when
    not recorded)."""
    try:
        text = (jar.parent / BUILD_RECORD).read_text()
    except OSError:
        return "?"
    return text.strip().partition("=")[2]


UNRESOLVED = re.compile(r"org\.opendc:[\w-]+:(jar|pom):2\.0")


def _build_failure(log: str, repository: str | None) -> str:
    """One line saying why Maven failed: unresolved OpenDC artifacts, else its first error."""
    errors = [
        line.removeprefix("[ERROR]").strip()
        for line in log.splitlines()
        if line.startswith("[ERROR]") and line.removeprefix("[ERROR]").strip()
    ]
    first = errors[0] if errors else (log.strip().splitlines() or ["(no output)"])[-1]
    if UNRESOLVED.search(log):
        where = f"in {repository} or " if repository else ""
        return (
            f"the OpenDC driver's Maven build found no org.opendc:*:2.0 {where}in Maven Central; "
            f"set {MAVEN_REPO_ENV} (or --maven-repo) to a Maven repository that holds OpenDC 2.0"
            f" (Maven said: {first[:300]})"
        )
    return f"the OpenDC driver's Maven build failed: {first[:500]}"


def write_inputs(
    folder: Path,
    hosts: tuple[HostSetting, ...],
    placement: list[tuple[str, int, int, str]],
    fragments: dict[str, tuple[np.ndarray, np.ndarray, int]],
) -> dict[str, str]:
    """The driver's three input tables in ``folder``; returns their texts by file name.

    ``placement`` rows are (vm, cores, memory MB, host); ``fragments`` maps a VM to
    (durations ms (n,), usage MHz (n,), cores).
    """
    texts = {
        "hosts.csv": "name,core_count,core_speed_mhz,memory_mb,idle_power_w,max_power_w\n"
        + "".join(
            f"{h.name},{h.core_count},{float(h.core_speed_mhz)!r},{h.memory_mb},"
            f"{float(h.idle_power_w)!r},{float(h.max_power_w)!r}\n"
            for h in hosts
        ),
        "vms.csv": "vm,cores,memory_mb,host\n"
        + "".join(f"{vm},{cores},{memory},{host}\n" for vm, cores, memory, host in placement),
    }
    lines = ["vm,duration_ms,cpu_usage_mhz,cores\n"]
    for vm, (durations, usage, cores) in fragments.items():
        lines.extend(
            f"{vm},{int(d)},{float(u)!r},{cores}\n"
            for d, u in zip(durations.tolist(), usage.tolist(), strict=True)
        )
    texts["fragments.csv"] = "".join(lines)
    for name, text in texts.items():
        (folder / name).write_text(text)
    return texts


def run_driver(
    toolchain: Toolchain,
    jar: Path,
    inputs: Path,
    outputs: Path,
    windows: int,
    on_progress: Callable[[int], None] = lambda done: None,
    timeout_s: float | None = None,
) -> None:
    """Run the driver on ``inputs`` for ``windows`` windows, writing into ``outputs``.

    ``on_progress(k)`` is called as the driver reports k windows simulated. A JVM still running
    after ``timeout_s`` (default: 600 s plus 0.05 s a window; a 30-day run takes about 2 s) is
    killed.
    """
    command = [
        toolchain.java,
        *SHORT_JVM_OPTIONS,
        "-jar",
        str(jar),
        "--input",
        str(inputs),
        "--output",
        str(outputs),
        "--windows",
        str(windows),
        "--window-ms",
        str(WINDOW_MS),
    ]
    try:
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace"
        )
    except OSError as exc:
        raise SimulatorError(f"cannot start the OpenDC driver ({toolchain.java}): {exc}") from None
    messages: list[str] = []
    if timeout_s is None:
        timeout_s = 600 + windows * 0.05

    def read_stderr() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            parts = line.split()
            if len(parts) == 3 and parts[0] == "progress" and parts[1].isdigit():
                on_progress(int(parts[1]))
            elif line.strip():
                messages.append(line.rstrip())

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    try:
        code = process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise SimulatorError(f"the OpenDC driver ran over {timeout_s:.0f} s; stopped") from None
    finally:
        if process.poll() is None:  # timed out or interrupted: do not leave the JVM running
            process.kill()
            process.wait()
    assert process.stdout is not None
    stdout = process.stdout.read()
    reader.join(timeout=10)
    errors = [m.removeprefix("error: ") for m in messages if m.startswith("error: ")]
    if code != 0:
        detail = errors[0] if errors else (messages[-1] if messages else "no message")
        raise SimulatorError(f"the OpenDC driver failed (exit {code}): {detail[:500]}")
    if stdout.strip() != "done":
        raise SimulatorError(
            "the OpenDC driver did not finish as expected: it printed "
            f"{stdout.strip()[:200]!r} instead of 'done'"
        )


@dataclass(frozen=True)
class DriverOutput:
    """Window means the driver wrote, each of shape (windows,).

    ``hosts[name]`` holds ``cpu_usage_mhz``, ``cpu_demand_mhz``, ``cpu_utilization`` and
    ``power_draw_w``; ``vms[id]`` holds ``cpu_usage_mhz``, ``cpu_demand_mhz`` and the VM's
    ``capacity_mhz`` (vCPUs x their speed, one number); ``run`` the run's facts (start time on
    OpenDC's clock, the sampling grid, the placement OpenDC made).
    """

    hosts: dict[str, dict[str, np.ndarray]]
    vms: dict[str, dict[str, np.ndarray]]
    capacity_mhz: dict[str, float]
    run: dict[str, str]


HOST_COLUMNS = ("cpu_usage_mhz", "cpu_demand_mhz", "cpu_utilization", "power_draw_w")
VM_COLUMNS = ("cpu_usage_mhz", "cpu_demand_mhz", "capacity_mhz")


def _read_table(
    path: Path, key: str, columns: tuple[str, ...], names: list[str], windows: int
) -> dict[str, dict[str, np.ndarray]]:
    """One output table, checked row by row: every name, every window in order, finite values."""
    header = ",".join((key, "window", *columns))

    def fail(message: str) -> SimulatorError:
        return SimulatorError(f"the OpenDC driver wrote a malformed {path.name}: {message}")

    try:
        lines = path.read_text(errors="strict").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise fail(str(exc)) from None
    if not lines or lines[0] != header:
        raise fail(f"expected the header {header!r}, got {(lines or [''])[0][:100]!r}")
    rows = lines[1:]
    if len(rows) != windows * len(names):
        raise fail(f"{len(rows)} rows, expected {windows} windows x {len(names)}")
    values = np.empty((len(names), windows, len(columns)), dtype=np.float64)
    for i, line in enumerate(rows):
        cells = line.split(",")
        entity, window = divmod(i, windows)
        if len(cells) != 2 + len(columns):
            raise fail(f"line {i + 2} has {len(cells)} fields, expected {2 + len(columns)}")
        if cells[0] != names[entity] or cells[1] != str(window):
            raise fail(
                f"line {i + 2} is {cells[0]} window {cells[1]}, expected "
                f"{names[entity]} window {window}"
            )
        try:
            values[entity, window] = [float(c) for c in cells[2:]]
        except ValueError:
            raise fail(f"line {i + 2} holds a value that is not a number: {line[:100]!r}") from None
    if not np.all(np.isfinite(values)):
        entity, window, column = (int(x[0]) for x in np.nonzero(~np.isfinite(values)))
        raise fail(f"{names[entity]} {columns[column]} is not finite in window {window}")
    return {
        name: {column: values[e, :, c].copy() for c, column in enumerate(columns)}
        for e, name in enumerate(names)
    }


def read_output(folder: Path, hosts: list[str], vms: list[str], windows: int) -> DriverOutput:
    """The driver's ``hosts.csv``, ``vms.csv`` and ``run.properties`` in ``folder``."""
    for name in ("hosts.csv", "vms.csv", "run.properties"):
        if not (folder / name).is_file():
            raise SimulatorError(f"the OpenDC driver finished but wrote no {name}")
    host_table = _read_table(folder / "hosts.csv", "host", HOST_COLUMNS, hosts, windows)
    vm_table = _read_table(folder / "vms.csv", "vm", VM_COLUMNS, vms, windows)
    run: dict[str, str] = {}
    for line in (folder / "run.properties").read_text(errors="replace").splitlines():
        key, sep, value = line.partition("=")
        if not sep:
            raise SimulatorError(f"the OpenDC driver wrote a malformed run.properties: {line!r}")
        run[key] = value
    expected = {
        "driver_version": DRIVER_VERSION,
        "windows": str(windows),
        "window_ms": str(WINDOW_MS),
    }
    for key, value in expected.items():
        if run.get(key) != value:
            raise SimulatorError(
                f"the OpenDC driver's run.properties says {key}={run.get(key)!r}, expected {value}"
            )
    capacity: dict[str, float] = {}
    for vm, table in vm_table.items():
        values = table.pop("capacity_mhz")
        if not np.all(values == values[0]) or not values[0] > 0:
            raise SimulatorError(f"the OpenDC driver reported an unusable capacity for VM {vm}")
        capacity[vm] = float(values[0])
    return DriverOutput(host_table, vm_table, capacity, run)


def sha256_text(text: str) -> str:
    """SHA-256 of a text's UTF-8 bytes."""
    return hashlib.sha256(text.encode()).hexdigest()
