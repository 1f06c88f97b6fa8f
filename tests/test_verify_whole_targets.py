"""``whatif verify`` checks a sound target as a whole (its stored rows, events, factors and task
arrays against what the writer makes of the rebuilt pairs) and falls back to the pair-by-pair
checks on any difference: whatever is changed in a file, the report is the one the
pair-by-pair checks alone make, problem for problem."""

from __future__ import annotations

import shutil

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from whatif_bench.corpus import Corpus
from whatif_bench.corpus.fileformat import DATA_DATASETS, PAIR_COLUMNS
from whatif_bench.errors import WhatIfError
from whatif_bench.generator import checking
from whatif_bench.generator.checking import verify_corpus

SECOND = "sumo/flow_loop_e_0_near"  # the two-target corpus's second target: offsets past 0


def _outcome(path) -> tuple:
    """What verify says of ``path``: its problems and warnings, or the error it raised."""
    try:
        report = verify_corpus(path, progress=False)
    except WhatIfError as exc:
        return ("error", str(exc))
    return (report.checked, report.problems, report.warnings)


def _pair_by_pair(path, monkeypatch) -> tuple:
    """``_outcome`` with every target checked pair by pair."""
    with monkeypatch.context() as patch:
        patch.setattr(checking, "_whole_target", lambda *args: False)
        return _outcome(path)


def _rows_of_second(path) -> list[int]:
    """Row positions of SECOND's kept pairs."""
    with Corpus(path) as corpus:
        pairs = corpus.pairs
        simulator, target = SECOND.split("/")
        chosen = (pairs["simulator"] == simulator) & (pairs["target"] == target) & pairs["kept"]
        return np.flatnonzero(chosen.to_numpy(dtype=bool)).tolist()


def _changed(value):
    """Another value of the same kind as a stored ``value``."""
    if isinstance(value, bytes | str):
        return (value.decode() if isinstance(value, bytes) else value) + "x"
    if isinstance(value, np.bool_ | bool):
        return not value
    if np.issubdtype(type(value), np.integer):
        return value + 1
    return value + 0.5


def test_a_sound_corpus_is_checked_a_target_at_a_time(two_target_corpus, monkeypatch):
    wholes = []
    real = checking._whole_target

    def counting(*args):
        wholes.append(real(*args))
        return wholes[-1]

    def no_pair_checks(*args):
        raise AssertionError("a sound target was checked pair by pair")

    monkeypatch.setattr(checking, "_whole_target", counting)
    monkeypatch.setattr(checking, "_check_pair", no_pair_checks)
    report = verify_corpus(two_target_corpus, progress=False)
    assert report.ok and report.checked == 400, report.problems
    assert wholes == [True, True]


# every /pairs column (the whole-target check compares each) and every array it reads
ARRAYS = {
    "events/start": "event_offset",
    "events/direction": "event_offset",
    "events/ratio": "event_offset",
    "events/factors": "factor_offset",
    "futures/replay_factors": "kfactor_offset",
    "futures/novel_factors": "kfactor_offset",
    **{f"data/{name}": f"{name}_offset" for name in DATA_DATASETS},
}


# each stored thing once, at SECOND's first, middle or last kept pair in turn
CHANGES = [
    (name, ("first", "middle", "last")[number % 3])
    for number, name in enumerate([f"pairs/{c}" for c in PAIR_COLUMNS] + sorted(ARRAYS))
]


@pytest.mark.one_quick  # about 1.5 s a case
@pytest.mark.parametrize(("name", "where"), CHANGES)
def test_any_changed_value_gets_the_pair_by_pair_report(
    two_target_corpus, tmp_path, monkeypatch, name, where
):
    """One stored value of SECOND's first, middle or last kept pair changed: verify finds a
    problem, and its report (or error) is the pair-by-pair one."""
    path = tmp_path / "changed.h5"
    shutil.copyfile(two_target_corpus, path)
    rows = _rows_of_second(path)
    row = rows[{"first": 0, "middle": len(rows) // 2, "last": -1}[where]]
    with h5py.File(path, "r+") as h5:
        if name.startswith("pairs/"):
            index = row
        else:  # the pair's first value of the array
            index = int(h5[f"pairs/{ARRAYS[name]}"][row])
        dataset = h5[name]
        dataset[index] = _changed(dataset[index])
    outcome = _outcome(path)
    assert outcome[0] == "error" or outcome[1], f"{name}: no problem found"
    assert outcome == _pair_by_pair(path, monkeypatch)


@pytest.mark.slow
@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_any_changed_task_value_is_found_as_the_pair_checks_find_it(
    two_target_corpus, tmp_path, monkeypatch, data
):
    """A value anywhere in a task array, set to any other float32 (NaN and infinities
    included): the report names it, and is the pair-by-pair one."""
    path = tmp_path / "changed.h5"
    shutil.copyfile(two_target_corpus, path)
    name = data.draw(st.sampled_from(DATA_DATASETS))
    with h5py.File(path, "r+") as h5:
        dataset = h5[f"data/{name}"]
        index = data.draw(st.integers(0, dataset.shape[0] - 1))
        old = np.float32(dataset[index])
        new = np.float32(data.draw(st.floats(width=32, allow_nan=True, allow_infinity=True)))
        if new.view(np.uint32) == old.view(np.uint32):
            new = np.nextafter(old, np.float32(np.inf)) if np.isfinite(old) else np.float32(0)
        dataset[index] = new
    outcome = _outcome(path)
    assert outcome[1], f"/data/{name}[{index}] {old} -> {new}: no problem found"
    assert outcome == _pair_by_pair(path, monkeypatch)


def test_targets_split_into_runs_get_the_pair_by_pair_report(
    two_target_corpus, tmp_path, monkeypatch
):
    """Two rows of different targets swapped (every /pairs column): each target's rows come in
    runs, which are never checked as a whole target; the report is the pair-by-pair one."""
    path = tmp_path / "swapped.h5"
    shutil.copyfile(two_target_corpus, path)
    with h5py.File(path, "r+") as h5:
        targets = h5["pairs/target"].asstr()[()]
        second = int(np.flatnonzero(targets == SECOND.split("/")[1])[0])  # SECOND's first row
        assert second > 0 and targets[second - 1] != targets[second]
        for column in PAIR_COLUMNS:
            values = h5[f"pairs/{column}"]
            values[second - 1], values[second] = values[second], values[second - 1]
    wholes = []
    real = checking._whole_target

    def counting(*args):
        wholes.append(real(*args))
        return wholes[-1]

    with monkeypatch.context() as patch:
        patch.setattr(checking, "_whole_target", counting)
        outcome = _outcome(path)
    assert wholes and not any(wholes)
    assert outcome == _pair_by_pair(path, monkeypatch)
