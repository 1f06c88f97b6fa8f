"""OpenDC trace input: the three folder layouts read to the same fragments, the run's length
follows the trace, and every bad trace is one clear error (no JVM needed)."""

from __future__ import annotations

import hashlib
import shutil

import numpy as np
import pytest

from tests.conftest import run_cli
from tests.opendc_support import (
    TRACE_CURRENT,
    gwa_folder_from_2_0,
    need_trace,
    write_gwa_csv,
)
from whatif_bench.simulators import opendc
from whatif_bench.simulators.opendc.traces import TraceError, detect_layout, read_trace

VMS = opendc.VM_SLOTS


def test_the_default_vms_are_the_papers_three_and_1129():
    assert VMS == ("1019", "1023", "1026", "1129")


def test_the_2_0_trace_gives_the_papers_vms_as_opendc_replays_them():
    trace = read_trace(need_trace(), VMS)
    assert trace.layout == "opendc-2.0" and set(trace.files) == {"meta.parquet", "trace.parquet"}
    for vm in VMS:
        item = trace.vms[vm]
        assert item.cores == 1 and item.submission_ms == 1_376_314_546_000
        assert np.all(item.durations_ms % 300_000 == 0) and np.all(item.usage_mhz >= 0)
    # replayed 5-minute samples (the reference's table): the trace ends before day 30
    windows = {vm: trace.vms[vm].replayed_ms // 300_000 for vm in VMS}
    assert windows == {"1019": 8636, "1023": 8633, "1026": 8616, "1129": 8637}
    assert trace.vms["1019"].memory_mb == 181


def test_the_run_stops_where_the_first_target_vms_trace_ends():
    trace = read_trace(need_trace(), VMS)
    assert opendc.plan_windows(30, trace, VMS) == 8616  # VM 1026's 8,616 samples
    assert opendc.plan_windows(2, trace, VMS) == 576
    with pytest.raises(opendc.SimulatorError, match="fewer than 2 windows"):
        opendc.plan_windows(0.001, trace, VMS)


def test_all_three_layouts_give_the_same_five_minute_values(tmp_path):
    """The 2.0 Parquet, GWA-T-12 CSV files made from it, and the newer layout of the same trace
    (whose durations carry +-1 s jitter) agree on every 5-minute sample."""
    if not (TRACE_CURRENT / "fragments.parquet").is_file():
        pytest.skip("the shared trace has no current/ layout")
    old = read_trace(need_trace(), VMS[:3])
    csv = read_trace(gwa_folder_from_2_0(tmp_path / "gwa", VMS[:3]), VMS[:3])
    new = read_trace(TRACE_CURRENT, VMS[:3])
    assert (csv.layout, new.layout) == ("bitbrains-csv", "opendc-current")
    for vm in VMS[:3]:
        samples = np.repeat(old.vms[vm].usage_mhz, old.vms[vm].durations_ms // 300_000)
        np.testing.assert_array_equal(csv.vms[vm].usage_mhz, samples)
        assert csv.vms[vm].submission_ms == old.vms[vm].submission_ms
        item = new.vms[vm]
        mid = np.arange(samples.size) * 300_000 + 150_000
        at = np.searchsorted(np.cumsum(item.durations_ms), mid, side="right")
        inside = at < item.usage_mhz.size
        np.testing.assert_array_equal(item.usage_mhz[at[inside]], samples[inside])
        assert new.vms[vm].memory_mb == old.vms[vm].memory_mb


def test_a_cut_shortens_only_the_last_fragment():
    trace = read_trace(need_trace(), ["1023"])
    vm = trace.vms["1023"]
    durations, usage = vm.cut(1_000_000)
    assert durations.sum() == 1_000_000 and usage.size == durations.size
    assert np.array_equal(durations[:-1], vm.durations_ms[: durations.size - 1])
    # past the trace's end nothing is added: the VM terminates early
    whole, values = vm.cut(vm.replayed_ms + 10 * 300_000)
    assert np.array_equal(whole, vm.durations_ms) and np.array_equal(values, vm.usage_mhz)


def _copy(tmp_path, layout="opendc-2.0"):
    target = tmp_path / "trace"
    shutil.copytree(need_trace().parent / layout, target)
    return target


def _truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _parquet_without(path, column):
    import pyarrow.parquet as pq

    pq.write_table(pq.read_table(path).drop([column]), path)


def _parquet_with_null(path, column):
    """The file with the first cell of ``column`` emptied."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    values = table.column(column).to_pylist()
    values[0] = None
    index = table.column_names.index(column)
    pq.write_table(
        table.set_column(index, column, pa.array(values, table.schema.field(column).type)), path
    )


def _edit_vm_row(path, column, key, index, change):
    """Set ``column`` of the ``index``-th row of id ``key`` in the Parquet file to
    ``change(value, previous)`` (``previous``: the value of that id's row before); returns
    (the row in the file, the new value, the previous value)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    rows = np.flatnonzero(np.array(table.column("id").to_pylist()) == key)
    values = table.column(column).to_pylist()
    row, previous = int(rows[index]), values[rows[index - 1]] if index else None
    values[row] = change(values[row], previous)
    position = table.column_names.index(column)
    field = table.schema.field(column)
    pq.write_table(table.set_column(position, field, pa.array(values, field.type)), path)
    return row, values[row], previous


def _time_going_back(folder):
    """The 11th fragment of VM 1019 starts 10**9 ms earlier: one step back in time."""
    row, new, previous = _edit_vm_row(
        folder / "trace.parquet", "time", "1019.csv", 10, lambda t, _: t - 10**9
    )
    return (
        f"{folder / 'trace.parquet'}: VM 1019, row {row}: time {new} ms is not after the VM's "
        f"previous fragment's {previous} ms"
    )


def _time_standing_still(folder):
    row, new, previous = _edit_vm_row(
        folder / "trace.parquet", "time", "1023.csv", 3, lambda _, before: before
    )
    return (
        f"{folder / 'trace.parquet'}: VM 1023, row {row}: time {new} ms is not after the VM's "
        f"previous fragment's {previous} ms"
    )


def _end_before_start(folder):
    row, _, _ = _edit_vm_row(folder / "meta.parquet", "endTime", "1026.csv", 0, lambda *_: 0)
    return (
        f"{folder / 'meta.parquet'}: VM 1026, row {row}: endTime 0 ms is before "
        "submissionTime 1376314546000 ms"
    )


def _negative_flops(folder):
    row, _, _ = _edit_vm_row(folder / "trace.parquet", "flops", "1129.csv", 5, lambda *_: -7)
    return f"{folder / 'trace.parquet'}: VM 1129, row {row}: negative flops -7"


# OpenDC 2.0 traces whose every cell is there but says something impossible: each damage edits
# the copy and returns the error expected, naming the file, the VM and the row of the file
IMPOSSIBLE_TRACES = [_time_going_back, _time_standing_still, _end_before_start, _negative_flops]


def _sha256(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


@pytest.mark.parametrize("damage", IMPOSSIBLE_TRACES, ids=lambda d: d.__name__[1:])
def test_an_impossible_2_0_trace_names_the_file_the_vm_and_the_row(tmp_path, damage):
    folder = _copy(tmp_path)
    message = damage(folder)
    before = _sha256(folder)
    with pytest.raises(TraceError) as info:
        read_trace(folder, VMS)
    assert str(info.value) == message
    assert _sha256(folder) == before


@pytest.mark.parametrize("damage", IMPOSSIBLE_TRACES, ids=lambda d: d.__name__[1:])
def test_simulate_refuses_an_impossible_2_0_trace_in_one_line_and_writes_nothing(
    tmp_path, monkeypatch, damage
):
    """Through the command line: one ``error:`` line, the trace unchanged, no baselines file
    (the ``cli`` backend is never started: the trace is read first)."""
    folder = _copy(tmp_path)
    message = damage(folder)
    before = _sha256(folder)
    monkeypatch.setenv("OPENDC_BIN", "/bin/false")
    out = tmp_path / "out" / "o.h5"
    result = run_cli(
        "simulate", "--simulator", "opendc", "--backend", "cli", "--days", "0.1",
        "--trace", str(folder), "--out", str(out),
    )  # fmt: skip
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode == 1 and errors == [f"error: {message}"], result.stderr
    assert "Traceback" not in result.stderr and "unexpected" not in result.stderr
    assert _sha256(folder) == before
    assert not out.exists()
    leftovers = [p.name for p in out.parent.iterdir()] if out.parent.exists() else []
    assert [name for name in leftovers if name != ".o.h5.lock"] == []


BAD_TRACES = [
    ("missing VM", lambda d: None, ("1019", "9999", "1026", "1129"), r"no VM\(s\) \['9999'\]"),
    (
        "truncated trace.parquet",
        lambda d: _truncate(d / "trace.parquet"),
        VMS,
        r"trace.parquet: not a readable Parquet file",
    ),
    (
        "truncated meta.parquet",
        lambda d: _truncate(d / "meta.parquet"),
        VMS,
        r"meta.parquet: not a readable Parquet file",
    ),
    (
        "no cpuUsage column",
        lambda d: _parquet_without(d / "trace.parquet", "cpuUsage"),
        VMS,
        r"trace.parquet: lacks column\(s\) \['cpuUsage'\]",
    ),
    (
        "empty submission time",
        lambda d: _parquet_with_null(d / "meta.parquet", "submissionTime"),
        VMS,
        r"meta.parquet: column 'submissionTime' has 1 empty cell",
    ),
    (
        "empty duration",
        lambda d: _parquet_with_null(d / "trace.parquet", "duration"),
        VMS,
        r"trace.parquet: column 'duration' has 1 empty cell",
    ),
    (
        "empty folder",
        lambda d: [p.unlink() for p in list(d.iterdir())],
        VMS,
        r"holds no trace: expected meta.parquet \+ trace.parquet",
    ),
]


@pytest.mark.parametrize(
    ("case", "damage", "vms", "message"), BAD_TRACES, ids=[c[0] for c in BAD_TRACES]
)
def test_bad_traces_are_one_clear_error(tmp_path, case, damage, vms, message):
    folder = _copy(tmp_path)
    damage(folder)
    changed = {p.name: p.read_bytes() for p in folder.iterdir()}
    with pytest.raises(TraceError, match=message):
        read_trace(folder, vms)
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == changed  # nothing rewritten


def test_a_folder_of_trace_folders_names_them(tmp_path):
    need_trace()
    with pytest.raises(TraceError, match=r"subfolder\(s\) \['current', 'opendc-2.0'\] do"):
        detect_layout(need_trace().parent)
    with pytest.raises(TraceError, match="trace folder not found.*traces/bitbrains-small"):
        detect_layout(tmp_path / "nowhere")


def _gwa(tmp_path, **kwargs):
    folder = tmp_path / "gwa"
    for vm in VMS:
        write_gwa_csv(folder, vm, [1.0, 2.0, 3.0], **kwargs)
    return folder


BAD_CSV = [
    ("negative usage", lambda f: write_gwa_csv(f, "1019", [1.0, -2.0]), r"CPU usage -2.0 MHz"),
    ("NaN usage", lambda f: write_gwa_csv(f, "1019", [1.0, float("nan")]), r"row 1 has an empty"),
    (
        "time going back",
        lambda f: write_gwa_csv(f, "1019", [1.0, 2.0, 3.0], step_s=-300),
        r"timestamps do not increase at row 1",
    ),
    (
        "not a GWA file",
        lambda f: (f / "1019.csv").write_text("a;b\n1;2\n"),
        r"not a GWA-T-12 Bitbrains file, missing column\(s\)",
    ),
    (
        "empty cell",
        lambda f: (f / "1019.csv").write_text(
            (f / "1023.csv").read_text().replace(";\t1;", ";\t;", 1)
        ),
        r"row 0 has an empty or non-numeric cell",
    ),
    (
        "no samples",
        lambda f: (f / "1019.csv").write_text((f / "1023.csv").read_text().splitlines()[0] + "\n"),
        r"the trace has no samples",
    ),
    (
        "text in a number column",
        lambda f: (f / "1019.csv").write_text(
            (f / "1023.csv").read_text().replace(";\t1;", ";\tone;", 1)
        ),
        r"holds something other than numbers",
    ),
]


@pytest.mark.parametrize(("case", "damage", "message"), BAD_CSV, ids=[c[0] for c in BAD_CSV])
def test_bad_gwa_files_are_one_clear_error(tmp_path, case, damage, message):
    folder = _gwa(tmp_path)
    damage(folder)
    with pytest.raises(TraceError, match=message):
        read_trace(folder, VMS)


def test_vms_that_are_not_submitted_together_are_refused():
    """VM 1052 joins the trace 17 days after the others; OpenDC would start it with them."""
    vms = ("1019", "1023", "1026", "1052")
    trace = read_trace(need_trace(), vms)
    with pytest.raises(TraceError, match="must be submitted together"):
        opendc.plan_windows(30, trace, vms)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"core_count": 0}, "at least 1 core"),
        ({"core_count": 2.5}, "whole number"),
        ({"core_speed_mhz": -1.0}, "core speed > 0"),
        ({"core_speed_mhz": float("nan")}, "finite numbers"),
        ({"memory_gib": 0.0}, "1 MB of memory"),
        ({"idle_power_w": 300.0}, "idle <= max"),
    ],
)
def test_impossible_host_settings_are_refused(settings, message):
    with pytest.raises(opendc.SimulatorError, match=message):
        opendc.HostSetting("host-0", **settings)


def test_the_rack_must_be_host_0_to_host_3():
    with pytest.raises(opendc.SimulatorError, match="expected hosts"):
        opendc.run(days=1, hosts=opendc.BASE_HOSTS[:3], trace=str(need_trace()))
