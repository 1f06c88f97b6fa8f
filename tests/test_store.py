"""The baselines store: exact round trip, provenance, atomic writes, corruption detected."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest

from whatif_bench import __version__
from whatif_bench.simulators.base import Baselines, SimulatorError
from whatif_bench.simulators.store import BaselinesFileError, read_baselines, write_baselines


def make(simulator="toy", n=50, seed=0):
    rng = np.random.default_rng(seed)
    return Baselines(
        simulator=simulator,
        simulator_version="toy 1.0",
        interval_s=60,
        start="2000-01-01T00:00:00",
        series={"a": rng.normal(size=n), "b": rng.uniform(1, 2, n)},
        units={"a": "kW", "b": "degF"},
        covariate_base_values={"x": 1.5},
        inputs={"model.txt": "the exact input"},
        notes="made by a test",
    )


def test_round_trip_is_exact_and_records_provenance(tmp_path):
    items = [make("one"), make("two", seed=1)]
    path = write_baselines(tmp_path / "b.h5", items)
    back = read_baselines(path)
    for item in items:
        got = back[item.simulator]
        assert got.content_hash() == item.content_hash()
        for name in item.series:
            assert np.array_equal(got.series[name], item.series[name])
        assert got.inputs == item.inputs and got.units == item.units
    with h5py.File(path) as h5:
        assert h5.attrs["toolkit_version"] == __version__
        assert h5["one"].attrs["interval_s"] == 60 and h5["one/series/a"].attrs["unit"] == "kW"


def test_writing_twice_gives_the_same_hashes(tmp_path):
    a = write_baselines(tmp_path / "a.h5", [make()])
    b = write_baselines(tmp_path / "b.h5", [make()])
    assert h5py.File(a).attrs["content_hash"] == h5py.File(b).attrs["content_hash"]


def test_an_edited_series_is_detected(tmp_path):
    path = write_baselines(tmp_path / "b.h5", [make()])
    with h5py.File(path, "r+") as h5:
        data = h5["toy/series/a"][()]
        data[3] += 1e-9
        h5["toy/series/a"][...] = data
    with pytest.raises(BaselinesFileError, match="does not match its recorded hash"):
        read_baselines(path)


def test_a_truncated_file_is_detected(tmp_path):
    path = write_baselines(tmp_path / "b.h5", [make(n=5000)])
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(BaselinesFileError):
        read_baselines(path)


def test_other_files_are_rejected(tmp_path):
    with pytest.raises(BaselinesFileError, match="no such baselines file"):
        read_baselines(tmp_path / "absent.h5")
    (tmp_path / "text.h5").write_text("not hdf5")
    with pytest.raises(BaselinesFileError, match="not a readable HDF5 file"):
        read_baselines(tmp_path / "text.h5")
    with h5py.File(tmp_path / "other.h5", "w") as h5:
        h5.attrs["format"] = "something else"
    with pytest.raises(BaselinesFileError, match="not a WhatIf-Bench baselines file"):
        read_baselines(tmp_path / "other.h5")


def test_nan_series_are_refused(tmp_path):
    item = make()
    series = dict(item.series)
    series["a"] = series["a"].copy()
    series["a"][7] = np.nan
    with pytest.raises(SimulatorError, match="toy/a: non-finite value nan at step 7"):
        Baselines(**{**item.__dict__, "series": series})


def test_a_write_that_fails_midway_leaves_no_file(tmp_path):
    class Boom(Exception):
        pass

    class FailsWhileWriting(Baselines):
        calls = 0

        def content_hash(self):  # the first call feeds the file-level hash, the second its group
            type(self).calls += 1
            if type(self).calls == 2:
                raise Boom
            return super().content_hash()

    good, bad = make("a"), FailsWhileWriting(**make("b").__dict__)
    with pytest.raises(Boom):
        write_baselines(tmp_path / "b.h5", [good, bad])
    # no final file and no partial one; only the output lock file stays (outputs.output_lock)
    assert [p.name for p in tmp_path.iterdir()] == [".b.h5.lock"]


def test_a_rejected_write_keeps_the_earlier_file(tmp_path):
    write_baselines(tmp_path / "c.h5", [make()])
    with pytest.raises(BaselinesFileError, match="each simulator may appear once"):
        write_baselines(tmp_path / "c.h5", [make(), make()])
    assert read_baselines(tmp_path / "c.h5")["toy"].content_hash() == make().content_hash()


def test_each_step_has_its_timestamp(tmp_path):
    path = write_baselines(tmp_path / "b.h5", [make(n=5)])
    with h5py.File(path) as h5:
        assert h5["toy/time_s"][()].tolist() == [0, 60, 120, 180, 240]
        assert h5["toy"].attrs["start"] == "2000-01-01T00:00:00"


# ---- hand-made or damaged files: one BaselinesFileError naming file, simulator and field ------


def _set_attr(name, value):
    def edit(h5):
        h5["toy"].attrs[name] = value

    return edit


def _del(path):
    def edit(h5):
        if path.startswith("@"):
            del h5["toy"].attrs[path[1:]]
        else:
            del h5[path]

    return edit


def _replace_series(values):
    def edit(h5):
        del h5["toy/series/a"]
        h5["toy/series"].create_dataset("a", data=values)
        h5["toy/series/a"].attrs["unit"] = "kW"

    return edit


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (_set_attr("interval_s", 0), r"attribute 'interval_s': must be in 1\.\.31622400 s, got 0"),
        (_set_attr("interval_s", -60), r"attribute 'interval_s': must be in 1\.\.\d+ s, got -60"),
        (_set_attr("interval_s", 10**12), r"attribute 'interval_s': must be in 1\.\.\d+ s"),
        (_set_attr("interval_s", 60.5), r"attribute 'interval_s': expected a whole number"),
        (_set_attr("interval_s", "60"), r"attribute 'interval_s': expected a whole number"),
        (_set_attr("start", "yesterday"), r"attribute 'start': not an ISO date and time"),
        (_set_attr("start", 5), r"attribute 'start': expected text, got int64"),
        (_set_attr("covariate_base_values", "{"), r"'covariate_base_values': is not valid JSON"),
        (
            _set_attr("covariate_base_values", '{"x": NaN}'),
            r"'covariate_base_values': expected finite numbers by name",
        ),
        (_set_attr("n_steps", 7), r"attribute 'n_steps': is 7 but the series have 50 steps"),
        (_del("@interval_s"), r"attribute 'interval_s': is missing"),
        (_del("@start"), r"attribute 'start': is missing"),
        (_del("@content_hash"), r"attribute 'content_hash': is missing"),
        (_del("toy/series"), r"group 'series': is missing"),
        (_del("toy/inputs"), r"group 'inputs': is missing"),
        (_del("toy/time_s"), r"dataset 'time_s': is missing"),
        (_replace_series(np.full(50, np.nan)), r"series toy/a: non-finite value nan at step 0"),
        (_replace_series(np.full(50, np.inf)), r"series toy/a: non-finite value inf at step 0"),
        (_replace_series(np.ones((5, 10))), r"series 'a': expected a one-dimensional dataset"),
        (_replace_series(np.array([b"x"] * 50)), r"series 'a': expected numbers"),
        (_replace_series(np.ones(49)), r"group 'series': series have different lengths"),
    ],
)
def test_a_bad_baselines_file_names_file_simulator_and_field(tmp_path, edit, message):
    path = write_baselines(tmp_path / "b.h5", [make()])
    with h5py.File(path, "r+") as h5:
        edit(h5)
    with pytest.raises(BaselinesFileError, match=message) as error:
        read_baselines(path)
    assert str(error.value).startswith(f"{path}: simulator 'toy': ")


def test_an_unsafe_simulator_name_or_an_empty_file_is_refused(tmp_path):
    path = write_baselines(tmp_path / "b.h5", [make()])
    with h5py.File(path, "r+") as h5:
        h5.move("toy", ".hidden")
    with pytest.raises(BaselinesFileError, match=r"simulator name '.hidden' is not a valid name"):
        read_baselines(path)
    with h5py.File(path, "r+") as h5:
        del h5[".hidden"]
    with pytest.raises(BaselinesFileError, match=r"b.h5: holds no simulator"):
        read_baselines(path)


def test_bad_baselines_are_one_error_line_from_the_command_line(tmp_path, capsys):
    from whatif_bench.cli import main

    path = write_baselines(tmp_path / "b.h5", [make()])
    with h5py.File(path, "r+") as h5:
        h5["toy"].attrs["interval_s"] = 0
    expected = f"error: {path}: simulator 'toy': attribute 'interval_s': must be in"
    for argv in (
        ["baselines", "info", str(path)],
        ["baselines", "plot", str(path), "--out", str(tmp_path / "png")],
        ["generate", "--baselines", str(path), "--out", str(tmp_path / "c.h5")],
    ):
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert err.startswith(expected), err
        assert "Traceback" not in err and "unexpected" not in err
    assert not (tmp_path / "png").exists() and not (tmp_path / "c.h5").exists()


def test_a_folder_given_as_baselines_file_is_named_as_such(tmp_path):
    with pytest.raises(BaselinesFileError, match=r"is a folder, not a baselines file"):
        read_baselines(tmp_path)


def test_a_full_disk_while_writing_baselines_is_one_clear_error(tmp_path):
    """RLIMIT_FSIZE makes writes past 200 kB fail (EFBIG) as a full disk would (ENOSPC); the
    store must report it, keep the previous file and leave no temporary file."""
    import resource
    import signal
    import subprocess
    import sys
    import textwrap

    out = tmp_path / "b.h5"
    write_baselines(out, [make("old")])
    before = out.read_bytes()
    script = textwrap.dedent(
        f"""
        import numpy as np
        from tests.test_store import make
        from whatif_bench.outputs import OutputError
        from whatif_bench.simulators.store import write_baselines
        item = make("big", n=400_000)  # about 6 MB of float64, past the limit
        try:
            write_baselines({str(out)!r}, [item])
        except OutputError as exc:
            print(exc)
        """
    )

    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))

    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=limit,
        cwd=str(Path(__file__).resolve().parents[1]),
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"{out}: file too large for this file system or limit"
    assert out.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [".b.h5.lock", "b.h5"]
