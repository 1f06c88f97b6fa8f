"""The corpus file's identity: one definition of the format and the verification threshold, and
a reader that refuses a format version it does not read (a newer toolkit's file, a damaged or
missing attribute) with one error naming the file, the version found and the versions it reads.
"""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest

from tests.conftest import run_whatif, small_corpus
from whatif_bench.corpus.fileformat import FORMAT, FORMAT_VERSION, READABLE_VERSIONS
from whatif_bench.corpus.reader import CorpusError
from whatif_bench.generator import Corpus
from whatif_bench.relationships.verification import THRESHOLD

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def corpus_path(tmp_path_factory):
    return small_corpus(tmp_path_factory.mktemp("format"), ("epanet/pressure_10",))


@pytest.fixture
def copy(tmp_path, corpus_path):
    path = tmp_path / "copy.h5"
    shutil.copyfile(corpus_path, path)
    return path


def test_the_writer_records_the_format_the_reader_reads(corpus_path):
    with Corpus(corpus_path) as corpus:
        attrs = corpus.attrs
        assert len(corpus) > 0
    assert attrs["format"] == FORMAT and attrs["format_version"] == FORMAT_VERSION
    assert FORMAT_VERSION in READABLE_VERSIONS
    assert json.loads(attrs["axes"])["threshold"] == THRESHOLD


READS = " or ".join(str(v) for v in READABLE_VERSIONS)
VERSIONS = {
    "newer": (
        FORMAT_VERSION + 1,
        f"corpus format version {FORMAT_VERSION + 1}, but this toolkit reads format version "
        f"{READS}; a newer whatif-bench wrote it: upgrade the toolkit, or generate the corpus again",
    ),
    "older": (
        1,
        f"corpus format version 1, but this toolkit reads format version {READS}; an older "
        "whatif-bench made it by an earlier method (docs/METHOD.md): generate the corpus again",
    ),
    "zero": (
        0,
        f"corpus format version 0, but this toolkit reads format version {READS}; "
        "generate the corpus again",
    ),
    "text": (
        "1",
        f"corpus format version '1', but this toolkit reads format version {READS}; "
        "generate the corpus again",
    ),
    "float": (
        np.float64(1.5),
        f"corpus format version 1.5, but this toolkit reads format version {READS}; "
        "generate the corpus again",
    ),
    "missing": (
        None,
        "corpus without a format version (file attribute 'format_version'); this toolkit "
        f"reads format version {READS}",
    ),
}


@pytest.mark.parametrize("case", sorted(VERSIONS))
def test_an_unreadable_format_version_is_one_clear_error(copy, case):
    version, message = VERSIONS[case]
    with h5py.File(copy, "r+") as h5:
        if version is None:
            del h5.attrs["format_version"]
        else:
            h5.attrs["format_version"] = version
    with pytest.raises(CorpusError) as caught:
        Corpus(copy)
    assert str(caught.value) == f"{copy}: {message}"
    result = run_whatif("info", str(copy))
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.strip() == f"error: {copy}: {message}"


def test_a_readable_version_written_as_another_integer_type_opens(copy):
    with h5py.File(copy, "r+") as h5:
        h5.attrs["format_version"] = np.int32(FORMAT_VERSION)
    with Corpus(copy) as corpus:
        assert len(corpus) > 0


def _threshold_literals(path: Path) -> list[str]:
    """Where ``path`` writes the threshold's value as a float literal: the name it assigns
    (``QUANTILE_LEVELS``, ``THRESHOLD``), or ``line N`` when the literal is inside other code."""
    found = []
    tree = ast.parse(path.read_text())
    inside: dict[int, str] = {}  # id(node) -> the module-level name assigned around it
    for statement in tree.body:
        if isinstance(statement, ast.Assign) and isinstance(statement.targets[0], ast.Name):
            for node in ast.walk(statement.value):
                inside[id(node)] = statement.targets[0].id
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and type(node.value) is float:
            if node.value == THRESHOLD:
                found.append(inside.get(id(node), f"line {node.lineno}"))
    return found


def test_the_threshold_is_written_once():
    """Generation, verification, the axes record and the stream use ``THRESHOLD``; no other
    module of theirs writes its value again (the quantile levels 0.1 of the corpus room and of
    the diagnostics' summaries are not it)."""
    found = {
        str(path.relative_to(REPO)): where
        for path in [
            REPO / "relationships" / "verification.py",
            *(
                path
                for folder in ("corpus", "generator", "stream", "evaluation")
                for path in sorted((REPO / folder).glob("*.py"))
            ),
        ]
        if (where := _threshold_literals(path))
    }
    assert found == {
        "relationships/verification.py": ["THRESHOLD"],
        "corpus/levels.py": ["QUANTILE_LEVELS"],
        "generator/diagnostics.py": ["QUANTILES"],
    }, found


def test_the_format_is_defined_once():
    """Only ``corpus/fileformat.py`` assigns the corpus format's name and version."""
    owners = []
    for path in sorted([*(REPO / "corpus").glob("*.py"), *(REPO / "generator").glob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names = {t.id for t in targets if isinstance(t, ast.Name)}
                where = path.relative_to(REPO)
                owners += [f"{where}:{n}" for n in sorted(names & {"FORMAT", "FORMAT_VERSION"})]
    assert owners == ["corpus/fileformat.py:FORMAT", "corpus/fileformat.py:FORMAT_VERSION"]
