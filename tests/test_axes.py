"""History layouts follow docs/METHOD.md (section 5) for every (C, l, E), and every window fits its baseline."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from whatif_bench.corpus import axes
from whatif_bench.relationships import load_registry
from whatif_bench.simulators import read_baselines, shipped_baselines_path

C4 = {name: spec.c4 for name, spec in load_registry().simulators.items()}


@settings(max_examples=300, deadline=None)
@given(
    context=st.integers(600, 9000),
    prediction=st.integers(16, 900),
    event_length=st.sampled_from(axes.EVENT_LENGTHS),
    setting=st.sampled_from(axes.E_SETTINGS),
)
def test_layout_rules_hold_for_any_context(context, prediction, event_length, setting):
    layout = axes.layout(context, prediction, event_length, setting)
    starts = layout.starts
    assert layout.context >= context
    assert starts[0] >= 0.40 * layout.context  # observational prefix
    for first, second in zip(starts, starts[1:], strict=False):
        assert second - (first + event_length) >= axes.MIN_GAP  # gap after each event
    last_end = starts[-1] + event_length
    assert (
        layout.context - last_end >= axes.MIN_GAP
    )  # the last event is followed by 32 free steps too
    assert layout.context - last_end >= 0.02 * layout.context  # end buffer
    n = len(starts)
    assert (n == 1) if setting == "Efew" else (2 <= n <= 64)
    if layout.context > context:  # extended only when needed, and minimally
        assert axes.usable_length(layout.context - 1) < n * (event_length + axes.MIN_GAP)


def test_most_events_fill_the_context():
    layout = axes.layout(4096, 512, 32, "Emax")
    # E_max counts a gap between events: E l + (E - 1) 32 <= floor(0.58 C)
    assert len(layout.starts) == (axes.usable_length(4096) + 32) // (32 + 32)
    assert len(axes.layout(8000, 864, 32, "Emax").starts) == 64  # capped


@settings(max_examples=300, deadline=None)
@given(context=st.integers(1, 20000))
def test_the_usable_part_is_58_percent_rounded_down_and_the_shares_add_up(context):
    usable = axes.usable_length(context)
    assert 100 * usable <= 58 * context < 100 * (usable + 1)  # exact: no float rounding
    assert 100 * axes.prefix_length(context) >= 40 * context
    assert 100 * axes.buffer_length(context) > 2 * context - 100
    total = axes.prefix_length(context) + usable + axes.buffer_length(context)
    assert total == context


@pytest.mark.parametrize(
    ("lengths", "events", "extended"),
    [
        ((1024, 128), 2, 1876),  # the paper: "1,876 at C1"
        ((7488, 864), 8, 7504),  # the paper: "7,504 at C4 on OpenDC"
    ],
)
def test_the_contexts_the_paper_reports_for_512_step_events(lengths, events, extended):
    layout = axes.layout(*lengths, 512, "Emax")
    assert len(layout.starts) == events
    assert layout.context == extended


def test_opendcs_own_c4_grows_to_the_papers_7504():
    """The spec header's C4 (not only the literal pair above) is the one the paper extends."""
    assert axes.layout(*C4["opendc"], 512, "Emax").context == 7504


def test_future_event_is_cut_by_the_window_end():
    assert axes.layout(1024, 128, 512, "Efew").future_length == 128
    assert axes.layout(1024, 128, 64, "Efew").future_length == 64


@pytest.mark.parametrize(
    ("prediction", "event_length", "novel"),
    [(128, 64, 64), (128, 128, 128), (128, 256, 256), (128, 512, 256), (256, 512, 512)],
)
def test_a_novel_event_lasts_at_most_two_windows_and_replay_keeps_its_length(
    prediction, event_length, novel
):
    layout = axes.layout(4096, prediction, event_length, "Efew")
    assert layout.future_event_length("novel") == novel
    assert layout.future_event_length("replay") == event_length


@pytest.mark.parametrize("simulator", ["epanet", "gridlabd", "sumo"])
def test_every_window_fits_the_shipped_baseline(simulator):
    length = read_baselines(shipped_baselines_path())[simulator].n_steps
    for context, prediction in axes.contexts(C4[simulator]).values():
        for event_length in axes.EVENT_LENGTHS:
            for setting in axes.E_SETTINGS:
                assert axes.layout(context, prediction, event_length, setting).window <= length


def test_c4_lengths_come_from_the_spec_headers():
    assert set(C4) == set(axes.SHIPPED_SIMULATORS)
    for c4 in C4.values():
        context, prediction = axes.contexts(c4)["C4"]
        assert (context, prediction) == c4
        assert 7000 <= context <= 8000 and 512 <= prediction <= 864


def test_unknown_settings_are_rejected():
    with pytest.raises(axes.AxisError, match="unknown E setting"):
        axes.event_count(1024, 32, "Esome")


def test_the_contexts_grow_exactly_where_the_method_says():
    grown = {}
    for simulator, c4 in C4.items():
        for label, (context, prediction) in axes.contexts(c4).items():
            for event_length in axes.EVENT_LENGTHS:
                layout = axes.layout(context, prediction, event_length, "Emax")
                if layout.context != context:
                    grown[(simulator, label, event_length)] = (len(layout.starts), layout.context)
    shared = {("C1", 512): (2, 1876), ("C2", 32): (19, 2097), ("C3", 64): (25, 4138)}
    shared[("C3", 128)] = (15, 4138)
    expected = {(s, c, ell): v for s in C4 for (c, ell), v in shared.items()}
    expected[("opendc", "C4", 512)] = expected[("sumo", "C4", 512)] = (8, 7504)
    assert grown == expected
