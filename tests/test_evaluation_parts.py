"""The evaluation's parts on their own: the chunk store (what a resumed run finds done, the
manifest that ties a folder to one run, the lock, both passes in one folder), the two scoring
passes as data (``ScoringPass``: columns, failures, reading and scoring a chunk), the retries of
a pass through worker deaths (``dispatch``) and the one place that decides where chunks run."""

from __future__ import annotations

import json
import math
import pickle
import subprocess
import sys
from types import SimpleNamespace

import hypothesis
import numpy as np
import pandas as pd
import pytest
from hypothesis import strategies as st

from whatif_bench.cluster import WORKER_DIED, WorkerDied
from whatif_bench.corpus import covariate_units
from whatif_bench.evaluation import Forecast, runner
from whatif_bench.evaluation.chunk_store import (
    ChunkStore,
    PendingChunk,
    chunk_name,
    manifest,
    open_store,
)
from whatif_bench.evaluation.corpus_ref import CorpusRef, close_corpus_reader
from whatif_bench.evaluation.dispatch import MAX_WORKER_DEATHS, ChunkJobs, PassState, save_all
from whatif_bench.evaluation.errors import EvaluationError
from whatif_bench.evaluation.model_calls import TIMEOUT_REASON, ModelCalls
from whatif_bench.evaluation.relational import RELATIONAL, RELATIONAL_COLUMNS
from whatif_bench.evaluation.scoring import TASK_COLUMNS, TASKS, ScoringPass
from whatif_bench.outputs import OutputLockedError

PASSES = [TASKS, RELATIONAL]


def _store(tmp_path) -> tuple[ChunkStore, list[str]]:
    notes: list[str] = []
    return ChunkStore(tmp_path, notes.append), notes


def _frame(scoring, ids, label, failed=""):
    """A scored frame of ``ids`` in the pass's layout (every score 0.5)."""
    scores = {c: 0.5 for c in scoring.failed_values}
    if scoring is TASKS:
        scores["imputed"] = False
    rows = [{scoring.key: i, "model": label, **scores, "failed": failed} for i in ids]
    return scoring.layout.frame(rows)


# ---- the chunk store ------------------------------------------------------------------------


def test_chunk_names_of_the_two_passes_differ_in_the_kind_only():
    assert chunk_name(3) == "chunk-00003.parquet"
    assert chunk_name(3, "relational") == "chunk-relational-00003.parquet"
    assert chunk_name(12, TASKS.layout.kind) == "chunk-00012.parquet"
    assert chunk_name(12, RELATIONAL.layout.kind) == "chunk-relational-00012.parquet"


@pytest.mark.parametrize("scoring", PASSES, ids=["tasks", "relational"])
def test_a_resumed_store_keeps_only_complete_clean_chunks_of_this_model(tmp_path, scoring):
    store, notes = _store(tmp_path)
    chunks = [["a", "b"], ["c"], ["d"], ["e"], ["f"], ["g"]]
    store.folder("m").mkdir(parents=True)
    store.write("m", 0, scoring.layout, _frame(scoring, ["a", "b"], "m"))  # complete
    store.write("m", 1, scoring.layout, _frame(scoring, ["c"], "m", failed="boom"))  # retried
    store.chunk_path("m", 2, scoring.layout).write_bytes(b"not parquet")  # truncated
    store.write("m", 3, scoring.layout, _frame(scoring, ["x"], "m"))  # another chunk's ids
    store.write("m", 4, scoring.layout, _frame(scoring, ["f"], "other"))  # another model
    # chunk 5: never written
    done, todo = store.resume(scoring.layout, chunks, ["model"], ["m"])
    assert list(done) == [("m", 0)]
    pd.testing.assert_frame_equal(done["m", 0], _frame(scoring, ["a", "b"], "m"))
    assert [chunk.number for chunk in todo] == [1, 2, 3, 4, 5]
    assert todo[0] == PendingChunk(1, ["c"], [("model", "m")]) and todo[0].models == ["model"]
    assert len(notes) == 3  # unreadable, other ids, other model; not the failed or missing one
    assert "unreadable" in notes[0] and chunk_name(2, scoring.layout.kind) in notes[0]
    assert all("does not hold this chunk's results" in n for n in notes[1:])


def test_a_chunk_of_the_format_before_timings_is_read_with_its_fill_and_a_note(tmp_path):
    store, notes = _store(tmp_path)
    store.folder("m").mkdir(parents=True)
    old = _frame(TASKS, ["a"], "m")[list(TASK_COLUMNS[:5])]
    store.write("m", 0, TASKS.layout, old)
    done, todo = store.resume(TASKS.layout, [["a"]], ["model"], ["m"])
    assert todo == [] and list(done["m", 0].columns) == list(TASK_COLUMNS)
    assert math.isnan(done["m", 0]["seconds"].iloc[0]) and done["m", 0]["imputed"].dtype == bool
    assert len(notes) == 1 and "predate per-task timings" in notes[0]
    # the relational pass has no older format: the same columns there are not its chunk
    store.write("m", 0, RELATIONAL.layout, old.rename(columns={"task_id": "pair_id"}))
    done, todo = store.resume(RELATIONAL.layout, [["a"]], ["model"], ["m"])
    assert done == {} and len(todo) == 1


def test_the_manifest_ties_the_folder_to_one_evaluation(tmp_path):
    tasks = pd.DataFrame({"task_id": ["a", "b"]})
    attrs = {"baselines_hash": "x", "registry_hash": "y", "master_seed": 0}
    ours = manifest(tmp_path / "c.h5", attrs, tasks, None, 0)
    store, _ = _store(tmp_path)
    store.claim(ours)
    assert json.loads((tmp_path / "manifest.json").read_text()) == ours
    store.claim(ours)  # the same evaluation resumes
    for other in (
        manifest(tmp_path / "c.h5", attrs, tasks.iloc[:1], None, 0),  # another selection
        manifest(tmp_path / "c.h5", attrs, tasks, 0.5, 0),
        manifest(tmp_path / "d.h5", attrs, tasks, None, 0),  # another corpus
        manifest(tmp_path / "c.h5", {**attrs, "master_seed": 1}, tasks, None, 0),
    ):
        with pytest.raises(EvaluationError, match="holds results of another evaluation"):
            store.claim(other)
    (tmp_path / "manifest.json").write_text("")
    with pytest.raises(EvaluationError, match="not a readable evaluation manifest \\(empty\\)"):
        store.claim(ours)
    (tmp_path / "manifest.json").write_text("[1]")
    with pytest.raises(EvaluationError, match="not an evaluation manifest"):
        store.claim(ours)


def test_both_passes_share_the_model_folders_and_a_changed_model_clears_both(tmp_path):
    store, notes = _store(tmp_path)
    store.prepare_models(["naive"], ["naive"])
    for scoring in PASSES:
        store.write("naive", 0, scoring.layout, _frame(scoring, ["a"], "naive"))
    names = sorted(p.name for p in store.folder("naive").glob("chunk-*"))
    assert names == ["chunk-00000.parquet", "chunk-relational-00000.parquet"]
    for scoring in PASSES:  # each pass reads its own chunk, not the other's
        done, todo = store.resume(scoring.layout, [["a"]], ["naive"], ["naive"])
        assert list(done) == [("naive", 0)] and todo == []
        assert list(done["naive", 0].columns) == list(scoring.layout.columns)
    store.prepare_models(["naive"], ["naive"])  # the same model: kept
    assert len(list(store.folder("naive").glob("chunk-*"))) == 2 and notes == []
    meta = store.folder("naive") / "model.json"
    meta.write_text(json.dumps({"id": "another version"}))
    store.prepare_models(["naive"], ["naive"])
    assert list(store.folder("naive").glob("chunk-*")) == []
    assert len(notes) == 1 and "changed since its results" in notes[0]


def test_an_open_store_is_locked_and_a_run_that_writes_nothing_leaves_nothing(tmp_path):
    corpus = tmp_path / "c.h5"
    corpus.write_bytes(b"")
    out = tmp_path / "deep" / "results"
    with pytest.raises(RuntimeError, match="no tasks"):
        with open_store(out, corpus, print) as store:
            assert store.out == out and out.is_dir()
            with pytest.raises(OutputLockedError, match="another whatif evaluate is writing"):
                with open_store(out, corpus, print):
                    pass
            raise RuntimeError("no tasks")
    assert not (tmp_path / "deep").exists()  # the folders it made are gone
    with open_store(out, corpus, print) as store:
        store.write_table("per_task.parquet", pd.DataFrame({"x": [1]}))
    with pytest.raises(RuntimeError):
        with open_store(out, corpus, print):
            raise RuntimeError("later")
    assert (out / "per_task.parquet").is_file()  # a folder with results is kept


# ---- the two passes as data -----------------------------------------------------------------


def test_the_two_passes_differ_in_their_data_only():
    assert TASKS.key == "task_id" and RELATIONAL.key == "pair_id"
    assert TASKS.layout.columns == TASK_COLUMNS and RELATIONAL.layout.columns == RELATIONAL_COLUMNS
    assert (TASKS.table, RELATIONAL.table) == ("per_task.parquet", "relational.parquet")
    assert isinstance(RELATIONAL, ScoringPass) and isinstance(TASKS, ScoringPass)
    assert (
        TASKS.layout.legacy_columns == TASK_COLUMNS[:5] and RELATIONAL.layout.legacy_columns is None
    )
    for scoring in PASSES:  # sent to worker processes as they are
        again = pickle.loads(pickle.dumps(scoring))
        assert (again.read, again.rows, again.units) == (scoring.read, scoring.rows, scoring.units)
        assert again.layout.columns == scoring.layout.columns


@pytest.mark.parametrize("scoring", PASSES, ids=["tasks", "relational"])
def test_a_failed_frame_has_the_columns_and_types_of_a_scored_one(scoring):
    failed = scoring.failed_frame(["a", "b"], "m", "the worker process died")
    scored = _frame(scoring, ["a", "b"], "m")
    assert list(failed.columns) == list(scoring.layout.columns)
    assert failed.dtypes.to_dict() == scored.dtypes.to_dict()
    assert failed[scoring.key].tolist() == ["a", "b"] and set(failed["model"]) == {"m"}
    assert (failed["failed"] == "the worker process died").all()
    scores = [c for c in scoring.layout.columns if c not in (scoring.key, "model", "failed")]
    assert failed[[c for c in scores if c != "imputed"]].isna().all().all()


class Shifted:
    """A user model: the last value, plus 1 wherever a covariate moves; NaN for ``bad``."""

    name = "shifted"

    def __init__(self, bad: str = "") -> None:
        self.bad = bad

    def predict(self, inputs):
        out = []
        for given in inputs:
            base = np.full(given.prediction_length, float(given.history_target[-1]))
            moved = np.abs(given.future_covariates - given.history_covariates[:, -1:]).sum(0)
            point = base + (moved > 0)
            if self.bad and given.task_id.endswith(self.bad):
                out.append(SimpleNamespace(point=np.full_like(point, np.nan)))
            else:
                out.append(Forecast(point=point))
        return out


def _kept_pairs(corpus) -> list[str]:
    return corpus.pairs.loc[corpus.pairs["kept"], "pair_id"].tolist()


@pytest.fixture(scope="module")
def corpus_ref(one_target_corpus):
    ref = CorpusRef.start(str(one_target_corpus))
    yield ref
    close_corpus_reader()


def test_the_tasks_pass_reads_and_scores_a_chunk_as_it_was_read_elsewhere(corpus_ref):
    corpus, units = corpus_ref.open()
    everything = corpus.task_ids()
    ids = [i for i in everything if i.endswith("/replay")][:3]
    ids += [i for i in everything if i.endswith("/novel")][:3]
    here = TASKS.score_chunk(corpus_ref, ids, ["naive", Shifted(bad="/novel")])
    inputs, truths = TASKS.read(corpus, ids, units)
    sent = TASKS.score(inputs, truths, ["naive", Shifted(bad="/novel")])
    for one, other in zip(here, sent, strict=True):
        pd.testing.assert_frame_equal(runner.without_timings(one), runner.without_timings(other))
    naive, shifted = here
    assert naive["task_id"].tolist() == ids and (naive["failed"] == "").all()
    novel = shifted["task_id"].str.endswith("/novel")
    assert novel.any() and (shifted.loc[~novel, "failed"] == "").all()
    assert (shifted.loc[novel, "failed"] == "point forecast has NaN or infinite values").all()
    assert shifted.loc[novel, ["wql", "wape", "seconds"]].isna().all().all()


def test_the_relational_pass_scores_histories_and_names_the_future_that_failed(corpus_ref):
    corpus, _ = corpus_ref.open()
    pairs = _kept_pairs(corpus)[:3]
    naive, shifted, bad = RELATIONAL.score_chunk(
        corpus_ref, pairs, ["naive", Shifted(), Shifted(bad="/restraint")]
    )
    assert naive["pair_id"].tolist() == pairs and (naive["failed"] == "").all()
    assert (naive["direction"].fillna(0.0) == 0.0).all()  # the naive forecast never moves
    assert (naive["restraint"] == 1.0).all()  # it is the band restraint is measured by
    assert (shifted["failed"] == "").all()
    assert (bad["failed"] == "restraint forecast: point forecast has NaN or infinite values").all()
    assert bad[list(RELATIONAL.failed_values)].isna().all().all()


def test_a_model_given_up_is_not_called_in_either_pass(corpus_ref):
    corpus, _ = corpus_ref.open()
    calls = ModelCalls(given_up={"shifted": "predict took longer than 1 s (on an earlier batch)"})
    for scoring, ids in ((TASKS, corpus.task_ids()[:2]), (RELATIONAL, _kept_pairs(corpus)[:1])):
        frame = scoring.score_chunk(corpus_ref, ids, [Shifted()], calls)[0]
        assert (frame["failed"] == calls.given_up["shifted"]).all()


# ---- running a pass: the retries, the one place that decides where chunks run -----------------


class FakePool:
    """Runs calls ``(ids, labels, given_up)`` in this process; a call that would run the model
    ``killer`` is a worker death (a given-up model is not run)."""

    distributed = False

    def __init__(self) -> None:
        self.batches: list[list[list[str]]] = []

    def ordered(self, function, calls):
        calls = list(calls)
        self.batches.append([call[1] for call in calls])
        for call in calls:
            if "killer" in call[1] and "killer" not in call[2]:
                raise WorkerDied(f"{WORKER_DIED} (killed by signal 9 SIGKILL)")
            yield function(*call)


class Bar:
    def __init__(self) -> None:
        self.finished = 0
        self.closed = False

    def update(self, n: int = 1) -> None:  # units finished (tqdm's update)
        self.finished += n

    def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize("scoring", PASSES, ids=["tasks", "relational"])
def test_a_worker_death_loses_nothing_and_blames_the_model_that_repeats_it(tmp_path, scoring):
    store, notes = _store(tmp_path)
    for label in ("m", "killer"):
        store.folder(label).mkdir(parents=True)

    def work(ids, labels, given_up):
        return [
            scoring.failed_frame(ids, label, given_up[label])
            if label in given_up
            else _frame(scoring, ids, label)
            for label in labels
        ]

    todo = [PendingChunk(i, [f"u{i}"], [("m", "m"), ("killer", "killer")]) for i in range(3)]
    pool, bar, given_up = FakePool(), Bar(), {}
    jobs = ChunkJobs(
        pool, work, lambda chunk: (chunk.ids, [lb for _, lb in chunk.pending], dict(given_up))
    )
    state = PassState(scoring, store, {}, given_up, bar)
    save_all(jobs, todo, state)
    # all of them at once (a death), chunk 0 alone (a death), its models one by one, the rest
    both = ["m", "killer"]
    assert pool.batches == [[both] * 3, [both], [["m"]], [["killer"]], [both] * 2]
    assert bar.finished == 3 and bar.closed
    assert sorted(state.done) == sorted((label, i) for label in both for i in range(3))
    assert all((state.done["m", i]["failed"] == "").all() for i in range(3))
    assert state.done["killer", 0]["failed"].str.startswith(WORKER_DIED).all()
    assert set(given_up) == {"killer"} and "not called again" in given_up["killer"]
    assert (state.done["killer", 2]["failed"] == given_up["killer"]).all()
    assert store.read("m", 2, ["u2"], scoring.layout)[0] is not None  # saved as it came
    assert len(notes) == 2 and "chunk 0 and the ones after it run again" in notes[0]
    assert "killed its worker process again when chunk 0 ran it alone" in notes[1]
    assert MAX_WORKER_DEATHS > 2  # (two deaths: the full pool goes on)


def test_a_fatal_failure_enters_given_up_once(tmp_path):
    store, _ = _store(tmp_path)
    store.folder("m").mkdir(parents=True)
    reason = TIMEOUT_REASON.format(timeout=2)
    state = PassState(TASKS, store, {}, {}, Bar(), left={0: 1, 1: 1})
    state.save(PendingChunk(0, ["a"], [("m", "m")]), [_frame(TASKS, ["a"], "m", failed=reason)])
    state.save(PendingChunk(1, ["b"], [("m", "m")]), [_frame(TASKS, ["b"], "m", failed=reason)])
    assert state.given_up == {"m": f"{reason} (on an earlier batch; not called again)"}


def _naive_jobs(tmp_path, corpus_ref, scoring, distributed: bool, given_up: dict) -> ChunkJobs:
    """The jobs of an evaluation of naive (model timeout 9 s) whose ``scoring`` pass runs on
    a dask cluster or locally, with the models ``given_up`` so far."""
    run = runner.EvaluationRun(
        corpus_path=tmp_path, models=("naive",), labels=("naive",), out=tmp_path, model_timeout=9.0
    )
    pool = SimpleNamespace(distributed=distributed)
    session = runner._Session(run, pool, ChunkStore(tmp_path, print), corpus_ref, given_up)
    return runner._jobs(session, scoring)


@pytest.mark.parametrize("distributed", [False, True], ids=["local", "dask"])
@pytest.mark.parametrize("scoring", PASSES, ids=["tasks", "relational"])
def test_one_place_decides_where_the_chunks_of_both_passes_run(
    tmp_path, corpus_ref, distributed, scoring
):
    corpus, _ = corpus_ref.open()
    ids = corpus.task_ids()[:2] if scoring is TASKS else _kept_pairs(corpus)[:2]
    jobs = _naive_jobs(tmp_path, corpus_ref, scoring, distributed, {"x": "gone"})
    call = jobs.call_of(PendingChunk(0, ids, [("naive", "naive")]))
    if distributed:  # read here, sent with the chunk: the workers need no corpus file
        assert jobs.function is runner._score_tasks and len(call[0]) == len(ids) * (
            1 if scoring is TASKS else 3
        )
    else:  # the ids go; the process that runs the chunk reads them, with the covariate units
        # found at the start (a worker loads no relationship registry to find them again)
        assert jobs.function is runner._score_chunk
        assert call[:2] == (corpus_ref, ids)
        assert call[0].units == covariate_units(corpus.attrs) != {}
    assert call[-2] == ModelCalls(9.0, {"x": "gone"}) and call[-1] is scoring
    frames = jobs.function(*call)
    assert len(frames) == 1 and frames[0][scoring.key].tolist() == ids


def test_a_worker_scores_its_chunk_without_loading_the_relationship_registry(tmp_path, corpus_ref):
    # A new process, as a loky worker is, runs the call a chunk is sent as. The covariate
    # units come with it, so the worker imports neither the registry nor numba (which took
    # 0.2 s to 0.9 s of each worker's start here).
    corpus, units = corpus_ref.open()
    call = _naive_jobs(tmp_path, corpus_ref, TASKS, False, {}).call_of(
        PendingChunk(0, corpus.task_ids()[:2], [("naive", "naive")])
    )
    (tmp_path / "call.pickle").write_bytes(pickle.dumps(call))
    code = (
        "import pickle, sys\n"
        "from whatif_bench.evaluation import runner\n"
        "frames = runner._score_chunk(*pickle.loads(open(sys.argv[1], 'rb').read()))\n"
        "print(len(frames[0]), (frames[0]['failed'] == '').all(), sorted(\n"
        "    m for m in ('numba', 'whatif_bench.relationships.registry') if m in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "call.pickle")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["2", "True", "[]"]
    assert units == covariate_units(corpus.attrs) != {}


# ---- chunk sizes: the whole corpus in the largest chunks, a small run in enough to show progress


@hypothesis.given(units=st.integers(0, 200_000), largest=st.integers(1, 512))
def test_a_chunk_is_never_larger_than_the_largest_and_a_small_run_makes_enough(units, largest):
    size = runner.chunk_size(units, largest)
    assert 1 <= size <= largest
    if largest >= runner.MIN_CHUNK:
        assert size >= runner.MIN_CHUNK
    if runner.MIN_CHUNK < size < largest:  # cut smaller: about CHUNKS_WANTED chunks
        fewest = runner.CHUNKS_WANTED * runner.MIN_CHUNK / (runner.MIN_CHUNK + 1)
        assert fewest <= math.ceil(units / size) <= runner.CHUNKS_WANTED


def test_the_whole_corpus_keeps_its_chunks_and_a_subset_is_cut_finer():
    assert runner.chunk_size(35_762, runner.CHUNK) == 256  # the default corpus's tasks
    assert runner.chunk_size(17_881, runner.RELATIONAL_CHUNK) == 128  # and its histories
    assert runner.chunk_size(1_260, runner.CHUNK) == 20  # a --subset 0.02: 63 chunks, not 5
    assert runner.chunk_size(360, runner.CHUNK) == runner.MIN_CHUNK


def test_the_bar_counts_tasks_and_moves_per_chunk(one_target_corpus, tmp_path, monkeypatch):
    import tqdm

    from whatif_bench.corpus import Corpus
    from whatif_bench.evaluation import evaluate

    bars: dict[str, list] = {}

    class Recorder(tqdm.tqdm):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            bars[kwargs["desc"]] = [kwargs["unit"], kwargs["total"]]

        def update(self, n=1):
            bars[self.desc].append(n)
            return super().update(n)

    monkeypatch.setattr(tqdm, "tqdm", Recorder)
    evaluate(one_target_corpus, ["naive"], tmp_path / "out", jobs=1, progress=True)
    with Corpus(one_target_corpus) as corpus:
        n = len(corpus)
    unit, total, *steps = bars["evaluating"]
    size = runner.chunk_size(n, runner.CHUNK)
    assert unit == "task" and total == n and sum(steps) == n
    assert steps == [size] * (n // size) + ([n % size] if n % size else [])
    assert len(steps) > 5
