"""Nothing of the user's is ever deleted or replaced (issue 23; docs/RELIABILITY.md, section 2).

Each fault of the hunt runs through the real command line: a folder is replaced only when this
toolkit's identity record says it is an output of the same kind, never while it holds an input
(by real path); only the toolkit's own temporaries (name, marker, owning process gone) are
cleaned up; FIFOs, devices and symbolic link loops are one ``error:`` line. Every case checks
that the inputs keep their SHA-256 and that nothing that was there is gone.

``/dev/null`` is used as an input only, or as an output only through the library functions
that refuse it before anything is opened: no test here can write to it.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.conftest import ONE_TARGET, run_cli, run_whatif
from whatif_bench import outputs
from whatif_bench.outputs import (
    IDENTITY,
    OutputError,
    atomic_folder,
    atomic_output,
    check_folder_output,
    check_output_path,
    remove_stale_temporaries,
    temporary_path,
    write_folder,
    write_identity,
)

# the reports draw one skill plot, not five (tests/conftest.py): not what these tests check
pytestmark = pytest.mark.usefixtures("one_skill_plot_in_module")

TARGET = ONE_TARGET  # epanet/pressure_10
STREAM = ("stream", "--seed", "3", "--count", "5", "--simulators", "epanet")


@pytest.fixture(scope="module")
def corpus_bytes(one_target_corpus) -> bytes:
    # the session's corpus is TARGET alone, seed 0: the file this module would generate
    return one_target_corpus.read_bytes()


@pytest.fixture(scope="module")
def baselines() -> str:
    from whatif_bench.simulators import shipped_baselines_path

    return str(shipped_baselines_path())


def snapshot(root: Path) -> dict[str, str]:
    """Every entry under ``root`` (not following links): a file's SHA-256, else its type."""
    found = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            mode = path.lstat().st_mode
            key = path.relative_to(root).as_posix()
            if stat.S_ISREG(mode):
                found[key] = hashlib.sha256(path.read_bytes()).hexdigest()
            elif stat.S_ISLNK(mode):
                found[key] = f"link->{os.readlink(path)}"
            else:
                found[key] = f"mode {stat.S_IFMT(mode):o}"
    return found


def assert_nothing_lost(before: dict[str, str], after: dict[str, str]) -> None:
    """Every entry of ``before`` is still there, unchanged (new ones: lock files, outputs)."""
    lost = {k: v for k, v in before.items() if after.get(k) != v}
    assert not lost, f"deleted or changed: {lost}"


class Ran:
    def __init__(self, returncode: int, stdout: str, stderr: str) -> None:
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def run_in_process(capsys, argv: list[str]) -> Ran:
    """``whatif ARGV`` through the command line's own entry point, in this process (fast)."""
    from whatif_bench.cli import main

    capsys.readouterr()
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return Ran(code, out, err)


def one_error(result, message: str) -> None:
    assert result.returncode == 1, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert message in lines[0], result.stderr
    assert "Traceback" not in result.stderr and "unexpected" not in result.stderr


# ---- the scenarios: each builds its files in ``root`` and returns (argv, message) ---------------
def _corpus(root: Path, corpus: bytes, where: str = "E/corpus.h5") -> Path:
    path = root / where
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(corpus)
    return path


def _users_folder(root: Path, name: str) -> Path:
    """A folder of someone else's that happens to hold a ``manifest.json``."""
    folder = root / name
    (folder / "src").mkdir(parents=True)
    (folder / "manifest.json").write_text('{"name": "my web app"}')
    (folder / "thesis.tex").write_text("\\documentclass{article}")
    (folder / "src" / "app.js").write_text("console.log(1)")
    return folder


def _loop(root: Path) -> Path:
    (root / "loop1").symlink_to("loop2")
    (root / "loop2").symlink_to("loop1")
    return root / "loop1"


def _fifo(root: Path, name: str = "pipe") -> Path:
    os.mkfifo(root / name)
    return root / name


def s_export_into_the_corpus_folder(root, corpus, baselines):
    c = _corpus(root, corpus)
    return ["export", str(c), "--format", "parquet", "--out", str(root / "E"), "--overwrite"], (
        "holds the input"
    )


def s_export_into_the_corpus_folder_through_a_link(root, corpus, baselines):
    c = _corpus(root, corpus)
    (root / "link.h5").symlink_to(c)
    return [
        "export", str(root / "link.h5"), "--format", "parquet", "--out", str(root / "E"),
        "--overwrite",
    ], "holds the input"  # fmt: skip


def s_export_into_a_parent_of_the_corpus(root, corpus, baselines):
    c = _corpus(root, corpus, "work/data/deep/corpus.h5")
    return ["export", str(c), "--format", "parquet", "--out", str(root / "work"), "--overwrite"], (
        "holds the input"
    )


def s_stream_into_the_cache_folder(root, corpus, baselines):
    (root / "X" / "cache").mkdir(parents=True)
    (root / "X" / "cache" / "world.h5").write_bytes(b"a cached world")
    cache = str(root / "X" / "cache")
    return [*STREAM, "--out", str(root / "X"), "--cache", cache, "--overwrite"], "holds the input"


def s_stream_onto_the_cache_folder(root, corpus, baselines):
    (root / "X").mkdir()
    (root / "X" / "world.h5").write_bytes(b"a cached world")
    x = str(root / "X")
    return [*STREAM, "--out", x, "--cache", x, "--overwrite"], "the output would replace the input"


NOT_OURS = "not empty and not a folder whatif {} wrote (no .whatif-output.json record)"


def s_export_over_a_folder_with_a_manifest(root, corpus, baselines):
    c = _corpus(root, corpus)
    out = _users_folder(root, "myapp")
    return ["export", str(c), "--format", "parquet", "--out", str(out), "--overwrite"], (
        NOT_OURS.format("export")
    )


def s_stream_over_a_folder_with_a_manifest(root, corpus, baselines):
    out = _users_folder(root, "myapp")
    return [*STREAM, "--out", str(out), "--cache", str(root / "c"), "--overwrite"], (
        NOT_OURS.format("stream")
    )


def s_diagnose_over_a_folder_with_a_manifest(root, corpus, baselines):
    c = _corpus(root, corpus)
    out = _users_folder(root, "myapp")
    (out / "diagnostics.json").write_text("{}")  # the old rule's marker name: not enough
    return ["diagnose", str(c), "--out", str(out)], NOT_OURS.format("diagnose")


def s_export_over_an_evaluation_folder(root, corpus, baselines):
    c = _corpus(root, corpus)
    out = root / "results"
    (out / "per_task").mkdir(parents=True)
    (out / "manifest.json").write_text('{"corpus": "c.h5"}')
    (out / "leaderboard.csv").write_text("model,score\n")
    return ["export", str(c), "--format", "parquet", "--out", str(out), "--overwrite"], (
        NOT_OURS.format("export")
    )


def s_export_over_a_stream_folder(root, corpus, baselines):
    c = _corpus(root, corpus)
    out = root / "shards"
    (out / "data").mkdir(parents=True)
    (out / "manifest.json").write_text("{}")
    write_identity(out, "stream")
    return ["export", str(c), "--format", "parquet", "--out", str(out), "--overwrite"], (
        "holds a whatif stream output, not an export-parquet one"
    )


def s_export_in_another_format_over_an_export(root, corpus, baselines):
    c = _corpus(root, corpus)
    out = root / "hf"
    out.mkdir()
    (out / "manifest.json").write_text("{}")
    write_identity(out, "export-parquet")
    return ["export", str(c), "--format", "fev", "--out", str(out), "--overwrite"], (
        "holds a whatif export-parquet output, not an export-fev one"
    )


NOT_AN_EVALUATION = (
    "not empty and not a folder whatif evaluate wrote (no .whatif-output.json record); "
    "refusing to write into it"
)


def _evaluate(root: Path, corpus: bytes, out: Path) -> list[str]:
    return ["evaluate", str(_corpus(root, corpus)), "--models", "naive", "--out", str(out)]


def _record_folder(root: Path, name: str, kind: str) -> Path:
    """A folder holding some files and the identity record of a whatif ``kind`` output."""
    folder = root / name
    (folder / "data").mkdir(parents=True)
    (folder / "manifest.json").write_text("{}")
    (folder / "data" / "part-0.parquet").write_bytes(b"PAR1 some rows PAR1")
    write_identity(folder, kind)
    return folder


def s_evaluate_into_a_users_folder(root, corpus, baselines):
    return _evaluate(root, corpus, _users_folder(root, "thesis")), NOT_AN_EVALUATION


def s_evaluate_into_an_evaluation_folder_without_the_record(root, corpus, baselines):
    out = root / "results"  # what a whatif version before the record wrote, or a look-alike
    (out / "per_task" / "naive").mkdir(parents=True)
    (out / "manifest.json").write_text('{"corpus": "c.h5"}')
    (out / "leaderboard.md").write_text("# my own notes")
    return _evaluate(root, corpus, out), NOT_AN_EVALUATION


def s_evaluate_into_an_export_folder(root, corpus, baselines):
    out = _record_folder(root, "hf", "export-parquet")
    return _evaluate(root, corpus, out), (
        "holds a whatif export-parquet output, not an evaluation one; refusing to write into it"
    )


def s_evaluate_into_a_stream_folder(root, corpus, baselines):
    out = _record_folder(root, "shards", "stream")
    return _evaluate(root, corpus, out), "holds a whatif stream output, not an evaluation one"


def s_evaluate_into_a_diagnose_folder(root, corpus, baselines):
    out = _record_folder(root, "report", "diagnostics")
    return _evaluate(root, corpus, out), "holds a whatif diagnostics output, not an evaluation one"


FIFO_OUT = "the output is a FIFO (named pipe), not a regular file"


def s_generate_out_fifo(root, corpus, baselines):
    return ["generate", "--targets", TARGET, "--jobs", "1", "--out", str(_fifo(root))], FIFO_OUT


def s_simulate_out_fifo(root, corpus, baselines):
    return ["simulate", "--simulator", "epanet", "--days", "1", "--out", str(_fifo(root))], (
        FIFO_OUT
    )


def s_combine_out_fifo(root, corpus, baselines):
    return ["baselines", "combine", "--out", str(_fifo(root)), baselines], FIFO_OUT


def s_doc_out_fifo(root, corpus, baselines):
    return ["relationships", "doc", "--out", str(_fifo(root))], FIFO_OUT


def s_export_out_fifo(root, corpus, baselines):
    c = _corpus(root, corpus)
    return ["export", str(c), "--format", "parquet", "--out", str(_fifo(root))], FIFO_OUT


def s_stream_out_fifo(root, corpus, baselines):
    return [*STREAM, "--out", str(_fifo(root)), "--cache", str(root / "c")], FIFO_OUT


FIFO_IN = "the input is a FIFO (named pipe), not a regular file"
DEVICE_IN = "/dev/null: the input is a character device, not a regular file"


def s_export_corpus_fifo(root, corpus, baselines):
    return ["export", str(_fifo(root)), "--format", "parquet", "--out", str(root / "o")], FIFO_IN


def s_generate_baselines_fifo(root, corpus, baselines):
    return [
        "generate", "--targets", TARGET, "--baselines", str(_fifo(root)), "--out",
        str(root / "c.h5"),
    ], FIFO_IN  # fmt: skip


def s_combine_input_fifo(root, corpus, baselines):
    return ["baselines", "combine", "--out", str(root / "b.h5"), str(_fifo(root))], FIFO_IN


def s_export_corpus_dev_null(root, corpus, baselines):
    return ["export", "/dev/null", "--format", "parquet", "--out", str(root / "o")], DEVICE_IN


def s_generate_baselines_dev_null(root, corpus, baselines):
    return [
        "generate", "--targets", TARGET, "--baselines", "/dev/null", "--out", str(root / "c.h5"),
    ], DEVICE_IN  # fmt: skip


def s_combine_input_dev_null(root, corpus, baselines):
    return ["baselines", "combine", "--out", str(root / "b.h5"), "/dev/null"], DEVICE_IN


LOOP = "is a symbolic link loop"


def s_combine_input_loop(root, corpus, baselines):
    return ["baselines", "combine", "--out", str(root / "b.h5"), str(_loop(root))], LOOP


def s_combine_out_loop(root, corpus, baselines):
    return ["baselines", "combine", "--out", str(_loop(root)), baselines], LOOP


def s_generate_baselines_loop(root, corpus, baselines):
    return [
        "generate", "--targets", TARGET, "--baselines", str(_loop(root)), "--out",
        str(root / "c.h5"),
    ], LOOP  # fmt: skip


def s_generate_out_loop(root, corpus, baselines):
    return ["generate", "--targets", TARGET, "--out", str(_loop(root) / "c.h5")], LOOP


def s_evaluate_out_loop(root, corpus, baselines):
    c = _corpus(root, corpus)
    return ["evaluate", str(c), "--models", "naive", "--out", str(_loop(root))], LOOP


def s_export_corpus_loop(root, corpus, baselines):
    return ["export", str(_loop(root)), "--format", "parquet", "--out", str(root / "o")], LOOP


def s_export_out_loop(root, corpus, baselines):
    c = _corpus(root, corpus)
    return ["export", str(c), "--format", "parquet", "--out", str(_loop(root))], LOOP


def s_relationships_list_forms_loop(root, corpus, baselines):
    return ["relationships", "list", "--forms", str(_loop(root))], LOOP


REFUSALS = [
    s_export_into_the_corpus_folder,
    s_export_into_the_corpus_folder_through_a_link,
    s_export_into_a_parent_of_the_corpus,
    s_stream_into_the_cache_folder,
    s_stream_onto_the_cache_folder,
    s_export_over_a_folder_with_a_manifest,
    s_stream_over_a_folder_with_a_manifest,
    s_diagnose_over_a_folder_with_a_manifest,
    s_export_over_an_evaluation_folder,
    s_export_over_a_stream_folder,
    s_export_in_another_format_over_an_export,
    s_evaluate_into_a_users_folder,
    s_evaluate_into_an_evaluation_folder_without_the_record,
    s_evaluate_into_an_export_folder,
    s_evaluate_into_a_stream_folder,
    s_evaluate_into_a_diagnose_folder,
    s_generate_out_fifo,
    s_simulate_out_fifo,
    s_combine_out_fifo,
    s_doc_out_fifo,
    s_export_out_fifo,
    s_stream_out_fifo,
    s_export_corpus_fifo,
    s_generate_baselines_fifo,
    s_combine_input_fifo,
    s_export_corpus_dev_null,
    s_generate_baselines_dev_null,
    s_combine_input_dev_null,
    s_combine_input_loop,
    s_combine_out_loop,
    s_generate_baselines_loop,
    s_generate_out_loop,
    s_evaluate_out_loop,
    s_export_corpus_loop,
    s_export_out_loop,
    s_relationships_list_forms_loop,
]


@pytest.mark.parametrize("scenario", REFUSALS, ids=lambda s: getattr(s, "__name__", str(s))[2:])
@pytest.mark.one_quick  # about 1 s over all its cases
def test_a_run_that_would_lose_user_data_is_one_error_and_changes_nothing(
    tmp_path, corpus_bytes, baselines, scenario, capsys
):
    root = tmp_path / "root"
    root.mkdir()
    argv, message = scenario(root, corpus_bytes, baselines)
    before = snapshot(root)
    shipped = hashlib.sha256(Path(baselines).read_bytes()).hexdigest()
    one_error(run_in_process(capsys, argv), message)
    assert_nothing_lost(before, snapshot(root))
    assert hashlib.sha256(Path(baselines).read_bytes()).hexdigest() == shipped
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


@pytest.mark.parametrize(
    "scenario",
    [
        s_export_into_the_corpus_folder,
        s_stream_over_a_folder_with_a_manifest,
        s_doc_out_fifo,
        s_evaluate_into_a_users_folder,
    ],
    ids=lambda s: s.__name__[2:],
)
@pytest.mark.one_quick  # about 2 s over all its cases
def test_the_installed_command_refuses_too(tmp_path, corpus_bytes, baselines, scenario):
    """A few of the table's cases through the ``whatif`` executable itself (a new process)."""
    argv, message = scenario(tmp_path, corpus_bytes, baselines)
    before = snapshot(tmp_path)
    one_error(run_whatif(*argv), message)
    assert_nothing_lost(before, snapshot(tmp_path))


# ---- an evaluation folder holds its identity record ----------------------------------------
EVALUATE = ("--models", "naive", "--subset", "0.05")


@pytest.fixture(scope="module")
def evaluation(tmp_path_factory, corpus_bytes) -> tuple[Path, Path]:
    """(corpus, an evaluation folder ``whatif evaluate`` wrote)."""
    root = tmp_path_factory.mktemp("evaluation")
    corpus = _corpus(root, corpus_bytes, "corpus.h5")
    result = run_cli("evaluate", str(corpus), *EVALUATE, "--out", str(root / "results"))
    assert result.returncode == 0, result.stderr
    return corpus, root / "results"


def test_an_evaluation_folder_holds_its_identity_record_and_resumes(evaluation, capsys):
    corpus, out = evaluation
    assert outputs.read_identity(out) == {
        "tool": "whatif-bench",
        "kind": "evaluation",
        "version": 1,
    }
    before = snapshot(out)
    result = run_in_process(capsys, ["evaluate", corpus, *EVALUATE, "--out", out])
    assert result.returncode == 0, result.stderr  # a resumed run: its own folder
    assert before[IDENTITY] == snapshot(out)[IDENTITY]
    assert {k for k in before if k.startswith("per_task/")} <= set(snapshot(out))


@pytest.mark.parametrize("made", ["missing", "empty"])
@pytest.mark.one_quick  # about 1 s over all its cases
def test_a_new_or_empty_folder_is_used_for_an_evaluation(tmp_path, corpus_bytes, made, capsys):
    corpus, out = _corpus(tmp_path, corpus_bytes), tmp_path / "results"
    if made == "empty":
        out.mkdir()
    result = run_in_process(capsys, ["evaluate", corpus, *EVALUATE, "--out", out])
    assert result.returncode == 0, result.stderr
    assert outputs.read_identity(out)["kind"] == "evaluation"  # type: ignore[index]


@pytest.mark.parametrize(
    "argv",
    [
        ["export", "{corpus}", "--format", "parquet", "--out", "{out}", "--overwrite"],
        ["export", "{corpus}", "--format", "fev", "--out", "{out}", "--overwrite"],
        [*STREAM, "--out", "{out}", "--cache", "{cache}", "--overwrite"],
        ["diagnose", "{corpus}", "--out", "{out}"],
    ],
    ids=["export-parquet", "export-fev", "stream", "diagnose"],
)
def test_other_commands_refuse_a_folder_whatif_evaluate_wrote(evaluation, tmp_path, argv, capsys):
    corpus, out = evaluation
    before = snapshot(out.parent)
    filled = [a.format(corpus=corpus, out=out, cache=tmp_path / "c") for a in argv]
    one_error(run_in_process(capsys, filled), "holds a whatif evaluation output, not a")
    assert snapshot(out.parent) == before


# ---- names beside an output that only look like temporaries ----------------------------------
@pytest.mark.slow  # about 4 s
def test_export_keeps_files_that_only_look_like_its_temporaries(tmp_path, corpus_bytes):
    c = _corpus(tmp_path, corpus_bytes)
    (tmp_path / ".results.old-backup" / "2024").mkdir(parents=True)
    (tmp_path / ".results.old-backup" / "2024" / "run.csv").write_text("1,2\n")
    (tmp_path / ".results.partial-notes.txt").write_text("notes")
    (tmp_path / ".results.partial-123").mkdir()  # the old rule's exact form, not ours
    live = temporary_path(tmp_path / "results", pid=os.getpid())  # ours, but its run is alive
    live.mkdir()
    write_identity(live, "export-parquet", pid=os.getpid())
    before = snapshot(tmp_path)
    for extra in ([], ["--overwrite"]):  # a new export, then replacing it
        result = run_whatif(
            "export", str(c), "--format", "parquet", "--out", str(tmp_path / "results"), *extra
        )
        assert result.returncode == 0, result.stderr
    assert_nothing_lost(before, snapshot(tmp_path))
    assert (tmp_path / "results" / IDENTITY).is_file()


@pytest.mark.slow  # about 2 s
def test_generate_keeps_files_that_only_look_like_its_temporaries(tmp_path):
    out = tmp_path / "c.h5"
    (tmp_path / ".c.h5.partial-mine").write_text("mine")
    (tmp_path / ".c.h5.partial-42").write_text("the old rule's form")
    (tmp_path / ".c.h5.whatif.partial-7x").write_text("not a pid")
    live = temporary_path(out, pid=os.getpid())
    live.write_text("a live run's")
    stale = temporary_path(out, pid=999_999_999)  # ours, its process gone: removed
    stale.write_text("a killed run's")
    stale.with_name(stale.name + ".txt").write_text("not exactly our name")
    before = snapshot(tmp_path)
    result = run_whatif("generate", "--targets", TARGET, "--jobs", "1", "--out", str(out))
    assert result.returncode == 0, result.stderr
    after = snapshot(tmp_path)
    assert not stale.exists()
    del before[stale.name]
    assert_nothing_lost(before, after)


def test_a_folder_moved_aside_by_a_killed_run_is_put_back(tmp_path):
    """A run killed between moving the old folder aside and renaming the new one in: the next
    run restores the old folder rather than delete the user's only copy."""
    out = tmp_path / "o"
    aside = outputs.aside_path(out, pid=999_999_999)
    aside.mkdir()
    (aside / "data.txt").write_text("previous export")
    write_identity(aside, "export-parquet")
    remove_stale_temporaries(out)
    assert (out / "data.txt").read_text() == "previous export" and not aside.exists()


# ---- the library rule --------------------------------------------------------------------
def fill(tmp: Path) -> dict:
    (tmp / "data.txt").write_text("new")
    return {"format": "test"}


def test_a_folder_is_replaced_only_with_the_identity_record_of_its_kind(tmp_path):
    out = write_folder(tmp_path / "o", False, fill, "whatif test", "test")
    assert outputs.read_identity(out) == {"tool": "whatif-bench", "kind": "test", "version": 1}
    write_folder(out, True, fill, "whatif test", "test")  # ours, same kind: replaced
    with pytest.raises(OutputError, match="holds a whatif test output, not an other one"):
        write_folder(out, True, fill, "whatif other", "other")
    (out / IDENTITY).write_text('{"tool": "someone-else", "kind": "test", "version": 1}')
    with pytest.raises(OutputError, match="no .whatif-output.json record"):
        write_folder(out, True, fill, "whatif test", "test")
    legacy = tmp_path / "legacy"  # an export of a whatif version before the record
    legacy.mkdir()
    (legacy / "manifest.json").write_text("{}")
    with pytest.raises(OutputError, match="delete it by hand or choose another folder"):
        write_folder(legacy, True, fill, "whatif test", "test")
    (tmp_path / "empty").mkdir()  # an empty folder holds nothing to lose
    write_folder(tmp_path / "empty", True, fill, "whatif test", "test")


def test_a_folder_holding_an_input_is_never_replaced(tmp_path):
    out = write_folder(tmp_path / "o", False, fill, "whatif test", "test")
    (out / "inside.h5").write_text("an input")
    (tmp_path / "elsewhere").symlink_to(out / "inside.h5")
    for source in (out / "inside.h5", tmp_path / "elsewhere", out, tmp_path / "o" / ".." / "o"):
        with pytest.raises(OutputError, match="holds the input"):
            check_folder_output(out, True, "whatif test", "test", [source])
    check_folder_output(out / "sub", True, "whatif test", "test", [out / "inside.h5"])


@pytest.mark.parametrize("folder", [False, True])
def test_dev_null_is_refused_as_an_output_before_it_is_touched(folder):
    before = os.stat("/dev/null")
    with pytest.raises(OutputError, match="^/dev/null: the output is a character device"):
        check_output_path("/dev/null", folder=folder)
    with pytest.raises(OutputError, match="^/dev/null: the output is a character device"):
        check_folder_output(Path("/dev/null"), True)
    entered = []
    with pytest.raises(OutputError, match="character device"):
        with atomic_output("/dev/null") as tmp:
            entered.append(tmp)  # never reached: nothing is written
    with pytest.raises(OutputError, match="character device"):
        with atomic_folder(Path("/dev/null"), lambda: None, "x") as tmp:
            entered.append(tmp)
    assert entered == []
    after = os.stat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and after.st_ino == before.st_ino
    assert not [p for p in Path("/dev").iterdir() if p.name.startswith(".null.")]


def test_special_files_and_loops_are_named(tmp_path):
    fifo = _fifo(tmp_path)
    loop = _loop(tmp_path)
    with pytest.raises(OutputError, match=f"^{fifo}: the output is a FIFO"):
        check_output_path(fifo)
    with pytest.raises(OutputError, match=f"^{loop}: the output is a symbolic link loop"):
        check_output_path(loop)
    with pytest.raises(OutputError, match=f"^{loop}: the input is a symbolic link loop"):
        check_output_path(tmp_path / "o", inputs=[loop])
    with pytest.raises(OutputError, match="^/dev/null: the input is a character device"):
        check_output_path(tmp_path / "o", inputs=["/dev/null"])
    assert stat.S_ISFIFO(fifo.lstat().st_mode)


# ---- property: --overwrite on a folder tree not made by the toolkit deletes nothing ----------
NAMES = st.sampled_from(
    ["manifest.json", "README.md", "data", "notes.txt", ".hidden", "diagnostics.json",
     "per_task", "a.parquet", ".whatif-output.json.bak", "x"]
)  # fmt: skip
TREE = st.recursive(
    st.binary(max_size=20),
    lambda children: st.dictionaries(NAMES, children, min_size=1, max_size=4),
    max_leaves=8,
).filter(lambda t: isinstance(t, dict))
SIBLINGS = st.lists(
    st.sampled_from(
        ["partial-", "old-", "partial-1", "old-backup", "whatif.partial-", "whatif."]
    ).flatmap(lambda stem: st.text("abc0123-.", max_size=5).map(lambda tail: stem + tail)),
    max_size=4,
    unique=True,
)


def build(folder: Path, tree) -> None:
    for name, child in tree.items():
        if isinstance(child, dict):
            (folder / name).mkdir()
            build(folder / name, child)
        else:
            (folder / name).write_bytes(child)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree=TREE, siblings=SIBLINGS, with_manifest=st.booleans())
def test_overwrite_of_a_tree_not_made_by_the_toolkit_deletes_nothing(tree, siblings, with_manifest):
    with tempfile.TemporaryDirectory() as name:
        root = Path(name)
        out = root / "out"
        out.mkdir()
        build(out, tree)
        if with_manifest and not (out / "manifest.json").exists():
            (out / "manifest.json").write_text("{}")
        for sibling in siblings:
            path = root / f".out.{sibling}"
            assume(outputs._temporary_pid(out, path) is None)  # noqa: SLF001
            path.write_text("the user's")
        before = snapshot(root)
        with pytest.raises(OutputError, match="no .whatif-output.json record"):
            write_folder(out, True, fill, "whatif test", "test")
        remove_stale_temporaries(out)
        after = snapshot(root)
        assert {k: v for k, v in after.items() if k != ".out.lock"} == before
