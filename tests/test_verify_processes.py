"""``whatif verify`` in worker processes: the report is the one a single process makes, problem
for problem, on a sound corpus and on damaged ones (where the problem limit and the
non-finite reports, which a single pass gives once per dataset, are what could differ)."""

from __future__ import annotations

import shutil

import h5py
import numpy as np
import pytest

from tests.conftest import small_corpus
from whatif_bench.generator import checking
from whatif_bench.generator.checking import verify_corpus

# worker processes are started (about 2 s each): not quick
pytestmark = pytest.mark.slow

TARGETS = ("epanet/pressure_10", "epanet/demand_9", "gridlabd/is_COOL_on")


@pytest.fixture(scope="module")
def three_targets(tmp_path_factory):
    return small_corpus(tmp_path_factory.mktemp("three-targets"), TARGETS)


def _target_rows(path, target: str) -> list[dict]:
    from whatif_bench.corpus import Corpus

    with Corpus(path) as corpus:
        pairs = corpus.pairs
        rows = pairs[(pairs["target"] == target) & pairs["kept"]]
        return rows.to_dict("records")


def _damage(path, tmp_path):
    """A copy with: stored values changed in the first and last target's pairs, a NaN in each
    of two targets' histories (a single pass reports the first only), an event statistic
    changed in the middle target."""
    damaged = tmp_path / "damaged.h5"
    shutil.copy2(path, damaged)
    first, middle, last = (_target_rows(path, t.split("/")[1]) for t in TARGETS)
    with h5py.File(damaged, "r+") as h5:
        data = h5["data/history_target"]
        for row in first[:3] + last[-3:]:
            offset = int(row["history_target_offset"])
            data[offset + 1] = data[offset + 1] * 1.5 + 1.0
        for row in (middle[0], last[0]):
            data[int(row["history_target_offset"]) + 2] = np.nan
        ratios = h5["events/ratio"]
        for row in middle[:4]:
            ratios[int(row["event_offset"])] = ratios[int(row["event_offset"])] + 0.25
    return damaged


def _report(path, jobs: int, limit: int):
    report = verify_corpus(path, progress=False, limit_problems=limit, jobs=jobs)
    return report.checked, report.problems


@pytest.mark.parametrize("limit", [7, 1000], ids=["stopped-by-the-limit", "every-problem"])
def test_worker_processes_report_what_one_process_reports(
    three_targets, tmp_path, monkeypatch, limit
):
    monkeypatch.setattr(checking, "MIN_PAIRS_PER_PROCESS", 1)  # three targets, several batches
    damaged = _damage(three_targets, tmp_path)
    one = _report(damaged, 1, limit)
    assert _report(damaged, 2, limit) == one
    assert _report(damaged, 3, limit) == one
    checked, problems = one
    non_finite = [p for p in problems if "non-finite" in p]
    if limit == 7:
        assert len(problems) == 8 and problems[-1] == "stopped after 7 problems"
        assert checked < 600
    else:
        assert checked == 600 and len(non_finite) == 1, problems
        assert any("ratio" in p for p in problems)
        assert sum("stored history_target differs" in p for p in problems) >= 6


def test_a_sound_corpus_verifies_in_worker_processes(three_targets, monkeypatch):
    monkeypatch.setattr(checking, "MIN_PAIRS_PER_PROCESS", 1)
    assert _report(three_targets, 2, 50) == (600, [])


def test_small_corpora_are_checked_in_this_process(three_targets, monkeypatch):
    """Below ``MIN_PAIRS_PER_PROCESS`` pairs a process, no worker starts whatever ``jobs``."""
    started = []
    monkeypatch.setattr(checking, "_check_rows_in_worker", lambda *a: started.append(a))
    assert _report(three_targets, 4, 50) == (600, [])
    assert started == []


def test_the_help_gives_the_pairs_per_process(capsys):
    from whatif_bench import cli

    with pytest.raises(SystemExit):
        cli.main(["verify", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert f"at most one per {checking.MIN_PAIRS_PER_PROCESS:,} pairs" in help_text
