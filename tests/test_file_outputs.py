"""An existing file named as an output is replaced only when this toolkit wrote it as an output
of the same kind (issue 23; ``outputs.file_kind`` reads the file's own content, never its name),
and every locked file output removes the temporaries its killed runs left, never anything else.

Each refusal runs through the command line's entry point and checks that every file that was
there keeps its SHA-256; each acceptance checks the command still replaces its own earlier
output (``bash dev corpus`` over its previous corpus).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import h5py
import pytest

from tests.conftest import ONE_TARGET, run_whatif
from tests.test_output_safety import assert_nothing_lost, one_error, run_in_process, snapshot
from whatif_bench.figures import new_figure, save_png
from whatif_bench.outputs import (
    BASELINES,
    CORPUS,
    FIGURE,
    REFERENCE,
    OutputError,
    aside_path,
    atomic_output,
    file_kind,
    temporary_path,
    write_text_atomic,
)
from whatif_bench.simulators import read_baselines, shipped_baselines_path, write_baselines

TARGET = ONE_TARGET
REPO = Path(__file__).resolve().parents[1]
THESIS = b"\\documentclass{article}\n\\begin{document}Years of work.\\end{document}\n"
REFUSE = "; refusing to replace it: delete it by hand or choose another name"


@pytest.fixture(scope="module")
def corpus(one_target_corpus) -> Path:
    return one_target_corpus


@pytest.fixture(scope="module")
def task_id(one_target_task_id) -> str:
    return one_target_task_id


@pytest.fixture
def live_pid() -> Iterator[int]:
    """The id of a process that is alive for the whole test (one this test started)."""
    process = subprocess.Popen(["sleep", "300"])
    try:
        yield process.pid
    finally:
        process.kill()
        process.wait()


# ---- files of every kind, by content ---------------------------------------------------------
def user_png(path: Path) -> Path:
    """A real PNG drawn by matplotlib, but not by this toolkit (no whatif-bench text chunk)."""
    figure = new_figure(1, 1)
    figure.subplots().plot([0, 1])
    figure.savefig(path, format="png")
    return path


def whatif_png(path: Path) -> Path:
    figure = new_figure(1, 1)
    figure.subplots().plot([0, 1])
    return save_png(figure, path)


def user_hdf5(path: Path, **attrs) -> Path:
    with h5py.File(path, "w") as h5:
        h5.attrs.update(attrs or {"format": "my-lab-data", "format_version": 3})
        h5["x"] = [1.0, 2.0]
    return path


def text(path: Path, content: bytes = THESIS) -> Path:
    path.write_bytes(content)
    return path


def copy(source: Path) -> Callable[[Path], Path]:
    def make(path: Path) -> Path:
        shutil.copyfile(source, path)
        return path

    return make


KINDS = [
    ("the shipped baselines store", copy(shipped_baselines_path()), BASELINES),
    ("the relationship reference", copy(REPO / "docs" / "RELATIONSHIPS.md"), REFERENCE),
    ("a figure save_png wrote", whatif_png, FIGURE),
    ("a thesis", text, None),
    ("an empty file", lambda p: text(p, b""), None),
    ("a README in Markdown", lambda p: text(p, b"# My project\n\nNotes.\n"), None),
    ("only the reference's title", lambda p: text(p, b"# Relationship reference\n\nMine.\n"), None),
    ("a PNG matplotlib drew for the user", user_png, None),
    ("a PNG signature, then garbage", lambda p: text(p, b"\x89PNG\r\n\x1a\n" + b"x" * 64), None),
    ("an HDF5 file of the user", user_hdf5, None),
    ("an HDF5 file with no version", lambda p: user_hdf5(p, format="whatif-corpus"), None),
    (
        "an HDF5 file with a text version",
        lambda p: user_hdf5(p, format="whatif-corpus", format_version="2"),
        None,
    ),
    ("an HDF5 signature, then garbage", lambda p: text(p, b"\x89HDF\r\n\x1a\n" + b"x" * 64), None),
]


@pytest.mark.parametrize(("make", "kind"), [k[1:] for k in KINDS], ids=[k[0] for k in KINDS])
def test_file_kind_reads_the_files_own_content(tmp_path, make, kind):
    # the name is the one each output would have: it never counts
    path = make(tmp_path / {BASELINES: "b.h5", REFERENCE: "R.md", FIGURE: "f.png"}.get(kind, "x"))
    before = snapshot(tmp_path)
    assert file_kind(path) == kind
    assert snapshot(tmp_path) == before  # read only


def test_the_writers_mark_their_files_as_file_kind_reads_them(tmp_path, corpus):
    from whatif_bench.relationships.docs import render_reference
    from whatif_bench.relationships.registry import load_registry

    assert file_kind(corpus) == CORPUS  # the corpus writer's format attributes
    assert file_kind(shipped_baselines_path()) == BASELINES
    reference = write_text_atomic(tmp_path / "R.md", render_reference(load_registry()))
    assert file_kind(reference) == REFERENCE
    assert file_kind(whatif_png(tmp_path / "f.png")) == FIGURE


def test_folders_special_files_and_missing_paths_are_no_kind(tmp_path):
    os.mkfifo(tmp_path / "pipe")  # never opened: that would block
    (tmp_path / "loop1").symlink_to("loop2")
    (tmp_path / "loop2").symlink_to("loop1")
    for path in ("pipe", "loop1", "missing.h5", "."):
        assert file_kind(tmp_path / path) is None
    assert file_kind("/dev/null") is None


# ---- refusals: each builds its files in ``root`` and returns (argv, the error line) -------------
def f_generate_over_a_thesis(root, corpus, task_id):
    out = text(root / "thesis.tex")
    return ["generate", "--targets", TARGET, "--jobs", "1", "--out", out], (
        f"error: {out}: exists and is not a whatif corpus (no whatif-bench record in it){REFUSE}"
    )


def f_generate_over_a_users_file_named_like_a_corpus(root, corpus, task_id):
    out = text(root / "whatif-corpus.h5")
    return ["generate", "--targets", TARGET, "--jobs", "1", "--out", out], (
        f"error: {out}: exists and is not a whatif corpus (no whatif-bench record in it){REFUSE}"
    )


def f_generate_over_a_users_hdf5(root, corpus, task_id):
    out = user_hdf5(root / "lab.h5")
    return ["generate", "--targets", TARGET, "--jobs", "1", "--out", out], (
        f"error: {out}: exists and is not a whatif corpus (no whatif-bench record in it){REFUSE}"
    )


def f_generate_through_a_link_to_a_thesis(root, corpus, task_id):
    text(root / "thesis.tex")
    (root / "c.h5").symlink_to("thesis.tex")  # a link is never an output: neither is replaced
    return ["generate", "--targets", TARGET, "--jobs", "1", "--out", root / "c.h5"], (
        f"error: {root / 'c.h5'}: is a symbolic link; refusing to replace it: give the file "
        "itself or another name"
    )


def f_generate_over_a_baselines_store(root, corpus, task_id):
    out = copy(shipped_baselines_path())(root / "b.h5")
    return ["generate", "--targets", TARGET, "--jobs", "1", "--out", out], (
        f"error: {out}: holds a whatif baselines store, not a whatif corpus{REFUSE}"
    )


def f_simulate_over_notes(root, corpus, task_id):
    out = text(root / "notes.h5")
    return ["simulate", "--simulator", "epanet", "--days", "1", "--out", out], (
        f"error: {out}: exists and is not a whatif baselines store (no whatif-bench record in "
        f"it){REFUSE}"
    )


def f_simulate_over_a_corpus(root, corpus, task_id):
    out = copy(corpus)(root / "c.h5")
    return ["simulate", "--simulator", "epanet", "--days", "1", "--out", out], (
        f"error: {out}: holds a whatif corpus, not a whatif baselines store{REFUSE}"
    )


def f_combine_over_a_users_file(root, corpus, task_id):
    out = text(root / "x")
    return ["baselines", "combine", "--out", out, shipped_baselines_path()], (
        "exists and is not a whatif baselines store (no whatif-bench record in it)"
    )


def f_combine_over_an_hdf5_that_only_names_the_format(root, corpus, task_id):
    out = user_hdf5(root / "b.h5", format="whatif-baselines")
    return ["baselines", "combine", "--out", out, shipped_baselines_path()], (
        "exists and is not a whatif baselines store"
    )


def f_doc_over_a_readme(root, corpus, task_id):
    out = text(root / "README.md", b"# My project\n")
    return ["relationships", "doc", "--out", out], (
        f"error: {out}: exists and is not a whatif relationship reference (no whatif-bench "
        f"record in it){REFUSE}"
    )


def f_doc_over_a_whatif_figure(root, corpus, task_id):
    out = whatif_png(root / "REL.md")
    return ["relationships", "doc", "--out", out], (
        f"error: {out}: holds a whatif figure, not a whatif relationship reference{REFUSE}"
    )


def f_show_plot_over_a_users_png(root, corpus, task_id):
    out = user_png(root / "mine.png")
    return ["show", "--corpus", corpus, task_id, "--plot", out], (
        f"error: {out}: exists and is not a whatif figure (no whatif-bench record in it){REFUSE}"
    )


def f_baselines_plot_over_a_users_png(root, corpus, task_id):
    (root / "plots").mkdir()
    out = user_png(root / "plots" / "epanet.png")
    return ["baselines", "plot", "--out", root / "plots"], f"error: {out}: exists and is not"


def f_relationships_plot_over_a_users_png(root, corpus, task_id):
    (root / "plots").mkdir()
    out = text(root / "plots" / "is_COOL_on.png")
    argv = ["--simulator", "gridlabd", "--target", "is_COOL_on", "--out", root / "plots"]
    return ["relationships", "plot", *argv], f"error: {out}: exists and is not a whatif figure"


FILE_REFUSALS = [
    f_generate_over_a_thesis,
    f_generate_over_a_users_file_named_like_a_corpus,
    f_generate_over_a_users_hdf5,
    f_generate_through_a_link_to_a_thesis,
    f_generate_over_a_baselines_store,
    f_simulate_over_notes,
    f_simulate_over_a_corpus,
    f_combine_over_a_users_file,
    f_combine_over_an_hdf5_that_only_names_the_format,
    f_doc_over_a_readme,
    f_doc_over_a_whatif_figure,
    f_show_plot_over_a_users_png,
    f_baselines_plot_over_a_users_png,
    f_relationships_plot_over_a_users_png,
]


@pytest.mark.parametrize("scenario", FILE_REFUSALS, ids=lambda s: s.__name__[2:])
@pytest.mark.one_quick  # about 2 s over all its cases
def test_an_existing_file_that_is_not_whatifs_own_of_that_kind_is_never_replaced(
    tmp_path, corpus, task_id, scenario, capsys
):
    argv, message = scenario(tmp_path, corpus, task_id)
    before = snapshot(tmp_path)
    one_error(run_in_process(capsys, argv), message)
    after = snapshot(tmp_path)
    assert_nothing_lost(before, after)
    assert not [name for name in after if ".whatif.partial-" in name]


@pytest.mark.parametrize(
    "scenario",
    [f_generate_over_a_thesis, f_simulate_over_notes, f_doc_over_a_readme],
    ids=lambda s: s.__name__[2:],
)
@pytest.mark.one_quick  # about 1 s over all its cases
def test_the_installed_command_refuses_an_existing_file_too(tmp_path, corpus, task_id, scenario):
    argv, message = scenario(tmp_path, corpus, task_id)
    before = snapshot(tmp_path)
    one_error(run_whatif(*map(str, argv)), message)
    assert_nothing_lost(before, snapshot(tmp_path))


def test_a_library_file_output_of_a_kind_refuses_another_file(tmp_path):
    out = text(tmp_path / "thesis.tex")
    with pytest.raises(OutputError, match="exists and is not a whatif corpus"):
        with atomic_output(out, kind=CORPUS) as tmp:
            tmp.write_text("never written")
    with pytest.raises(OutputError, match="exists and is not a whatif figure"):
        save_png(new_figure(1, 1), out)
    assert out.read_bytes() == THESIS
    save_png(new_figure(1, 1), out, check_existing=False)  # in a folder the toolkit owns
    assert file_kind(out) == FIGURE


# ---- the same kind is replaced -----------------------------------------------------------
def a_generate(root, corpus, task_id):
    out = copy(corpus)(root / "c.h5")  # ``bash dev corpus`` over its previous corpus
    return ["generate", "--targets", TARGET, "--jobs", "1", "--seed", "1", "--out", out], out


def a_simulate(root, corpus, task_id):
    out = copy(shipped_baselines_path())(root / "b.h5")
    return ["simulate", "--simulator", "epanet", "--days", "1", "--out", out], out


def a_combine(root, corpus, task_id):
    out = copy(shipped_baselines_path())(root / "b.h5")
    return ["baselines", "combine", "--out", out, shipped_baselines_path()], out


def a_doc_over_the_committed_reference(root, corpus, task_id):
    out = copy(REPO / "docs" / "RELATIONSHIPS.md")(root / "RELATIONSHIPS.md")
    return ["relationships", "doc", "--out", out], out


def a_show_plot(root, corpus, task_id):
    out = whatif_png(root / "task.png")
    return ["show", "--corpus", corpus, task_id, "--plot", out], out


def a_baselines_plot(root, corpus, task_id):
    # two of EPANET's shipped series: a small figure to draw (all four simulators' take ~17 s)
    epanet = read_baselines(shipped_baselines_path())["epanet"]
    two = dict(list(epanet.series.items())[:2])
    small = dataclasses.replace(
        epanet, series=two, units={name: epanet.units[name] for name in two}
    )
    store = write_baselines(root / "epanet.h5", [small])
    (root / "plots").mkdir()
    argv = ["baselines", "plot", "--out", root / "plots", store]
    return argv, whatif_png(root / "plots" / "epanet.png")


@pytest.mark.parametrize(
    ("scenario", "kind"),
    [
        (a_generate, CORPUS),
        (a_simulate, BASELINES),
        (a_combine, BASELINES),
        (a_doc_over_the_committed_reference, REFERENCE),
        (a_show_plot, FIGURE),
        (a_baselines_plot, FIGURE),
    ],
    ids=lambda s: getattr(s, "__name__", "")[2:] or None,
)
@pytest.mark.one_quick  # about 12 s over all its cases
def test_an_earlier_output_of_the_same_kind_is_replaced(
    tmp_path, corpus, task_id, scenario, kind, capsys
):
    argv, out = scenario(tmp_path, corpus, task_id)
    earlier = out.read_bytes()
    result = run_in_process(capsys, argv)
    assert result.returncode == 0, result.stderr
    assert file_kind(out) == kind
    if scenario is a_doc_over_the_committed_reference:
        assert out.read_bytes() == earlier  # the committed reference is up to date
    elif scenario is not a_combine:
        assert out.read_bytes() != earlier
    assert not [p for p in tmp_path.rglob("*") if ".whatif.partial-" in p.name]


# ---- stale temporaries of file outputs ---------------------------------------------------
def t_combine(root, corpus, task_id):
    out = root / "b.h5"
    return ["baselines", "combine", "--out", out, shipped_baselines_path()], out


def t_simulate(root, corpus, task_id):
    out = root / "b.h5"
    return ["simulate", "--simulator", "epanet", "--days", "1", "--out", out], out


def t_doc(root, corpus, task_id):
    out = root / "REL.md"
    return ["relationships", "doc", "--out", out], out


def t_show_plot(root, corpus, task_id):
    out = root / "task.png"
    return ["show", "--corpus", corpus, task_id, "--plot", out], out


@pytest.mark.parametrize(
    "scenario", [t_combine, t_simulate, t_doc, t_show_plot], ids=lambda s: s.__name__[2:]
)
def test_a_file_output_removes_only_the_stale_temporaries_of_whatif(
    tmp_path, corpus, task_id, scenario, live_pid, capsys
):
    argv, out = scenario(tmp_path, corpus, task_id)
    stale = temporary_path(out, pid=999_999_999)  # ours, its process gone: removed
    stale.write_text("a killed run's half file")
    kept = {
        f".{out.name}.partial-mine": "the user's",
        f".{out.name}.whatif.partial-abc": "not a pid",
        f".{out.name}.whatif.partial-1x": "not a pid either",
        f"{stale.name}.txt": "not exactly our name",
        aside_path(out, pid=999_999_999).name: "a file: only folders are ever moved aside",
        temporary_path(out, pid=live_pid).name: "a run still going",
    }
    for name, content in kept.items():
        (tmp_path / name).write_text(content)
    (tmp_path / f".{out.name}.old-backup").mkdir()
    (tmp_path / f".{out.name}.old-backup" / "v1.h5").write_text("the user's backup")
    before = snapshot(tmp_path)
    result = run_in_process(capsys, argv)
    assert result.returncode == 0, result.stderr
    assert not stale.exists()
    del before[stale.name]
    assert_nothing_lost(before, snapshot(tmp_path))


def test_a_locked_atomic_output_removes_a_stale_temporary_an_unlocked_one_does_not(tmp_path):
    out = tmp_path / "o.txt"
    stale = temporary_path(out, pid=999_999_999)
    stale.write_text("stale")
    write_text_atomic(out, "1", lock=False)  # the caller locks the folder: not its business
    assert stale.exists()
    write_text_atomic(out, "2")
    assert not stale.exists() and out.read_text() == "2"
