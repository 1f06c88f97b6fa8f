"""``whatif generate``'s last lines: the corpus's headline, read back from the file it wrote
with h5py alone, is the first line ``whatif info`` prints (``summarise`` on an open
``Corpus``)."""

from __future__ import annotations

import pytest

from tests.conftest import ONE_TARGET
from tests.conftest import run_main as run
from whatif_bench.corpus import Corpus, file_headline, format_summary, summarise
from whatif_bench.corpus.summary import headline


def _info_headline(path) -> str:
    with Corpus(path) as corpus:
        return format_summary(summarise(corpus)).splitlines()[0]


@pytest.mark.slow  # about 2 s
def test_generate_prints_the_headline_info_prints(tmp_path, capsys):
    out = tmp_path / "c.h5"
    code, stdout, _ = run(
        capsys, "generate", "--targets", ONE_TARGET, "--jobs", "1", "--out", str(out)
    )
    assert code == 0
    lines = stdout.splitlines()
    assert lines[-2] == _info_headline(out)
    assert lines[-2].startswith(f"{out}: ") and " over 1 targets; seed 0, toolkit " in lines[-2]
    assert lines[-1].startswith(f"wrote {out} in ")


def test_the_file_headline_counts_targets_and_tasks_as_info_does(two_target_corpus):
    line = file_headline(two_target_corpus)
    assert line == _info_headline(two_target_corpus)
    assert " over 2 targets; " in line
    spelled = f"{two_target_corpus.parent}/./{two_target_corpus.name}"  # named as Corpus names it
    assert file_headline(spelled) == _info_headline(spelled) == line


def test_a_headline_without_tasks_says_so():
    assert headline("x.h5", 0, 0, 0, 7, "0.1.0") == (
        "x.h5: 0 of 0 tasks kept (no tasks) over 0 targets; seed 7, toolkit 0.1.0"
    )
    assert headline("x.h5", 2, 3, 1, 7, "0.1.0").endswith(
        "kept (66.7%) over 1 targets; seed 7, toolkit 0.1.0"
    )
