"""The OpenDC 2.0 library backend, run for real: the driver is built with Maven against the shared
OpenDC 2.0 repository and runs OpenDC's compute service on the shared Bitbrains trace.

Without a JDK, Maven or the shared files these tests skip and say why; CI has all three.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import run_cli, run_whatif
from tests.opendc_support import (
    MAVEN_REPO,
    TRACE_2_0,
    TRACE_CURRENT,
    gwa_folder_from_2_0,
    need_jvm,
)
from whatif_bench.simulators import opendc, read_baselines, shipped_baselines_path
from whatif_bench.simulators.base import SimulatorError, SimulatorUnavailable
from whatif_bench.simulators.opendc import library
from whatif_bench.simulators.opendc.traces import read_trace

WINDOW_MS = 300_000
IDLE_W, MAX_W = 105.5, 250.0


@pytest.fixture(scope="session")
def jvm():
    """The toolchain and the driver, from the driver cache every OpenDC run here uses
    ($WHATIF_OPENDC_CACHE, else ~/.cache): built there if it is not yet (once per machine and
    driver version, not once per session). A build from nothing, in a cache and a Maven local
    repository of its own, is test_the_driver_builds_against_the_shared_repository_alone."""
    need_jvm()
    toolchain = library.find_toolchain(need_maven=True)
    return toolchain, library.build_driver(toolchain, MAVEN_REPO)


@pytest.fixture(scope="session")
def two_days(jvm):
    return opendc.run(days=2, trace=str(TRACE_2_0), maven_repo=str(MAVEN_REPO), backend="library")


def _trace_samples(vm: str, n: int) -> np.ndarray:
    item = read_trace(TRACE_2_0, [vm]).vms[vm]
    return np.repeat(item.usage_mhz, item.durations_ms // WINDOW_MS)[:n]


def _maven_repository_without_opendc(local: Path) -> None:
    """``local``: Maven's own local repository (``~/.m2/repository``, which the ``jvm``
    fixture's build filled from Maven Central where it was empty) without ``org/opendc``,
    through hard links. Maven then fetches no plugin or compiler again (a build into an empty
    repository took 44 s here, 15 s with them), and every org.opendc artifact still has to come
    from a remote repository."""
    own = Path.home() / ".m2" / "repository"
    local.mkdir()
    if not own.is_dir():
        return

    def link(source: str, target: str) -> None:
        try:
            os.link(source, target)
        except OSError:  # another file system
            shutil.copy2(source, target)

    shutil.copytree(
        own,
        local,
        ignore=lambda folder, names: ["opendc"] if Path(folder) == own / "org" else [],
        copy_function=link,
        dirs_exist_ok=True,
    )


@pytest.mark.slow  # Maven builds the driver and fetches org.opendc:*:2.0 into a new repository
def test_the_driver_builds_against_the_shared_repository_alone(tmp_path, jvm):
    """A Maven local repository without org.opendc: every org.opendc artifact must come from
    the shared repository (Maven records where each came from). Building from an empty Maven
    repository, with the rest from Maven Central, is what the ``jvm`` fixture does on a new
    machine (CI's)."""
    toolchain, _ = jvm
    local = tmp_path / "m2"
    _maven_repository_without_opendc(local)
    assert not (local / "org" / "opendc").exists()
    jar = library.build_driver(
        toolchain, MAVEN_REPO, cache=tmp_path / "cache", local_repository=local, say=lambda _: None
    )
    assert jar.is_file() and jar.parent.name == library.driver_hash()[:16]
    assert library.build_repository(jar) == library.maven_repository(str(MAVEN_REPO))
    origins = sorted((local / "org" / "opendc").rglob("_remote.repositories"))
    modules = {path.parent.parent.name for path in origins}
    assert {
        "opendc-compute-simulator",
        "opendc-simulator-core",
        "opendc-compute-service",
    } <= modules
    for path in origins:
        assert "opendc-extra" in path.read_text(), path
    assert not list((tmp_path / "cache").rglob(".build-*"))  # the build folder is gone


@pytest.mark.slow  # about 1 s
def test_without_the_extra_repository_the_build_says_what_is_missing(tmp_path, jvm, monkeypatch):
    """Maven Central as served here has no org.opendc; artifacts Maven keeps from the shared
    repository count only where that repository is declared."""
    monkeypatch.delenv(library.MAVEN_REPO_ENV, raising=False)
    toolchain, _ = jvm
    try:
        library.build_driver(toolchain, None, cache=tmp_path / "cache", say=lambda _: None)
    except SimulatorUnavailable as exc:  # OpenDC cannot run here: a stream leaves its worlds out
        assert re.search(r"found no org\.opendc:\*:2\.0.*WHATIF_OPENDC_MAVEN_REPO", str(exc))
    else:
        pytest.skip("the Maven Central this machine reaches serves org.opendc:*:2.0")
    assert not library.built_jar(tmp_path / "cache").exists()
    assert not list((tmp_path / "cache").rglob(".build-*"))


def test_the_jar_is_built_once_and_reused(jvm, tmp_path):
    toolchain, jar = jvm
    said: list[str] = []
    again = library.build_driver(toolchain, MAVEN_REPO, cache=jar.parent.parent, say=said.append)
    assert again == jar and said == []


def test_two_days_give_the_22_targets_with_units(two_days, registry, jvm):
    _, jvm_jar = jvm
    assert two_days.n_steps == 576 and two_days.interval_s == 300
    assert set(two_days.series) == {r.target for r in registry.relationships("opendc")}
    assert two_days.start == "2013-08-12T13:35:46+00:00"
    assert two_days.units["power_draw_host-0"] == "W"
    assert two_days.units["cpu_time_idle_1019"] == "ms"
    # The repository the cached jar was built with, which need not be this run's --maven-repo:
    # the cache is per machine, and CI's clone may see the shared repository at another path.
    built_with = library.build_repository(jvm_jar)
    assert built_with.startswith("file://") and built_with.endswith("/opendc-maven")
    assert two_days.simulator_version.startswith(
        f"OpenDC 2.0 libraries (org.opendc:*:2.0 from Maven Central and {built_with})"
    )
    assert library.driver_hash()[:12] in two_days.simulator_version
    spec = {c.name: c.base_value for c in registry.simulators["opendc"].covariates}
    assert two_days.covariate_base_values == pytest.approx(spec)


def test_physical_identities_hold_on_the_output(two_days):
    s = two_days.series
    for host, vms in (("host-0", ("1019", "1023")), ("host-1", ("1026",))):
        # the host's own per-core speeds against its VMs' granted speeds (1019 + 1023 on host-0,
        # 1026 on host-1; host demand is their demands' sum by definition, so not checked here)
        total = sum(s[f"cpu_usage_{vm}"] for vm in vms)
        np.testing.assert_allclose(s[f"cpu_usage_{host}"], total, rtol=1e-12, atol=1e-9)
        # OpenDC's linear power model: idle + (max - idle) * utilisation
        np.testing.assert_allclose(
            s[f"power_draw_{host}"],
            IDLE_W + (MAX_W - IDLE_W) * s[f"cpu_utilization_{host}"],
            rtol=0,
            atol=1e-9,
        )
        np.testing.assert_allclose(
            s[f"cpu_utilization_{host}"] * 16 * 3000.0,
            s[f"cpu_usage_{host}"],
            rtol=1e-12,
            atol=1e-9,
        )
    for vm in ("1019", "1023", "1026"):
        # nothing contends for 48,000 MHz: the VM gets what the trace asks, window by window
        np.testing.assert_array_equal(s[f"cpu_usage_{vm}"], _trace_samples(vm, 576))
        np.testing.assert_array_equal(s[f"cpu_demand_{vm}"], s[f"cpu_usage_{vm}"])
    assert s["cpu_usage_host-0"].max() > 0 and s["power_draw_host-1"].min() > IDLE_W


def _hosts(**host_0):
    return tuple(
        dataclasses.replace(host, **host_0) if host.name == "host-0" else host
        for host in opendc.BASE_HOSTS
    )


@pytest.mark.parametrize(
    ("change", "capacity_factor"),
    [
        ({"core_speed_mhz": 1500.0}, 0.5),
        ({"core_count": 8}, 0.5),
        ({"core_speed_mhz": 6000.0}, 2.0),
    ],
)
@pytest.mark.one_quick  # about 2 s over all its cases
def test_core_speed_and_count_change_utilisation_and_power_as_opendcs_model_says(
    jvm, two_days, change, capacity_factor
):
    """With no contention the VMs use what they ask for; utilisation is usage over the host's
    capacity (cores x speed) and power follows the linear model. A VM's vCPU runs at its
    host's core speed, so its active time scales with 1 / core speed."""
    run = opendc.run(days=2, trace=str(TRACE_2_0), hosts=_hosts(**change), backend="library")
    base, new = two_days.series, run.series
    np.testing.assert_allclose(
        new["cpu_usage_host-0"], base["cpu_usage_host-0"], rtol=1e-12, atol=1e-9
    )
    np.testing.assert_allclose(
        new["cpu_utilization_host-0"],
        base["cpu_utilization_host-0"] / capacity_factor,
        rtol=1e-9,
        atol=1e-15,
    )
    np.testing.assert_allclose(
        new["power_draw_host-0"],
        IDLE_W + (MAX_W - IDLE_W) * new["cpu_utilization_host-0"],
        atol=1e-9,
    )
    assert new["power_draw_host-0"].max() != base["power_draw_host-0"].max()
    speed_factor = change.get("core_speed_mhz", 3000.0) / 3000.0
    np.testing.assert_allclose(
        new["cpu_time_active_1019"], base["cpu_time_active_1019"] / speed_factor, rtol=1e-12
    )
    for name in ("cpu_usage_host-1", "power_draw_host-1", "cpu_usage_1026"):  # host-1 unchanged
        np.testing.assert_array_equal(new[name], base[name])
    assert run.covariate_base_values["coreCount_host-0"] == change.get("core_count", 16)


def test_a_core_slower_than_the_demand_caps_the_vm(jvm, two_days):
    """At 10 MHz per core a 1-vCPU VM cannot get more than 10 MHz: usage = min(demand, 10)."""
    run = opendc.run(
        days=2, trace=str(TRACE_2_0), hosts=_hosts(core_speed_mhz=10.0), backend="library"
    )
    s = run.series
    np.testing.assert_array_equal(s["cpu_demand_1019"], two_days.series["cpu_demand_1019"])
    assert (s["cpu_demand_1019"] > 10).any()
    np.testing.assert_allclose(
        s["cpu_usage_1019"], np.minimum(s["cpu_demand_1019"], 10.0), atol=1e-9
    )
    np.testing.assert_allclose(s["cpu_time_idle_1019"].min(), 0.0, atol=1e-6)


@pytest.mark.slow  # about 1 s
def test_the_full_run_reproduces_the_shipped_baselines(jvm):
    shipped = read_baselines(shipped_baselines_path())["opendc"]
    run = opendc.run(trace=str(TRACE_2_0), backend="library")
    assert run.n_steps == shipped.n_steps == 8616
    assert run.content_hash() == shipped.content_hash()


def test_the_gwa_csv_layout_gives_the_same_series(jvm, two_days, tmp_path):
    run = opendc.run(days=2, trace=str(gwa_folder_from_2_0(tmp_path / "gwa")), backend="library")
    for name, values in two_days.series.items():
        np.testing.assert_array_equal(run.series[name], values, err_msg=name)
    assert "bitbrains-csv" in run.inputs["setting.json"]


def _simulate_one_day(out, *options):
    """``whatif simulate`` of one OpenDC day on the shared trace, through the command line."""
    return run_whatif(
        "simulate", "--simulator", "opendc", "--trace", str(TRACE_2_0), "--days", "1",
        "--out", str(out), *options,
    )  # fmt: skip


def test_simulate_writes_a_checked_store(jvm, tmp_path):
    out = tmp_path / "opendc.h5"
    result = _simulate_one_day(out, "--maven-repo", str(MAVEN_REPO))
    assert result.returncode == 0, result.stderr
    stored = read_baselines(out)["opendc"]
    assert stored.n_steps == 288 and len(stored.series) == 22
    info = run_cli("baselines", "info", str(out))
    assert "opendc     22 series x    288 steps" in info.stdout


def _stub_java(tmp_path, body: str):
    """A `java` on PATH that answers `-version` like a JDK 17 and runs ``body`` otherwise."""
    folder = tmp_path / "bin"
    folder.mkdir()
    script = folder / "java"
    script.write_text(
        textwrap.dedent(f"""\
        #!{sys.executable}
        import sys
        if sys.argv[1:] == ["-version"]:
            print('openjdk version "17.0.15" 2025-04-15', file=sys.stderr)
            sys.exit(0)
        """)
        + textwrap.dedent(body)
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return folder


JVM_FAULTS = [
    (
        "crash",
        "print('#  SIGSEGV (0xb) at pc=0x0', file=sys.stderr); sys.exit(134)\n",
        r"the OpenDC driver failed \(exit 134\)",
    ),
    (
        "garbage",
        "print('\\x00\\x17 garbage'); sys.exit(0)\n",
        r"did not finish as expected: it printed",
    ),
    ("no output files", "print('done'); sys.exit(0)\n", r"finished but wrote no hosts.csv"),
    (
        "malformed output",
        """\
        import pathlib
        out = pathlib.Path(sys.argv[sys.argv.index('--output') + 1]); out.mkdir(parents=True)
        (out / 'hosts.csv').write_text('host,window\\nhost-0,zero\\n')
        (out / 'vms.csv').write_text('x'); (out / 'run.properties').write_text('')
        print('done')
        """,
        r"malformed hosts.csv: expected the header",
    ),
]


@pytest.mark.parametrize(("case", "body", "message"), JVM_FAULTS, ids=[f[0] for f in JVM_FAULTS])
def test_a_failing_or_garbled_jvm_is_one_error_line_and_no_file(
    jvm, tmp_path, monkeypatch, case, body, message
):
    _, jar = jvm
    monkeypatch.setenv("PATH", f"{_stub_java(tmp_path, body)}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv(library.CACHE_ENV, str(jar.parent.parent))  # the jar is "built"
    out = tmp_path / "o.h5"
    result = _simulate_one_day(out)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode != 0 and len(errors) == 1, result.stderr
    assert re.search(message, errors[0]), errors[0]
    assert "Traceback" not in result.stderr and not out.exists()


def test_bad_trace_input_through_the_command_line(jvm, tmp_path):
    bad = tmp_path / "trace"
    bad.mkdir()
    (bad / "meta.parquet").write_bytes((TRACE_2_0 / "meta.parquet").read_bytes()[:100])
    (bad / "trace.parquet").write_bytes((TRACE_2_0 / "trace.parquet").read_bytes())
    out = tmp_path / "o.h5"
    result = run_cli("simulate", "--simulator", "opendc", "--trace", str(bad), "--out", str(out))
    assert result.returncode != 0 and "meta.parquet: not a readable Parquet file" in result.stderr
    assert not out.exists() and "Traceback" not in result.stderr


def test_an_old_java_is_refused(tmp_path, monkeypatch):
    folder = tmp_path / "bin"
    folder.mkdir()
    for name, text in (("java", 'java version "1.7.0_80"'), ("mvn", "")):
        script = folder / name
        script.write_text(f"#!/bin/sh\necho '{text}' >&2\n")
        script.chmod(0o755)
    monkeypatch.setenv("PATH", str(folder))
    with pytest.raises(
        SimulatorUnavailable, match=r"Java 1\.7\.0_80; the OpenDC 2\.0 driver needs Java 8"
    ):
        library.find_toolchain()


def test_no_jdk_no_maven_names_what_is_missing(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv(library.CACHE_ENV, str(tmp_path / "empty-cache"))
    with pytest.raises(
        SimulatorUnavailable, match=r"no java or mvn on PATH.*openjdk-17-jdk-headless"
    ):
        library.find_toolchain()


def test_a_built_jar_needs_java_alone(jvm, tmp_path, monkeypatch):
    """A container image ships the jar built: Maven is then not needed."""
    _, jar = jvm
    folder = tmp_path / "bin"
    folder.mkdir()
    (folder / "java").symlink_to(library.find_toolchain(need_maven=False).java)
    monkeypatch.setenv("PATH", str(folder))
    monkeypatch.setenv(library.CACHE_ENV, str(jar.parent.parent))
    assert library.find_toolchain().mvn is None
    monkeypatch.setenv(library.CACHE_ENV, str(tmp_path / "empty-cache"))
    with pytest.raises(SimulatorUnavailable, match="no mvn on PATH"):
        library.find_toolchain()


@pytest.mark.parametrize(
    ("value", "message"),
    [("/nonexistent/repo", "no such folder"), (".", r"not a Maven repository \(no org/ folder")],
)
def test_a_bad_maven_repository_setting_is_refused(tmp_path, monkeypatch, value, message):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SimulatorError, match=message):
        library.maven_repository(value)
    monkeypatch.setenv(library.MAVEN_REPO_ENV, value)
    with pytest.raises(SimulatorError, match=r"\$WHATIF_OPENDC_MAVEN_REPO"):
        library.maven_repository(None)
    assert library.maven_repository("https://repo.example/maven2") == "https://repo.example/maven2"


def _window_means(durations_ms: np.ndarray, usage: np.ndarray, windows: int) -> np.ndarray:
    """Reference: the time mean of a fragment sequence over each 300 s window, (windows,)."""
    ends = np.cumsum(durations_ms)
    starts = ends - durations_ms
    out = np.zeros(windows)
    for k in range(windows):
        lo, hi = k * WINDOW_MS, (k + 1) * WINDOW_MS
        overlap = np.clip(np.minimum(ends, hi) - np.maximum(starts, lo), 0, None)
        out[k] = float(np.dot(overlap, usage)) / WINDOW_MS
    return out


@pytest.mark.slow  # about 1 s
def test_window_means_are_exact_on_the_newer_layout_whose_fragments_jitter(jvm):
    """The newer layout's fragments last 599 s, 601 s, ...: a window holds parts of two, and the
    driver's mean must equal the time mean computed here from the fragments alone."""
    if not (TRACE_CURRENT / "fragments.parquet").is_file():
        pytest.skip("the shared trace has no current/ layout")
    run = opendc.run(days=2, trace=str(TRACE_CURRENT), backend="library")
    trace = read_trace(TRACE_CURRENT, opendc.VM_SLOTS)
    jittered = 0
    for vm in ("1019", "1023", "1026"):
        item = trace.vms[vm]
        expected = _window_means(item.durations_ms, item.usage_mhz, 576)
        np.testing.assert_allclose(run.series[f"cpu_usage_{vm}"], expected, rtol=1e-12, atol=1e-9)
        jittered += int(np.sum(item.cut(576 * WINDOW_MS)[0] % WINDOW_MS != 0))
    assert jittered > 0  # the layout does put fragment boundaries inside windows


def _driver_inputs(folder, hosts=None, vms=None, fragments=None):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "hosts.csv").write_text(
        hosts
        or "name,core_count,core_speed_mhz,memory_mb,idle_power_w,max_power_w\n"
        + "".join(f"host-{i},16,3000.0,65536,105.5,250.0\n" for i in range(2))
    )
    (folder / "vms.csv").write_text(
        vms or "vm,cores,memory_mb,host\na,1,100,host-0\nb,1,100,host-0\n"
    )
    (folder / "fragments.csv").write_text(
        fragments or "vm,duration_ms,cpu_usage_mhz,cores\na,600000,20.0,1\nb,600000,30.0,1\n"
    )
    return folder


DRIVER_FAULTS = [
    (
        "unknown host",
        {"vms": "vm,cores,memory_mb,host\na,1,100,host-9\nb,1,100,host-0\n"},
        (),
        r"VM a is placed on unknown host host-9",
    ),
    (
        "bad header",
        {"fragments": "vm,duration,cpu_usage_mhz,cores\na,1,1,1\n"},
        (),
        r"fragments.csv: expected the header vm,duration_ms,cpu_usage_mhz,cores",
    ),
    (
        "not a number",
        {"fragments": "vm,duration_ms,cpu_usage_mhz,cores\na,600000,lots,1\nb,600000,1,1\n"},
        (),
        r"fragments.csv line 2: cpu_usage_mhz is not valid: 'lots'",
    ),
    (
        "part of a second",
        {"fragments": "vm,duration_ms,cpu_usage_mhz,cores\na,600500,1,1\nb,600000,1,1\n"},
        (),
        r"line 2: duration_ms is not valid",
    ),
    (
        "infinite speed",
        {
            "hosts": "name,core_count,core_speed_mhz,memory_mb,idle_power_w,max_power_w\n"
            "host-0,16,Infinity,65536,105.5,250.0\n"
        },
        (),
        r"impossible setting",
    ),
    (
        "host names nest",
        {
            "hosts": "name,core_count,core_speed_mhz,memory_mb,idle_power_w,max_power_w\n"
            "host-0,16,3000.0,65536,105.5,250.0\nhost-00,16,3000.0,65536,105.5,250.0\n"
        },
        (),
        r"host name host-0 is part of host-00",
    ),
    (
        "overcommitted host",
        {
            "hosts": "name,core_count,core_speed_mhz,memory_mb,idle_power_w,max_power_w\n"
            "host-0,1,40.0,65536,105.5,250.0\n"
        },
        (),
        r"host host-0 is overcommitted at \d+ ms: its VMs are granted 50.0 MHz",
    ),
    (
        "memory too small",
        {
            "hosts": "name,core_count,core_speed_mhz,memory_mb,idle_power_w,max_power_w\n"
            "host-0,16,3000.0,50,105.5,250.0\n"
        },
        (),
        r"OpenDC did not start VM\(s\) .*no host could take them",
    ),
    ("unknown option", {}, ("--speed", "2"), r"usage: --input DIR"),
    ("trace longer than the run", {}, ("--windows", "1"), r"VM a ended its trace at -1 ms"),
]


@pytest.mark.parametrize(
    ("case", "tables", "extra", "message"), DRIVER_FAULTS, ids=[f[0] for f in DRIVER_FAULTS]
)
@pytest.mark.one_quick  # about 1 s over all its cases
def test_the_drivers_own_checks_end_in_one_error_line(jvm, tmp_path, case, tables, extra, message):
    toolchain, jar = jvm
    inputs = _driver_inputs(tmp_path / "in", **tables)
    args = {"--input": str(inputs), "--output": str(tmp_path / "out"), "--windows": "2"}
    for key, value in zip(extra[::2], extra[1::2], strict=True):
        args[key] = value
    command = [toolchain.java, "-jar", str(jar), *[x for pair in args.items() for x in pair]]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    lines = [line for line in result.stderr.splitlines() if not line.startswith("progress ")]
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ") and re.search(message, lines[0]), lines[0]
    assert result.stdout == ""


def test_the_drivers_own_inputs_run_cleanly(jvm, tmp_path):
    """The table above's base inputs are valid: two windows, both VMs on host-0."""
    toolchain, jar = jvm
    inputs, out = _driver_inputs(tmp_path / "in"), tmp_path / "out"
    library.run_driver(toolchain, jar, inputs, out, 2)  # exit 0 and "done", or an error
    output = library.read_output(out, ["host-0", "host-1"], ["a", "b"], 2)
    np.testing.assert_allclose(output.hosts["host-0"]["cpu_usage_mhz"], [50.0, 50.0])
    assert output.run["placement.a"] == output.run["placement.b"] == "host-0"


def test_both_jvms_get_the_short_run_options_and_a_users_maven_opts_win(tmp_path, monkeypatch):
    """Stub ``java`` and ``mvn`` record their arguments and MAVEN_OPTS; the user's MAVEN_OPTS
    come after the toolkit's options (the JVM takes the last of two settings)."""
    record = tmp_path / "record.txt"
    folder = _stub_java(tmp_path, f"open({str(record)!r}, 'a').write(repr(sys.argv[1:]) + '\\n')\n")
    mvn = folder / "mvn"
    mvn.write_text(
        f"#!{sys.executable}\nimport os, sys\n"
        f"open({str(record)!r}, 'a').write(os.environ.get('MAVEN_OPTS', '') + '\\n')\n"
        "sys.exit(1)\n"
    )
    mvn.chmod(mvn.stat().st_mode | stat.S_IEXEC)
    toolchain = library.Toolchain(str(folder / "java"), str(mvn), "17.0.15")
    with pytest.raises(SimulatorError, match=r"the OpenDC driver did not finish as expected"):
        library.run_driver(toolchain, tmp_path / "x.jar", tmp_path, tmp_path / "out", 2)
    monkeypatch.setenv("MAVEN_OPTS", "-XX:TieredStopAtLevel=4 -Xmx1g")
    with pytest.raises(SimulatorError):
        library.build_driver(toolchain, None, cache=tmp_path / "cache", say=lambda _: None)
    java_argv, maven_opts = record.read_text().splitlines()
    assert eval(java_argv)[:3] == [*library.SHORT_JVM_OPTIONS, "-jar"]  # noqa: S307 (our repr)
    assert maven_opts.split() == [*library.SHORT_JVM_OPTIONS, "-XX:TieredStopAtLevel=4", "-Xmx1g"]
    assert not library.built_jar(tmp_path / "cache").exists()


@pytest.mark.slow  # about 1 s
def test_a_jvm_that_runs_too_long_is_stopped(tmp_path):
    folder = _stub_java(tmp_path, "import time; time.sleep(60)\n")
    toolchain = library.Toolchain(str(folder / "java"), None, "17.0.15")
    started = time.monotonic()
    with pytest.raises(SimulatorError, match=r"the OpenDC driver ran over 1 s; stopped"):
        library.run_driver(
            toolchain, tmp_path / "x.jar", tmp_path, tmp_path / "out", 2, timeout_s=1.0
        )
    assert time.monotonic() - started < 30
