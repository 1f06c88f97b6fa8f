"""A task splits into what a model may see and the ground truth (fev's ``get_input_data`` /
``get_ground_truth``), and the evaluation reads only those, from a corpus it opens once.

``Corpus.task_inputs`` and ``Corpus.ground_truths`` read a batch straight from the file; they
must equal ``corpus[task_id].input_data()`` and ``.ground_truth()`` exactly, in any order and
for any selection (neighbouring tasks are read as one block, scattered ones one by one).
"""

from __future__ import annotations

import re
import shutil

import h5py
import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import small_corpus
from whatif_bench.corpus.reader import ITER_CHUNK, CorpusError
from whatif_bench.evaluation import evaluate, runner
from whatif_bench.evaluation.corpus_ref import CorpusRef
from whatif_bench.evaluation.forecasters import Forecast, TaskInput
from whatif_bench.generator import Corpus

# the reports draw one skill plot, not five (tests/conftest.py): not what these tests check
pytestmark = pytest.mark.usefixtures("one_skill_plot_in_module")

TARGETS = ("sumo/flow_loop_e_0_near", "epanet/pressure_10")


@pytest.fixture(scope="module")
def corpus_path(tmp_path_factory):
    return small_corpus(tmp_path_factory.mktemp("parts"), TARGETS)


@pytest.fixture(scope="module")
def units(corpus_path):
    with Corpus(corpus_path) as corpus:
        return runner.covariate_units(corpus.attrs)


def assert_same_input(got: TaskInput, expected: TaskInput) -> None:
    for name in ("history_target", "history_covariates", "future_covariates"):
        a, b = getattr(got, name), getattr(expected, name)
        assert a.dtype == b.dtype == np.float32 and a.shape == b.shape, name
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32)), name  # bit for bit
    for name in (
        "task_id",
        "start",
        "freq",
        "interval_s",
        "covariate_names",
        "covariate_units",
        "target_name",
        "target_unit",
    ):
        assert getattr(got, name) == getattr(expected, name), name


def _orders(ids: list[str]) -> dict[str, list[str]]:
    rng = np.random.default_rng(7)
    return {
        "all": ids,
        "shuffled": [ids[i] for i in rng.permutation(len(ids))],
        "scattered": ids[::37],
        "one": ids[5:6],
        "both-futures": [ids[0], ids[len(ids) // 2], ids[1]],
    }


@pytest.mark.parametrize("order", ["all", "shuffled", "scattered", "one", "both-futures"])
@pytest.mark.one_quick  # about 1 s over all its cases
def test_inputs_and_truths_equal_the_full_tasks(corpus_path, units, order):
    with Corpus(corpus_path) as corpus:
        ids = _orders(corpus.task_ids())[order]
        inputs = corpus.task_inputs(ids, units)
        truths = corpus.ground_truths(ids)
        assert len(inputs) == len(truths) == len(ids)
        for task_id, given, truth in zip(ids, inputs, truths, strict=True):
            task = corpus[task_id]
            assert_same_input(given, task.input_data(units.get((task.simulator, task.target))))
            assert truth.dtype == np.float32
            assert np.array_equal(truth.view(np.uint32), task.ground_truth().view(np.uint32))
            assert np.array_equal(task.ground_truth(), task.future_target)
            assert all(given.covariate_units)  # built from the shipped registry
        assert corpus.task_inputs([]) == [] and corpus.ground_truths([]) == []


def test_input_data_is_the_models_view_of_the_task(corpus_path):
    with Corpus(corpus_path) as corpus:
        task = next(iter(corpus))
    given = task.input_data()
    assert_same_input(given, TaskInput.from_task(task))
    assert given.prediction_length == task.ground_truth().size
    assert not hasattr(given, "future_target") and not hasattr(given, "counterfactual_future")


def test_a_filtered_view_reads_its_own_tasks_only(corpus_path, units):
    with Corpus(corpus_path) as corpus:
        view = corpus.filter(simulator="epanet", future="novel")
        ids = view.task_ids()
        for given, task_id in zip(view.task_inputs(ids, units), ids, strict=True):
            assert_same_input(given, corpus[task_id].input_data(units[("epanet", "pressure_10")]))
        other = corpus.filter(simulator="sumo").task_ids()[0]
        with pytest.raises(KeyError, match="no task"):
            view.task_inputs([other])
        with pytest.raises(KeyError, match="no task"):
            view.ground_truths([ids[0].replace("/novel", "/replay")])


def test_unknown_and_dropped_tasks_are_refused_as_by_getitem(corpus_path):
    with Corpus(corpus_path) as corpus:
        dropped = corpus.pairs[~corpus.pairs["kept"]]["pair_id"]
        cases = ["nope/x/K1-C1-L32-Efew/novel", corpus.task_ids()[0].rsplit("/", 1)[0] + "/other"]
        if len(dropped):
            cases.append(dropped.iloc[0] + "/replay")
        for task_id in cases:
            with pytest.raises(KeyError) as expected:
                corpus[task_id]
            for read in (corpus.task_inputs, corpus.ground_truths):
                with pytest.raises(KeyError) as caught:
                    read([task_id])
                assert str(caught.value) == str(expected.value)


def test_an_offset_outside_the_data_is_a_damaged_corpus(tmp_path, corpus_path):
    copy = tmp_path / "copy.h5"
    shutil.copyfile(corpus_path, copy)
    with h5py.File(copy, "r+") as h5:
        kept = int(np.flatnonzero(h5["pairs/kept"][()])[0])
        h5["pairs/future_target_offset"][kept] = 10**9
        pair_id = h5["pairs/pair_id"][kept].decode()
    with Corpus(copy) as corpus:
        with pytest.raises(CorpusError, match="damaged corpus, /data/future_target"):
            corpus.ground_truths([pair_id + "/replay"])
        corpus.task_inputs([pair_id + "/replay"])  # the inputs do not need the future target


class LastValue:
    name = "last"

    def predict(self, batch):
        return [Forecast(point=np.full(t.prediction_length, t.history_target[-1])) for t in batch]


@pytest.mark.slow  # about 3 s
def test_the_evaluation_opens_the_corpus_once_and_reads_no_recipe(
    tmp_path, corpus_path, monkeypatch
):
    """In this process (jobs=1): one open for the index and every chunk; no full task, recipe
    or counterfactual is read; the reader is closed at the end."""
    opened = []
    real_init = Corpus.__init__

    def counting_init(self, path, *args, **kwargs):
        if not args and not kwargs:  # a file opened, not a filtered view of an open one
            opened.append(path)
        real_init(self, path, *args, **kwargs)

    def refuse(*_):
        raise AssertionError("the evaluation read a full task")

    monkeypatch.setattr(runner, "CHUNK", 16)
    monkeypatch.setattr(Corpus, "__init__", counting_init)
    monkeypatch.setattr(Corpus, "_task", refuse)
    monkeypatch.setattr(Corpus, "recipe", refuse)
    monkeypatch.setattr(Corpus, "baseline", refuse)
    result = evaluate(corpus_path, ["naive", LastValue()], tmp_path / "o", progress=False)
    assert len(result.per_task) == 2 * len(result.per_task["task_id"].unique()) > 2 * 16
    assert len(opened) == 1
    assert getattr(runner._open_corpus, "value", None) is None  # closed


def test_a_corpus_replaced_during_the_evaluation_is_refused(tmp_path, corpus_path):
    """A process with the corpus open keeps reading the file it opened (the one the evaluation
    started with); a process opening it later refuses a file replaced or removed meanwhile."""
    path = tmp_path / "c.h5"
    shutil.copyfile(corpus_path, path)
    corpus, _, identity = runner._corpus_reader(str(path))
    try:
        task_id = corpus.task_ids()[0]
        first = runner._score_chunk(CorpusRef(str(path), identity), [task_id], ["naive"])[0]
        assert list(first["task_id"]) == [task_id]
        shutil.copyfile(corpus_path, tmp_path / "new.h5")
        (tmp_path / "new.h5").replace(path)  # as whatif generate puts a new corpus in place
        again = runner._score_chunk(CorpusRef(str(path), identity), [task_id], ["naive"])[0]
        pd.testing.assert_frame_equal(  # still the file it opened (seconds are measured)
            runner.without_timings(again), runner.without_timings(first)
        )
        runner.close_corpus_reader()  # as in a worker process that opens it now
        with pytest.raises(runner.EvaluationError, match="the corpus changed"):
            runner._score_chunk(CorpusRef(str(path), identity), [task_id], ["naive"])
        path.unlink()
        with pytest.raises(runner.EvaluationError, match="went away"):
            runner._score_chunk(CorpusRef(str(path), identity), [task_id], ["naive"])
    finally:
        runner.close_corpus_reader()


def test_scores_equal_the_full_task_path(corpus_path, units):
    """The scores from the split reads equal scoring the full tasks' arrays (the old path)."""
    from whatif_bench.evaluation.metrics import score

    with Corpus(corpus_path) as corpus:
        ids = corpus.task_ids()[:40]
        tasks = [corpus[i] for i in ids]
        frame = runner._score_tasks(
            corpus.task_inputs(ids, units), corpus.ground_truths(ids), [LastValue()]
        )[0]
    expected = pd.DataFrame(
        [
            {
                "task_id": t.task_id,
                **score(
                    t.future_target.astype(np.float64),
                    np.full(t.prediction_length, t.history_target[-1]).astype(np.float64),
                    None,
                ),
            }
            for t in tasks
        ]
    )
    assert frame["task_id"].tolist() == expected["task_id"].tolist()
    assert np.array_equal(frame["wql"].to_numpy(), expected["wql"].to_numpy())
    assert np.array_equal(frame["wape"].to_numpy(), expected["wape"].to_numpy())


def _same(a, b) -> bool:
    """Equal values of the same type, arrays compared by dtype, shape and bytes."""
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    return type(a) is type(b) and a == b


# the Task fields read from /data (the counterfactual is a view of its baseline window)
READ_ARRAYS = ("history_target", "history_covariates", "future_target", "future_covariates")


@pytest.mark.parametrize(
    "view",
    [{}, {"K": 2}, {"future": "novel"}, {"C": "C3", "ell": [16, 256]}],
    ids=["whole", "sparse", "novel", "two-axes"],
)
def test_iterating_a_view_gives_each_task_as_reading_it_by_id_does(corpus_path, view):
    # iteration reads ITER_CHUNK tasks at once and cuts them apart; corpus[id] reads one
    import dataclasses

    with Corpus(corpus_path) as whole:
        corpus = whole.filter(**view)
        ids = corpus.task_ids()
        assert len(ids) > ITER_CHUNK or view, len(ids)  # the whole view spans several chunks
        tasks = list(corpus)
        assert [task.task_id for task in tasks] == ids
        for task in tasks:
            reference = corpus[task.task_id]
            for field in dataclasses.fields(task):
                value = getattr(task, field.name)
                assert _same(value, getattr(reference, field.name)), (task.task_id, field.name)
                if field.name in READ_ARRAYS:  # its own memory, not a block of the chunk's
                    assert value.base is None or value.base.nbytes == value.nbytes, field.name


def test_a_task_read_by_id_is_the_one_built_from_its_pandas_row(corpus_path):
    # corpus[id] reads the pair's row from numpy columns; the row pandas gives (pairs.iloc) is
    # the reference: every field the same, value and type
    import dataclasses

    with Corpus(corpus_path) as corpus:
        for task_id in corpus.task_ids():
            pair_id, _, future = task_id.rpartition("/")
            reference = corpus._task(corpus.pairs.iloc[corpus._rows[pair_id]], future)
            task = corpus[task_id]
            for field in dataclasses.fields(task):
                assert _same(getattr(task, field.name), getattr(reference, field.name)), (
                    task_id,
                    field.name,
                )


# baseline starts of every kind: dates, fixed offsets, microseconds, nanoseconds
BASELINE_STARTS = [
    "2024-01-08T00:00:00",
    "1988-01-01",
    "2000-12-01T06:30:00+02:00",
    "2013-08-12 13:40:46+00:00",
    "2024-03-31T01:59:59.250000-05:00",
    "2024-02-29T00:00:00.000000001",  # nanoseconds: pandas' own arithmetic
]


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    start=st.sampled_from(BASELINE_STARTS),
    steps=st.integers(0, 10**7),
    interval_s=st.sampled_from([1, 60, 300, 900, 3600]),
)
def test_a_windows_start_time_is_pandas_arithmetic_on_its_baselines_start(start, steps, interval_s):
    # window_start_time adds through datetime where that is exact; the Timestamp must be the
    # one pandas' own sum gives: the same instant, unit and zone
    from whatif_bench.corpus import window_start_time

    try:
        expected = pd.Timestamp(start) + pd.Timedelta(seconds=steps * interval_s)
    except ValueError:  # beyond what a Timestamp holds (pandas 2: past the year 2262)
        with pytest.raises(ValueError):
            window_start_time(start, steps, interval_s)
        return
    got = window_start_time(start, steps, interval_s)
    assert (got, got.unit, repr(got)) == (expected, expected.unit, repr(expected))


@settings(max_examples=100, deadline=None, derandomize=True)
@given(
    start=st.sampled_from(BASELINE_STARTS),
    steps=st.lists(st.integers(0, 10**6), max_size=12),
    numpy_steps=st.booleans(),
    interval_s=st.sampled_from([1, 60, 300, 3600]),
)
def test_the_start_texts_of_several_windows_are_each_windows_isoformat(
    start, steps, numpy_steps, interval_s
):
    # a description asks for all its events' times at once (window_start_texts); each is the
    # isoformat of window_start_time, numpy steps (pandas' arithmetic) included
    from whatif_bench.corpus import window_start_time
    from whatif_bench.corpus.task import window_start_text, window_start_texts

    given_steps = list(np.array(steps, dtype=np.int64)) if numpy_steps else steps
    texts = window_start_texts(start, given_steps, interval_s)
    assert texts == [window_start_time(start, s, interval_s).isoformat() for s in given_steps]
    assert texts == [window_start_text(start, s, interval_s) for s in given_steps]


def test_reading_tasks_by_id_in_any_order_gives_each_as_reading_it_alone(corpus_path):
    # Corpus.tasks reads ITER_CHUNK tasks at once, wherever they lie (CorpusDataset's shuffle)
    import dataclasses

    with Corpus(corpus_path) as corpus:
        every = corpus.task_ids()
        ids = [every[i] for i in np.random.default_rng(4).permutation(len(every))[:150]]
        assert len(ids) > 2 * ITER_CHUNK
        tasks = list(corpus.tasks(ids))
        assert [task.task_id for task in tasks] == ids
        for task in tasks:
            reference = corpus[task.task_id]
            for field in dataclasses.fields(task):
                assert _same(getattr(task, field.name), getattr(reference, field.name)), (
                    task.task_id,
                    field.name,
                )
        assert list(corpus.tasks([])) == []


@pytest.mark.parametrize(
    ("task_id", "message"),
    [
        ("nowhere/pair/replay", "no task 'nowhere/pair/replay' in this corpus view"),
        ("{first}/sideways", "no task '{first}/sideways' in this corpus view"),
    ],
    ids=["unknown-pair", "unknown-future"],
)
def test_reading_an_unknown_task_by_id_is_the_key_error_of_reading_it_alone(
    corpus_path, task_id, message
):
    with Corpus(corpus_path) as corpus:
        first = corpus.task_ids()[0].rpartition("/")[0]
        task_id, message = task_id.format(first=first), message.format(first=first)
        tasks = corpus.tasks([corpus.task_ids()[0], task_id])
        with pytest.raises(KeyError, match=re.escape(message)):
            list(tasks)
        with pytest.raises(KeyError, match=re.escape(message)):
            corpus[task_id]
