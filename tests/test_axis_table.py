"""One axis table: a value or a name changed in ``corpus.axes.AXES`` reaches every consumer
(the sweep, the corpus file and ``Corpus.filter``, ``Task``, ``whatif info``, the subset strata,
the evaluation's slices and plot labels)."""

from __future__ import annotations

import dataclasses
import json

import pandas as pd
import pytest

from tests.conftest import small_corpus
from whatif_bench.corpus import axes, summary
from whatif_bench.corpus.reader import Corpus, CorpusError
from whatif_bench.corpus.recipe import PairKey
from whatif_bench.corpus.task import Task
from whatif_bench.evaluation import report, runner
from whatif_bench.generator import sweep

TARGET = "epanet/pressure_10"
NEW_LENGTH = 16  # an event length the shipped table lacks; the layout rules hold for it too


def patched(axis_name: str, /, **changes) -> tuple[axes.Axis, ...]:
    """The shipped table with one axis changed."""
    return tuple(dataclasses.replace(a, **changes) if a.name == axis_name else a for a in axes.AXES)


@pytest.fixture(scope="module")
def longer_table(tmp_path_factory):
    """A one-target corpus, and its evaluation, generated with an extra event length."""
    values = (NEW_LENGTH, *axes.axis("ell").values)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(axes, "AXES", patched("ell", values=values))
        folder = tmp_path_factory.mktemp("axis_table")
        path = small_corpus(folder, (TARGET,))
        result = runner.evaluate(path, ["naive", "linear"], folder / "eval", progress=False)
    return values, Corpus(path), result  # the shipped table again for the tests


def test_the_sweep_reads_the_table(registry, monkeypatch):
    relationship = next(r for r in registry if f"{r.simulator}/{r.target}" == TARGET)
    shipped = [key for key, _, _ in sweep.pair_keys(relationship)]
    monkeypatch.setattr(axes, "AXES", patched("ell", values=(NEW_LENGTH, 32, 64, 128, 256, 512)))
    keys = [key for key, _, _ in sweep.pair_keys(relationship)]
    assert len(shipped) == 5 * 4 * 5 * 2 and len(keys) == 5 * 4 * 6 * 2
    assert {k.event_length for k in keys} == {NEW_LENGTH, 32, 64, 128, 256, 512}
    assert [k for k in keys if k.event_length != NEW_LENGTH] == shipped  # order kept
    monkeypatch.setattr(axes, "AXES", patched("K", values=(1, 3)))
    assert sorted({key.k for key, _, _ in sweep.pair_keys(relationship)}) == [1, 3]


@pytest.mark.slow  # about 3 s
def test_a_new_value_reaches_the_corpus_and_its_tasks(longer_table):
    values, corpus, _ = longer_table
    assert sorted(corpus.pairs["event_length"].unique()) == sorted(values)
    assert json.loads(corpus.attrs["axes"])["event_lengths"] == list(values)
    view = corpus.filter(ell=NEW_LENGTH, future="novel")
    assert len(view) > 0 and set(view.pairs["event_length"]) == {NEW_LENGTH}
    task = corpus[view.task_ids()[0]]
    assert task.event_length == NEW_LENGTH and task.recipe["event_length"] == NEW_LENGTH
    by_length = summary.summarise(corpus)["by_axis"]["ell"]
    assert list(by_length) == [str(v) for v in sorted(values)]


@pytest.mark.slow  # its fixture generates and evaluates a corpus: about 2 s
def test_a_new_value_reaches_the_strata_and_the_reports(longer_table):
    values, corpus, result = longer_table
    frame = corpus.tasks_frame()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(axes, "AXES", patched("ell", values=values))
        subset = runner.select_tasks(frame, 0.01)
    # one target: every stratum holds one task, so every (K, C, l, E, future) is kept
    assert len(subset) == len(frame)
    assert set(subset["event_length"]) == set(values)
    with pytest.MonkeyPatch.context() as patch:  # without the l axis, one task per (K, C, E)
        patch.setattr(axes, "AXES", tuple(a for a in axes.AXES if a.name != "ell"))
        coarse = runner.select_tasks(frame, 0.01)
    assert len(coarse) == frame.groupby(["future", "k", "c_label", "e_setting"]).ngroups
    assert len(coarse) < len(frame)
    sliced = pd.read_csv(result.out / "slices" / "ell.csv")
    assert sorted(sliced["event_length"].unique()) == sorted(values)
    assert NEW_LENGTH in set(result.per_task["event_length"])


def test_names_order_and_labels_come_from_the_table(monkeypatch, tmp_path):
    shipped = report.slices()
    assert list(shipped) == ["simulator", "future", "K", "E", "ell", "C"]
    assert runner.STRATA == axes.strata()
    monkeypatch.setattr(axes, "AXES", patched("ell", name="L", label="L: event span [steps]"))
    assert list(report.slices()) == ["simulator", "future", "K", "E", "L", "C"]
    assert report.slice_labels()["L"] == "L: event span [steps]"
    assert summary.pair_axes()["L"] == "event_length"
    monkeypatch.setattr(axes, "AXES", patched("C", report_rank=-1))
    assert list(report.slices())[0] == "C"


@pytest.mark.slow  # the fixture's corpus and evaluation: about 2 s
def test_filter_accepts_the_table_names_only(longer_table, monkeypatch):
    _, corpus, _ = longer_table
    with pytest.raises(CorpusError, match="unknown axis"):
        corpus.filter(L=128)
    monkeypatch.setattr(axes, "AXES", patched("ell", name="L"))
    assert set(corpus.filter(L=128).pairs["event_length"]) == {128}
    with pytest.raises(CorpusError, match=r"unknown axis \['ell'\]"):
        corpus.filter(ell=128)


def test_pair_key_and_task_hold_every_axis():
    """A new axis needs a field of ``PairKey`` and ``Task`` named by its column."""
    key_fields = [f.name for f in dataclasses.fields(PairKey)]
    assert set(key_fields) == {"target", *axes.pair_columns()}
    assert set(axes.strata()) <= {f.name for f in dataclasses.fields(Task)}
    key = PairKey.from_values(
        "t", {"simulator": "sumo", "k": 2, "c_label": "C1", "event_length": 64, "e_setting": "Emax"}
    )
    assert key.pair_id == "sumo/t/K2-C1-L64-Emax"
    assert list(key.axis_values()) == axes.pair_columns()


def test_the_stream_weights_the_table_values():
    from whatif_bench.stream.distribution import CANONICAL, AxisDistribution

    weighted = {a.weights: a.values for a in axes.AXES if a.weights}
    assert CANONICAL == weighted
    defaults = AxisDistribution()
    assert all(tuple(getattr(defaults, name)) == values for name, values in weighted.items())
