"""Generation, reading and verification fail clearly, never lose a good corpus, never lie.

Every failing case asserts its specific message (naming the path, field or target), exit code
1 (2 for usage errors), and no traceback or "unexpected" catch-all in stderr.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import signal
import subprocess
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from tests.conftest import ONE_TARGET, run_cli, whatif_executable
from tests.test_generator_resilience import start_and_wait_for_partial
from whatif_bench.corpus.reader import CorpusError
from whatif_bench.generator import Corpus, GenerationConfig, generate
from whatif_bench.generator.checking import verify_corpus
from whatif_bench.generator.sweep import GenerationError
from whatif_bench.simulators import read_baselines, shipped_baselines_path, write_baselines

TARGET = "epanet/pressure_10"
SHIPPED = shipped_baselines_path()


def clean_failure(result, message, code=1):
    """The run failed with ``code`` and one specific message, without a traceback."""
    assert result.returncode == code, (result.returncode, result.stderr)
    assert message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and "unexpected" not in result.stderr, result.stderr


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def leftovers(folder: Path, name: str) -> list[Path]:
    """Files of a run other than its lock file: the output and any temporary file."""
    return [p for p in folder.iterdir() if name in p.name and not p.name.endswith(".lock")]


@pytest.fixture(scope="module")
def corpus_path(one_target_corpus):
    """TARGET alone (the session's; the tests that change a corpus change a ``copy``)."""
    assert TARGET == ONE_TARGET
    return one_target_corpus


@pytest.fixture
def copy(tmp_path, corpus_path):
    path = tmp_path / "copy.h5"
    shutil.copyfile(corpus_path, path)
    return path


# ---- 1. the output never replaces the input ------------------------------------------------
@pytest.mark.parametrize("spelling", ["same", "dotted", "symlink"])
def test_out_equal_to_baselines_is_refused_and_the_input_kept(tmp_path, spelling):
    baselines = tmp_path / "b.h5"
    shutil.copyfile(SHIPPED, baselines)
    before = digest(baselines)
    (tmp_path / "sub").mkdir()
    out = {
        "same": baselines,
        "dotted": tmp_path / "sub" / ".." / "b.h5",
        "symlink": tmp_path / "link.h5",
    }[spelling]
    if spelling == "symlink":
        out.symlink_to(baselines)
    result = run_cli("generate", "--baselines", str(baselines), "--out", str(out))
    clean_failure(result, "the output would replace the input")
    assert digest(baselines) == before


# ---- 2. unusable --out paths are refused before any work -----------------------------------
def _bad_out(tmp_path, case):
    if case == "folder":
        (tmp_path / "dir").mkdir()
        return str(tmp_path / "dir"), "is a folder; give a file name"
    if case == "empty":
        return "", "the output path is empty"
    (tmp_path / "file").write_text("x")
    return str(tmp_path / "file" / "c.h5"), "is a file, not a folder"


@pytest.mark.parametrize("case", ["folder", "empty", "under_a_file"])
def test_unusable_out_is_refused_up_front(tmp_path, case):
    out, message = _bad_out(tmp_path, case)
    started = time.monotonic()
    result = run_cli("generate", "--targets", TARGET, "--out", out, "--jobs", "1")
    clean_failure(result, message)
    assert time.monotonic() - started < 30  # refused before generating
    assert not list(tmp_path.rglob("*.partial*"))


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a 0o500 folder anyway")
def test_read_only_folder_is_refused(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        result = run_cli("generate", "--targets", TARGET, "--out", str(folder / "c.h5"))
    finally:
        folder.chmod(0o700)
    clean_failure(result, "no permission to write here")
    assert not list(folder.iterdir())


def test_a_temporary_file_is_never_read_as_a_corpus(tmp_path, corpus_path):
    from whatif_bench.outputs import temporary_path

    temporary = temporary_path(tmp_path / "c.h5")
    shutil.copyfile(corpus_path, temporary)
    with pytest.raises(CorpusError, match="temporary file of an unfinished whatif generate"):
        Corpus(temporary)
    clean_failure(run_cli("info", str(temporary)), "temporary file of an unfinished")


# ---- 3. concurrent runs and killed runs ----------------------------------------------------
def test_a_second_concurrent_run_fails_at_once(tmp_path):
    out = tmp_path / "c.h5"
    process, partial = start_and_wait_for_partial(out)
    try:
        started = time.monotonic()
        result = run_cli("generate", "--targets", TARGET, "--out", str(out), "--jobs", "1")
        clean_failure(result, f"{out}: another whatif run is writing this output")
        assert time.monotonic() - started < 30
        assert partial.exists()  # the first run's file is untouched
    finally:
        process.kill()
        process.wait()


@pytest.mark.slow  # about 2 s
def test_a_killed_run_keeps_the_previous_corpus(tmp_path, corpus_path):
    out = tmp_path / "c.h5"
    shutil.copyfile(corpus_path, out)
    before = digest(out)
    process, partial = start_and_wait_for_partial(out)
    time.sleep(1)  # let it write for a while
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert digest(out) == before
    with Corpus(out) as corpus:
        assert len(corpus.pairs) == 200
    # the next run ignores the stale temporary file of the killed one, removes it and completes
    result = run_cli("generate", "--targets", TARGET, "--out", str(out), "--jobs", "1")
    assert result.returncode == 0, result.stderr
    assert not partial.exists() and leftovers(tmp_path, "c.h5") == [out]


def test_ctrl_c_says_the_output_is_unchanged(tmp_path):
    out = tmp_path / "c.h5"
    log = tmp_path / "stderr.txt"
    with log.open("w") as stderr:
        process, partial = start_and_wait_for_partial(out, stderr=stderr)
        process.send_signal(signal.SIGINT)
        process.wait(timeout=60)
    assert process.returncode == 130
    assert f"interrupted; no corpus was written; {out} is unchanged" in log.read_text()
    assert not out.exists() and not partial.exists()


# ---- 4. a full disk ------------------------------------------------------------------------
def _limit_file_size():
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes past the limit then fail with EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (1_000_000, 1_000_000))


@pytest.mark.slow  # about 1 s
def test_a_full_disk_is_one_clear_error_and_keeps_the_old_corpus(tmp_path, corpus_path):
    """RLIMIT_FSIZE makes every write past 1 MB fail (EFBIG) as a full disk would (ENOSPC):
    HDF5 used to crash with SIGSEGV here and leave an unreadable file."""
    out = tmp_path / "c.h5"
    shutil.copyfile(corpus_path, out)
    before = digest(out)
    command = [
        *whatif_executable(),
        "generate",
        "--targets",
        TARGET,
        "sumo/flow_loop_e_0_near",
        "--out",
        str(out),
        "--jobs",
        "1",
    ]
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=300, preexec_fn=_limit_file_size
    )
    clean_failure(result, f"{out}: file too large for this file system or limit")
    assert digest(out) == before
    assert leftovers(tmp_path, "c.h5") == [out]


# ---- 5. values beyond float32 --------------------------------------------------------------
def test_baselines_beyond_float32_are_refused(tmp_path):
    epanet = read_baselines(SHIPPED)["epanet"]
    epanet.series["pressure_10"][100] = 1e39
    path = tmp_path / "big.h5"
    write_baselines(path, [epanet])
    out = tmp_path / "c.h5"
    result = run_cli("generate", "--baselines", str(path), "--targets", TARGET, "--out", str(out))
    clean_failure(result, "epanet/pressure_10: value 1e+39 at step 100 is beyond the float32 range")
    assert leftovers(tmp_path, "c.h5") == []


@pytest.mark.parametrize("reference", [False, True])
def test_verify_finds_a_non_finite_stored_value(copy, reference):
    with h5py.File(copy, "r+") as h5:
        h5["data/history_target"][5] = np.inf
    report = verify_corpus(copy, progress=False, reference=reference)
    assert "/data/history_target: non-finite value inf at index 5" in report.problems


def test_verify_finds_a_non_finite_value_that_no_pair_reads(copy):
    """The task arrays are checked on the values the pairs' checks read; what lies between or
    after the pairs' arrays is scanned on its own."""
    with h5py.File(copy, "r+") as h5:
        data = h5["data/future_target"]
        end = data.shape[0]
        data.resize((end + 3,))
        data[end:] = [0.0, np.nan, 1.0]
    report = verify_corpus(copy, progress=False)
    assert report.problems == [f"/data/future_target: non-finite value nan at index {end + 1}"]


# ---- 6. verify checks everything the file claims -------------------------------------------
def _first_kept(h5) -> int:
    return int(np.flatnonzero(h5["pairs/kept"][()])[0])


def _swap_covariates(h5):
    dataset = h5["baselines/epanet/pressure_10"]
    summary = json.loads(dataset.attrs["relationship"])
    summary["covariates"][0], summary["covariates"][1] = (
        summary["covariates"][1],
        summary["covariates"][0],
    )
    dataset.attrs["relationship"] = json.dumps(summary)


def _set(path, value):
    def edit(h5):
        name, _, index = path.partition("#")
        h5[name][int(index) if index else _first_kept(h5)] = value

    return edit


def _set_attr(where, name, value):
    def edit(h5):
        (h5[where] if where else h5).attrs[name] = value

    return edit


TAMPERING = {
    "relationship": (_swap_covariates, "epanet/pressure_10: relationship covariates stored"),
    "unit": (
        _set_attr("baselines/epanet/pressure_10", "unit", "bar"),
        "/baselines/epanet/pressure_10: unit stored 'bar', the registry says",
    ),
    "unit_hash": (
        _set_attr("baselines/epanet/pressure_10", "unit", "bar"),
        "/baselines/epanet/pressure_10: values, unit 'bar'",
    ),
    "interval": (
        _set_attr("baselines/epanet", "interval_s", 60),
        "/baselines/epanet/pressure_10: interval_s stored 60, the baselines have",
    ),
    "interval_hash": (
        _set_attr("baselines/epanet", "interval_s", 60),
        "interval_s 60 or start",
    ),
    "start": (
        _set_attr("baselines/epanet", "start", "1999-01-01T00:00:00"),
        "/baselines/epanet/pressure_10: start stored '1999-01-01T00:00:00', the baselines have",
    ),
    "baselines_hash": (
        _set_attr("", "baselines_hash", "0" * 64),
        "attribute baselines_hash: stored '" + "0" * 64,
    ),
    "n_pairs": (_set_attr("", "n_pairs", 201), "attribute n_pairs: stored 201, expected 200"),
    "n_pairs_kept": (_set_attr("", "n_pairs_kept", 1), "attribute n_pairs_kept: stored 1"),
    "event_ratio": (_set("events/ratio#0", 9.5), "/K1-C1-L32-Efew: stored event ratios"),
    "replay_ratio": (_set("pairs/replay_ratio", 9.5), ": replay_ratio stored 9.5, recomputed"),
    "novel_ratio": (_set("pairs/novel_ratio", 9.5), ": novel_ratio stored 9.5, recomputed"),
    "min_ratio": (
        _set("pairs/min_history_ratio", 9.5),
        ": min_history_ratio stored 9.5, recomputed",
    ),
    "offset": (
        _set("pairs/future_target_offset", 10**9),
        ": future_target_offset 1000000000 (+",
    ),
    "event_offset": (_set("pairs/event_offset", -3), ": event_offset -3 (+"),
}


@pytest.mark.parametrize("case", sorted(TAMPERING))
@pytest.mark.one_quick  # about 5 s over all its cases
def test_verify_names_every_edit(copy, case):
    edit, message = TAMPERING[case]
    with h5py.File(copy, "r+") as h5:
        edit(h5)
    report = verify_corpus(copy, progress=False)
    assert not report.ok
    assert any(message in problem for problem in report.problems), report.problems


@pytest.mark.parametrize("case", ["event_ratio", "replay_ratio", "offset", "value", "recipe"])
def test_verify_with_the_reference_functions_names_the_same_problems(copy, case):
    """``whatif verify --reference`` rebuilds pair by pair with the method's functions: the
    same report as the kernels' rebuild."""
    if case in TAMPERING:
        edit, _ = TAMPERING[case]
    elif case == "value":
        edit = _set("data/future_covariates#0", 123.0)
    else:
        edit = _set("events/factors#0", 7.25)
    with h5py.File(copy, "r+") as h5:
        edit(h5)
    kernels = verify_corpus(copy, progress=False)
    reference = verify_corpus(copy, progress=False, reference=True)
    assert not kernels.ok
    assert (kernels.problems, kernels.warnings) == (reference.problems, reference.warnings)


def test_verify_a_good_corpus_is_clean(corpus_path):
    report = verify_corpus(corpus_path, progress=False)
    assert report.ok and not report.warnings, (report.problems, report.warnings)


def test_duplicate_pair_ids_are_refused(copy):
    with h5py.File(copy, "r+") as h5:
        first = h5["pairs/pair_id"][0]
        h5["pairs/pair_id"][1] = first
    message = f"damaged corpus, pair id {first.decode()!r} appears more than once"
    with pytest.raises(CorpusError, match="appears more than once"):
        Corpus(copy)
    for command in (["verify", str(copy)], ["info", str(copy)]):
        clean_failure(run_cli(*command), message)


def test_verify_cli_reports_one_line_per_problem(copy):
    with h5py.File(copy, "r+") as h5:
        _swap_covariates(h5)
        h5.attrs["n_pairs_kept"] = 1
    result = run_cli("verify", str(copy))
    assert result.returncode == 1
    assert "relationship covariates stored" in result.stdout
    assert "attribute n_pairs_kept: stored 1" in result.stdout
    assert "rebuilt bit for bit" not in result.stdout


# ---- 7. damaged files: one clear error, never a KeyError -----------------------------------
def _delete(name):
    def edit(h5):
        del h5[name]

    return edit


def _delete_attr(where, name):
    def edit(h5):
        del (h5[where] if where else h5).attrs[name]

    return edit


DAMAGE = {
    "pairs_column": (_delete("pairs/kept"), "missing dataset /pairs/kept"),
    "events": (_delete("events/ratio"), "missing dataset /events/ratio"),
    "data": (_delete("data/future_target"), "missing dataset /data/future_target"),
    "group": (_delete("futures"), "missing group /futures"),
    "baseline": (
        _delete("baselines/epanet/pressure_10"),
        "missing dataset /baselines/epanet/pressure_10",
    ),
    "unit": (
        _delete_attr("baselines/epanet/pressure_10", "unit"),
        "missing attribute 'unit' of /baselines/epanet/pressure_10",
    ),
    "relationship": (
        _delete_attr("baselines/epanet/pressure_10", "relationship"),
        "missing attribute 'relationship' of /baselines/epanet/pressure_10",
    ),
    "interval": (
        _delete_attr("baselines/epanet", "interval_s"),
        "missing attribute 'interval_s' of /baselines/epanet",
    ),
    "start": (
        _delete_attr("baselines/epanet", "start"),
        "missing attribute 'start' of /baselines/epanet",
    ),
    "seed": (_delete_attr("", "master_seed"), "missing file attribute 'master_seed'"),
}


@pytest.mark.parametrize("case", sorted(DAMAGE))
@pytest.mark.one_quick  # about 1 s over all its cases
def test_a_damaged_corpus_is_one_clear_error(copy, case):
    edit, what = DAMAGE[case]
    with h5py.File(copy, "r+") as h5:
        edit(h5)
    message = f"{copy}: damaged corpus, {what}"
    with pytest.raises(CorpusError) as caught:
        Corpus(copy)
    assert str(caught.value) == message
    task = "epanet/pressure_10/K1-C1-L32-Efew/novel"
    for command in (
        ["info", str(copy)],
        ["show", task, "--corpus", str(copy)],
        ["verify", str(copy)],
    ):
        clean_failure(run_cli(*command), message)


def test_show_plots_into_a_folder(tmp_path, corpus_path):
    with Corpus(corpus_path) as corpus:
        task = corpus.task_ids()[0]
    folder = tmp_path / "plots"
    folder.mkdir()
    result = run_cli("show", task, "--corpus", str(corpus_path), "--plot", f"{folder}/")
    assert result.returncode == 0, result.stderr
    png = folder / (task.replace("/", "_") + ".png")
    assert png.read_bytes().startswith(b"\x89PNG")
    assert [p.name for p in folder.iterdir() if not p.name.startswith(".")] == [png.name]


def test_show_never_plots_over_the_corpus(tmp_path, corpus_path, copy):
    with Corpus(copy) as corpus:
        task = corpus.task_ids()[0]
    before = digest(copy)
    result = run_cli("show", task, "--corpus", str(copy), "--plot", str(copy))
    clean_failure(result, "the output would replace the input")
    assert digest(copy) == before


# ---- 8. numbers --------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--seed", str(10**30), "argument --seed: must be between 0 and 2**63 - 1, got 10000"),
        ("--seed", "-1", "argument --seed: must be between 0 and 2**63 - 1, got -1"),
        ("--seed", "1.5", "argument --seed: expected an integer, got '1.5'"),
        ("--jobs", "0", "argument --jobs: must be a positive integer (>= 1), got 0"),
        ("--jobs", "-5", "argument --jobs: must be a positive integer (>= 1), got -5"),
        ("--jobs", "two", "argument --jobs: expected an integer, got 'two'"),
    ],
)
def test_bad_numbers_are_usage_errors(tmp_path, option, value, message):
    out = tmp_path / "c.h5"
    result = run_cli("generate", "--targets", TARGET, "--out", str(out), option, value)
    clean_failure(result, message, code=2)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("seed", 2**63, "the seed must be between 0 and 2**63 - 1"),
        ("seed", -1, "the seed must be between 0 and 2**63 - 1"),
        ("jobs", 0, "jobs must be a positive integer"),
        ("jobs", -5, "jobs must be a positive integer"),
    ],
)
def test_bad_numbers_in_the_api(tmp_path, field, value, message):
    with pytest.raises(GenerationError, match=message.replace("*", r"\*")):
        GenerationConfig(baselines=str(SHIPPED), out=str(tmp_path / "c.h5"), **{field: value})


def test_the_largest_seed_is_stored(tmp_path):
    config = GenerationConfig(
        baselines=str(SHIPPED), out=str(tmp_path / "c.h5"), targets=(TARGET,), seed=2**63 - 1
    )
    with Corpus(generate(config, progress=False)) as corpus:
        assert corpus.attrs["master_seed"] == 2**63 - 1


# ---- 9. workers end with their parent ------------------------------------------------------
def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc (Linux)")
def test_generate_works_in_threads_of_its_one_process_which_a_kill_ends(tmp_path):
    """``--jobs 2`` runs the targets and the compression in threads: no worker process can
    outlive a killed run, and the killed run leaves no corpus."""
    out = tmp_path / "c.h5"
    process, _ = start_and_wait_for_partial(out, jobs="2")
    for _ in range(10):  # while it works
        assert _children(process.pid) == []
        time.sleep(0.05)
    assert process.poll() is None, "the run ended before it could be killed"
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not out.exists()


def test_generation_never_keeps_a_non_finite_array(corpus_path):
    from whatif_bench.generator.sweep import PairResult, check_finite

    with Corpus(corpus_path) as corpus:
        recipe = corpus.recipe(corpus.pairs.iloc[0])
    result = PairResult(recipe, np.array([1.0]), 1.0, 1.0)
    result.arrays = {"future_target": np.array([1.0, np.inf], dtype=np.float32)}
    with pytest.raises(
        GenerationError, match=r"future_target has the non-finite value inf at index 1"
    ):
        check_finite(result)


def test_a_failed_write_is_remembered_and_hdf5_still_closes(tmp_path):
    """GuardedFile: after the first failed write HDF5 keeps working from memory, closes
    cleanly, and ``finish`` raises the error (simulated with a read-only descriptor)."""
    from whatif_bench.h5write import GuardedFile

    guard = GuardedFile(tmp_path / "f.h5")
    h5 = h5py.File(guard, "w")
    h5.create_dataset("a", data=np.arange(10.0), chunks=(5,))
    h5.flush()
    os.close(guard.fd)
    guard.fd = os.open(tmp_path / "f.h5", os.O_RDONLY)  # every write now fails (EBADF)
    h5.create_dataset("b", data=np.arange(100_000.0), chunks=(1000,), compression="gzip")
    assert guard.error is not None
    assert np.array_equal(h5["b"][()], np.arange(100_000.0))  # read back from memory
    h5.close()
    with pytest.raises(OSError):
        guard.finish()


def test_a_guarded_file_writes_any_buffer_in_c_order(tmp_path):
    """GuardedFile.write takes h5py's contiguous byte views without copying them, and any other
    buffer (another format, or not contiguous) as its bytes in C order."""
    from whatif_bench.h5write import GuardedFile

    values = np.arange(12.0).reshape(3, 4)
    guard = GuardedFile(tmp_path / "f.bin")
    assert guard.write(memoryview(b"head")) == 4
    assert guard.write(values) == 96  # float64 format, contiguous
    assert guard.write(values[:, ::2]) == 48  # not contiguous
    guard.finish()
    written = (tmp_path / "f.bin").read_bytes()
    assert written == b"head" + values.tobytes() + values[:, ::2].tobytes()


def test_a_guarded_file_syncs_behind_its_writes_and_waits_for_that_before_closing(
    tmp_path, monkeypatch
):
    """Every SYNC_BEHIND bytes start an fdatasync in a thread (one at a time), so the closing
    fsync has little left; close waits for it, so the descriptor is never closed under it."""
    import threading

    from whatif_bench import h5write

    calls = []
    real = h5write._datasync
    release = threading.Event()

    def held_datasync(fd):  # runs until the test lets it go
        calls.append((fd, threading.current_thread().name, "start"))
        assert release.wait(30)
        real(fd)
        calls.append((fd, threading.current_thread().name, "end"))

    monkeypatch.setattr(h5write, "SYNC_BEHIND", 1000)
    monkeypatch.setattr(h5write, "_datasync", held_datasync)
    guard = h5write.GuardedFile(tmp_path / "f.bin")
    fd = guard.fd
    guard.write(b"x" * 999)
    assert guard.syncing is None  # below the threshold: nothing started
    guard.write(b"y" * 10)
    guard.write(b"z" * 5000)  # a sync is running: no second one
    assert guard.syncing is not None and guard.syncing.is_alive()
    closing = threading.Thread(target=guard.finish)  # waits for the sync, then fsyncs, closes
    closing.start()
    closing.join(0.3)
    assert closing.is_alive() and guard.fd == fd  # still waiting: the descriptor is open
    release.set()
    closing.join(30)
    assert calls == [(fd, "whatif-sync-behind", "start"), (fd, "whatif-sync-behind", "end")]
    assert guard.fd == -1 and guard.syncing is None
    assert (tmp_path / "f.bin").read_bytes() == b"x" * 999 + b"y" * 10 + b"z" * 5000


def test_a_failed_background_sync_is_the_files_error(tmp_path, monkeypatch):
    """A disk that fails only when the data reaches it (delayed allocation: ENOSPC or EIO at
    sync time) is reported by ``check`` and ``finish`` as a failed write is."""
    import errno

    from whatif_bench import h5write

    def failing_datasync(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(h5write, "SYNC_BEHIND", 100)
    monkeypatch.setattr(h5write, "_datasync", failing_datasync)
    guard = h5write.GuardedFile(tmp_path / "f.bin")
    guard.write(b"x" * 200)
    guard.syncing.join()
    with pytest.raises(OSError, match="No space left"):
        guard.check()
    with pytest.raises(OSError, match="No space left"):
        guard.finish()
    assert guard.fd == -1


def test_no_thread_for_a_background_sync_fails_no_write(tmp_path, monkeypatch):
    """When no thread can be started, writes go on and the closing fsync does the syncing:
    HDF5 never sees a failed write, and the descriptor is closed."""
    import threading

    from whatif_bench import h5write

    def refuse(self):
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(h5write, "SYNC_BEHIND", 100)
    monkeypatch.setattr(threading.Thread, "start", refuse)
    guard = h5write.GuardedFile(tmp_path / "f.bin")
    assert guard.write(b"x" * 200) == 200
    assert guard.write(b"y" * 200) == 200
    assert guard.syncing is None and guard.error is None
    guard.finish()
    assert guard.fd == -1
    assert (tmp_path / "f.bin").read_bytes() == b"x" * 200 + b"y" * 200


def test_a_target_without_pairs_adds_no_rows(tmp_path):
    """An empty target leaves the writer's columns empty, so a run that made nothing is the
    ``GenerationError`` it names, not an ``IndexError``."""
    from types import SimpleNamespace

    from whatif_bench.generator.writer import CorpusWriter

    writer = CorpusWriter(SimpleNamespace(out=str(tmp_path / "c.h5")), [], tmp_path / "t.h5")
    writer._add_rows([], [])
    assert writer.columns == {} and set(writer.offsets.values()) == {0}
    with pytest.raises(GenerationError, match="nothing was generated"):
        writer._finish()


def test_a_target_missing_from_the_registry_is_named_beside_given_baselines(corpus_path):
    """The given baselines' hash is made when first needed: a simulator whose every target is
    missing from the registry still gets its given-baselines comparison, not a KeyError."""
    from whatif_bench.generator.checking import VerifyReport, _check_baselines

    class NoRelationships:
        def get(self, simulator, target):
            raise KeyError(f"{simulator}/{target}")

    given = read_baselines(shipped_baselines_path())
    report = VerifyReport()
    with Corpus(corpus_path) as corpus:
        _check_baselines(corpus, NoRelationships(), given, report)
    assert report.problems == [
        f"/baselines/{ONE_TARGET}: not in the relationship registry ('{ONE_TARGET}')"
    ]
    assert report.warnings == []  # the shipped baselines are the ones the corpus was built from


def test_workers_helper_refuses_a_bad_count():
    from whatif_bench.workers import default_jobs, parallel

    assert default_jobs() >= 1
    for bad in (0, -5, 1.5, True):
        with pytest.raises(ValueError, match="positive integer"):
            parallel(bad)
    assert list(parallel(2)(__import__("joblib").delayed(abs)(-i) for i in range(3))) == [0, 1, 2]


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc (Linux)")
def test_stop_workers_ends_them_at_once_and_a_next_run_starts_new_ones():
    from joblib import delayed

    from whatif_bench.workers import parallel, stop_workers

    pids = set(parallel(2)(delayed(os.getpid)() for _ in range(4)))
    assert pids and os.getpid() not in pids and all(_alive(pid) for pid in pids)  # kept for reuse
    stop_workers()
    assert not any(_alive(pid) for pid in pids)
    again = set(parallel(2)(delayed(os.getpid)() for _ in range(4)))
    assert again and not again & pids
    stop_workers()
    stop_workers()  # none left: nothing to do


def test_the_console_script_stops_the_workers_after_the_command_and_exits_with_its_code(
    monkeypatch,
):
    from whatif_bench import cli, workers

    calls = []
    monkeypatch.setattr(cli, "main", lambda: calls.append("main") or 3)
    monkeypatch.setattr(workers, "stop_workers", lambda: calls.append("stop"))
    with pytest.raises(SystemExit) as stop:
        cli.entry()
    assert stop.value.code == 3 and calls == ["main", "stop"]
