"""OpenDC wrapper: input writers against OpenDC's documented schema, the output parser, and the
clear failure when no OpenDC backend exists. No OpenDC output is ever made up by the wrapper;
the parser is tested on small files these tests write in OpenDC's documented column layout."""

from __future__ import annotations

import json
import os
import stat
import sys
import textwrap
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.conftest import run_whatif
from whatif_bench.simulators import opendc
from whatif_bench.simulators.base import SimulatorError, SimulatorUnavailable

BITBRAINS_HEADER = (
    "Timestamp [ms];\tCPU cores;\tCPU capacity provisioned [MHZ];\tCPU usage [MHZ];\tCPU usage [%];\t"
    "Memory capacity provisioned [KB];\tMemory usage [KB];\tDisk read throughput [KB/s];\t"
    "Disk write throughput [KB/s];\tNetwork received throughput [KB/s];\tNetwork transmitted throughput [KB/s]"
)


def write_trace(folder, vm, n=12, cores=4, start=1376314846):
    rng = np.random.default_rng(int(vm))
    rows = [BITBRAINS_HEADER]
    for i in range(n):
        usage = float(rng.uniform(100, 2000))
        rows.append(
            f"{start + 300 * i};\t{cores};\t{cores * 2926.0};\t{usage:.3f};\t{usage / (cores * 29.26):.3f};\t"
            f"{8 * 1048576};\t{2 * 1048576};\t0;\t0;\t0;\t0"
        )
    (folder / f"{vm}.csv").write_text("\n".join(rows) + "\n")


# The Bitbrains trace OpenDC ships (see its README.md); read in place, never copied into the repo.
# $WHATIF_SHARED_DATA names the shared data folder when the clone is not beside it.
SHARED_DATA = Path(
    os.environ.get("WHATIF_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data")
)
SHARED_TRACE = SHARED_DATA / "opendc-bitbrains-small"


def write_shared_trace(folder, vms=("1019", "1023", "1026", "1052")):
    """GWA-T-12 ``<vm>.csv`` files from the shared trace's ``current/`` workload: one row per
    300 s sample from the VM's submission time (merged fragments are expanded again)."""
    import pandas as pd

    current = SHARED_TRACE / "current"
    if not (current / "tasks.parquet").is_file():
        pytest.skip(f"the shared Bitbrains trace is not at {SHARED_TRACE}")
    tasks = pd.read_parquet(current / "tasks.parquet").set_index("id")
    fragments = pd.read_parquet(current / "fragments.parquet")
    folder.mkdir(parents=True, exist_ok=True)
    for vm in vms:
        task = tasks.loc[int(vm)]
        rows = fragments[fragments["id"] == int(vm)]
        usage = np.repeat(rows["cpu_usage"].to_numpy(), np.round(rows["duration"] / 300_000))
        first = int(task["submission_time"]) // 1000
        cores, capacity = int(task["cpu_count"]), float(task["cpu_capacity"])
        lines = [BITBRAINS_HEADER]
        lines += [
            f"{first + 300 * i};\t{cores};\t{capacity};\t{u};\t{100 * u / capacity};\t"
            f"{int(task['mem_capacity'])};\t0;\t0;\t0;\t0;\t0"
            for i, u in enumerate(usage)
        ]
        (folder / f"{vm}.csv").write_text("\n".join(lines) + "\n")
    return folder


@pytest.fixture
def trace(tmp_path):
    folder = tmp_path / "trace"
    folder.mkdir()
    for vm in ("1019", "1023", "1026", "1052", "2000"):
        write_trace(folder, vm)
    return folder


def test_bitbrains_reader(trace):
    vm = opendc.read_bitbrains_vm(trace / "1019.csv")
    assert (
        vm.vm_id == "1019" and vm.cpu_cores == 4 and vm.cpu_capacity_mhz == pytest.approx(11704.0)
    )
    assert vm.cpu_usage_mhz.shape == (12,) and vm.memory_capacity_mb == 8192
    assert np.all(np.diff(vm.timestamps_s) == 300)


def test_bitbrains_reader_rejects_other_files(tmp_path):
    (tmp_path / "x.csv").write_text("a;b\n1;2\n")
    with pytest.raises(SimulatorError, match="not a Bitbrains trace"):
        opendc.read_bitbrains_vm(tmp_path / "x.csv")


def test_vm_selection_takes_the_papers_three_and_one_more(trace):
    assert [p.stem for p in opendc.select_vms(trace)] == ["1019", "1023", "1026", "1052"]
    with pytest.raises(SimulatorError, match=r"no trace file for VM\(s\) \['9999'\]"):
        opendc.select_vms(trace, ("1019", "9999"))


def test_topology_follows_opendcs_documented_schema():
    topology = opendc.topology()
    (cluster,) = topology["clusters"]
    (host,) = cluster["hosts"]
    assert host["count"] == 4 and host["name"] == "host"  # OpenDC names them host-0 .. host-3
    assert isinstance(host["cpu"]["coreCount"], int) and host["cpu"]["coreCount"] == 16
    assert host["cpu"]["coreSpeed"] == 3000.0
    assert host["memory"]["memorySize"] == 64 * 2**30  # bytes
    model = host["cpuPowerModel"]
    assert model["modelType"] in {"constant", "sqrt", "linear", "square", "cubic"}
    assert model["idlePower"] == 105.5 and model["maxPower"] > model["idlePower"]
    json.dumps(topology)


def test_experiment_has_the_required_fields():
    experiment = opendc.experiment()
    for field in ("topologies", "workloads", "allocationPolicies"):
        assert isinstance(experiment[field], list) and experiment[field]
    assert experiment["workloads"][0]["type"] == "ComputeWorkload"
    assert experiment["exportModels"][0]["exportInterval"] == 300


def test_workload_parquet_has_the_documented_types(trace, tmp_path):
    vms = [opendc.read_bitbrains_vm(p) for p in opendc.select_vms(trace)]
    tasks_path, fragments_path = opendc.write_workload(vms, tmp_path / "workload", days=1)
    tasks, fragments = pq.read_table(tasks_path), pq.read_table(fragments_path)
    assert tasks.schema.equals(
        pa.schema(
            [
                ("id", pa.string()),
                ("submission_time", pa.int64()),
                ("duration", pa.int64()),
                ("cpu_count", pa.int32()),
                ("cpu_capacity", pa.float64()),
                ("mem_capacity", pa.int64()),
            ]
        )
    )
    assert fragments.schema.equals(
        pa.schema(
            [
                ("id", pa.string()),
                ("duration", pa.int64()),
                ("cpu_count", pa.int32()),
                ("cpu_usage", pa.float64()),
            ]
        )
    )
    assert tasks.num_rows == 4 and fragments.num_rows == 4 * 12
    assert tasks.column("duration").to_pylist() == [12 * 300_000] * 4
    np.testing.assert_allclose(fragments.column("cpu_usage").to_numpy()[:12], vms[0].cpu_usage_mhz)


def test_the_run_starts_at_the_real_traces_first_sample(tmp_path):
    """The shared Bitbrains trace starts on 2013-08-12 at 13:35:46 UTC; the workload is submitted
    from that instant and the baselines are dated by it."""
    vms = [opendc.read_bitbrains_vm(p) for p in opendc.select_vms(write_shared_trace(tmp_path))]
    assert [vm.vm_id for vm in vms] == ["1019", "1023", "1026", "1052"]
    assert opendc.trace_start(vms) == "2013-08-12T13:35:46+00:00"
    tasks_path, _ = opendc.write_workload(vms, tmp_path / "workload", days=30)
    submitted = pq.read_table(tasks_path).column("submission_time").to_pylist()
    assert min(submitted) == 1_376_314_546_000  # ms since the epoch: the same instant
    assert submitted[3] == 1_377_787_092_000  # VM 1052 joins the trace 17 days later


def write_outputs(folder, n_steps=6):
    """host.parquet and task.parquet in OpenDC's documented column layout (test data)."""
    folder.mkdir(parents=True, exist_ok=True)
    timestamps = [300_000 * (i + 1) for i in range(n_steps)]
    hosts = [
        {
            "timestamp": t,
            "host_name": f"host-{h}",
            "cpu_demand": 1000.0 + h + i,
            "cpu_usage": 900.0 + i,
            "cpu_utilization": 0.1 + 0.01 * i,
            "cpu_time_active": 1000 * i + 5,
            "power_draw": 110.0 + i,
        }
        for i, t in enumerate(timestamps)
        for h in range(4)
    ]
    tasks = [
        {
            "timestamp": t,
            "task_name": vm,
            "host_name": "host-0",
            "cpu_demand": 500.0 + i,
            "cpu_usage": 450.0 + i,
            "cpu_time_active": 100 * i + 3,
            "cpu_time_idle": 200 * i + 7,
        }
        for i, t in enumerate(timestamps)
        for vm in ("1019", "1023", "1026", "1052")
    ]
    pq.write_table(pa.Table.from_pylist(hosts), folder / "host.parquet")
    pq.write_table(pa.Table.from_pylist(tasks), folder / "task.parquet")
    return folder / "host.parquet", folder / "task.parquet"


def test_parser_turns_opendc_output_into_the_22_targets(tmp_path, registry):
    host, task = write_outputs(tmp_path / "out")
    series, units = opendc.parse_outputs(host, task)
    assert set(series) == {r.target for r in registry.relationships("opendc")}
    assert series["cpu_demand_host-1"].tolist() == [1001.0 + i for i in range(6)]
    assert series["cpu_time_idle_1023"].tolist() == [200.0 * i + 7 for i in range(6)]
    assert units["power_draw_host-0"] == "W"


def test_parser_reports_missing_columns_and_samples(tmp_path):
    host, task = write_outputs(tmp_path / "out")
    pq.write_table(pq.read_table(host).drop(["power_draw"]), host)
    with pytest.raises(
        SimulatorError, match=r"host.parquet lacks OpenDC column\(s\) \['power_draw'\]"
    ):
        opendc.parse_outputs(host, task)
    host, task = write_outputs(tmp_path / "out2")
    with pytest.raises(SimulatorError, match="misses"):
        opendc.parse_outputs(host, task, n_steps=10)


def test_no_backend_fails_with_how_to_get_opendc(trace, monkeypatch, tmp_path):
    monkeypatch.delenv("OPENDC_BIN", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SimulatorUnavailable, match="JVM program"):
        opendc.run(days=1, trace=str(trace))


def test_cli_without_backend_exits_non_zero_and_says_how(trace, tmp_path):
    result = run_whatif(
        "simulate", "--simulator", "opendc", "--trace", str(trace), "--out", str(tmp_path / "o.h5")
    )
    assert result.returncode != 0
    assert "OpenDC is a JVM program" in result.stderr and not (tmp_path / "o.h5").exists()


def test_run_drives_a_backend_through_opendc_bin(trace, tmp_path, monkeypatch, registry):
    """Plumbing check with a stand-in executable that copies prepared output files into place;
    it exercises command line, working folder and output discovery, not OpenDC itself."""
    prepared = tmp_path / "prepared"
    write_outputs(prepared, n_steps=288)
    stub = tmp_path / "opendc-stub"
    stub.write_text(
        textwrap.dedent(f"""\
        #!{sys.executable}
        import json, shutil, sys, pathlib
        assert sys.argv[1:] == ["run", "experiment.json"], sys.argv
        experiment = json.load(open("experiment.json"))
        assert pathlib.Path("workload/tasks.parquet").is_file() and pathlib.Path("topology.json").is_file()
        out = pathlib.Path(experiment["outputFolder"]) / "raw-output" / "0" / "seed=0"
        out.mkdir(parents=True)
        for name in ("host.parquet", "task.parquet"):
            shutil.copy("{prepared}/" + name, out / name)
    """)
    )
    stub.chmod(stub.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("OPENDC_BIN", str(stub))
    baselines = opendc.run(days=1, trace=str(trace))
    assert baselines.n_steps == 288 and len(baselines.series) == 22
    assert baselines.start == "2013-08-12T13:40:46+00:00"  # the stand-in trace's first sample
    assert json.loads(baselines.inputs["topology.json"]) == opendc.topology()
    spec = {c.name: c.base_value for c in registry.simulators["opendc"].covariates}
    assert baselines.covariate_base_values == pytest.approx(spec)
