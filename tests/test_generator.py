"""The generator end to end on real shipped baselines: corpus content, API, determinism."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest

from tests.conftest import run_cli
from whatif_bench import __version__
from whatif_bench.corpus.provenance import registry_hash
from whatif_bench.generator import Corpus, GenerationConfig, generate
from whatif_bench.generator.checking import verify_corpus
from whatif_bench.simulators import read_baselines, shipped_baselines_path

TARGETS = ("sumo/flow_loop_e_0_near", "epanet/pressure_10", "gridlabd/air_temperature")
SHIPPED = str(shipped_baselines_path())


def make(tmp_path, name="c.h5", targets=TARGETS, seed=0, jobs=1):
    config = GenerationConfig(
        baselines=SHIPPED, out=str(tmp_path / name), targets=targets, seed=seed, jobs=jobs
    )
    return generate(config, progress=False)


@pytest.fixture(scope="module")
def corpus_path(tmp_path_factory):
    return make(tmp_path_factory.mktemp("corpus"))


@pytest.fixture
def corpus(corpus_path):
    with Corpus(corpus_path) as opened:
        yield opened


def test_two_hundred_pairs_per_target_and_both_futures(corpus):
    assert len(corpus.pairs) == 3 * 200
    kept = int(corpus.pairs["kept"].sum())
    assert len(corpus) == 2 * kept > 0
    frame = corpus.tasks_frame()
    assert set(frame["future"]) == {"replay", "novel"}
    assert frame["task_id"].is_unique


def test_file_records_its_provenance(corpus):
    attrs = corpus.attrs
    assert attrs["toolkit_version"] == __version__ and attrs["master_seed"] == 0
    assert json.loads(attrs["config"])["targets"] == list(TARGETS)
    assert attrs["registry_hash"] == registry_hash()
    from whatif_bench.simulators.store import combined_hash

    shipped = read_baselines(SHIPPED)
    used = {target.split("/")[0] for target in TARGETS}  # the simulators the corpus draws on
    assert attrs["baselines_hash"] == combined_hash(shipped[s] for s in sorted(used))
    assert attrs["baselines_hash"] != combined_hash(shipped.values())  # OpenDC is not among them
    assert attrs["complete"]


def test_tasks_carry_their_simulators_calendar_and_their_own_window_start(corpus):
    """Each task is dated by its simulator's baselines start plus its window offset, so tasks of
    two simulators (and two windows of one) show different real dates; the forecaster's input
    carries the same start and step."""
    from whatif_bench.evaluation.forecasters import TaskInput

    shipped = read_baselines(SHIPPED)
    firsts = {}
    for simulator in ("sumo", "epanet", "gridlabd"):
        task = next(iter(corpus.filter(simulator=simulator)))
        expected = np.datetime64(shipped[simulator].start) + np.timedelta64(
            task.start_step * shipped[simulator].interval_s, "s"
        )
        assert task.baseline_start == shipped[simulator].start
        assert task.start == task.timestamps()[0] == expected
        model_view = TaskInput.from_task(task)
        assert model_view.start == expected and model_view.interval_s == task.interval_s
        assert np.array_equal(model_view.timestamps(), task.timestamps().to_numpy("datetime64[s]"))
        firsts[simulator] = task.timestamps()[0]
    assert firsts["sumo"].year == 2024 and firsts["gridlabd"].year == 1988
    assert len(set(firsts.values())) == 3
    starts = {int(s) for s in corpus.filter(simulator="sumo").pairs["window_start"]}
    assert len(starts) > 1  # windows of one simulator are dated apart too


def test_task_arrays_follow_the_recipe(corpus):
    task = corpus["sumo/flow_loop_e_0_near/K3-C2-L128-Emax/novel"]
    recipe = task.recipe
    assert task.history_target.shape == (2048,) and task.future_target.shape == (256,)
    assert task.history_covariates.shape == (3, 2048) and task.future_covariates.shape == (3, 256)
    assert task.covariates == ("tau", "minGap", "accel")
    stamps = task.timestamps()
    assert len(stamps) == 2048 + 256 and (stamps[1] - stamps[0]).total_seconds() == 300
    assert stamps[0] == np.datetime64("2024-02-05T00:00:00") + np.timedelta64(
        300 * task.start_step, "s"
    )
    assert task.history_target.dtype == np.float32
    baseline = read_baselines(SHIPPED)["sumo"].series["flow_loop_e_0_near"]
    window = baseline[task.start_step : task.start_step + 2048 + 256].astype(np.float32)
    assert np.array_equal(task.counterfactual_history, window[:2048])
    inside = np.zeros(2048, dtype=bool)
    for start in recipe["event_starts"]:
        inside[start : start + 128] = True
    assert np.array_equal(task.history_target[~inside], task.counterfactual_history[~inside])
    assert not np.array_equal(task.history_target[inside], task.counterfactual_history[inside])
    # covariates are base value x factor, in physical units; all step-shaped here
    for c, base in enumerate(recipe["base_values"]):
        assert task.history_covariates[c, 0] == np.float32(base)
        first = recipe["event_starts"][0]
        assert task.history_covariates[c, first] == np.float32(base * recipe["factors"][0][c])
        assert task.future_covariates[c, 0] == np.float32(base * recipe["future_factors"][c])
        assert task.future_covariates[c, 128] == np.float32(base)  # after the future event


def test_replay_copies_a_past_event_and_novel_leaves_the_range(corpus):
    replay = corpus["sumo/flow_loop_e_0_near/K3-C2-L128-Emax/replay"]
    source = replay.recipe["replay_source"]
    assert replay.recipe["future_factors"] == replay.recipe["factors"][source]
    novel = corpus["sumo/flow_loop_e_0_near/K3-C2-L128-Emax/novel"]
    assert np.array_equal(novel.history_target, replay.history_target)  # one shared history
    factors = np.array(novel.recipe["factors"])
    assert novel.recipe["future_factors"][2] >= factors[:, 2].max() + 5  # accel is direct


def test_every_kept_pair_passes_the_ten_percent_rule(corpus):
    kept = corpus.pairs[corpus.pairs["kept"]]
    assert (kept[["min_history_ratio", "replay_ratio", "novel_ratio"]] >= 0.10).all().all()
    dropped = corpus.pairs[~corpus.pairs["kept"]]
    assert set(dropped["drop_reason"]) <= {"history", "replay", "novel"}
    for _, row in dropped.iterrows():
        ratio = {
            "history": row["min_history_ratio"],
            "replay": row["replay_ratio"],
            "novel": row["novel_ratio"],
        }
        assert ratio[row["drop_reason"]] < 0.10


def test_filtering_by_every_axis(corpus):
    view = corpus.filter(simulator="sumo", future="novel", K=[2, 3], C="C2", ell=128, E="Emax")
    frame = view.tasks_frame()
    assert len(view) == len(frame) > 0
    assert set(frame["future"]) == {"novel"} and set(frame["k"]) <= {2, 3}
    assert set(frame["c_label"]) == {"C2"} and set(frame["event_length"]) == {128}
    tasks = list(view)
    assert [t.task_id for t in tasks] == frame["task_id"].tolist()
    with pytest.raises(KeyError):
        view["epanet/pressure_10/K1-C1-L32-Efew/novel"]  # outside the view


def test_dropped_tasks_say_why(corpus):
    row = corpus.pairs[~corpus.pairs["kept"]].iloc[0]
    with pytest.raises(KeyError, match="dropped by verification"):
        corpus[row["pair_id"] + "/replay"]


def test_workers_do_not_change_a_single_byte(tmp_path, corpus_path):
    two = make(tmp_path, "two.h5", jobs=2)
    assert two.read_bytes() == corpus_path.read_bytes()


def test_a_subset_gives_exactly_the_tasks_of_the_full_run(one_target_corpus, corpus):
    subset = one_target_corpus  # make(targets=("epanet/pressure_10",)), made once a session
    with Corpus(subset) as small:
        assert len(small.pairs) == 200
        for task_id in small.task_ids()[::37]:
            a, b = small[task_id], corpus[task_id]
            for name in (
                "history_target",
                "history_covariates",
                "future_target",
                "future_covariates",
            ):
                assert np.array_equal(getattr(a, name), getattr(b, name)), (task_id, name)
            assert a.recipe == b.recipe


def test_a_different_seed_gives_different_tasks(tmp_path, corpus):
    other = make(tmp_path, "seed1.h5", targets=("epanet/pressure_10",), seed=1)
    with Corpus(other) as changed:
        assert not np.array_equal(
            changed.pairs["window_start"], corpus.filter(target="pressure_10").pairs["window_start"]
        )


def test_verify_rebuilds_every_pair(corpus_path):
    report = verify_corpus(corpus_path, progress=False)
    assert report.ok and report.checked == 600


@pytest.mark.slow  # about 2 s
def test_verify_detects_an_altered_value(tmp_path, corpus_path):
    copy = tmp_path / "altered.h5"
    copy.write_bytes(corpus_path.read_bytes())
    with h5py.File(copy, "r+") as h5:
        h5["data/future_target"][10] = h5["data/future_target"][10] + np.float32(1e-3)
    report = verify_corpus(copy, progress=False)
    assert not report.ok and "future_target differs" in report.problems[0]
    result = run_cli("verify", str(copy))
    assert result.returncode == 1


def test_verify_detects_an_altered_recipe(tmp_path, corpus_path):
    copy = tmp_path / "recipe.h5"
    copy.write_bytes(corpus_path.read_bytes())
    with h5py.File(copy, "r+") as h5:
        h5["events/factors"][0] = 123.0
    report = verify_corpus(copy, progress=False)
    assert "stored recipe differs" in report.problems[0]


def test_truncated_or_incomplete_files_are_refused(tmp_path, corpus_path):
    truncated = tmp_path / "truncated.h5"
    truncated.write_bytes(corpus_path.read_bytes()[: corpus_path.stat().st_size // 2])
    result = run_cli("verify", str(truncated))
    assert result.returncode == 1 and "error:" in result.stderr
    incomplete = tmp_path / "incomplete.h5"
    incomplete.write_bytes(corpus_path.read_bytes())
    with h5py.File(incomplete, "r+") as h5:
        h5.attrs["complete"] = False
    result = run_cli("info", str(incomplete))
    assert result.returncode == 1 and "incomplete corpus" in result.stderr


def test_info_counts_by_axis(corpus_path):
    result = run_cli("info", str(corpus_path), "--json", check=True)
    summary = json.loads(result.stdout)
    assert summary["tasks"]["generated"] == 1200
    assert set(summary["by_axis"]) == {"simulator", "K", "C", "ell", "E"}
    assert sum(v["generated"] for v in summary["by_axis"]["K"].values()) == 1200
    kept_pairs = summary["pairs"]["kept"]
    for future in ("replay", "novel"):
        assert summary["by_future"][future]["generated"] == 600
        assert summary["by_future"][future]["kept"] == kept_pairs
    assert summary["tasks"]["kept"] == 2 * kept_pairs
    text = run_cli("info", str(corpus_path), check=True).stdout
    assert f"replay: {kept_pairs:,}/600" in text and f"novel: {kept_pairs:,}/600" in text


def test_show_prints_and_plots(tmp_path, corpus_path):
    png = tmp_path / "task.png"
    result = run_cli(
        "show",
        "sumo/flow_loop_e_0_near/K3-C2-L128-Emax/replay",
        "--corpus",
        str(corpus_path),
        "--plot",
        str(png),
        check=True,
    )
    assert "7 history events of 128 steps" in result.stdout and "copied from event" in result.stdout
    assert "window starts at baseline step" in result.stdout and "(2024-02-" in result.stdout
    assert png.read_bytes().startswith(b"\x89PNG")
    missing = run_cli("show", "sumo/nope/K1-C1-L32-Efew/replay", "--corpus", str(corpus_path))
    assert missing.returncode == 1 and "no task" in missing.stderr
