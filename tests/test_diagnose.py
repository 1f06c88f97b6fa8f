"""``whatif diagnose`` and ``whatif relationships diagnose`` (docs/DIAGNOSTICS.md).

The diagnostics of a small real corpus equal hand computations: from the file's own recorded
statistics and recipes, with every pair rebuilt independently of the generator (the plain-numpy
shape and relationship twins instead of the jitted kernels). The spec path draws the very pairs
``generate`` draws; bad input is one clear error and writes nothing; the CLI round-trips.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
from pathlib import Path

import h5py
import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import run_cli, small_corpus
from whatif_bench.generator import Corpus
from whatif_bench.generator.diagnose import (
    check_out_folder,
    diagnose_corpus,
    diagnose_relationships,
)
from whatif_bench.generator.diagnostics import quantile
from whatif_bench.relationships.shapes import factor_trajectory
from whatif_bench.simulators import read_baselines, shipped_baselines_path, write_baselines

# a power draw that sits at 0 most of the time and loses pairs to every kind of event; a
# clipped on/off indicator; a target that keeps most of its pairs. Their flags are not asserted: the
# tests check that each flag follows the rule, whatever the registry's numbers.
TARGETS = ("gridlabd/hvac_power", "gridlabd/is_AUX_on", "epanet/demand_9")  # registry order
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def corpus_path(tmp_path_factory):
    return small_corpus(tmp_path_factory.mktemp("diagnose"), TARGETS)


@pytest.fixture(scope="module")
def report(corpus_path):
    return diagnose_corpus(corpus_path, progress=False)


@pytest.fixture(scope="module")
def report_folder(report, tmp_path_factory):
    """``report`` written to a folder once for the module (its plots take about 2 s; read
    only)."""
    from whatif_bench.generator.diagnose import write_folder

    return write_folder(report, tmp_path_factory.mktemp("report") / "one")


def clean_failure(result, message, code=1):
    assert result.returncode == code, (result.returncode, result.stderr)
    assert message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and "unexpected" not in result.stderr, result.stderr


# ---- hand computations ----------------------------------------------------------------
def _stat(actual, other, baseline) -> float:
    """mean |actual - other| / mean |baseline|; 0 for a zero baseline (no relative change)."""
    change, level = np.mean(np.abs(actual - other)), np.mean(np.abs(baseline))
    return float(change / level) if level else 0.0


def _trajectories(relationship, k, n_steps, starts, length, factors) -> np.ndarray:
    """(K, n) factors of events of ``length`` at ``starts``, from the plain-numpy shapes."""
    return np.stack(
        [
            factor_trajectory(
                n_steps,
                np.asarray(starts),
                np.full(len(starts), length),
                np.asarray(factors)[:, c],
                relationship.covariates[c].shape,
            )
            for c in range(k)
        ]
    )


def _by_hand(corpus, relationship, row, event_ratios) -> dict:
    """One pair's quantities, rebuilt without the generator's code."""
    k, context, horizon = int(row["k"]), int(row["context"]), int(row["prediction"])
    length, start = int(row["event_length"]), int(row["window_start"])
    recipe = corpus.recipe(row)
    window = corpus.baseline(row["simulator"], row["target"])[start : start + context + horizon]
    past, ahead = window[:context], window[context:]
    history = relationship.evaluate_reference(
        past, _trajectories(relationship, k, context, recipe.layout.starts, length, recipe.factors)
    )
    padded = np.zeros(max(length, horizon))
    padded[:horizon] = ahead

    def future(factors, event_length=length):
        matrix = _trajectories(
            relationship, k, padded.size, [0], event_length, np.asarray([factors])
        )
        return relationship.evaluate_reference(padded, matrix)[:horizon]

    span = min(length, horizon)
    # a Novel event lasts at most two prediction windows (docs/METHOD.md, section 5)
    replay, novel = (
        future(recipe.replay_factors),
        future(recipe.novel_factors, min(length, 2 * horizon)),
    )
    steps = np.concatenate([np.arange(s, s + length) for s in recipe.layout.starts])
    # the rebuilt pair reproduces the file's own 10 % statistics
    for s, stored in zip(recipe.layout.starts, event_ratios, strict=True):
        mine = _stat(history[s : s + length], past[s : s + length], past[s : s + length])
        assert mine == pytest.approx(stored, rel=1e-9, abs=1e-12)
    assert _stat(novel[:span], ahead[:span], ahead[:span]) == pytest.approx(
        row["novel_ratio"], rel=1e-9, abs=1e-12
    )
    margin = _stat(novel[:span], ahead[:span], ahead[:span])
    for factors in recipe.factors:
        margin = min(margin, _stat(novel[:span], future(factors)[:span], ahead[:span]))
    lo, hi = relationship.window
    clipped = math.isfinite(lo)
    return {
        "margin": margin,
        "amplification": _divide(row["novel_ratio"], max(event_ratios)),
        "coverage": span / horizon,
        "steps": steps.size + 2 * span,
        "zero": int(np.sum(past[steps] == 0)) + 2 * int(np.sum(ahead[:span] == 0)),
        "bound": sum(
            int(np.sum((values == lo) | (values == hi)))
            for values in (history[steps], replay[:span], novel[:span])
        )
        if clipped
        else 0,
        "replay_vs_novel": _stat(novel[:span], replay[:span], ahead[:span]),
    }


def _divide(a: float, b: float) -> float:
    """a / b with inf / inf and 0 / 0 undefined (NaN), x / 0 infinite, x / inf zero."""
    if (math.isinf(a) and math.isinf(b)) or (a == 0 and b == 0):
        return math.nan
    if b == 0:
        return math.inf
    return a / b


def _median(values) -> float:
    """The median of the values that are not NaN (inf counts as larger than any number)."""
    values = np.asarray(values, dtype=np.float64)
    return float(np.median(values[~np.isnan(values)]))


@pytest.mark.slow  # about 2 s
def test_diagnostics_equal_hand_computations(corpus_path, report, registry):
    with h5py.File(corpus_path, "r") as h5:
        ratios = h5["events/ratio"][()]
    with Corpus(corpus_path) as corpus:
        pairs = corpus.pairs
        assert [f"{t['simulator']}/{t['target']}" for t in report.targets] == list(TARGETS)
        for summary in report.targets:
            relationship = registry.get(summary["simulator"], summary["target"])
            mine = pairs[pairs["target"] == summary["target"]].to_dict("records")
            events = [
                ratios[int(r["event_offset"]) : int(r["event_offset"]) + int(r["n_events"])]
                for r in mine
            ]
            hand = [_by_hand(corpus, relationship, r, e) for r, e in zip(mine, events, strict=True)]
            kept = [i for i, r in enumerate(mine) if r["kept"]]
            assert summary["pairs"] == len(mine) == 200
            assert summary["kept"] == len(kept)
            assert summary["pass_rate"] == pytest.approx(len(kept) / 200)
            for reason in ("history", "replay", "novel"):
                assert summary["dropped"][reason] == sum(r["drop_reason"] == reason for r in mine)
            assert summary["history_effect"]["p50"] == pytest.approx(
                _median(np.concatenate(events))
            )
            every = np.concatenate(events)
            if np.all(np.isfinite(every)):  # numpy's quantile cannot interpolate next to inf
                assert summary["history_effect"]["p90"] == pytest.approx(
                    float(np.quantile(every, 0.9))
                )
            for name, column in (
                ("replay_effect", "replay_ratio"),
                ("novel_effect", "novel_ratio"),
            ):
                assert summary[name]["p50"] == pytest.approx(_median([r[column] for r in mine]))
            assert summary["novel_amplification"]["p50"] == pytest.approx(
                _median([hand[i]["amplification"] for i in kept])
            )
            margins = np.array([hand[i]["margin"] for i in kept])
            assert summary["novel_margin"]["p50"] == pytest.approx(_median(margins))
            assert summary["margin_below_threshold"] == pytest.approx(np.mean(margins < 0.10))
            assert summary["flagged"] == bool(_median(margins) < 0.10)
            assert summary["coverage"] == pytest.approx(np.mean([h["coverage"] for h in hand]))
            steps = sum(h["steps"] for h in hand)
            assert summary["zero_baseline_share"] == pytest.approx(
                sum(h["zero"] for h in hand) / steps
            )
            if relationship.is_state():
                assert summary["at_bound_share"] == pytest.approx(
                    sum(h["bound"] for h in hand) / steps
                )
            else:
                assert summary["at_bound_share"] is None
            rows = report.pairs[report.pairs["target"] == summary["target"]]
            assert rows["novel_margin"].to_numpy() == pytest.approx([h["margin"] for h in hand])
            # a rule for every pair: the nearest history response is never farther from the
            # Novel future than "no event" (the Novel effect) or the Replay future is
            assert np.all(rows["novel_margin"] <= rows["novel_effect"] * (1 + 1e-12))
            assert np.all(
                rows["novel_margin"].to_numpy()
                <= np.array([h["replay_vs_novel"] for h in hand]) * (1 + 1e-9) + 1e-12
            )


def test_the_corpus_exercises_every_diagnostic(report):
    """The chosen targets cover what the hand computation must check: clipped steps, zero
    baselines, drops by history and Replay events, kept and dropped pairs."""
    by_name = {f"{t['simulator']}/{t['target']}": t for t in report.targets}
    assert by_name["gridlabd/is_AUX_on"]["at_bound_share"] > 0
    assert by_name["gridlabd/hvac_power"]["zero_baseline_share"] > 0
    assert all(by_name["gridlabd/hvac_power"]["dropped"][r] > 0 for r in ("history", "replay"))
    assert 0 < report.pairs["kept"].sum() < len(report.pairs)


def test_the_report_measures_every_imprint_on_the_corpus_baselines(corpus_path, report, registry):
    from whatif_bench.generator.diagnose import format_table
    from whatif_bench.relationships.imprints import measure, series_windows

    with Corpus(corpus_path) as corpus:
        expected = [
            i.as_dict()
            for name in TARGETS
            for i in measure(
                registry.get(*name.split("/")),
                series_windows(corpus.baseline(*name.split("/")), 16),
            )
        ]
    assert report.imprints == expected
    weak = report.weak_imprints()
    assert weak == [i for i in expected if i["measurable"] is False]
    text = format_table(report)
    assert f"imprints: {len(weak)} of 30 (secondary covariate, K) below" in text
    for name in {f"{i['simulator']}/{i['target']}" for i in weak}:
        assert f"\n{name}: " in text


def test_a_spec_diagnosis_draws_the_pairs_generate_draws(report, registry):
    relationships = [registry.get(*name.split("/")) for name in TARGETS]
    drawn = diagnose_relationships(relationships, seed=0, progress=False)
    assert drawn.targets == report.targets
    pd.testing.assert_frame_equal(drawn.pairs, report.pairs)
    for key, effects in report.history_effects.items():
        np.testing.assert_array_equal(drawn.history_effects[key], effects)


def test_a_sample_is_a_seeded_subset_of_the_same_pairs(report, registry):
    relationships = [registry.get(*name.split("/")) for name in TARGETS]
    sampled = diagnose_relationships(relationships, sample=0.1, seed=0, progress=False)
    assert [t["pairs"] for t in sampled.targets] == [20, 20, 20]
    same = report.pairs.set_index("pair_id").loc[sampled.pairs["pair_id"]].reset_index()
    pd.testing.assert_frame_equal(sampled.pairs, same[sampled.pairs.columns])
    alone = diagnose_relationships(relationships[1:2], sample=0.1, seed=0, progress=False)
    assert alone.pairs["pair_id"].tolist() == sampled.pairs["pair_id"].tolist()[20:40]
    other = diagnose_relationships(relationships[1:2], sample=0.1, seed=1, progress=False)
    assert other.pairs["pair_id"].tolist() != alone.pairs["pair_id"].tolist()


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.floats(0, 1e6), min_size=1, max_size=30),
    st.integers(0, 5),
    st.sampled_from([0.1, 0.5, 0.9]),
)
def test_quantile_treats_inf_as_larger_than_any_number(finite, n_inf, q):
    values = np.array(finite + [math.inf] * n_inf)
    got = quantile(np.append(values, math.nan), q)  # NaN is left out
    if n_inf == 0:
        assert got == pytest.approx(float(np.quantile(values, q)))
        return
    top = max(finite)
    stand_ins = [np.quantile(np.where(np.isinf(values), top + m, values), q) for m in (1, 1e3)]
    if math.isinf(got):  # the quantile reaches into the infinite values: it grows with them
        assert stand_ins[1] > stand_ins[0]
    else:  # it never touches them: any stand-in above the largest number gives it
        assert got == pytest.approx(stand_ins[0]) and got == pytest.approx(stand_ins[1])


# ---- the command line ---------------------------------------------------------------------
@pytest.mark.slow  # about 2 s
def test_cli_round_trip(corpus_path, report, tmp_path):
    out = tmp_path / "diag"
    result = run_cli("diagnose", str(corpus_path), "--out", str(out), "--json")
    assert result.returncode == 0, result.stderr
    printed = json.loads(result.stdout)
    assert printed == json.loads((out / "diagnostics.json").read_text())
    assert printed["targets"] == json.loads(json.dumps(report.as_dict()))["targets"]
    table = pd.read_csv(out / "diagnostics.csv")
    assert table["target"].tolist() == [name.split("/")[1] for name in TARGETS]
    assert table["novel_margin_p50"].to_numpy() == pytest.approx(
        [t["novel_margin"]["p50"] for t in report.targets]
    )
    assert len(pd.read_csv(out / "pairs.csv")) == 600
    imprints = pd.read_csv(out / "imprints.csv")
    assert len(imprints) == len(report.imprints) == 30  # 3 targets, K = 2..5: 10 each
    assert imprints["reach"].to_numpy() == pytest.approx([i["reach"] for i in report.imprints])
    assert printed["imprints"] == json.loads(json.dumps(report.as_dict()))["imprints"]
    for name in ("gridlabd", "epanet", "overview"):
        png = (out / "plots" / f"{name}.png").read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    assert "diagnosing" in result.stderr  # the progress bar; stdout held only the JSON

    # a second run replaces the earlier report, leaving nothing else behind
    text = run_cli("diagnose", str(corpus_path), "--target", "is_AUX_on", "--out", str(out))
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0].split()[:3] == ["target", "pairs", "pass"]
    flag = "FLAG" if report.targets[1]["flagged"] else ""
    assert lines[1].startswith("gridlabd/is_AUX_on") and lines[1].endswith(flag)
    assert pd.read_csv(out / "diagnostics.csv")["target"].tolist() == ["is_AUX_on"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".diag.lock", "diag"]


@pytest.mark.slow  # about 1 s
def test_relationships_diagnose_prints_the_same_table(corpus_path, tmp_path):
    spec = run_cli("relationships", "diagnose", "--target", *TARGETS)
    corpus = run_cli("diagnose", str(corpus_path))
    assert spec.returncode == 0 and corpus.returncode == 0, spec.stderr + corpus.stderr
    assert spec.stdout == corpus.stdout


@pytest.mark.slow  # about 3 s
def test_a_new_target_is_diagnosed_from_its_spec_before_generating(tmp_path):
    """The author's path: a spec adding a target (a saturating user form) to SUMO, on a
    baselines file that records its series, diagnosed without generating anything."""
    sumo = read_baselines(shipped_baselines_path())["sumo"]
    series = sumo.series["speed_loop_e_1_near"].copy()
    extra = dataclasses.replace(
        sumo,
        series={**sumo.series, "speed_loop_e_0_far": series},
        units={**sumo.units, "speed_loop_e_0_far": sumo.units["speed_loop_e_1_near"]},
    )
    baselines = write_baselines(tmp_path / "b.h5", [extra])
    result = run_cli(
        "relationships",
        "diagnose",
        str(ROOT / "examples/extra_sumo_target.toml"),
        "--forms",
        str(ROOT / "examples/custom_forms.py"),
        "--baselines",
        str(baselines),
        "--sample",
        "0.1",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    printed = json.loads(result.stdout)
    (target,) = printed["targets"]
    assert (target["simulator"], target["target"], target["form"]) == (
        "sumo",
        "speed_loop_e_0_far",
        "logistic_saturation",
    )
    assert target["pairs"] == 20 and printed["source"]["kind"] == "spec"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".b.h5.lock", "b.h5"]


@pytest.fixture
def other_registry(tmp_path, corpus_path):
    path = tmp_path / "other.h5"
    shutil.copy(corpus_path, path)
    with h5py.File(path, "r+") as h5:
        h5.attrs["registry_hash"] = "0" * 64
    return path


@pytest.fixture
def bad_spec(tmp_path):
    path = tmp_path / "bad.toml"
    text = (ROOT / "examples/extra_sumo_target.toml").read_text()
    path.write_text(text.replace('form = "logistic_saturation"', 'form = "no_such_form"'))
    return path


BAD_INPUT = [
    # (arguments with {corpus}, {missing}, {file}, {folder}, {other}, {spec}, {sumo_only};
    # message; exit code)
    (["diagnose", "{missing}"], "no such corpus file", 1),
    (["diagnose", "{corpus}", "--target", "nope"], "has no target 'nope'", 1),
    (
        ["diagnose", "{corpus}", "--target", "is_AUX_on", "--out", "{file}"],
        "exists and is not a folder",
        1,
    ),
    (
        ["diagnose", "{corpus}", "--out", "{folder}"],
        "not empty and not a folder whatif diagnose wrote (no .whatif-output.json record)",
        1,
    ),
    (["diagnose", "{other}"], "built with another relationship registry", 1),
    (["diagnose", "{corpus}", "--jobs", "0"], "must be a positive integer", 2),
    (
        [
            "relationships",
            "diagnose",
            "--target",
            "opendc/cpu_demand_host-0",
            "--baselines",
            "{sumo_only}",
        ],
        "no baselines of simulator 'opendc'",
        1,
    ),
    (
        ["relationships", "diagnose", "--target", "nope"],
        "the shipped registry has no target 'nope'",
        1,
    ),
    (
        ["relationships", "diagnose", "{spec}"],
        "field 'form': unknown primary form 'no_such_form'",
        1,
    ),
    (
        [
            "relationships",
            "diagnose",
            str(ROOT / "examples/extra_sumo_target.toml"),
            "--forms",
            str(ROOT / "examples/custom_forms.py"),
        ],
        "no baseline series sumo/speed_loop_e_0_far",
        1,
    ),
    (["relationships", "diagnose", "--sample", "0"], "must be a fraction in (0, 1]", 2),
    (["relationships", "diagnose", "--sample", "1.5"], "must be a fraction in (0, 1]", 2),
    (["relationships", "diagnose", "--seed", "-1"], "must be between 0 and 2**63 - 1", 2),
]


@pytest.mark.parametrize(("arguments", "message", "code"), BAD_INPUT)
@pytest.mark.one_quick  # about 2 s over all its cases
def test_bad_input_is_one_error_and_writes_nothing(
    tmp_path, corpus_path, other_registry, bad_spec, arguments, message, code
):
    file = tmp_path / "a-file"
    file.write_text("keep")
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "notes.txt").write_text("keep")
    sumo_only = tmp_path / "sumo-only.h5"
    write_baselines(sumo_only, [read_baselines(shipped_baselines_path())["sumo"]])
    names = {
        "sumo_only": str(sumo_only),
        "corpus": str(corpus_path),
        "missing": str(tmp_path / "missing.h5"),
        "file": str(file),
        "folder": str(folder),
        "other": str(other_registry),
        "spec": str(bad_spec),
    }
    filled = [a.format(**names) for a in arguments]
    out = tmp_path / "out"
    if "--out" not in filled:
        filled += ["--out", str(out)]
    before = sorted(p.name for p in tmp_path.iterdir())
    clean_failure(run_cli(*filled), message, code)
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert file.read_text() == "keep" and sorted(p.name for p in folder.iterdir()) == ["notes.txt"]


def test_an_earlier_report_is_replaced_but_nothing_else(tmp_path, report_folder):
    from whatif_bench.outputs import OutputError

    out = report_folder
    assert check_out_folder(out) == out  # an earlier report may be replaced
    (tmp_path / "empty").mkdir()
    assert check_out_folder(tmp_path / "empty") == tmp_path / "empty"
    (tmp_path / "link").symlink_to(out)
    with pytest.raises(OutputError, match="is a symbolic link"):
        check_out_folder(tmp_path / "link")
    with pytest.raises(OutputError, match="cannot write to the root folder"):
        check_out_folder("/")


@pytest.mark.slow  # about 3 s
def test_the_report_folder_is_the_same_byte_for_byte_whatever_the_workers(
    corpus_path, report_folder, tmp_path
):
    from whatif_bench.generator.diagnose import write_folder

    one = report_folder  # diagnosed in one process
    two = write_folder(diagnose_corpus(corpus_path, jobs=2, progress=False), tmp_path / "two")
    files = sorted(p.relative_to(one).as_posix() for p in one.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(two).as_posix() for p in two.rglob("*") if p.is_file())
    assert len(files) == 8  # 3 CSVs, the JSON, a plot per simulator (2), the overview, the record
    for name in files:
        assert (one / name).read_bytes() == (two / name).read_bytes(), name
