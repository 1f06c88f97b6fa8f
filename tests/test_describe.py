"""Task descriptions and scenario text (``corpus.describe``) on a real small corpus: the
attribution sums to the total effect for both combination classes and every K, equals the
term-by-term split for an unclipped additive target, matches the stored future; the scenario
text covers every shape, factors above and below 1, and is deterministic."""

from __future__ import annotations

import dataclasses
import itertools
import json

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import run_cli, small_corpus
from whatif_bench.corpus.describe import (
    SCHEMA,
    Describer,
    attribution,
    clock_text,
    coalition_effects,
    coalition_effects_reference,
    describe_task,
    duration_text,
    number_text,
    scenario_text,
    shapley,
)
from whatif_bench.corpus.provenance import corpus_registry
from whatif_bench.corpus.task import Task
from whatif_bench.generator import Corpus
from whatif_bench.relationships.engine import EventSchedule

# multiplicative; additive with a clipping window [1, 2]; additive without a window
TARGETS = ("epanet/pressure_10", "gridlabd/is_COOL_on", "sumo/meanTimeLoss_e2_e_0")


@pytest.fixture(scope="module")
def corpus_path(tmp_path_factory):
    return small_corpus(tmp_path_factory.mktemp("describe"), TARGETS)


@pytest.fixture(scope="module")
def described(corpus_path):
    """(task, relationship, float64 baseline of the future, description) of every task."""
    out = []
    with Corpus(corpus_path) as corpus:
        registry, _ = corpus_registry(corpus)
        for task_id in corpus.task_ids():
            task = corpus[task_id]
            relationship = registry.get(task.simulator, task.target)
            begin = task.start_step + task.context_length
            future = corpus.baseline(task.simulator, task.target)[
                begin : begin + task.prediction_length
            ]
            out.append((task, relationship, future, describe_task(task, relationship, future)))
    return out


def _shapley_by_permutations(worth, k: int) -> np.ndarray:
    """Plain reference: the mean marginal contribution over all K! orders."""
    out = np.zeros(k)
    orders = list(itertools.permutations(range(k)))
    for order in orders:
        mask = 0
        for player in order:
            out[player] += worth[mask | (1 << player)] - worth[mask]
            mask |= 1 << player
    return out / len(orders)


def test_shapley_matches_the_permutation_definition(rng):
    for k in range(1, 6):
        worth = rng.normal(size=2**k)
        np.testing.assert_allclose(shapley(worth), _shapley_by_permutations(worth, k), atol=1e-12)


@pytest.mark.slow  # about 2 s
def test_attribution_sums_to_the_total_for_both_classes_and_every_k(described):
    seen = set()
    for task, relationship, _, description in described:
        effect = description["effect"]
        parts = sum(effect["contributions"].values()) + effect["unattributed"]
        assert parts == pytest.approx(effect["total"], rel=1e-12, abs=1e-9), task.task_id
        assert list(effect["contributions"]) == list(task.covariates)
        seen.add((relationship.combination, relationship.is_state(), task.k))
    classes = [("multiplicative", False), ("additive", False), ("additive", True)]
    assert {(c, clipped, k) for c, clipped in classes for k in range(1, 6)} <= seen


def test_total_effect_is_that_of_the_stored_future(described):
    """The engine's total over the float64 baseline equals the stored (float32) future's."""
    for task, _, future, description in described:
        stored = float(np.sum(task.future_target.astype(np.float64) - future))
        scale = float(np.abs(task.future_target).sum()) + 1.0
        assert abs(stored - description["effect"]["total"]) < 1e-6 * scale, task.task_id


def test_full_coalition_is_the_engine_apply_events(described):
    for task, relationship, future, _ in described[::25]:
        length = task.recipe["future_event_length"]
        factors = np.asarray(task.recipe["future_factors"])
        effects = coalition_effects(relationship, future, length, factors)
        padded = np.zeros(max(length, future.size))
        padded[: future.size] = future
        schedule = EventSchedule(np.array([0]), np.array([length]), factors[None, :])
        expected = relationship.apply_events(padded, schedule)[: future.size]
        np.testing.assert_allclose(effects[-1] + future, expected, rtol=1e-13, atol=1e-12)
        assert np.all(effects[0] == 0.0)  # every covariate at factor 1: no effect


def test_coalition_effects_equal_every_coalition_evaluated_everywhere_to_the_bit(described):
    """Coalitions evaluated up to the event's last moved step and one all-ones row after it
    give the very effects of evaluating all 2^K coalitions at every step."""
    shorter = 0
    for task, relationship, future, _ in described[::5]:
        length = task.recipe["future_event_length"]
        factors = np.asarray(task.recipe["future_factors"])
        for cut in (length, max(1, length // 3)):  # the event as stored, and a short one
            shorter += cut < future.size
            np.testing.assert_array_equal(
                coalition_effects(relationship, future, cut, factors),
                coalition_effects_reference(relationship, future, cut, factors),
                err_msg=task.task_id,
            )
    assert shorter >= 20  # the all-ones tail was exercised


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 5).flatmap(
        lambda k: st.lists(
            st.floats(-1e6, 1e6, allow_nan=False), min_size=2**k * 3, max_size=2**k * 3
        )
    )
)
def test_shapley_of_one_game_is_each_column_of_the_per_step_games(values):
    """The scalar path (Python floats) and the per-step path (numpy rows) sum the same terms
    in the same order: one game's values are bit for bit each column's."""
    games = np.asarray(values).reshape(-1, 3)  # (2^K, 3): three games side by side
    per_step = shapley(games)
    for column in range(3):
        np.testing.assert_array_equal(shapley(games[:, column]), per_step[:, column])


def test_unclipped_additive_shapley_is_the_term_split(described):
    checked = 0
    for task, rel, future, description in described:
        if rel.combination != "additive" or rel.is_state():
            continue
        length = task.recipe["future_event_length"]
        factors = np.asarray(task.recipe["future_factors"])
        schedule = EventSchedule(np.array([0]), np.array([length]), factors[None, :])
        trajectories = rel.factor_trajectories(max(length, future.size), schedule)
        trajectories = trajectories[:, : future.size]
        s = rel.dampening_factor(task.k)
        primary = rel.form.evaluate_reference(future, trajectories[0], params=rel.primary_params)
        terms = [float(np.sum(primary - future))]
        for info, row in zip(rel.covariates[1 : task.k], trajectories[1:], strict=True):
            r = info.effect.evaluate_reference(row, params=info.effect.pack(info.effect_params))
            terms.append(
                float(np.sum((np.abs(future) + rel.level) * info.sign * s * info.weight * r))
            )
        got = list(description["effect"]["contributions"].values())
        np.testing.assert_allclose(got, terms, rtol=1e-9, atol=1e-9 * (1 + abs(sum(terms))))
        checked += 1
    assert checked >= 50


def test_clipping_makes_the_game_non_additive_and_the_attribution_still_sums(registry):
    """A state target near its upper bound: each covariate alone would push it over, together
    they are clipped, so the effects do not add up; the Shapley values still sum exactly."""
    rel = registry.get("gridlabd", "is_COOL_on")
    assert rel.combination == "additive" and rel.window == (1.0, 2.0)
    baseline = np.full(16, 1.7)
    factors = np.array([0.1, 8.0])
    effects = coalition_effects(rel, baseline, 16, factors)
    worth = effects.sum(axis=1)
    assert np.all(effects[-1] + baseline <= 2.0)
    assert worth[1] + worth[2] > worth[3] + 1.0  # clipping: the whole is less than the parts
    result = attribution(rel, baseline, 16, factors)
    parts = sum(result["contributions"].values()) + result["unattributed"]
    assert parts == pytest.approx(result["total"], rel=1e-12)
    assert result["total"] == pytest.approx(worth[3])


@settings(max_examples=60, deadline=None)
@given(
    data=st.data(),
    k=st.integers(1, 5),
    length=st.integers(1, 40),
    horizon=st.integers(1, 40),
)
def test_attribution_sums_to_total_for_random_factors(registry, data, k, length, horizon):
    rels = sorted(registry.relationships(), key=lambda r: (r.simulator, r.target))
    rel = data.draw(st.sampled_from(rels))
    factors = np.array(
        data.draw(st.lists(st.floats(0.05, 20.0), min_size=k, max_size=k)), dtype=np.float64
    )
    seed = data.draw(st.integers(0, 2**32 - 1))
    lo, hi = rel.typical_range
    lo, hi = (0.0, 100.0) if not (np.isfinite(lo) and np.isfinite(hi)) else (lo, hi)
    baseline = np.random.default_rng(seed).uniform(lo, hi, size=horizon)
    result = attribution(rel, baseline, length, factors, per_step=True)
    parts = sum(result["contributions"].values()) + result["unattributed"]
    assert parts == pytest.approx(
        result["total"], rel=1e-9, abs=1e-9 * (1 + np.abs(baseline).sum())
    )
    per_step = np.array(list(result["per_step"].values())).sum(axis=0)
    np.testing.assert_allclose(
        per_step, result["per_step_total"], rtol=1e-9, atol=1e-9 * (1 + np.abs(baseline).max())
    )
    # without the per-step parts the worths come from one kernel call: the same numbers
    plain = attribution(rel, baseline, length, factors)
    assert plain == {key: result[key] for key in plain}


def test_description_is_json_with_a_fixed_layout(described):
    task, relationship, future, description = described[0]
    text = json.dumps(description, allow_nan=False)
    assert json.loads(text) == description
    assert list(description) == [
        "schema",
        "task_id",
        "future",
        "simulator",
        "target",
        "target_unit",
        "relationship",
        "window",
        "covariates",
        "events",
        "effect",
    ]
    assert description["schema"] == SCHEMA
    again = describe_task(task, relationship, future)
    assert json.dumps(again) == text


def test_events_carry_times_lengths_and_physical_values(described):
    for task, relationship, _, description in described[::40]:
        stamps = task.timestamps()
        recipe = task.recipe
        events = description["events"]
        assert len(events) == len(recipe["event_starts"]) + 1
        assert [e["kind"] for e in events] == ["history"] * (len(events) - 1) + ["future"]
        for event, start in zip(
            events, [*recipe["event_starts"], task.context_length], strict=True
        ):
            assert event["start_step"] == start
            assert pd.Timestamp(event["start_time"]) == stamps[start]
            assert event["length_steps"] == recipe["event_length"]
            assert event["duration_s"] == recipe["event_length"] * task.interval_s
        future = events[-1]
        assert future["steps_in_window"] == min(recipe["event_length"], task.prediction_length)
        for entry, info, factor, base in zip(
            future["covariates"],
            relationship.covariates,
            recipe["future_factors"],
            recipe["base_values"],
            strict=False,
        ):
            assert entry["covariate"] == info.name and entry["unit"] == info.unit
            assert entry["peak_value"] == pytest.approx(base * factor)
        # a step covariate's stored future equals its peak value over the event's steps
        for row, entry in zip(task.future_covariates, future["covariates"], strict=True):
            if entry["shape"] == "step":
                np.testing.assert_allclose(
                    row[: future["steps_in_window"]], entry["peak_value"], rtol=1e-6
                )


# ---- scenario text ---------------------------------------------------------------------
def test_duration_and_clock_texts():
    assert duration_text(7200) == "2 hours"
    assert duration_text(5400) == "1 hour 30 minutes"
    assert duration_text(60) == "1 minute"
    assert duration_text(90061) == "1 day 1 hour 1 minute 1 second"
    assert clock_text(pd.Timestamp("2024-02-05 14:00")) == "2024-02-05 14:00"
    assert clock_text(pd.Timestamp("2024-02-05 14:00:30")) == "2024-02-05 14:00:30"


def _task(k: int, factors: list[float], length: int, horizon: int, future="novel") -> Task:
    """A hand-made task (arrays unused by the text) starting 2024-02-05 12:00, 5-minute steps,
    with 24 history steps, so the future starts at 14:00."""
    recipe = {
        "window_start": 0,
        "event_starts": [2],
        "event_length": length,
        "directions": [1],
        "factors": [list(factors)],
        "replay_source": 0,
        "future_factors": list(factors),
        "shapes": [],
        "base_values": [],
    }
    return Task(
        task_id="x/y/K1-C1-L1-Efew/novel",
        future=future,
        simulator="x",
        target="cpu load",
        k=k,
        c_label="C1",
        event_length=length,
        e_setting="Efew",
        covariates=(),
        units={},
        interval_s=300,
        baseline_start="2024-02-05T12:00:00",
        start_step=0,
        history_target=np.zeros(24),
        history_covariates=np.zeros((k, 24)),
        future_covariates=np.zeros((k, horizon)),
        future_target=np.zeros(horizon),
        counterfactual_history=np.zeros(24),
        counterfactual_future=np.zeros(horizon),
        recipe=recipe,
    )


def _relationship(registry, combination: str, shapes: list[str], directions: list[str]):
    """A shipped relationship of ``combination`` with its covariates' shapes, directions,
    names, units and bases set for the test."""
    rel = next(
        r
        for r in sorted(registry.relationships(), key=lambda r: (r.simulator, r.target))
        if r.combination == combination and not r.is_state()
    )
    names = ["core speed", "core count", "memory", "fan", "load"]
    units = ["GHz", "cores", "GiB", "", "%"]
    covariates = tuple(
        dataclasses.replace(info, name=n, unit=u, shape=s, direction=d, base_value=b)
        for info, n, u, s, d, b in zip(
            rel.covariates,
            names,
            units,
            shapes,
            directions,
            [2.0, 8.0, 16.0, 1.0, 50.0],
            strict=False,
        )
    )
    return dataclasses.replace(rel, target="cpu load", unit="W", covariates=covariates)


@pytest.mark.parametrize("combination", ["multiplicative", "additive"])
def test_scenario_text_step_and_bell_up_and_down(registry, combination):
    shapes = ["step", "bell", "step", "bell", "step"]
    directions = ["direct", "inverse", "direct", "direct", "inverse"]
    rel = _relationship(registry, combination, shapes, directions)
    task = _task(2, [6.0, 0.5], length=24, horizon=48)
    text = scenario_text(task, rel)
    assert text == (
        "From 2024-02-05 14:00, core speed is set to 6 times its base value (12 GHz instead "
        "of 2 GHz) for 2 hours, then returns; and core count ramps down to 0.5 times its base "
        "value (4 cores instead of 8 cores) over 2 hours, peaking at 2024-02-05 14:57:30, then "
        "returns. The target, cpu load (W), rises as core speed rises and falls as core count "
        f"rises; the covariates' effects combine {combination}ly."
    )
    assert scenario_text(task, rel) == text  # deterministic

    swapped = _relationship(registry, combination, ["bell", "step"] + shapes[2:], directions)
    task = _task(2, [0.25, 3.0], length=12, horizon=48)
    text = scenario_text(task, swapped)
    assert (
        "core speed ramps down to 0.25 times its base value (0.5 GHz instead of 2 GHz) "
        "over 1 hour, peaking at 2024-02-05 14:27:30, then returns" in text
    )
    assert (
        "core count is set to 3 times its base value (24 cores instead of 8 cores) for "
        "1 hour, then returns" in text
    )
    up = _relationship(registry, combination, ["bell"] * 5, directions)
    assert "ramps up to 3 times" in scenario_text(_task(1, [3.0], 12, 48), up)


def test_scenario_text_joins_many_covariates_and_says_when_cut(registry):
    rel = _relationship(
        registry, "additive", ["step"] * 5, ["direct", "inverse", "direct", "direct", "inverse"]
    )
    task = _task(5, [2.0, 0.5, 1.5, 3.0, 0.8], length=60, horizon=24)
    text = scenario_text(task, rel)
    assert text.startswith("From 2024-02-05 14:00, core speed is set to 2 times")
    assert "; and load is set to 0.8 times its base value (40 % instead of 50 %)" in text
    # a Novel event lasts min(l, 2 H) = 48 steps: 4 hours, still longer than the window
    assert "fan is set to 3 times its base value (3 instead of 1) for 4 hours;" in text
    assert "then returns" not in text  # the event outlasts the 2-hour window
    assert "longer than the 2 hours forecast window" in text
    assert text.endswith("the covariates' effects combine additively.")
    assert "falls as core count rises, rises as memory rises, rises as fan rises" in text


def test_scenario_text_anonymised(registry):
    rel = _relationship(registry, "multiplicative", ["step"] * 5, ["direct"] * 5)
    task = _task(1, [4.0], length=12, horizon=24)
    text = scenario_text(
        task, rel, names={"core speed": "<covariate_1>"}, units=False, relations=False
    )
    assert text == (
        "From 2024-02-05 14:00, <covariate_1> is set to 4 times its base value (8 instead of "
        "2) for 1 hour, then returns."
    )


def test_scenario_text_of_every_corpus_task_is_stable(described, corpus_path):
    texts = {t.task_id: scenario_text(t, r) for t, r, _, _ in described}
    with Corpus(corpus_path) as corpus:
        registry, _ = corpus_registry(corpus)
        for task_id in list(texts)[::30]:
            task = corpus[task_id]
            assert scenario_text(task, registry.get(task.simulator, task.target)) == texts[task_id]
    shapes = {s for t, r, _, _ in described for s in t.recipe["shapes"]}
    assert shapes == {"step", "bell"}
    assert all(text.startswith("From ") and text.endswith(".") for text in texts.values())
    for task, relationship, _, _ in described[::40]:  # every covariate named, with its unit
        for info, factor in zip(
            relationship.covariates[: task.k], task.recipe["future_factors"], strict=True
        ):
            assert info.name in texts[task.task_id]
            assert (
                f"({number_text(info.base_value * factor)} {info.unit} instead of"
                in (texts[task.task_id])
            )


def test_a_restraint_task_has_no_future_event_and_says_nothing_changes(tmp_path):
    """``--futures replay,novel,restraint``: the Restraint task's description lists only the
    history events, with a zero effect; its sentence says no covariate changes."""
    from whatif_bench.generator import GenerationConfig, generate
    from whatif_bench.simulators import shipped_baselines_path

    path = generate(
        GenerationConfig(
            baselines=str(shipped_baselines_path()),
            out=str(tmp_path / "r.h5"),
            targets=("epanet/pressure_10",),
            jobs=1,
            futures=("replay", "novel", "restraint"),
        ),
        progress=False,
    )
    with Corpus(path) as corpus:
        registry, _ = corpus_registry(corpus)
        pair = corpus.task_ids()[0].rsplit("/", 1)[0]
        task = corpus[f"{pair}/restraint"]
        relationship = registry.get(task.simulator, task.target)
        described = Describer(corpus).describe(task)
    assert [e["kind"] for e in described["events"]] == ["history"] * len(
        task.recipe["event_starts"]
    )
    assert described["effect"]["total"] == 0.0
    assert set(described["effect"]["contributions"].values()) == {0.0}
    text = scenario_text(task, relationship)
    assert "no covariate changes" in text and "still under way" not in text
    for info in relationship.covariates[: task.k]:
        assert f"{info.name} at {number_text(info.base_value)} {info.unit}" in text


# ---- whatif show --describe ---------------------------------------------------------------
def test_show_describe_prints_the_description_and_the_text(described, corpus_path):
    task, relationship, future, description = described[len(described) // 2]
    shown = run_cli("show", task.task_id, "--corpus", str(corpus_path), "--describe")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout) == description
    text = run_cli("show", task.task_id, "--corpus", str(corpus_path), "--scenario")
    assert text.returncode == 0, text.stderr
    assert text.stdout == scenario_text(task, relationship) + "\n"
    plain = run_cli("show", task.task_id, "--corpus", str(corpus_path))
    assert plain.stdout.splitlines()[0] == task.task_id  # the usual summary, unchanged
    assert "schema" not in plain.stdout
    first = run_cli("show", "--describe", task.task_id, "--corpus", str(corpus_path))
    assert first.returncode == 0 and json.loads(first.stdout) == json.loads(shown.stdout)
    both = run_cli("show", task.task_id, "--corpus", str(corpus_path), "--describe", "--scenario")
    assert both.returncode != 0 and "not allowed with argument" in both.stderr


def test_describer_uses_the_corpus_float64_baseline(described, corpus_path):
    task, relationship, future, description = described[3]
    with Corpus(corpus_path) as corpus:
        describer = Describer(corpus)
        assert describer.describe(corpus[task.task_id]) == description
        assert json.loads(describer.json(corpus[task.task_id])) == description
        assert describer.text(corpus[task.task_id]) == scenario_text(task, relationship)


def test_the_documented_example_is_what_the_code_gives(corpus_path):
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[1] / "docs" / "CORPUS_FORMAT.md").read_text()
    section = doc[doc.index("**Worked example**") :]
    block = section[section.index("```json\n") + 8 : section.index("\n```\n")]
    quoted = section[section.index("\n> ") :].split("\n\n")[0]
    sentence = " ".join(line[2:] for line in quoted.strip().splitlines())
    example = json.loads(block)
    with Corpus(corpus_path) as corpus:
        describer = Describer(corpus)
        task = corpus[example["task_id"]]
        assert describer.describe(task) == example
        assert describer.text(task) == sentence
