"""Relational scores (docs/RELATIONAL.md): each definition against hand computations, the rules
they obey for every input, the Restraint inputs read from a real corpus, and ``whatif evaluate
--relational`` end to end."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from tests.conftest import every_tenth_task_id, run_cli, run_whatif_drawing_one_skill_plot
from whatif_bench.evaluation import Forecast, evaluate, make_forecaster
from whatif_bench.evaluation.relational import (
    SCORE_COLUMNS,
    HistoryTruth,
    contrast,
    direction,
    history_scores,
    intensity,
    restraint,
    summarise,
)
from whatif_bench.evaluation.runner import relational_parts
from whatif_bench.generator import Corpus, GenerationConfig, generate
from whatif_bench.simulators import shipped_baselines_path

# the reports draw one skill plot, not five (tests/conftest.py): not what these tests check
pytestmark = pytest.mark.usefixtures("one_skill_plot_in_module")


def test_direction_counts_agreeing_signs_and_a_zero_forecast_effect_as_wrong():
    # steps 0-2 count (true effect 2, 2, 1); step 3 has no true effect. Step 0 agrees, step 1
    # has the wrong sign, step 2 a zero forecast effect: 1 of 3
    assert direction(np.array([1.0, -1.0, 0.0, 2.0]), np.array([2.0, 2.0, 1.0, 0.0])) == 1 / 3
    assert math.isnan(direction(np.array([1.0, 2.0]), np.zeros(2)))


def test_intensity_is_the_median_ratio_over_steps_with_a_real_true_effect():
    # mean |true| = 8.001 / 4 = 2.00025, so the floor is 0.0200025 and step 2 (0.001) is out;
    # ratios 0.5, 1.0, 1.5 -> median 1.0
    true = np.array([2.0, 4.0, 0.001, -2.0])
    made = np.array([1.0, 4.0, 5.0, -3.0])
    assert intensity(made, true) == 1.0
    assert intensity(np.zeros(4), true) == 0.0  # no reaction
    assert intensity(-true, true) == -1.0  # the wrong way, at full size
    assert math.isnan(intensity(made, np.zeros(4)))


def test_contrast_asks_whether_novel_moved_further_exactly_when_the_truth_did():
    replay, novel = np.array([1.0, 1.0]), np.array([3.0, -3.0])  # true magnitudes 1 < 3
    assert contrast(np.array([2.0, 2.0]), np.array([1.0, 1.0]), replay, novel) == 0.0
    assert contrast(np.array([2.0, 2.0]), np.array([3.0, -3.0]), replay, novel) == 1.0
    assert contrast(np.zeros(2), np.zeros(2), replay, novel) == 0.0  # a tie never agrees
    assert contrast(np.array([1.0, 1.0]), np.zeros(2), novel, replay) == 1.0  # reversed truth
    assert math.isnan(contrast(np.ones(2), np.ones(2), replay, replay))


def test_restraint_is_the_share_of_steps_inside_the_naive_error_band():
    # counterfactual 10, last history value 12: band 2; 13 is outside, 12 on the edge is inside
    counterfactual = np.full(4, 10.0)
    assert restraint(np.array([10.0, 11.5, 12.0, 13.0]), counterfactual, 12.0) == 0.75
    assert restraint(np.full(4, 12.0), counterfactual, 12.0) == 1.0  # naive itself


def test_history_scores_by_hand():
    # H = 3, event window of 2 steps. Truths: cf 10, 10, 10; Replay 12, 11, 10; Novel 16, 14, 10
    truth = HistoryTruth(
        "p",
        counterfactual=np.array([10.0, 10.0, 10.0]),
        replay=np.array([12.0, 11.0, 10.0]),
        novel=np.array([16.0, 14.0, 10.0]),
        event_steps=2,
        last_value=9.0,
    )
    forecasts = {
        "restraint": np.array([9.0, 9.5, 11.5]),  # |err| 1, .5, 1.5 vs band 1: 2 of 3
        "replay": np.array([10.0, 9.0, 0.0]),  # effects +1, -0.5 vs true +2, +1
        "novel": np.array([13.0, 12.5, 0.0]),  # effects +4, +3 vs true +6, +4
    }
    scores = history_scores(forecasts, truth)
    assert list(scores) == SCORE_COLUMNS
    assert scores["direction_replay"] == 0.5 and scores["direction_novel"] == 1.0
    assert scores["direction"] == 3 / 4
    assert scores["intensity_replay"] == np.median([0.5, -0.5])
    assert scores["intensity_novel"] == np.median([4 / 6, 3 / 4])
    assert scores["intensity"] == np.median([0.5, -0.5, 4 / 6, 3 / 4])
    assert scores["contrast"] == 1.0  # forecast 3.5 > 0.75, truth 5 > 1.5
    assert scores["restraint"] == 2 / 3


def test_summarise_means_and_medians_over_histories_and_leaves_failures_out():
    rows = pd.DataFrame(
        {
            "pair_id": ["a", "b", "c", "a"],
            "model": ["m", "m", "m", "n"],
            **{c: [0.0, 1.0, 5.0, np.nan] for c in SCORE_COLUMNS},
            "failed": ["", "", "", "predict raised"],
        }
    )
    rows.loc[2, "direction"] = np.nan  # undefined for history c: left out of the mean
    table = summarise(rows).set_index("model")
    assert table.loc["m", "direction"] == 0.5
    assert table.loc["m", "contrast"] == 2.0 and table.loc["m", "intensity"] == 1.0
    assert table.loc["m", "num_histories"] == 3
    assert "n" not in table.index  # failed on its only history


finite = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False)


@settings(max_examples=60, deadline=None)
@given(
    arrays(np.float64, st.tuples(st.integers(1, 4), st.integers(1, 12)), elements=finite),
    st.integers(1, 12),
)
def test_the_truth_scores_one_and_a_covariate_blind_forecast_zero(values, steps):
    """For every set of truths: forecasting the truths themselves scores 1 on each score that
    is defined; a forecast identical under every future (naive) scores 0 on direction and
    intensity and 1 on restraint."""
    horizon = values.shape[1]
    rows = np.vstack([values, np.zeros((4 - values.shape[0], horizon))])
    truth = HistoryTruth("p", rows[0], rows[1], rows[2], min(steps, horizon), float(rows[3, 0]))
    exact = {"restraint": truth.counterfactual, "replay": truth.replay, "novel": truth.novel}
    for name, value in history_scores(exact, truth).items():
        assert math.isnan(value) or value == 1.0, name
    flat = np.full(horizon, truth.last_value)
    blind = history_scores(dict.fromkeys(("restraint", "replay", "novel"), flat), truth)
    for name in ("direction", "direction_replay", "direction_novel", "contrast"):
        assert math.isnan(blind[name]) or blind[name] == 0.0, name
    for name in ("intensity", "intensity_replay", "intensity_novel"):
        assert math.isnan(blind[name]) or blind[name] == 0.0, name
    assert blind["restraint"] == 1.0


# ---- on a real corpus -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def corpus_path(two_target_corpus):
    """sumo/flow_loop_e_0_near and epanet/pressure_10 (the session's; no test here changes it)."""
    return two_target_corpus


@pytest.fixture(scope="module")
def a_tenth_of_the_ids(corpus_path) -> list[str]:
    """76 of the corpus's 760 tasks (``every_tenth_task_id``): the evaluations here score these."""
    return every_tenth_task_id(corpus_path)


def test_restraint_inputs_hold_the_history_and_base_covariates(corpus_path):
    with Corpus(corpus_path) as corpus:
        short = corpus.filter(C="C1", ell=32)  # the Replay event ends before the horizon does
        pair_ids = short.pairs[short.pairs["kept"]]["pair_id"].tolist()[:3]
        inputs, truths = relational_parts(corpus, pair_ids)
        for index, pair_id in enumerate(pair_ids):
            replay, novel, held = inputs[3 * index : 3 * index + 3]
            task = corpus[f"{pair_id}/replay"]
            assert held.task_id == f"{pair_id}/restraint"
            assert np.array_equal(held.history_target, task.history_target)
            assert np.array_equal(held.history_covariates, task.history_covariates)
            assert held.future_covariates.dtype == np.float32
            # after the Replay event every covariate is back at its base value, as stored
            assert np.array_equal(held.future_covariates[:, 32:], task.future_covariates[:, 32:])
            bases = np.array(task.recipe["base_values"], dtype=np.float32)
            assert np.array_equal(held.future_covariates, np.repeat(bases[:, None], 128, axis=1))
            assert (replay.task_id, novel.task_id) == (f"{pair_id}/replay", f"{pair_id}/novel")
            assert np.array_equal(truths[index].counterfactual, task.counterfactual_future)
            assert np.array_equal(truths[index].replay, task.future_target)
            assert truths[index].event_steps == 32
            assert truths[index].last_value == task.history_target[-1]


@pytest.mark.slow  # about 4 s
def test_evaluate_relational_scores_every_history_the_same_with_one_or_two_jobs(
    tmp_path, corpus_path, a_tenth_of_the_ids
):
    results = [
        evaluate(
            corpus_path,
            ["naive", "ridge", "linear"],
            tmp_path / f"jobs{jobs}",
            task_ids=a_tenth_of_the_ids,
            jobs=jobs,
            progress=False,
            relational=True,
        )
        for jobs in (1, 2)
    ]
    one, two = (pd.read_parquet(tmp_path / f"jobs{j}" / "relational.parquet") for j in (1, 2))
    pd.testing.assert_frame_equal(one, two)
    result = results[0]
    assert set(one["pair_id"]) == set(result.per_task["task_id"].str.rpartition("/")[0])
    assert (one["failed"] == "").all()
    board = result.leaderboard.set_index("model")
    # naive ignores the covariates: no forecast effect, so no direction or size, and its
    # restraint forecast is the band's edge
    assert board.loc["naive", "direction"] == 0.0 and board.loc["naive", "intensity"] == 0.0
    assert board.loc["naive", "restraint"] == 1.0
    assert board.loc["ridge", "direction"] > 0.5  # the covariates carry the effect's sign
    assert board.loc["ridge", "num_histories"] == one["pair_id"].nunique()
    for axis in ("simulator", "K", "E", "ell", "C"):
        table = pd.read_csv(tmp_path / "jobs1" / "slices" / f"relational_{axis}.csv")
        assert {"model", *SCORE_COLUMNS, "num_histories"} <= set(table.columns)
    assert not (tmp_path / "jobs1" / "slices" / "relational_future.csv").exists()
    assert "## Relational scores" in (tmp_path / "jobs1" / "leaderboard.md").read_text()
    # one history's row, recomputed from the corpus tasks and ridge's own forecasts
    row = one[one["model"] == "ridge"].iloc[0]
    with Corpus(corpus_path) as corpus:
        inputs, truths = relational_parts(corpus, [row["pair_id"]])
    points = [f.point for f in make_forecaster("ridge").predict(inputs)]
    futures = ("replay", "novel", "restraint")
    expected = history_scores(dict(zip(futures, points, strict=True)), truths[0])
    for name in SCORE_COLUMNS:
        assert row[name] == pytest.approx(expected[name], nan_ok=True), name


@pytest.mark.slow  # a whatif process and its two workers: about 4 s
def test_a_model_failing_on_restraint_inputs_fails_its_histories_with_one_error_line(
    tmp_path, one_target_corpus
):
    model = tmp_path / "model.py"
    model.write_text(
        "import numpy as np\n"
        "from whatif_bench.evaluation import Forecast\n"
        "class M:\n"
        "    name = 'fails-on-restraint'\n"
        "    def predict(self, batch):\n"
        "        if any(t.task_id.endswith('/restraint') for t in batch):\n"
        "            raise RuntimeError('constant covariates')\n"
        "        return [Forecast(point=np.full(t.prediction_length, 1.0)) for t in batch]\n"
    )
    out = tmp_path / "out"
    # the one-target corpus: its 360 tasks are the fewest a --subset of these corpora selects
    done = run_whatif_drawing_one_skill_plot(
        "evaluate", str(one_target_corpus), "--models", f"naive,{model}:M", "--out", str(out),
        "--subset", "0.05", "--relational",
    )  # fmt: skip
    assert done.returncode == 1
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in done.stderr
    assert "relational scores" in done.stderr and "constant covariates" in done.stderr
    table = pd.read_parquet(out / "relational.parquet")
    failed = table[table["model"] == "fails-on-restraint"]
    assert (failed["failed"] == "predict raised RuntimeError: constant covariates").all()
    assert (table[table["model"] == "naive"]["failed"] == "").all()
    assert "relational scores over" in done.stdout


# ---- the Restraint future in a corpus (whatif generate --futures replay,novel,restraint) -------
@pytest.fixture(scope="module")
def restraint_path(tmp_path_factory):
    folder = tmp_path_factory.mktemp("restraint-corpus")
    config = GenerationConfig(
        baselines=str(shipped_baselines_path()),
        out=str(folder / "c.h5"),
        targets=("sumo/flow_loop_e_0_near", "epanet/pressure_10"),
        jobs=1,
        futures=("restraint", "novel", "replay"),  # any order: stored in the canonical one
    )
    return generate(config, progress=False)


def _datasets(path) -> dict[str, object]:
    """Every dataset of a file: its bytes (its values, for strings)."""
    import h5py

    found: dict[str, object] = {}

    def keep(name, item):
        if isinstance(item, h5py.Dataset):
            values = np.asarray(item[()])
            found[name] = values.tolist() if values.dtype.kind == "O" else values.tobytes()

    with h5py.File(path, "r") as h5:
        h5.visititems(keep)
    return found


@pytest.mark.slow  # about 1 s
def test_a_restraint_corpus_stores_nothing_new_and_records_its_futures(corpus_path, restraint_path):
    import h5py

    stored = _datasets(corpus_path)
    assert len(stored) > 20 and _datasets(restraint_path) == stored  # every array, byte for byte
    with h5py.File(corpus_path, "r") as plain, h5py.File(restraint_path, "r") as other:
        differ = {k for k in plain.attrs if plain.attrs[k] != other.attrs[k]}
        assert differ == {"config", "axes", "n_tasks_generated", "n_tasks_kept"}
        assert "futures" not in json.loads(plain.attrs["config"])  # the default, as before
        assert json.loads(other.attrs["config"])["futures"] == ["replay", "novel", "restraint"]
        assert json.loads(other.attrs["axes"])["futures"] == ["replay", "novel", "restraint"]
        assert other.attrs["n_tasks_kept"] == 3 * other.attrs["n_pairs_kept"]
    done = run_cli("verify", str(restraint_path))
    assert done.returncode == 0, done.stderr
    info = run_cli("info", str(restraint_path), "--json")
    assert json.loads(info.stdout)["by_future"]["restraint"]["kept"] > 0


def test_restraint_tasks_hold_base_covariates_and_the_counterfactual(restraint_path):
    with Corpus(restraint_path) as corpus:
        assert corpus.futures == ("replay", "novel", "restraint")
        view = corpus.filter(future="restraint", C="C1")
        ids = view.task_ids()
        assert ids and all(i.endswith("/restraint") for i in ids)
        assert len(corpus) == 3 * int(corpus.pairs["kept"].sum())
        mixed = [ids[0], ids[0].replace("/restraint", "/novel"), ids[1]]
        inputs, truths = corpus.task_inputs(mixed), corpus.ground_truths(mixed)
        for task_id, given, truth in zip(mixed, inputs, truths, strict=True):
            task = corpus[task_id]
            assert np.array_equal(given.future_covariates, task.future_covariates)
            assert np.array_equal(truth, task.future_target)
        task = corpus[ids[0]]
        assert np.array_equal(task.future_target, task.counterfactual_future)
        bases = np.array(task.recipe["base_values"], dtype=np.float32)
        assert np.array_equal(task.future_covariates[:, 0], bases)
        assert (task.future_covariates == task.future_covariates[:, :1]).all()
        assert task.recipe["future_factors"] == [1.0] * task.k
        pair = ids[0].rpartition("/")[0]
        assert np.array_equal(
            corpus.restraint_inputs([pair])[0].future_covariates, task.future_covariates
        )


@pytest.mark.slow  # about 2 s
def test_evaluating_a_restraint_corpus_scores_restraint_tasks_and_the_same_relations(
    tmp_path, corpus_path, restraint_path, a_tenth_of_the_ids
):
    plain = evaluate(corpus_path, ["naive", "ridge"], tmp_path / "a", progress=False,
                     task_ids=a_tenth_of_the_ids, relational=True)  # fmt: skip
    pairs = {task_id.rpartition("/")[0] for task_id in a_tenth_of_the_ids}
    with Corpus(restraint_path) as corpus:  # the same histories' tasks, Restraint's too
        ids = [i for i in corpus.task_ids() if i.rpartition("/")[0] in pairs]
    other = evaluate(restraint_path, ["naive", "ridge"], tmp_path / "b", progress=False,
                     task_ids=ids, relational=True)  # fmt: skip
    assert set(other.per_task["future"]) == {"replay", "novel", "restraint"}
    assert "restraint" in set(pd.read_csv(tmp_path / "b" / "slices" / "future.csv")["future"])
    # the relational scores of a history are the same whether Restraint is stored or derived
    both = other.relational.merge(plain.relational, on=["pair_id", "model"])
    assert len(both) == len(plain.relational) > 0
    for name in SCORE_COLUMNS:
        pd.testing.assert_series_equal(both[f"{name}_x"], both[f"{name}_y"], check_names=False)


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("replay,novel,restrain", "unknown future type 'restrain' in --futures"),
        ("novel,restraint", "--futures must include replay and novel"),
    ],
)
def test_bad_futures_are_one_error_line(tmp_path, given, said):
    done = run_cli(
        "generate", "--targets", "epanet/pressure_10", "--out", str(tmp_path / "x.h5"),
        "--futures", given,
    )  # fmt: skip
    assert done.returncode != 0 and not (tmp_path / "x.h5").exists()
    assert done.stderr.strip().splitlines() == [done.stderr.strip()]
    assert done.stderr.startswith("error: ") and said in done.stderr


class CountingNaive:
    """The last value, counting the inputs it is asked for (per class, across instances)."""

    name = "counting-naive"
    _seen: list[str] = []  # private: not part of the fingerprint

    def predict(self, batch):
        CountingNaive._seen += [t.task_id for t in batch]
        return [Forecast(point=np.full(t.prediction_length, t.history_target[-1])) for t in batch]


@pytest.mark.slow  # about 1 s
def test_relational_chunks_are_kept_and_a_second_run_forecasts_nothing(
    tmp_path, corpus_path, a_tenth_of_the_ids
):
    out = tmp_path / "resume"
    tasks = a_tenth_of_the_ids
    # model_timeout=None: predict runs in this process, where the count is kept (with a time
    # limit it runs in a forked child per batch; docs/RELIABILITY.md, section 8)
    first = evaluate(corpus_path, ["naive", CountingNaive()], out, task_ids=tasks, progress=False,
                     relational=True, model_timeout=None)  # fmt: skip
    histories = first.relational["pair_id"].nunique()
    restraint = [i for i in CountingNaive._seen if i.endswith("/restraint")]
    assert len(restraint) == histories  # every history's Restraint input, once
    assert len(list((out / "per_task" / "counting-naive").glob("chunk-relational-*"))) >= 1
    CountingNaive._seen = []
    again = evaluate(corpus_path, ["naive", CountingNaive()], out, task_ids=tasks, progress=False,
                     relational=True, model_timeout=None)  # fmt: skip
    assert CountingNaive._seen == [] and again.notes == []
    pd.testing.assert_frame_equal(again.relational, first.relational)


def test_verify_names_a_config_whose_futures_contradict_the_axes(tmp_path, restraint_path):
    import shutil

    import h5py

    copy = tmp_path / "c.h5"
    shutil.copyfile(restraint_path, copy)
    with h5py.File(copy, "r+") as h5:
        config = json.loads(h5.attrs["config"])
        del config["futures"]
        h5.attrs["config"] = json.dumps(config, sort_keys=True)
    done = run_cli("verify", str(copy))
    assert done.returncode != 0
    assert "attribute config: futures None differ from the future types of the axes" in (
        done.stdout + done.stderr
    )
