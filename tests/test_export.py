"""``whatif export`` / ``export_corpus``: the parquet format read back by Hugging Face
``datasets`` bit for bit, the atomic folder and manifest, determinism, and bad input."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import run_cli, sigint_as_ctrl_c
from whatif_bench import __version__
from whatif_bench.cli import main
from whatif_bench.corpus.describe import Describer
from whatif_bench.errors import WhatIfError
from whatif_bench.export import ExportError, export_corpus
from whatif_bench.export import api as export_api
from whatif_bench.export import parquet as pq_format
from whatif_bench.generator import Corpus
from whatif_bench.outputs import OutputError

TARGETS = ("sumo/flow_loop_e_0_near", "epanet/pressure_10")

ARRAYS = (
    "history_target",
    "history_covariates",
    "future_covariates",
    "future_target",
    "counterfactual_future",
)
# The tests that only need some export select the replay futures: half the tasks, both
# simulators. --subset alone keeps every task of this corpus (a stratum holds one task per
# target), so each of their exports would write all of them.
REPLAY = ["replay"]


@pytest.fixture(scope="module")
def corpus_path(two_target_corpus):
    """The session's corpus of TARGETS: read only here (the test that aims an export at the
    corpus itself aims it at a copy)."""
    return two_target_corpus


@pytest.fixture(scope="module")
def exported(corpus_path, tmp_path_factory):
    """The whole small corpus, exported with small batches and files so both split."""
    patch = pytest.MonkeyPatch()
    patch.setattr(export_api, "BATCH_TASKS", 100)
    patch.setattr(pq_format, "ROWS_PER_FILE", 250)
    try:
        out = export_corpus(
            corpus_path, "parquet", tmp_path_factory.mktemp("exp") / "hf", progress=False
        )
    finally:
        patch.undo()
    return out


def _bits(values) -> np.ndarray:
    return np.asarray(values, dtype=np.float32).view(np.uint32)


@pytest.fixture(scope="module")
def corpus_tasks(corpus_path):
    """Every task of the corpus in id order, with its description: read once for the tests
    that compare what a reader of the export returns with them."""
    with Corpus(corpus_path) as corpus:
        describer = Describer(corpus)
        tasks = [corpus[task_id] for task_id in corpus.task_ids()]
        return [(task, describer.describe(task)) for task in tasks]


def _assert_rows_equal(rows, corpus_tasks):
    ids = [task.task_id for task, _ in corpus_tasks]
    assert list(rows["task_id"]) == ids
    for i, (task, description) in enumerate(corpus_tasks):
        task_id = task.task_id
        row = rows[i]
        for name in ARRAYS:
            expected = getattr(task, name)
            got = np.asarray(row[name], dtype=np.float32)
            assert got.shape == expected.shape, (task_id, name)
            assert np.array_equal(_bits(got), _bits(expected)), (task_id, name)
        assert row["covariates"] == list(task.covariates)
        assert row["target_unit"] == task.units[task.target]
        assert row["k"] == task.k and row["c_label"] == task.c_label
        assert row["context_length"] == task.context_length
        assert row["prediction_length"] == task.prediction_length
        assert row["interval_s"] == task.interval_s
        assert row["start"] == task.timestamps()[0].isoformat()  # text: torch format takes it
        assert row["pair_id"] + "/" + row["future"] == task_id
        assert json.loads(row["recipe"]) == json.loads(json.dumps(task.recipe))
        assert json.loads(row["description"]) == description


@pytest.mark.slow  # about 3 s
def test_load_dataset_parquet_reads_every_array_bit_for_bit(exported, corpus_tasks):
    from datasets import load_dataset

    files = sorted(str(p) for p in (exported / "data").glob("*.parquet"))
    assert len(files) > 1  # split into several files, one row group per batch of 100
    import pyarrow.parquet as pq

    groups = [pq.ParquetFile(files[0]).metadata.row_group(i).num_rows for i in range(3)]
    assert groups == [100, 100, 50]
    assert pq.ParquetFile(files[0]).metadata.row_group(0).column(15).compression == "ZSTD"
    ds = load_dataset("parquet", data_files=files, split="train")
    _assert_rows_equal(ds, corpus_tasks)


# The shipped baselines' documented starts (see test_shipped_baselines.py).
BASELINE_STARTS = {"epanet": "2024-01-08T00:00:00", "sumo": "2024-02-05T00:00:00"}


def test_a_rows_start_is_its_simulators_date_plus_its_window_offset(exported, corpus_path):
    import pyarrow.parquet as pq

    files = sorted((exported / "data").glob("*.parquet"))
    rows = [r for f in files for r in pq.read_table(f, columns=["task_id", "start"]).to_pylist()]
    starts = {r["task_id"]: np.datetime64(r["start"], "s") for r in rows}
    with Corpus(corpus_path) as corpus:
        for simulator, baseline_start in BASELINE_STARTS.items():
            task = next(iter(corpus.filter(simulator=simulator)))
            expected = np.datetime64(baseline_start) + np.timedelta64(300 * task.start_step, "s")
            assert starts[task.task_id] == expected, simulator


@pytest.mark.slow  # about 1 s
def test_dataset_from_parquet_reads_the_same(exported, corpus_tasks):
    from datasets import Dataset

    files = sorted(str(p) for p in (exported / "data").glob("*.parquet"))
    ds = Dataset.from_parquet(files)
    _assert_rows_equal(ds, corpus_tasks)


def test_card_config_and_features_load_offline(exported, monkeypatch):
    import pyarrow.parquet as pq
    from datasets import Features, load_dataset
    from datasets.info import DatasetInfo

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    ds = load_dataset(str(exported))  # the card's config: split "test", declared features
    assert list(ds) == ["test"]
    card = (exported / "README.md").read_text()
    import yaml

    header = yaml.safe_load(card.split("---\n")[1])
    declared = DatasetInfo._from_yaml_dict(header["dataset_info"]).features
    first = sorted((exported / "data").glob("*.parquet"))[0]
    assert declared == Features.from_arrow_schema(pq.read_schema(first))
    assert ds["test"].features == declared
    assert ds["test"].num_rows == header["dataset_info"]["splits"][0]["num_examples"]


def test_the_split_is_named_test_in_the_card_the_manifest_and_the_documented_loads(
    exported, monkeypatch
):
    import yaml
    from datasets import load_dataset

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    assert pq_format.SPLIT == "test"
    card = (exported / "README.md").read_text()
    header = yaml.safe_load(card.split("---\n")[1])
    (config,) = header["configs"]
    assert [f["split"] for f in config["data_files"]] == [pq_format.SPLIT]
    assert [s["name"] for s in header["dataset_info"]["splits"]] == [pq_format.SPLIT]
    manifest = json.loads((exported / "manifest.json").read_text())
    assert manifest["written"]["split"] == pq_format.SPLIT
    assert f'load_dataset("path/to/this/folder", split="{pq_format.SPLIT}")' in card
    # the card's own load line, run in the export folder; and the folder through its card
    monkeypatch.chdir(exported)
    load_line = pq_format.CARD_EXAMPLE.splitlines()[2]
    assert load_line.startswith("tasks = load_dataset(") and load_line in card
    scope: dict = {"load_dataset": load_dataset}
    exec(load_line, scope)
    whole = load_dataset(str(exported), split=pq_format.SPLIT)
    for tasks in (scope["tasks"], whole):
        assert str(tasks.split) == "test" and tasks.num_rows == manifest["n_tasks"]
    assert scope["tasks"]["task_id"] == whole["task_id"]


def test_card_body_has_axes_counts_provenance_and_sources(exported, corpus_path):
    card = (exported / "README.md").read_text()
    with Corpus(corpus_path) as corpus:
        attrs = corpus.attrs
        frame = corpus.tasks_frame()
    assert attrs["baselines_hash"] in card and attrs["registry_hash"] in card
    for sim in ("sumo", "epanet"):
        n = (frame["simulator"] == sim).sum() // 2
        assert f"| {sim} | {n} | {n} | 1 |" in card  # novel, replay, targets
    assert "EPANET 2.2" in card and "Eclipse SUMO" in card and "EPL-2.0" in card
    assert "| K (covariates) |" in card and "| E (events in history) |" in card


def test_manifest_is_written_last_and_describes_the_export(exported, corpus_path):
    manifest = json.loads((exported / "manifest.json").read_text())
    with Corpus(corpus_path) as corpus:
        ids = corpus.task_ids()
        attrs = corpus.attrs
    assert manifest["toolkit_version"] == __version__ and manifest["format"] == "parquet"
    assert manifest["corpus"]["path"] == str(Path(corpus_path).resolve())
    assert manifest["corpus"]["master_seed"] == 0
    assert manifest["corpus"]["baselines_hash"] == attrs["baselines_hash"]
    assert manifest["corpus"]["registry_hash"] == attrs["registry_hash"]
    assert manifest["selection"] == {"subset": None, "seed": 0, "simulators": [], "futures": []}
    assert manifest["n_tasks"] == len(ids) == manifest["written"]["rows"]
    expected = hashlib.sha256("".join(f"{i}\n" for i in ids).encode()).hexdigest()
    assert manifest["task_ids_sha256"] == expected
    on_disk = sorted(p.relative_to(exported).as_posix() for p in exported.rglob("*") if p.is_file())
    assert ".whatif-output.json" in on_disk  # the identity record (outputs.IDENTITY)
    assert sorted(manifest["files"]) == [
        f for f in on_disk if f not in ("manifest.json", ".whatif-output.json")
    ]
    for name, entry in manifest["files"].items():
        data = (exported / name).read_bytes()
        assert entry == {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    assert [f["path"] for f in manifest["written"]["data_files"]] == sorted(
        f for f in manifest["files"] if f.startswith("data/")
    )
    assert not list(exported.parent.glob(".hf.*partial-*"))


@pytest.mark.slow  # about 2 s
def test_same_input_gives_byte_identical_files(corpus_path, tmp_path):
    outs = [
        export_corpus(
            corpus_path,
            "parquet",
            tmp_path / name,
            subset=0.3,
            seed=7,
            futures=REPLAY,
            progress=False,
        )
        for name in ("a", "b")
    ]
    files = [sorted(p.relative_to(o) for p in o.rglob("*") if p.is_file()) for o in outs]
    assert files[0] == files[1] and len(files[0]) >= 3
    for rel in files[0]:
        assert (outs[0] / rel).read_bytes() == (outs[1] / rel).read_bytes(), rel


def test_selection_options(corpus_path, tmp_path):
    from datasets import Dataset

    out = export_corpus(
        corpus_path,
        "parquet",
        tmp_path / "sel",
        subset=0.1,
        seed=3,
        simulators=["sumo"],
        futures=["novel"],
        progress=False,
    )
    ds = Dataset.from_parquet(str(out / "data" / "tasks-00000.parquet"))
    assert set(ds["simulator"]) == {"sumo"} and set(ds["future"]) == {"novel"}
    from whatif_bench.corpus import select_tasks

    with Corpus(corpus_path) as corpus:
        frame = corpus.filter(simulator="sumo", future="novel").tasks_frame()
    # one target per simulator here: every stratum holds one task, so ceil(0.1 x 1) keeps it
    assert ds["task_id"] == select_tasks(frame, 0.1, 3)["task_id"].tolist()
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["selection"] == {
        "subset": 0.1,
        "seed": 3,
        "simulators": ["sumo"],
        "futures": ["novel"],
    }


@pytest.mark.slow  # about 1 s
def test_existing_out_is_refused_and_overwrite_replaces_it_when_done(corpus_path, tmp_path):
    out = export_corpus(
        corpus_path, "parquet", tmp_path / "o", subset=0.05, futures=REPLAY, progress=False
    )
    before = (out / "manifest.json").read_bytes()
    with pytest.raises(WhatIfError, match="already exists; pass --overwrite to replace it"):
        export_corpus(corpus_path, "parquet", out, subset=0.1, futures=REPLAY, progress=False)
    assert (out / "manifest.json").read_bytes() == before
    export_corpus(
        corpus_path, "parquet", out, subset=0.1, futures=REPLAY, overwrite=True, progress=False
    )
    assert json.loads((out / "manifest.json").read_text())["selection"]["subset"] == 0.1
    assert sorted(p.name for p in tmp_path.iterdir()) == [".o.lock", "o"]


def test_overwrite_never_replaces_a_folder_that_is_not_an_export(corpus_path, tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("precious")
    with pytest.raises(WhatIfError, match="not empty and not a folder whatif export wrote"):
        export_corpus(corpus_path, "parquet", mine, overwrite=True, progress=False)
    assert (mine / "thesis.tex").read_text() == "precious"


@pytest.mark.parametrize("error", [RuntimeError("boom"), KeyboardInterrupt()])
@pytest.mark.one_quick  # about 1 s over all its cases
def test_a_failure_or_ctrl_c_leaves_the_old_export_and_no_temporary_folder(
    corpus_path, tmp_path, monkeypatch, error
):
    out = export_corpus(
        corpus_path, "parquet", tmp_path / "o", subset=0.05, futures=REPLAY, progress=False
    )
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    calls = []

    def failing(tasks, *rest):
        calls.append(1)
        if len(calls) == 2:
            raise error
        return original(tasks, *rest)

    original = pq_format.table
    monkeypatch.setattr(pq_format, "table", failing)
    monkeypatch.setattr(export_api, "BATCH_TASKS", 10)
    with pytest.raises(type(error)):
        export_corpus(corpus_path, "parquet", out, overwrite=True, progress=False)
    assert len(calls) == 2
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [".o.lock", "o"]


def test_a_full_disk_in_the_background_writer_leaves_the_old_export(
    corpus_path, tmp_path, monkeypatch
):
    """The row groups are written by a background thread: its error ends the export as one
    in the main thread would (one ``OutputError``), the old export kept, no temporary left."""
    import errno

    import pyarrow.parquet as pq

    out = export_corpus(
        corpus_path, "parquet", tmp_path / "o", subset=0.05, futures=REPLAY, progress=False
    )
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    calls = []
    original = pq.ParquetWriter.write_table

    def full(self, table, *rest, **options):
        calls.append(threading.get_ident())
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return original(self, table, *rest, **options)

    monkeypatch.setattr(pq.ParquetWriter, "write_table", full)
    monkeypatch.setattr(export_api, "BATCH_TASKS", 10)
    with pytest.raises(OutputError, match=f"{out}: no space left on the device"):
        export_corpus(corpus_path, "parquet", out, overwrite=True, progress=False)
    assert len(calls) == 2 and threading.get_ident() not in calls  # written in the background
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [".o.lock", "o"]


def test_gluonts_compressing_in_a_thread_gives_the_same_bytes_however_lines_are_handed(
    corpus_path, tmp_path, monkeypatch
):
    """The gluonts export hands lines to its compressing thread by the few MiB: a line at a
    time, or a batch's lines at once, the files are the same bytes (and compressed there)."""
    import gzip

    from whatif_bench.export import gluonts

    threads: dict[str, list[int]] = {"one-line": [], "whole-batch": []}  # a thread a write
    original = gzip.GzipFile.write
    outs = []
    for name, size in (("one-line", 1), ("whole-batch", 1 << 40)):

        def write(self, data, made=threads[name]):
            made.append(threading.get_ident())
            return original(self, data)

        monkeypatch.setattr(gzip.GzipFile, "write", write)
        monkeypatch.setattr(gluonts, "WRITE_BYTES", size)
        outs.append(
            export_corpus(corpus_path, "gluonts", tmp_path / name, subset=0.1, progress=False)
        )
    files = [sorted(p.relative_to(o) for p in o.rglob("*") if p.is_file()) for o in outs]
    assert files[0] == files[1] and any(str(f).endswith(".jsonl.gz") for f in files[0])
    for rel in files[0]:
        assert (outs[0] / rel).read_bytes() == (outs[1] / rel).read_bytes(), rel
    tasks = json.loads((outs[0] / "manifest.json").read_text())["n_tasks"]
    lines = sum(
        len(gzip.decompress((outs[0] / f).read_bytes()).splitlines())
        for f in files[0]
        if str(f).endswith(".jsonl.gz")
    )
    groups = len(json.loads((outs[0] / "manifest.json").read_text())["written"]["groups"])
    assert lines == tasks and len(threads["one-line"]) == tasks  # a write a line
    assert len(threads["whole-batch"]) == groups < tasks  # a write a batch, one a file here
    assert threading.get_ident() not in threads["one-line"] + threads["whole-batch"]


def test_a_full_disk_in_the_gluonts_compressing_thread_leaves_the_old_export(
    corpus_path, tmp_path, monkeypatch
):
    import errno
    import gzip

    out = export_corpus(corpus_path, "gluonts", tmp_path / "o", subset=0.05, progress=False)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    calls = []
    original = gzip.GzipFile.write

    def full(self, data):
        calls.append(threading.get_ident())
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return original(self, data)

    monkeypatch.setattr(gzip.GzipFile, "write", full)
    monkeypatch.setattr(export_api, "BATCH_TASKS", 10)
    with pytest.raises(OutputError, match=f"{out}: no space left on the device"):
        export_corpus(corpus_path, "gluonts", out, overwrite=True, progress=False)
    assert len(calls) == 2 and threading.get_ident() not in calls
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [".o.lock", "o"]


@pytest.mark.parametrize("where", ["header", "thread"])
def test_gluonts_files_that_fail_to_write_and_to_close_are_one_error_and_all_closed(
    corpus_path, tmp_path, monkeypatch, where
):
    """A full disk in the first gzip header (made in this thread), or in the compressing
    thread's first write, which waits until this thread has queued the first file's closing
    and opened the second (the closing then never runs): the disk stays full, closing fails
    too. One error, every file the export opened closed, no temporary folder left."""
    import errno
    import io
    import time

    from whatif_bench.export import gluonts

    made: list[io.FileIO] = []
    full = threading.Event()

    class Full(io.FileIO):
        def write(self, data):
            if where == "header":
                full.set()
            elif threading.current_thread() is not threading.main_thread():
                deadline = time.monotonic() + 60
                while len(made) < 2 and time.monotonic() < deadline:
                    time.sleep(0.01)
                full.set()
            if full.is_set():
                raise OSError(errno.ENOSPC, "No space left on device")
            return super().write(data)

        def close(self):
            was_open = not self.closed
            super().close()
            if was_open and full.is_set():
                raise OSError(errno.ENOSPC, "No space left on device")

    def full_open(path, mode="r"):
        made.append(Full(path, mode))
        return made[-1]

    monkeypatch.setattr(gluonts, "open", full_open, raising=False)
    monkeypatch.setattr(gluonts, "WRITE_BYTES", 1 << 40)  # a write a batch
    with pytest.raises(OutputError, match="no space left on the device"):
        export_corpus(corpus_path, "gluonts", tmp_path / "o", progress=False)
    assert len(made) == (1 if where == "header" else 2)
    assert all(f.closed for f in made)
    assert not list(tmp_path.glob(".o.whatif.partial-*")) and not (tmp_path / "o").exists()


@pytest.mark.slow  # about 1 s
def test_a_stale_temporary_folder_of_a_killed_run_is_removed(corpus_path, tmp_path):
    from whatif_bench.outputs import temporary_path, write_identity

    # a temporary of a run that is gone: the toolkit's name with its pid, and its identity record
    stale = temporary_path(tmp_path / "o", pid=999_999_999)
    (stale / "data").mkdir(parents=True)
    write_identity(stale, "export-parquet", pid=999_999_999)
    mine = [tmp_path / ".o.partial-999999", tmp_path / ".o.old-backup"]  # names a user may have
    for folder in mine:
        (folder / "data").mkdir(parents=True)
    export_corpus(
        corpus_path, "parquet", tmp_path / "o", subset=0.05, futures=REPLAY, progress=False
    )
    assert not stale.exists()
    assert all((folder / "data").is_dir() for folder in mine)


def test_empty_selection_is_one_clear_error(corpus_path, tmp_path):
    with Corpus(corpus_path) as corpus:
        with pytest.raises(ExportError, match="no tasks selected from .*nothing to export"):
            export_corpus(corpus.filter(K=99), "parquet", tmp_path / "e", progress=False)
    assert not (tmp_path / "e").exists()


# ---- the command line -------------------------------------------------------------------
def _clean_error(result, message: str) -> None:
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip() == f"error: {message}"
    assert "Traceback" not in result.stderr and "unexpected" not in result.stderr


def test_cli_writes_an_export(corpus_path, tmp_path):
    out = tmp_path / "cli"
    result = run_cli(
        "export", str(corpus_path), "--format", "parquet", "--out", str(out),
        "--subset", "0.05", "--simulators", "epanet", "--futures", "replay",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"wrote {out}"
    assert (out / "manifest.json").is_file() and (out / "README.md").is_file()


def test_cli_bad_input_is_one_clear_error(corpus_path, tmp_path):
    out = str(tmp_path / "x")
    result = run_cli("export", str(corpus_path), "--format", "csv", "--out", out)
    assert result.returncode == 2 and "invalid choice: 'csv'" in result.stderr
    missing = tmp_path / "missing.h5"
    _clean_error(
        run_cli("export", str(missing), "--format", "parquet", "--out", out),
        f"{missing}: no such corpus file",
    )
    text = tmp_path / "notes.h5"
    text.write_text("not hdf5")
    result = run_cli("export", str(text), "--format", "parquet", "--out", out)
    assert result.returncode == 1 and result.stderr.startswith(f"error: {text}: not a readable")
    assert "Traceback" not in result.stderr and "unexpected" not in result.stderr
    under = tmp_path / "afile"
    under.write_text("")
    _clean_error(
        run_cli("export", str(corpus_path), "--format", "parquet", "--out", str(under / "sub")),
        f"{under / 'sub'}: {under} is a file, not a folder",
    )
    _clean_error(
        run_cli("export", str(corpus_path), "--format", "parquet", "--out", str(under)),
        f"{under}: exists and is not a folder",
    )
    _clean_error(
        run_cli(
            "export",
            str(corpus_path),
            "--format",
            "parquet",
            "--out",
            out,
            "--simulators",
            "opendc",
        ),  # fmt: skip
        "simulator(s) ['opendc'] are not in this corpus; it has ['epanet', 'sumo']",
    )
    result = run_cli(
        "export", str(corpus_path), "--format", "parquet", "--out", out, "--subset", "0"
    )
    assert result.returncode == 2 and "must be a fraction in (0, 1]" in result.stderr
    assert not os.path.exists(out)


def test_cli_ctrl_c_says_nothing_was_written(corpus_path, tmp_path, monkeypatch, capsys):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(export_api, "export_corpus", interrupted)
    out = tmp_path / "o"
    code = main(["export", str(corpus_path), "--format", "parquet", "--out", str(out)])
    assert code == 130
    assert capsys.readouterr().err.strip() == (
        f"interrupted; no export was written; {out} is unchanged"
    )


def test_cli_help_states_the_defaults():
    result = run_cli("export", "--help")
    assert result.returncode == 0
    text = " ".join(result.stdout.split())
    for phrase in ("{parquet,fev,llm,gluonts}", "default: all tasks", "default: 0", "default: off"):
        assert phrase in text


def test_a_second_concurrent_export_fails_at_once(corpus_path, tmp_path):
    from whatif_bench.outputs import output_lock

    out = tmp_path / "o"
    with output_lock(out):  # another run holds the output
        with pytest.raises(WhatIfError, match="another whatif run is writing this output"):
            export_corpus(corpus_path, "parquet", out, progress=False)
    assert not out.exists()


def test_out_equal_to_the_corpus_is_refused(corpus_path, tmp_path):
    corpus_path = Path(
        shutil.copyfile(corpus_path, tmp_path / "c.h5")
    )  # the shared one is read only
    with pytest.raises(WhatIfError, match="exists and is not a folder"):
        export_corpus(corpus_path, "parquet", corpus_path, progress=False)
    assert Corpus(corpus_path).close() is None  # still a readable corpus


@pytest.mark.slow  # about 1 s
def test_dot_root_and_symlink_outs_are_clear_errors(corpus_path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(WhatIfError, match=f"^{tmp_path}: already exists; pass --overwrite"):
        export_corpus(corpus_path, "parquet", ".", progress=False)
    not_ours = f"^{tmp_path}: not empty and not a folder whatif export wrote"
    with pytest.raises(WhatIfError, match=not_ours):
        export_corpus(corpus_path, "parquet", ".", overwrite=True, progress=False)
    with pytest.raises(WhatIfError, match="^/: cannot export to the root folder"):
        export_corpus(corpus_path, "parquet", "/", overwrite=True, progress=False)
    real = export_corpus(
        corpus_path, "parquet", tmp_path / "real", subset=0.05, futures=REPLAY, progress=False
    )
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(WhatIfError, match="link: is a symbolic link; give the folder itself"):
        export_corpus(corpus_path, "parquet", "link", overwrite=True, progress=False)
    assert (tmp_path / "notes.txt").read_text() == "mine" and (real / "manifest.json").is_file()


# Runs the real command line in a child process whose batch reader pauses after its first batch
# (and says so in a file), so the Ctrl-C lands mid-export however fast the machine is.
PAUSING_EXPORT = """
import sys, time
from pathlib import Path
from whatif_bench import cli
from whatif_bench.export import api

marker, *args = sys.argv[1:]
real = api.task_batches

def pausing(*a, **k):
    for number, batch in enumerate(real(*a, **k)):
        yield batch
        if number == 0:
            Path(marker).write_text("paused")
            time.sleep(120)

api.task_batches = pausing
sys.exit(cli.main(args))
"""


@pytest.mark.slow  # about 2 s
def test_ctrl_c_of_the_real_command_removes_the_temporary_folder(corpus_path, tmp_path):
    import signal
    import subprocess
    import sys
    import time

    out, marker = tmp_path / "o", tmp_path.parent / f"{tmp_path.name}-paused"
    process = subprocess.Popen(
        [sys.executable, "-c", PAUSING_EXPORT, str(marker), "export", str(corpus_path)]
        + ["--format", "parquet", "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=sigint_as_ctrl_c,
    )
    deadline = time.monotonic() + 120
    while not marker.exists() and time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()
        time.sleep(0.01)
    assert list(tmp_path.glob(".o.whatif.partial-*")), "the export should be under way"
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    assert err.strip().splitlines()[-1] == f"interrupted; no export was written; {out} is unchanged"
    assert "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == [".o.lock"]


@pytest.mark.parametrize(
    ("format_", "options", "files"),
    [
        ("fev", [], ["tasks.yaml"]),
        ("fev", ["--per-task"], ["tasks.yaml", "tasks_per_task.yaml"]),
        ("llm", [], ["key.jsonl"]),
        ("gluonts", [], ["metadata.json"]),  # written without GluonTS: runs under pandas 3 too
    ],
)
@pytest.mark.one_quick  # about 14 s over all its cases
def test_every_format_runs_through_the_command(
    tmp_path, capsys, corpus_path, format_, options, files
):
    out = tmp_path / "export"
    argv = ["export", str(corpus_path), "--format", format_, "--out", str(out)]
    code = main([*argv, "--subset", "0.05", "--futures", *REPLAY, *options])
    err = capsys.readouterr().err
    assert code == 0, err
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["format"] == format_
    assert manifest["options"] == ({"per_task": True} if options else {})
    assert manifest["n_tasks"] == manifest["written"]["tasks"] > 0
    for name in files:
        assert (out / name).is_file()
    assert sorted(manifest["files"]) == sorted(
        str(p.relative_to(out))
        for p in out.rglob("*")
        if p.is_file() and p.name not in ("manifest.json", ".whatif-output.json")
    )


def test_per_task_is_for_fev_only(tmp_path, capsys, corpus_path):
    out = tmp_path / "export"
    code = main(["export", str(corpus_path), "--format", "llm", "--out", str(out), "--per-task"])
    assert code == 1
    assert capsys.readouterr().err == (
        "error: per-task fev tasks apply to --format fev only, not 'llm'\n"
    )
    assert not out.exists()
