"""Baselines from CSV and Parquet tables (docs/BASELINES_FORMAT.md): the layout read back to the
same record as the store, every malformed file refused with one error naming file and place,
generate's checks of the baseline against the spec, and ``whatif baselines combine``."""

from __future__ import annotations

import json
import math
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import run_cli
from whatif_bench.simulators import read_baselines, shipped_baselines_path, write_baselines
from whatif_bench.simulators.base import Baselines, BaselinesFileError

ROOT = Path(__file__).resolve().parents[1]
NET3_SPEC = ROOT / "examples" / "net3" / "net3.toml"
BASES = {"heater": 100.0, "fan": 2}
GOOD_CSV = """\
# simulator: lab
# simulator_version: rig 1
# covariate_base_values: {"heater": 100.0, "fan": 2}
# notes: a test table
time,plate [degC],power [W]
2024-01-01T00:00:00,20.5,100
2024-01-01T00:05:00,21.0,101
2024-01-01T00:10:00,21.5,99
"""


def write_parquet(
    path: Path,
    start: datetime,
    interval_s: int,
    series: dict,
    units: dict,
    metadata: dict | None = None,
) -> Path:
    n = len(next(iter(series.values())))
    columns = {
        "time": pa.array(
            [start + timedelta(seconds=i * interval_s) for i in range(n)], type=pa.timestamp("s")
        )
    }
    columns.update({f"{k} [{units[k]}]": pa.array(v, type=pa.float64()) for k, v in series.items()})
    table = pa.table(columns)
    meta = {"simulator": "lab", "covariate_base_values": json.dumps(BASES)}
    meta.update(metadata or {})
    pq.write_table(table.replace_schema_metadata(meta), path)
    return path


def write_csv(path: Path, start: datetime, interval_s: int, series: dict, units: dict) -> Path:
    n = len(next(iter(series.values())))
    lines = ["# simulator: lab", f"# covariate_base_values: {json.dumps(BASES)}"]
    lines.append(",".join(["time", *(f"{k} [{units[k]}]" for k in series)]))
    for i in range(n):
        stamp = (start + timedelta(seconds=i * interval_s)).isoformat()
        lines.append(",".join([stamp, *(repr(float(v[i])) for v in series.values())]))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_good_table_reads_as_a_record(tmp_path):
    path = tmp_path / "lab.csv"
    path.write_text(GOOD_CSV)
    item = read_baselines(path)["lab"]
    assert (item.interval_s, item.start, item.n_steps) == (300, "2024-01-01T00:00:00", 3)
    assert item.units == {"plate": "degC", "power": "W"}
    assert item.covariate_base_values == BASES
    assert (item.simulator_version, item.notes) == ("rig 1", "a test table")
    np.testing.assert_array_equal(item.series["power"], [100.0, 101.0, 99.0])


names = st.from_regex(r"[a-z][a-z0-9_]{0,11}", fullmatch=True)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    data=st.data(),
    n_steps=st.integers(2, 40),
    interval_s=st.sampled_from([1, 60, 300, 3600, 86400]),
    start=st.datetimes(datetime(1900, 1, 1), datetime(2100, 1, 1)).map(
        lambda d: d.replace(microsecond=0)
    ),
)
def test_csv_parquet_and_store_hold_the_same_record(tmp_path, data, n_steps, interval_s, start):
    """For any finite series, timing and names, the CSV and Parquet layouts read to the record
    the store holds: the same content hash, bit-identical values."""
    keys = data.draw(st.lists(names, min_size=1, max_size=4, unique=True))
    floats = st.floats(allow_nan=False, allow_infinity=False, width=64)
    series = {
        k: np.array(data.draw(st.lists(floats, min_size=n_steps, max_size=n_steps))) for k in keys
    }
    units = {k: data.draw(st.sampled_from(["psi", "veh/h", "%", "1", "m^3 s^-1"])) for k in keys}
    from_csv = read_baselines(write_csv(tmp_path / "x.csv", start, interval_s, series, units))
    from_parquet = read_baselines(
        write_parquet(tmp_path / "x.parquet", start, interval_s, series, units)
    )
    store = write_baselines(tmp_path / "x.h5", from_csv.values())
    from_store = read_baselines(store)
    hashes = {r["lab"].content_hash() for r in (from_csv, from_parquet, from_store)}
    assert len(hashes) == 1
    for key, values in series.items():
        assert from_parquet["lab"].series[key].tobytes() == values.tobytes()
        assert from_csv["lab"].series[key].tobytes() == values.tobytes()
    assert from_csv["lab"].start == start.isoformat() and from_csv["lab"].interval_s == interval_s


BAD_CSV = [
    # (old text, new text, expected message part)
    ("# simulator: lab\n", "", "metadata key 'simulator': is missing"),
    (
        '# covariate_base_values: {"heater": 100.0, "fan": 2}\n',
        "",
        "metadata key 'covariate_base_values': is missing",
    ),
    ('{"heater": 100.0, "fan": 2}', '{"heater": 100.0,', "covariate_base_values': is not JSON"),
    ('{"heater": 100.0, "fan": 2}', "[100]", "expected a JSON object"),
    ('{"heater": 100.0, "fan": 2}', '{"heater": NaN}', "entry 'heater': expected a finite number"),
    ('{"heater": 100.0, "fan": 2}', '{"heater": "hot"}', "entry 'heater': expected a finite"),
    ("# simulator: lab", "# simulator: ../lab", "'../lab' is not a valid name"),
    (
        "# simulator: lab",
        "# simulator: lab\n# simulator: lab2",
        "line 2: metadata key 'simulator' is given twice",
    ),
    ("# notes: a test table", "# note: a test table", "line 4: unknown metadata key 'note'"),
    ("# notes: a test table", "# a test table", "line 4: expected '# key: value'"),
    ("time,plate", "when,plate", "line 5: the first column must be 'time'"),
    ("plate [degC]", "plate", "column 'plate': needs its unit in square brackets"),
    ("plate [degC]", "plate []", "column 'plate []': needs its unit"),
    ("plate [degC]", "power [W]", "series 'power' appears twice"),
    ("plate [degC]", "pl/ate [degC]", "'pl/ate' is not a valid series name"),
    ("time,plate [degC],power [W]\n", "time\n", "has no series column"),
    ("21.0,101", "21.0,", "line 7, column 'power [W]': not a number: ''"),
    ("21.0,101", "21.0,ten", "line 7, column 'power [W]': not a number: 'ten'"),
    ("21.0,101", "21.0,nan", "line 7, column 'power [W]': non-finite value nan"),
    ("21.0,101", "21.0,1e400", "line 7, column 'power [W]': non-finite value"),
    ("21.0,101", "21.0,101,7", "line 7: has 4 fields, the header has 3"),
    ("21.0,101", '21.0,"101', "line 8: unexpected end of data"),  # an unclosed quote
    ("21.0,101", "21.0,1_01", "line 7, column 'power [W]': not a number: '1_01'"),
    (
        '{"heater": 100.0, "fan": 2}',
        '{"heater": 1' + "0" * 400 + "}",
        "entry 'heater': expected a finite number, got 1000",
    ),
    ("2024-01-01T00:05:00,21.0,101\n", "2024-01-01T00:05:00,21.0,101\n\n", "line 8: is empty"),
    ("2024-01-01T00:05:00", "2024-01-01T00:06:00", "row 2, column 'time'"),
    ("2024-01-01T00:05:00", "2024-01-01T00:00:00", "the step must be whole seconds"),
    ("2024-01-01T00:05:00", "yesterday", "row 1, column 'time': not an ISO date and time"),
    ("2024-01-01T00:05:00", "2024-01-01T00:05:00+01:00", "must be local time"),
    (
        "2024-01-01T00:05:00,21.0,101\n2024-01-01T00:10:00,21.5,99\n",
        "",
        "column 'time': needs at least 2 rows, got 1",
    ),
]


@pytest.mark.parametrize(("old", "new", "message"), BAD_CSV)
def test_a_malformed_csv_is_one_error_naming_file_and_place(tmp_path, old, new, message):
    assert old in GOOD_CSV
    path = tmp_path / "lab.csv"
    path.write_text(GOOD_CSV.replace(old, new, 1))
    with pytest.raises(BaselinesFileError) as error:
        read_baselines(path)
    assert str(error.value).startswith(f"{path}: ") and message in str(error.value)
    result = run_cli("baselines", "info", str(path))
    assert result.returncode == 1 and result.stderr.startswith("error: ")
    assert message in result.stderr and "Traceback" not in result.stderr


def test_bytes_that_are_not_text_are_refused(tmp_path):
    path = tmp_path / "lab.csv"
    path.write_bytes(b"# simulator: lab\n\xff\xfe\x00binary")
    with pytest.raises(BaselinesFileError, match="is not UTF-8"):
        read_baselines(path)


def _series(n: int = 3) -> tuple[dict, dict]:
    return {"plate": np.linspace(20, 21, n)}, {"plate": "degC"}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda t: t.drop_columns(["time"]).append_column("time", t.column("time")),
            "the first column must be 'time'",
        ),
        (lambda t: t.set_column(0, "time", pa.array([1, 2, 3])), "expected timestamps or ISO"),
        (
            lambda t: t.set_column(
                0,
                "time",
                pa.array(
                    [datetime(2024, 1, 1, 0, i) for i in range(3)], type=pa.timestamp("s", tz="UTC")
                ),
            ),
            "must be local time",
        ),
        (
            lambda t: t.set_column(1, "plate [degC]", pa.array(["a", "b", "c"])),
            "column 'plate [degC]': expected numbers",
        ),
        (
            lambda t: t.set_column(1, "plate [degC]", pa.array([1.0, None, 2.0])),
            "row 1, column 'plate [degC]': is missing",
        ),
        (
            lambda t: t.set_column(1, "plate [degC]", pa.array([1.0, math.inf, 2.0])),
            "row 1, column 'plate [degC]': non-finite value inf",
        ),
        (
            lambda t: t.replace_schema_metadata({"simulator": "lab"}),
            "metadata key 'covariate_base_values': is missing",
        ),
        (lambda t: t.rename_columns(["time", "plate"]), "needs its unit in square brackets"),
        (lambda t: t.rename_columns([" time ", "plate [degC]"]), None),  # spaces: still fine
    ],
)
def test_a_malformed_parquet_is_one_error_naming_file_and_place(tmp_path, change, message):
    path = write_parquet(tmp_path / "lab.parquet", datetime(2024, 1, 1), 60, *_series())
    table = pq.read_table(path)
    changed = change(table)
    if changed.schema.metadata is None or b"simulator" not in changed.schema.metadata:
        if "covariate_base_values" not in (message or ""):
            changed = changed.replace_schema_metadata(table.schema.metadata)
    pq.write_table(changed, path)
    if message is None:
        assert read_baselines(path)["lab"].units == {"plate": "degC"}
        return
    with pytest.raises(BaselinesFileError) as error:
        read_baselines(path)
    assert str(error.value).startswith(f"{path}: ") and message in str(error.value)


def test_a_file_that_is_not_parquet_is_refused(tmp_path):
    path = tmp_path / "lab.parquet"
    path.write_text(GOOD_CSV)
    with pytest.raises(BaselinesFileError, match="not a readable Parquet file"):
        read_baselines(path)


# ---- generate checks the baseline against the spec --------------------------------------


@pytest.fixture(scope="module")
def net3_csv(tmp_path_factory) -> Path:
    """The Net3 source's CSV, written by the example script (a real wntr run)."""
    import subprocess
    import sys

    out = tmp_path_factory.mktemp("net3") / "net3.csv"
    subprocess.run(
        [sys.executable, str(ROOT / "examples" / "net3" / "simulate_net3.py"), "--out", str(out)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return out


def _edited_copy(source: Path, folder: Path, old: str, new: str) -> Path:
    text = source.read_text()
    assert old in text
    path = folder / source.name
    path.write_text(text.replace(old, new, 1))
    return path


@pytest.mark.parametrize(
    ("where", "old", "new", "message"),
    [
        (
            "csv",
            "pressure_15 [psi]",
            "pressure_15 [kPa]",
            "net3/pressure_15: unit 'kPa' in the baselines, 'psi' in the spec",
        ),
        (
            "csv",
            '"river_base_head": 220.0',
            '"river_base_head": 230.0',
            "covariate 'river_base_head': base value 230.0 in the baselines, 220.0 in the spec",
        ),
        ("csv", '"river_base_head": 220.0, ', "", "covariate_base_values has no 'river_base_head'"),
        ("spec", "c4 = [8000, 864]", "c4 = [9000, 864]", "the net3 baseline has 9,216 steps"),
        ("spec", 'unit = "psi"', "", "field 'unit': is required"),
    ],
)
@pytest.mark.one_quick  # about 4 s over all its cases
def test_generate_refuses_a_baseline_that_does_not_match_the_spec(
    tmp_path, net3_csv, where, old, new, message
):
    csv_path, spec = net3_csv, NET3_SPEC
    if where == "csv":
        csv_path = _edited_copy(net3_csv, tmp_path, old, new)
    else:
        spec = _edited_copy(NET3_SPEC, tmp_path, old, new)
    out = tmp_path / "tasks.h5"
    result = run_cli(
        "generate",
        "--spec",
        str(spec),
        "--baselines",
        str(csv_path),
        "--out",
        str(out),
        "--jobs",
        "1",
    )
    assert result.returncode == 1, result.stderr
    assert result.stderr.startswith("error: ") and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    left = {p.name for p in tmp_path.iterdir()} - {csv_path.name, spec.name, ".tasks.h5.lock"}
    assert left == set(), left  # nothing written (the lock file may stay)


def test_a_source_without_its_spec_is_named_in_the_error(tmp_path, net3_csv):
    result = run_cli("generate", "--baselines", str(net3_csv), "--out", str(tmp_path / "t.h5"))
    assert result.returncode == 1 and "no spec file declares ['net3']" in result.stderr
    assert not (tmp_path / "t.h5").exists()


def test_the_same_source_as_csv_and_parquet_makes_the_same_corpus(tmp_path, net3_csv):
    item = read_baselines(net3_csv)["net3"]
    parquet = write_parquet(
        tmp_path / "net3.parquet",
        datetime.fromisoformat(item.start),
        item.interval_s,
        item.series,
        item.units,
        {
            "simulator": "net3",
            "covariate_base_values": json.dumps(item.covariate_base_values),
            "simulator_version": item.simulator_version,
            "notes": item.notes,
        },
    )
    outputs = []
    for name, baselines in (("a.h5", net3_csv), ("b.h5", parquet)):
        out = tmp_path / name
        result = run_cli(
            "generate",
            "--spec",
            str(NET3_SPEC),
            "--baselines",
            str(baselines),
            "--targets",
            "net3/pressure_123",
            "--jobs",
            "1",
            "--out",
            str(out),
        )
        assert result.returncode == 0, result.stderr
        outputs.append(out.read_bytes())
    assert outputs[0] == outputs[1]


# ---- whatif baselines combine -------------------------------------------------------------


def test_combine_gathers_layouts_into_one_store(tmp_path, net3_csv):
    out = tmp_path / "all.h5"
    result = run_cli(
        "baselines",
        "combine",
        str(shipped_baselines_path()),
        str(net3_csv),
        "--out",
        str(out),
    )
    assert result.returncode == 0, result.stderr
    combined = read_baselines(out)
    shipped = read_baselines(shipped_baselines_path())
    assert set(combined) == {*shipped, "net3"}
    for name, item in shipped.items():
        assert combined[name].content_hash() == item.content_hash()
    assert combined["net3"].content_hash() == read_baselines(net3_csv)["net3"].content_hash()


@pytest.mark.parametrize(
    ("files", "message"),
    [
        (lambda d, csv: [csv, csv], "simulator 'net3' is also in"),
        (lambda d, csv: [d / "missing.csv"], "no such baselines file"),
        (lambda d, csv: [d / "all.h5"], "the output would replace the input"),
    ],
)
def test_combine_refuses_bad_inputs_and_writes_nothing(tmp_path, net3_csv, files, message):
    out = tmp_path / "all.h5"
    if "replace" in message:
        write_baselines(
            out,
            [Baselines("lab", "1", 60, "2024-01-01T00:00:00", {"y": np.ones(3)}, {"y": "1"}, {})],
        )
    before = out.read_bytes() if out.exists() else None
    result = run_cli(
        "baselines", "combine", *map(str, files(tmp_path, net3_csv)), "--out", str(out)
    )
    assert result.returncode == 1 and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert (out.read_bytes() if out.exists() else None) == before


@pytest.mark.parametrize("suffix", [".csv", ".parquet", ".pq"])
def test_a_store_is_never_written_under_a_table_name(tmp_path, net3_csv, suffix):
    """The reader takes those names for tables, so a store written there could not be read."""
    out = tmp_path / f"all{suffix}"
    for args in (
        ("baselines", "combine", str(net3_csv), "--out", str(out)),
        ("simulate", "--simulator", "epanet", "--days", "1", "--out", str(out)),
    ):
        result = run_cli(*args)
        assert result.returncode == 1 and "a baselines store is HDF5; name it .h5" in result.stderr
        assert not out.exists()
    with pytest.raises(BaselinesFileError, match="name it .h5"):
        write_baselines(out, read_baselines(net3_csv).values())


def test_extra_series_are_refused_for_a_simulator_without_them(tmp_path):
    result = run_cli(
        "simulate", "--simulator", "gridlabd", "--extra-series", "--out", str(tmp_path / "b.h5")
    )
    assert result.returncode == 1
    assert "--extra-series: gridlabd records no extra series" in result.stderr
    assert not (tmp_path / "b.h5").exists()
