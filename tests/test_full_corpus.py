"""The main job: the full default corpus from the shipped baselines, then verified."""

from __future__ import annotations

import pytest

from tests.conftest import run_whatif
from whatif_bench.generator import Corpus


@pytest.mark.slow
def test_default_corpus_is_generated_and_verifies(tmp_path):
    out = tmp_path / "whatif-corpus.h5"
    result = run_whatif("generate", "--out", str(out))
    assert result.returncode == 0, result.stderr
    with Corpus(out) as corpus:
        # every target of the four simulators, 200 histories each
        assert len(corpus.pairs) == 99 * 200
        assert corpus.attrs["n_tasks_generated"] == 39_600
        kept = corpus.attrs["n_tasks_kept"]
        assert len(corpus) == kept and 0 < kept <= 39_600
        assert set(corpus.pairs["simulator"]) == {"epanet", "gridlabd", "opendc", "sumo"}
    verified = run_whatif("verify", str(out))
    assert verified.returncode == 0, verified.stdout[-2000:]
    assert "every pair rebuilt bit for bit" in verified.stdout
