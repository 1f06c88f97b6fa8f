"""The baselines store: exact round trip, provenance, atomic writes, corruption detected."""

from __future__ import annotations

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
