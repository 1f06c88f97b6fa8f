"""OpenDC's backends: which one runs, and the newer OpenDC's command line (``cli``/``container``).

The newer OpenDC is not served by any package index, so the ``cli`` backend is checked against
the newer OpenDC's documented input schema and, for the plumbing, with a stand-in executable
that copies prepared output files into place; it exercises the command line, the working folder
and the output discovery, not OpenDC itself (the library backend's tests run OpenDC 2.0).
"""

from __future__ import annotations

import json
import stat
import sys
import textwrap

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.conftest import run_cli
from tests.opendc_support import need_trace
from whatif_bench.simulators import opendc
from whatif_bench.simulators.base import SimulatorError, SimulatorUnavailable
from whatif_bench.simulators.opendc import library, newer
from whatif_bench.simulators.opendc.traces import read_trace

SLOTS = {"1019": "1019", "1023": "1023", "1026": "1026"}


def test_topology_follows_the_newer_opendcs_documented_schema():
    topology = newer.topology(opendc.BASE_HOSTS)
    (cluster,) = topology["clusters"]
    (host,) = cluster["hosts"]
    assert host["count"] == 4 and host["name"] == "host"  # OpenDC names them host-0 .. host-3
    assert isinstance(host["cpu"]["coreCount"], int) and host["cpu"]["coreCount"] == 16
    assert host["cpu"]["coreSpeed"] == 3000.0
    assert host["memory"]["memorySize"] == 64 * 2**30  # bytes
    model = host["cpuPowerModel"]
    assert model == {"modelType": "linear", "idlePower": 105.5, "maxPower": 250.0}
    json.dumps(topology)


def test_experiment_has_the_required_fields():
    experiment = newer.experiment()
    for field in ("topologies", "workloads", "allocationPolicies"):
        assert isinstance(experiment[field], list) and experiment[field]
    assert experiment["workloads"][0]["type"] == "ComputeWorkload"
    assert experiment["exportModels"][0]["exportInterval"] == 300


def test_workload_parquet_has_the_documented_types(tmp_path):
    vms = list(read_trace(need_trace(), opendc.VM_SLOTS).vms.values())
    tasks_path, fragments_path = newer.write_workload(vms, tmp_path / "w", 86_400_000, 3000.0)
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
    assert fragments.schema.names == ["id", "duration", "cpu_count", "cpu_usage"]
    assert tasks.column("duration").to_pylist() == [86_400_000] * 4  # cut at one day
    assert tasks.column("submission_time").to_pylist() == [1_376_314_546_000] * 4
    assert tasks.column("cpu_capacity").to_pylist() == [3000.0] * 4  # 2.0 records none


def write_outputs(folder, n_steps=6):
    """host.parquet and task.parquet in the newer OpenDC's documented column layout."""
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
        for vm in ("1019", "1023", "1026", "1129")
    ]
    pq.write_table(pa.Table.from_pylist(hosts), folder / "host.parquet")
    pq.write_table(pa.Table.from_pylist(tasks), folder / "task.parquet")
    return folder / "host.parquet", folder / "task.parquet"


def test_parser_turns_opendc_output_into_the_22_targets(tmp_path, registry):
    host, task = write_outputs(tmp_path / "out")
    series, units = newer.parse_outputs(host, task, SLOTS)
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
        newer.parse_outputs(host, task, SLOTS)
    host, task = write_outputs(tmp_path / "out2")
    with pytest.raises(SimulatorError, match="misses"):
        newer.parse_outputs(host, task, SLOTS, n_steps=10)


def test_no_backend_names_what_each_one_needs(monkeypatch, tmp_path):
    monkeypatch.delenv("OPENDC_BIN", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv(library.CACHE_ENV, str(tmp_path / "no-driver-built"))
    with pytest.raises(SimulatorUnavailable) as caught:
        opendc.choose_backend("auto")
    message = str(caught.value)
    assert "library: no java or mvn on PATH" in message
    assert "cli: no `opendc` command found" in message and "container: needs --image" in message


@pytest.mark.parametrize(
    ("backend", "image", "message"),
    [
        ("cli", "some/image", "does not go with --backend cli"),
        ("container", None, "needs --image"),
        ("gpu", None, "unknown OpenDC backend"),
    ],
)
def test_backend_choices_that_cannot_work_are_refused(backend, image, message):
    with pytest.raises(SimulatorError, match=message):
        opendc.choose_backend(backend, image)


def test_cli_without_any_backend_exits_non_zero_and_says_how(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    result = run_cli(
        "simulate",
        "--simulator",
        "opendc",
        "--trace",
        str(need_trace()),
        "--out",
        str(tmp_path / "o.h5"),
    )
    assert result.returncode != 0 and not (tmp_path / "o.h5").exists()
    assert "no OpenDC backend can run here" in result.stderr and "Traceback" not in result.stderr


def test_without_a_trace_the_run_says_where_to_get_one(monkeypatch):
    monkeypatch.delenv(opendc.TRACE_ENV, raising=False)
    with pytest.raises(
        SimulatorUnavailable, match=r"--trace DIR or set WHATIF_OPENDC_TRACE.*v2\.0"
    ):
        opendc.trace_folder(None)


def test_run_drives_the_newer_opendc_through_opendc_bin(tmp_path, monkeypatch, registry):
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
    baselines = opendc.run(days=1, trace=str(need_trace()), backend="cli")
    assert baselines.n_steps == 288 and len(baselines.series) == 22
    assert baselines.start == "2013-08-12T13:35:46+00:00"
    assert json.loads(baselines.inputs["topology.json"]) == newer.topology(opendc.BASE_HOSTS)
    assert json.loads(baselines.inputs["setting.json"])["backend"] == "cli"
    spec = {c.name: c.base_value for c in registry.simulators["opendc"].covariates}
    assert baselines.covariate_base_values == pytest.approx(spec)
