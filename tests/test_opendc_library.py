"""The OpenDC 2.0 library backend, run for real: the driver is built with Maven against the shared
OpenDC 2.0 repository and runs OpenDC's compute service on the shared Bitbrains trace.

Without a JDK, Maven or the shared files these tests skip and say why; CI has all three.
"""

from __future__ import annotations

import dataclasses
import os
import stat
import sys
import textwrap

import numpy as np
import pytest

from tests.conftest import run_whatif
from tests.opendc_support import MAVEN_REPO, TRACE_2_0, gwa_folder_from_2_0, need_jvm
from whatif_bench.simulators import opendc, read_baselines, shipped_baselines_path
from whatif_bench.simulators.base import SimulatorError, SimulatorUnavailable
from whatif_bench.simulators.opendc import library
from whatif_bench.simulators.opendc.traces import read_trace

WINDOW_MS = 300_000
IDLE_W, MAX_W = 105.5, 250.0


@pytest.fixture(scope="session")
def jvm(tmp_path_factory):
    """The driver built once for the session (in a cache of its own) and the toolchain."""
    need_jvm()
    cache = tmp_path_factory.mktemp("opendc-driver-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(library.CACHE_ENV, str(cache))
        toolchain = library.find_toolchain(need_maven=True)
        yield toolchain, library.build_driver(toolchain, MAVEN_REPO, cache=cache)


@pytest.fixture(scope="session")
def two_days(jvm):
    return opendc.run(days=2, trace=str(TRACE_2_0), maven_repo=str(MAVEN_REPO), backend="library")


def _trace_samples(vm: str, n: int) -> np.ndarray:
    item = read_trace(TRACE_2_0, [vm]).vms[vm]
    return np.repeat(item.usage_mhz, item.durations_ms // WINDOW_MS)[:n]


@pytest.mark.slow  # Maven fetches its plugins and the Kotlin compiler into an empty repository
def test_the_driver_builds_against_the_shared_repository_alone(tmp_path):
    """An empty Maven local repository: every org.opendc artifact must come from the shared
    repository (Maven records where each came from), the rest from Maven Central."""
    need_jvm()
    toolchain = library.find_toolchain(need_maven=True)
    local = tmp_path / "m2"
    jar = library.build_driver(
        toolchain, MAVEN_REPO, cache=tmp_path / "cache", local_repository=local, say=lambda _: None
    )
    assert jar.is_file() and jar.parent.name == library.driver_hash()[:16]
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


def test_without_the_extra_repository_the_build_says_what_is_missing(tmp_path, jvm, monkeypatch):
    """Maven Central as served here has no org.opendc; artifacts Maven keeps from the shared
    repository count only where that repository is declared."""
    monkeypatch.delenv(library.MAVEN_REPO_ENV, raising=False)
    toolchain, _ = jvm
    with pytest.raises(
        SimulatorError, match=r"found no org\.opendc:\*:2\.0.*WHATIF_OPENDC_MAVEN_REPO"
    ):
        library.build_driver(toolchain, None, cache=tmp_path / "cache", say=lambda _: None)
    assert not library.built_jar(tmp_path / "cache").exists()


def test_the_jar_is_built_once_and_reused(jvm, tmp_path):
    toolchain, jar = jvm
    said: list[str] = []
    again = library.build_driver(toolchain, MAVEN_REPO, cache=jar.parent.parent, say=said.append)
    assert again == jar and said == []


def test_two_days_give_the_22_targets_with_units(two_days, registry):
    assert two_days.n_steps == 576 and two_days.interval_s == 300
    assert set(two_days.series) == {r.target for r in registry.relationships("opendc")}
    assert two_days.start == "2013-08-12T13:35:46+00:00"
    assert two_days.units["power_draw_host-0"] == "W"
    assert two_days.units["cpu_time_idle_1019"] == "ms"
    assert two_days.simulator_version.startswith("OpenDC 2.0 libraries (org.opendc:*:2.0)")
    spec = {c.name: c.base_value for c in registry.simulators["opendc"].covariates}
    assert two_days.covariate_base_values == pytest.approx(spec)


def test_physical_identities_hold_on_the_output(two_days):
    s = two_days.series
    # host usage and demand are the sums of their VMs' (1019 + 1023 on host-0, 1026 on host-1)
    for host, vms in (("host-0", ("1019", "1023")), ("host-1", ("1026",))):
        for field in ("cpu_usage", "cpu_demand"):
            total = sum(s[f"{field}_{vm}"] for vm in vms)
            np.testing.assert_allclose(s[f"{field}_{host}"], total, rtol=1e-12, atol=1e-9)
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
        np.testing.assert_allclose(
            s[f"cpu_time_active_{host}"], s[f"cpu_utilization_{host}"] * WINDOW_MS, rtol=1e-15
        )
    for vm in ("1019", "1023", "1026"):
        # nothing contends for 48,000 MHz: the VM gets what the trace asks, window by window
        np.testing.assert_array_equal(s[f"cpu_usage_{vm}"], _trace_samples(vm, 576))
        np.testing.assert_array_equal(s[f"cpu_demand_{vm}"], s[f"cpu_usage_{vm}"])
        np.testing.assert_allclose(
            s[f"cpu_time_active_{vm}"] + s[f"cpu_time_idle_{vm}"], WINDOW_MS, rtol=1e-15
        )
        np.testing.assert_allclose(
            s[f"cpu_time_active_{vm}"], s[f"cpu_usage_{vm}"] / 3000 * WINDOW_MS
        )
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


def test_simulate_writes_a_checked_store(jvm, tmp_path):
    out = tmp_path / "opendc.h5"
    result = run_whatif(
        "simulate",
        "--simulator",
        "opendc",
        "--trace",
        str(TRACE_2_0),
        "--days",
        "1",
        "--maven-repo",
        str(MAVEN_REPO),
        "--out",
        str(out),
    )
    assert result.returncode == 0, result.stderr
    stored = read_baselines(out)["opendc"]
    assert stored.n_steps == 288 and len(stored.series) == 22
    info = run_whatif("baselines", "info", str(out))
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
    result = run_whatif(
        "simulate",
        "--simulator",
        "opendc",
        "--trace",
        str(TRACE_2_0),
        "--days",
        "1",
        "--out",
        str(out),
    )
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode != 0 and len(errors) == 1, result.stderr
    assert __import__("re").search(message, errors[0]), errors[0]
    assert "Traceback" not in result.stderr and not out.exists()


def test_bad_trace_input_through_the_command_line(jvm, tmp_path):
    bad = tmp_path / "trace"
    bad.mkdir()
    (bad / "meta.parquet").write_bytes((TRACE_2_0 / "meta.parquet").read_bytes()[:100])
    (bad / "trace.parquet").write_bytes((TRACE_2_0 / "trace.parquet").read_bytes())
    out = tmp_path / "o.h5"
    result = run_whatif("simulate", "--simulator", "opendc", "--trace", str(bad), "--out", str(out))
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
    with pytest.raises(SimulatorUnavailable, match=message):
        library.maven_repository(value)
    monkeypatch.setenv(library.MAVEN_REPO_ENV, value)
    with pytest.raises(SimulatorUnavailable, match=r"\$WHATIF_OPENDC_MAVEN_REPO"):
        library.maven_repository(None)
    assert library.maven_repository("https://repo.example/maven2") == "https://repo.example/maven2"
