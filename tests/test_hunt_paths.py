"""Paths a fault hunt found mishandled, each one ``error:`` line that changes nothing
(docs/RELIABILITY.md, section 2): a file output that is a symbolic link (dangling or not), a
file in the world cache that is not the toolkit's baselines store, an empty path, an evaluation
of an unreadable corpus, and a special file or folder given as an input.

Every case runs the command line's entry point in this process and checks the one line, the exit
code, that every entry that was there keeps its SHA-256 (links stay links, FIFOs are never
opened) and that nothing new is left (no output, no lock file, no folder).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ONE_TARGET
from tests.test_file_outputs import text, user_hdf5, whatif_png
from tests.test_output_safety import Ran, one_error, run_in_process, snapshot
from whatif_bench.outputs import BASELINES, file_kind
from whatif_bench.simulators import shipped_baselines_path

TARGET = ONE_TARGET
WORLD = "epanet-demand-summer"
DAYS = 0.2
WORLD_FILE = f"{WORLD}-{DAYS:g}d.h5"  # WorldCache.path of WORLD run for DAYS
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def corpus(one_target_corpus) -> Path:
    return one_target_corpus


@pytest.fixture(scope="module")
def task_id(one_target_task_id) -> str:
    return one_target_task_id


@pytest.fixture(scope="module")
def world_store(tmp_path_factory) -> Path:
    """A real cache file of WORLD, built by the cache itself (a short run)."""
    from whatif_bench.simulators.worlds import WorldCache, get_world

    cache = WorldCache(tmp_path_factory.mktemp("worlds"))
    cache.get(get_world(WORLD), DAYS)
    return cache.path(get_world(WORLD), DAYS)


def command(argv: list) -> str:
    """The command words of ``argv`` (``"baselines-info"``), for test ids."""
    return "-".join(str(a) for a in argv[:2] if str(a) and not str(a).startswith(("-", "{")))


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def without_progress(result: Ran) -> Ran:
    """``result`` without the progress bars ``whatif worlds build`` draws on stderr before its
    first world (tqdm's ``N%|`` lines, redrawn with carriage returns)."""
    lines = [ln for ln in result.stderr.splitlines() if not re.search(r"\d%\|", ln)]
    return Ran(result.returncode, result.stdout, "\n".join(lines))


def refused_and_unchanged(
    capsys, root: Path, argv: list, line: str, progress: bool = False
) -> None:
    """``whatif ARGV`` fails with exactly ``line`` (besides progress bars, with ``progress``)
    and leaves ``root`` exactly as it was."""
    before = snapshot(root)
    result = run_in_process(capsys, argv)
    if progress:
        result = without_progress(result)
    one_error(result, line)
    assert result.stderr.strip() == line
    assert snapshot(root) == before


# ---- 1. a file output that is a symbolic link is refused, dangling or not ---------------------
LINKED = "is a symbolic link; refusing to replace it: give the file itself or another name"


def _link(root: Path, name: str, make: Callable[[Path], Path] | None) -> Path:
    """``root/name``: a link to a file ``make`` writes in ``root/other``, or a dangling one."""
    (root / "other").mkdir()
    target = Path("other") / f"target{Path(name).suffix}"
    if make is not None:
        make(root / target)
    (root / name).symlink_to(target)
    return root / name


def _copy(source: Path) -> Callable[[Path], Path]:
    return lambda path: Path(shutil.copyfile(source, path))


LINK_OUTPUTS = [
    ("generate-to-a-corpus", "c.h5", "corpus", ["generate", "--targets", TARGET, "--jobs", "1"]),
    ("generate-dangling", "c.h5", None, ["generate", "--targets", TARGET, "--jobs", "1"]),
    (
        "simulate-to-a-store",
        "b.h5",
        "store",
        ["simulate", "--simulator", "epanet", "--days", "0.1"],
    ),
    ("simulate-dangling", "b.h5", None, ["simulate", "--simulator", "epanet", "--days", "0.1"]),
    (
        "combine-to-a-store",
        "b.h5",
        "store",
        ["baselines", "combine", str(shipped_baselines_path())],
    ),
    ("combine-dangling", "b.h5", None, ["baselines", "combine", str(shipped_baselines_path())]),
    ("doc-to-the-reference", "R.md", "reference", ["relationships", "doc"]),
    ("doc-dangling", "R.md", None, ["relationships", "doc"]),
    ("show-plot-to-a-figure", "t.png", "figure", ["show", "--corpus", "{corpus}", "{task}"]),
    ("show-plot-dangling", "t.png", None, ["show", "--corpus", "{corpus}", "{task}"]),
]


@pytest.mark.parametrize(("name", "target", "argv"), [c[1:] for c in LINK_OUTPUTS],
                         ids=[c[0] for c in LINK_OUTPUTS])  # fmt: skip
def test_a_file_output_that_is_a_symbolic_link_is_refused_and_kept(
    tmp_path, corpus, task_id, name, target, argv, capsys
):
    makers = {
        "corpus": _copy(corpus),
        "store": _copy(shipped_baselines_path()),
        "reference": _copy(REPO / "docs" / "RELATIONSHIPS.md"),
        "figure": whatif_png,
        None: None,
    }
    link = _link(tmp_path, name, makers[target])
    argv = [str(a).format(corpus=corpus, task=task_id) for a in argv]
    option = "--plot" if argv[0] == "show" else "--out"
    refused_and_unchanged(capsys, tmp_path, [*argv, option, link], f"error: {link}: {LINKED}")
    assert link.is_symlink()


# ---- 2. the world cache reads and replaces only its own baselines stores ----------------------
def _move(cache: Path) -> str:
    return f"refusing to read or replace it: move it out of the cache folder {cache}"


UNRECOGNISED = (
    "not recognisable as a training-world cache file (no whatif baselines format in it: another "
    "program's file, or one too damaged to read)"
)


def _truncated(store: Path) -> Callable[[Path], object]:
    return lambda path: path.write_bytes(store.read_bytes()[: store.stat().st_size // 2])


FOREIGN = [
    ("a thesis", lambda store: text, UNRECOGNISED),
    ("an empty file", lambda store: lambda p: p.write_bytes(b""), UNRECOGNISED),
    ("an HDF5 file of the user", lambda store: user_hdf5, UNRECOGNISED),
    ("a truncated cache file", _truncated, UNRECOGNISED),
    (
        "a corpus",
        None,
        "holds a whatif corpus, not a training-world cache file (a whatif baselines store)",
    ),  # fmt: skip
    (
        "a whatif figure",
        lambda store: whatif_png,
        "holds a whatif figure, not a training-world cache file (a whatif baselines store)",
    ),  # fmt: skip
    (
        "a link to a cache file",
        lambda store: lambda p: p.symlink_to(store),
        "is a symbolic link, not a training-world cache file",
    ),  # fmt: skip
    ("a folder", lambda store: lambda p: p.mkdir(), "is a folder, not a training-world cache file"),
    ("a FIFO", lambda store: os.mkfifo, "is a FIFO (named pipe), not a training-world cache file"),
]


@pytest.mark.parametrize("rebuild", [False, True], ids=["build", "rebuild"])
@pytest.mark.parametrize(("make", "why"), [f[1:] for f in FOREIGN], ids=[f[0] for f in FOREIGN])
def test_a_file_in_the_cache_that_is_not_a_store_of_ours_is_never_read_or_replaced(
    tmp_path, corpus, world_store, make, why, rebuild, capsys
):
    cache = tmp_path / "cache"
    cache.mkdir()
    path = cache / WORLD_FILE
    (make(world_store) if make is not None else _copy(corpus))(path)
    hint = ", or delete it by hand" if why == UNRECOGNISED else ""
    argv = ["worlds", "build", "--world", WORLD, "--cache", cache, "--days", DAYS]
    line = f"error: {path}: {why}; {_move(cache)}{hint}"
    rebuilt = [*argv, *(["--rebuild"] if rebuild else [])]
    refused_and_unchanged(capsys, tmp_path, rebuilt, line, progress=True)


def test_stream_refuses_a_users_file_in_its_cache_before_writing_anything(tmp_path, capsys):
    cache = tmp_path / "cache"
    cache.mkdir()
    path = text(cache / f"{WORLD}.h5")  # the name of the world's benchmark-length run
    argv = ["stream", "--seed", "3", "--count", "5", "--simulators", "epanet", "--worlds", WORLD]
    line = f"error: {path}: {UNRECOGNISED}; {_move(cache)}, or delete it by hand"
    refused_and_unchanged(
        capsys, tmp_path, [*argv, "--cache", cache, "--out", tmp_path / "st"], line
    )


def test_a_damaged_store_of_ours_is_named_corrupt_and_rebuilt_only_with_rebuild(
    tmp_path, world_store, capsys
):
    import h5py

    cache = tmp_path / "cache"
    cache.mkdir()
    path = Path(shutil.copyfile(world_store, cache / WORLD_FILE))
    with h5py.File(path, "r+") as h5:  # one value changed: its content hash no longer matches
        series = h5["epanet/series"]
        first = series[next(iter(series))]
        first[0] = first[0] + 1.0
    argv = ["worlds", "build", "--world", WORLD, "--cache", cache, "--days", DAYS]
    damaged = sha256(path)
    result = without_progress(run_in_process(capsys, argv))
    one_error(result, f"error: corrupt training-world cache file: {path}: simulator 'epanet': ")
    assert result.stderr.strip().endswith(
        f"rebuild it with: whatif worlds build --world {WORLD} --cache {cache} --days {DAYS:g} "
        "--rebuild"
    )
    assert sha256(path) == damaged
    result = run_in_process(capsys, [*argv, "--rebuild"])
    assert result.returncode == 0, result.stderr
    assert file_kind(path) == BASELINES and sha256(path) == sha256(world_store)


# ---- 3. an empty path is refused, never taken for the current folder --------------------------
EMPTY = [
    (["worlds", "build", "--world", WORLD, "--days", DAYS, "--cache", ""], "--cache"),
    (["stream", "--seed", "3", "--count", "5", "--cache", "", "--out", "st"], "--cache"),
    (
        ["generate", "--targets", TARGET, "--jobs", "1", "--baselines", "", "--out", "g.h5"],
        "--baselines",
    ),  # fmt: skip
    (["verify", "{corpus}", "--baselines", ""], "--baselines"),
    (["relationships", "diagnose", "--targets", TARGET, "--baselines", ""], "--baselines"),
    (["baselines", "info", ""], "baselines file"),
    (["baselines", "plot", "", "--out", "plots"], "baselines file"),
    (["info", ""], "corpus file"),
    (["verify", ""], "corpus file"),
    (["show", "--corpus", "", "{task}"], "corpus file"),
    (["diagnose", ""], "corpus file"),
    (["export", "", "--format", "parquet", "--out", "o"], "corpus file"),
    (["evaluate", "", "--models", "naive", "--out", "results"], "corpus file"),
    (["show", "--corpus", "{corpus}", "{task}", "--plot", ""], "--plot"),
]


@pytest.mark.parametrize(("argv", "what"), EMPTY, ids=[f"{command(a)}-{what}" for a, what in EMPTY])
def test_an_empty_path_is_refused_and_nothing_is_written_here(
    tmp_path, monkeypatch, corpus, task_id, argv, what, capsys
):
    monkeypatch.chdir(tmp_path)
    given = shutil.copyfile(corpus, tmp_path / "c.h5")
    argv = [str(a).format(corpus=given, task=task_id) for a in argv]
    refused_and_unchanged(capsys, tmp_path, argv, f"error: {what}: the path is empty")
    assert capsys.readouterr().out == ""


# ---- 4. an evaluation of an unreadable corpus leaves no folder ---------------------------------
def _random_bytes(path: Path) -> None:
    path.write_bytes(np.random.default_rng(4).bytes(4096))


UNREADABLE = [
    ("an empty file", lambda c: lambda p: p.write_bytes(b""), "not a readable HDF5 file"),
    ("random bytes", lambda c: _random_bytes, "not a readable HDF5 file"),
    ("a truncated corpus", _truncated, "not a readable HDF5 file"),
    ("a baselines store", lambda c: _copy(shipped_baselines_path()), "not a WhatIf-Bench corpus"),
]


@pytest.mark.parametrize("out", ["results", "deep/er/results"])
@pytest.mark.parametrize(("make", "why"), [u[1:] for u in UNREADABLE],
                         ids=[u[0] for u in UNREADABLE])  # fmt: skip
def test_evaluating_an_unreadable_corpus_creates_no_folder(
    tmp_path, corpus, make, why, out, capsys
):
    given = tmp_path / "in.h5"
    make(corpus)(given)
    argv = ["evaluate", given, "--models", "naive", "--out", tmp_path / out]
    before = snapshot(tmp_path)
    one_error(run_in_process(capsys, argv), f"error: {given}: {why}")
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("existed", [False, True], ids=["new", "existing-empty"])
def test_an_evaluation_that_fails_before_writing_removes_only_the_folders_it_made(
    tmp_path, corpus, monkeypatch, existed, capsys
):
    from whatif_bench.evaluation import runner

    def fail(*args, **kwargs):
        raise runner.EvaluationError("no task selected")

    monkeypatch.setattr(runner, "select_tasks", fail)  # after the folder is made
    out = tmp_path / "deep" / "results"
    if existed:
        out.mkdir(parents=True)
    argv = ["evaluate", corpus, "--models", "naive", "--out", out]
    one_error(run_in_process(capsys, argv), "error: no task selected")
    assert out.is_dir() if existed else not (tmp_path / "deep").exists()


# ---- 5. a special file or folder as an input is named for what it is --------------------------
SPECIAL = [
    ("fifo", "a FIFO (named pipe)"),
    ("/dev/null", "a character device"),
    ("loop", "a symbolic link loop"),
    ("folder", None),
]
CORPUS_COMMANDS = [
    ["info", "{x}"],
    ["verify", "{x}"],
    ["show", "--corpus", "{x}", "{task}"],
    ["diagnose", "{x}"],
    ["evaluate", "{x}", "--models", "naive", "--out", "{root}/results"],
]
BASELINES_COMMANDS = [
    ["baselines", "info", "{x}"],
    ["baselines", "plot", "{x}", "--out", "{root}/plots"],
    ["verify", "{corpus}", "--baselines", "{x}"],
    ["relationships", "diagnose", "--targets", TARGET, "--baselines", "{x}"],
]


def _special(root: Path, kind: str) -> str:
    if kind == "fifo":
        os.mkfifo(root / "pipe")  # never opened: that would block
        return str(root / "pipe")
    if kind == "loop":
        (root / "loop1").symlink_to("loop2")
        (root / "loop2").symlink_to("loop1")
        return str(root / "loop1")
    if kind == "folder":
        (root / "folder").mkdir()
        return str(root / "folder")
    return kind


# (export names a FIFO, a device or a loop as "the input" itself: test_output_safety.py)
EXPORT = ["export", "{x}", "--format", "parquet", "--out", "{root}/o"]
INPUTS = [
    *[(kind, what, c, "corpus") for kind, what in SPECIAL for c in CORPUS_COMMANDS],
    ("folder", None, EXPORT, "corpus"),
    *[(kind, what, c, "baselines file") for kind, what in SPECIAL for c in BASELINES_COMMANDS],
]


@pytest.mark.parametrize(
    ("kind", "what", "argv", "role"),
    INPUTS,
    ids=[f"{kind.strip('/')}-{command(argv)}-{role}" for kind, _, argv, role in INPUTS],
)
def test_a_special_file_or_folder_as_an_input_is_named_for_what_it_is(
    tmp_path, corpus, task_id, kind, what, argv, role, capsys
):
    x = _special(tmp_path, kind)
    argv = [a.format(x=x, task=task_id, corpus=corpus, root=tmp_path) for a in argv]
    line = (
        f"error: {x}: is a folder, not a {role.removesuffix(' file')} file"
        if what is None
        else f"error: {x}: the {role} is {what}, not a regular file"
    )
    refused_and_unchanged(capsys, tmp_path, argv, line)
