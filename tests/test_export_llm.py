"""The llm export: task folders, the answer parser (property tests) and the retry harness."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import random

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.test_generator import make
from whatif_bench.corpus import covariate_units, task_units
from whatif_bench.corpus.describe import Describer
from whatif_bench.evaluation.llm_prompt import (
    FILES,
    forecast_with_retries,
    growing_wait,
    inline_prompt,
    parse_response,
)
from whatif_bench.export.formats import writer
from whatif_bench.export.llm import KEY, TASKS, task_folder_name
from whatif_bench.export.texts import FloatTexts, StampTexts, float_texts, iso_stamps
from whatif_bench.generator import Corpus

TARGET = "sumo/flow_loop_e_0_near"


# ---- answers --------------------------------------------------------------------------------


def answer(pairs, tag="target_1", sep="\n"):
    body = sep.join(f"({stamp}, {value})" for stamp, value in pairs)
    return f"<{tag}>\n{body}\n</{tag}>"


def stamps_of(n, start="2001-03-04T05:00:00", seconds=300):
    return pd.date_range(start, periods=n, freq=pd.Timedelta(seconds=seconds))


FINITE = st.floats(allow_nan=False, allow_infinity=False, width=64)
LENGTHS = st.integers(min_value=1, max_value=40)


@st.composite
def tasks(draw):
    n = draw(LENGTHS)
    seconds = draw(st.sampled_from([1, 60, 300, 900, 3600]))
    start = draw(st.datetimes(min_value=pd.Timestamp("1990-01-01"), max_value=pd.Timestamp("2100")))
    stamps = stamps_of(n, pd.Timestamp(start).floor("s"), seconds)
    values = draw(st.lists(FINITE, min_size=n, max_size=n))
    return stamps, values


@given(tasks())
@settings(max_examples=150, deadline=None)
def test_a_well_formed_answer_round_trips_exactly(task):
    stamps, values = task
    pairs = [(s.isoformat(), repr(v)) for s, v in zip(stamps, values, strict=True)]
    parsed = parse_response(answer(pairs), stamps)
    assert parsed.ok, parsed.reason
    assert parsed.values["<target_1>"].tolist() == values  # exact, -0.0 aside
    assert parsed.array().shape == (1, len(values))


@given(tasks(), st.randoms(use_true_random=False), st.sampled_from(["\n", " ", ", ", "\n\n- "]))
@settings(max_examples=100, deadline=None)
def test_shuffled_pairs_come_back_in_timestamp_order(task, rng, sep):
    stamps, values = task
    pairs = [(s.isoformat(), repr(v)) for s, v in zip(stamps, values, strict=True)]
    rng.shuffle(pairs)
    text = "Sure! Here is my forecast.\n```\n" + answer(pairs, sep=sep) + "\n```\nHope it helps."
    parsed = parse_response(text, stamps)
    assert parsed.ok, parsed.reason
    assert parsed.values["<target_1>"].tolist() == values


def test_tolerates_fences_inside_quotes_and_bare_variable_names():
    stamps = stamps_of(3)
    text = (
        "**Answer**\n<target_1>\n```text\n"
        + "\n".join(f'("{s.isoformat()}", "{i}.5")' for i, s in enumerate(stamps))
        + "\n```\n</target_1>\n"
    )
    parsed = parse_response(text, stamps, variables=("target_1",))
    assert parsed.ok, parsed.reason
    assert parsed.values["target_1"].tolist() == [0.5, 1.5, 2.5]


def test_several_targets_in_header_order():
    stamps = stamps_of(2)
    text = answer([(s.isoformat(), 2) for s in stamps], "target_2") + answer(
        [(s.isoformat(), 1) for s in stamps], "target_1"
    )
    parsed = parse_response(text, stamps, variables=("<target_1>", "<target_2>"))
    assert parsed.ok, parsed.reason
    assert parsed.array().tolist() == [[1, 1], [2, 2]]


def _bad(mutation, pairs, stamps):
    """A broken variant of a well-formed answer."""
    if mutation == "missing":
        return answer(pairs[:-1])
    if mutation == "duplicated":
        return answer(pairs + pairs[:1])
    if mutation == "extra":
        extra = stamps[-1] + (stamps[1] - stamps[0] if len(stamps) > 1 else pd.Timedelta("1h"))
        return answer(pairs + [(extra.isoformat(), 1.0)])
    if mutation == "non-numeric":
        return answer([(pairs[0][0], "about 3")] + pairs[1:])
    if mutation == "nan":
        return answer([(pairs[0][0], "nan")] + pairs[1:])
    if mutation == "inf":
        return answer([(pairs[0][0], "-inf")] + pairs[1:])
    if mutation == "overflow":
        return answer([(pairs[0][0], "1e999")] + pairs[1:])
    if mutation == "no tags":
        return "\n".join(f"({s}, {v})" for s, v in pairs)
    if mutation == "wrong tag":
        return answer(pairs, tag="target_2")
    if mutation == "two blocks":
        return answer(pairs) + answer(pairs)
    if mutation == "bad timestamp":
        return answer([("yesterday", pairs[0][1])] + pairs[1:])
    if mutation == "stray text":
        return answer(pairs).replace("\n</target_1>", "\n... and so on\n</target_1>")
    raise AssertionError(mutation)


MUTATIONS = [
    "missing",
    "duplicated",
    "extra",
    "non-numeric",
    "nan",
    "inf",
    "overflow",
    "no tags",
    "wrong tag",
    "two blocks",
    "bad timestamp",
    "stray text",
]


@given(tasks(), st.sampled_from(MUTATIONS))
@settings(max_examples=200, deadline=None)
def test_broken_answers_fail_with_a_reason(task, mutation):
    stamps, values = task
    pairs = [(s.isoformat(), repr(v)) for s, v in zip(stamps, values, strict=True)]
    parsed = parse_response(_bad(mutation, pairs, stamps), stamps)
    assert not parsed.ok and parsed.values is None
    assert isinstance(parsed.reason, str) and parsed.reason


@given(tasks(), st.data())
@settings(max_examples=150, deadline=None)
def test_truncated_answers_fail_never_raise(task, data):
    stamps, values = task
    text = answer([(s.isoformat(), repr(v)) for s, v in zip(stamps, values, strict=True)])
    cut = data.draw(st.integers(min_value=0, max_value=len(text) - 1))
    parsed = parse_response(text[:cut], stamps)
    assert not parsed.ok and parsed.reason


@given(st.text(max_size=300), st.sampled_from(["<target_1>", "<target_1>\n(", "</target_1>"]))
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_arbitrary_text_never_raises(text, salt):
    parsed = parse_response(salt + text + salt[::-1], stamps_of(3))
    assert isinstance(parsed.ok, bool)
    assert parsed.ok or parsed.reason
    parse_response(text, stamps_of(3))


def test_reasons_name_the_problem():
    stamps = stamps_of(3)
    pairs = [(s.isoformat(), 1.0) for s in stamps]
    assert "missing" in parse_response(answer(pairs[:2]), stamps).reason
    assert "more than once" in parse_response(answer(pairs + pairs[:1]), stamps).reason
    assert "not finite" in parse_response(answer([(pairs[0][0], "NaN")] + pairs[1:]), stamps).reason
    assert "no <target_1> block" in parse_response("no idea", stamps).reason
    assert "never closed" in parse_response(answer(pairs)[:-5], stamps).reason
    assert parse_response(None, stamps).reason.startswith("the answer is a NoneType")


# ---- retries --------------------------------------------------------------------------------


class Model:
    """Fails ``failures`` times (alternating garbage and an exception), then answers."""

    def __init__(self, failures, stamps, value=7.0):
        self.failures, self.stamps, self.value, self.calls = failures, stamps, value, 0

    def __call__(self, prompt):
        self.calls += 1
        if self.calls <= self.failures:
            if self.calls % 2:
                return "I cannot forecast this."
            raise TimeoutError("the API timed out")
        return answer([(s.isoformat(), self.value) for s in self.stamps])


@pytest.mark.parametrize("failures", [0, 1, 4, 9])
def test_retries_until_an_answer_parses(failures):
    stamps, waits = stamps_of(5), []
    model = Model(failures, stamps)
    result = forecast_with_retries(model, "prompt", stamps, 3.0, sleep=waits.append)
    assert not result.imputed and result.attempts == failures + 1 == model.calls
    assert result.point.tolist() == [7.0] * 5 and len(result.reasons) == failures
    assert waits == [growing_wait(n) for n in range(1, failures + 1)]
    if failures >= 2:
        assert "TimeoutError" in result.reasons[1]


def test_never_answering_imputes_the_naive_forecast():
    stamps, waits = stamps_of(4), []
    model = Model(100, stamps)
    result = forecast_with_retries(
        model, "prompt", stamps, 2.5, max_attempts=10, sleep=waits.append
    )
    assert result.imputed and result.attempts == 10 == model.calls
    assert result.values.tolist() == [[2.5] * 4] and len(result.reasons) == 10
    assert (
        len(waits) == 9 and waits == sorted(waits) and waits[0] < waits[-1]
    )  # growing, none after the last


def test_counting_imputed_tasks():
    stamps = stamps_of(2)
    results = [
        forecast_with_retries(
            Model(f, stamps), "p", stamps, 0.0, max_attempts=3, sleep=lambda s: None
        )
        for f in (0, 2, 3, 5)
    ]
    assert sum(r.imputed for r in results) == 2
    assert [r.attempts for r in results] == [1, 3, 3, 3]


def test_growing_wait_is_capped():
    assert [growing_wait(n) for n in range(1, 5)] == [1, 2, 4, 8]
    assert growing_wait(20) == 60


# ---- writing --------------------------------------------------------------------------------


def test_float_texts_are_short_and_exact():
    values = np.array([0.1, -0.0, 1e30, 3.4028235e38, 1.4e-45, 123456.79, -2.5], dtype=np.float32)
    texts = float_texts(values)
    assert texts[0] == "0.1" and texts[1] == "-0.0"
    back = np.array([float(t) for t in texts]).astype(np.float32)
    assert np.array_equal(back, values) and np.array_equal(np.signbit(back), np.signbit(values))
    rng = np.random.default_rng(0)
    many = rng.standard_normal(20_000).astype(np.float32) * np.float32(10.0) ** rng.integers(
        -30, 30, 20_000
    ).astype(np.float32)
    many = many[np.isfinite(many)]
    assert np.array_equal(np.array(float_texts(many), dtype=np.float64).astype(np.float32), many)


def float_texts_reference(values: np.ndarray) -> list[str]:
    """The readable twin of ``float_texts``: each value formatted on its own."""
    texts = []
    for value in np.asarray(values, dtype=np.float32).ravel():
        text = str(value)
        back = np.float32(float(text))
        same = (back == value and np.signbit(back) == np.signbit(value)) or (
            np.isnan(back) and np.isnan(value)
        )
        texts.append(text if same else repr(float(value)))
    return texts


FLOAT32_BITS = st.integers(min_value=0, max_value=2**32 - 1)


@given(
    st.lists(FLOAT32_BITS, max_size=60),
    st.lists(st.sampled_from([0.0, -0.0, 1.0, np.nan, -np.inf, 1e-45]), max_size=20),
)
@settings(max_examples=200, deadline=None)
def test_float_texts_equal_formatting_each_value_alone(bits, repeated):
    # any bit pattern (NaN payloads, subnormals, -0.0 beside 0.0), with repeats: each distinct
    # pattern is formatted once, and the texts are those of formatting every value alone
    values = np.concatenate(
        [np.array(bits, dtype=np.uint32).view(np.float32), np.array(repeated, dtype=np.float32)]
    )
    assert float_texts(values) == float_texts_reference(values)


@given(
    st.lists(
        st.lists(st.one_of(FLOAT32_BITS, st.sampled_from([0, 2**31, 0x3F800000])), max_size=40),
        min_size=1,
        max_size=6,
    )
)
@settings(max_examples=150, deadline=None)
def test_one_exports_float_texts_are_each_arrays_own_whatever_came_before(arrays):
    # one FloatTexts across several arrays (as over an export's tasks): each array's texts
    # equal formatting each value alone, whichever patterns earlier arrays already formatted
    floats = FloatTexts()
    for bits in arrays * 2:
        values = np.array(bits, dtype=np.uint32).view(np.float32)
        assert floats(values).tolist() == float_texts_reference(values)
    assert floats(np.empty((0, 3), dtype=np.float32)).tolist() == []


# no zone (twice as often), UTC, fixed offsets (one of seconds: Amsterdam's before 1937) and
# zones whose offset changes within some indexes (clock changes: texts made one at a time)
ZONES = [
    None,
    None,
    "UTC",
    dt.timezone(dt.timedelta(hours=5, minutes=30)),
    dt.timezone(-dt.timedelta(hours=3, minutes=30)),
    "Europe/Amsterdam",
    "America/St_Johns",
]


@given(
    st.lists(
        st.tuples(
            st.datetimes(min_value=dt.datetime(1900, 1, 1), max_value=dt.datetime(2100, 1, 1)),
            st.sampled_from([1, 60, 300, 3600]),
            st.integers(min_value=0, max_value=30),
            st.sampled_from(ZONES),
        ),
        min_size=1,
        max_size=5,
    )
)
@settings(max_examples=100, deadline=None)
def test_one_exports_stamp_texts_are_each_indexs_isoformat_whatever_came_before(indexes):
    # each index twice, the second time from what the first formatted, and shifted by half its
    # length, half of it known
    stamps = StampTexts()
    for start, seconds, periods, tz in indexes * 2:
        step = pd.Timedelta(seconds=seconds)
        for first in (start, start + step * (periods // 2)):
            index = pd.date_range(first, periods=periods, freq=step, tz=tz)
            assert stamps(index) == [stamp.isoformat() for stamp in index]


@given(
    st.datetimes(min_value=dt.datetime(1900, 1, 1), max_value=dt.datetime(2200, 1, 1)),
    st.sampled_from([1, 60, 300, 900, 3600]),
    st.integers(min_value=0, max_value=50),
    st.sampled_from(ZONES),
)
@settings(max_examples=100, deadline=None)
def test_iso_stamps_are_each_stamps_isoformat(start, seconds, periods, tz):
    # whole seconds or not, with a time zone or without
    index = pd.date_range(start, periods=periods, freq=pd.Timedelta(seconds=seconds), tz=tz)
    assert iso_stamps(index) == [stamp.isoformat() for stamp in index]


@pytest.mark.parametrize(
    "start, tz",
    [
        ("2024-03-30T12:00:00", "Europe/Amsterdam"),  # clocks go forward an hour
        ("2024-10-26T12:00:00", "Europe/Amsterdam"),  # ... and back
        ("2024-11-02T12:00:00", "America/St_Johns"),  # half-hour offsets
        ("1937-06-30T12:00:00", "Europe/Amsterdam"),  # +00:19:32 to +00:20
    ],
)
def test_stamps_across_a_clock_change_are_each_stamps_isoformat(start, tz):
    stamps = StampTexts()
    index = pd.date_range(start, periods=300, freq=pd.Timedelta(seconds=600), tz=tz)
    assert len({stamp.utcoffset() for stamp in index}) == 2  # the change is inside
    # before the change (kept), across it (made one at a time), after it (kept, another offset)
    for part in (index[:50], index, index[50:], index[-50:]):
        assert stamps(part) == [stamp.isoformat() for stamp in part]
    # a span for each side's offset (whole-second stamps: the offset follows 19 characters)
    assert {offset for _, offset in stamps._spans} == {
        index[0].isoformat()[19:],
        index[-1].isoformat()[19:],
    }


def test_stamp_texts_keep_at_most_the_limit_in_all_their_spans(monkeypatch):
    from whatif_bench.export import texts

    monkeypatch.setattr(texts, "MEMO_LIMIT", 100)
    stamps = StampTexts()
    for tz in (None, "UTC", dt.timezone(dt.timedelta(hours=2)), None):  # a span per offset
        index = pd.date_range("2024-01-01", periods=60, freq=pd.Timedelta(seconds=300), tz=tz)
        assert stamps(index) == [stamp.isoformat() for stamp in index]
        assert sum(len(kept) for _, kept in stamps._spans.values()) <= 100
    assert len(stamps._spans) == 1


@pytest.fixture(scope="module")
def llm_corpus(tmp_path_factory):
    return make(tmp_path_factory.mktemp("llm-corpus"), targets=(TARGET,))


@pytest.fixture(scope="module")
def exported(llm_corpus, tmp_path_factory):
    base = tmp_path_factory.mktemp("llm")
    with Corpus(llm_corpus) as corpus:
        frame = corpus.tasks_frame()
        picked = pd.concat([frame.head(3), frame.tail(3)]).reset_index(drop=True)
        outs = []
        for name in ("one", "two"):
            out = base / name
            out.mkdir()
            summary = writer("llm")(corpus, picked, out, progress=False)
            outs.append(out)
        tasks = [corpus[t] for t in picked["task_id"]]
    return outs, summary, tasks


# pandas >= 3 parses floats exactly by default; pandas 2 needs the round-trip parser
EXACT = {} if int(pd.__version__.split(".")[0]) >= 3 else {"float_precision": "round_trip"}


def read(path):
    return pd.read_csv(path, **EXACT)


def test_summary_and_layout(exported):
    (out, _), summary, tasks = exported
    json.dumps(summary)
    assert summary["tasks"] == len(tasks) and summary["key"] == KEY
    assert sorted(p.name for p in out.iterdir()) == sorted([KEY, TASKS])
    folders = sorted(p.name for p in (out / TASKS).iterdir())
    assert folders == [task_folder_name(i) for i in range(len(tasks))]
    for position, _ in enumerate(tasks):
        files = sorted(p.name for p in (out / TASKS / task_folder_name(position)).iterdir())
        assert files == sorted([*FILES, "prompt.txt", "scenario.txt"])
    assert summary["files_per_task"] == [*FILES, "prompt.txt", "scenario.txt"]


def test_csvs_read_back_to_the_task_arrays_exactly(exported):
    (out, _), _, tasks = exported
    for position, task in enumerate(tasks):
        folder = out / TASKS / task_folder_name(position)
        stamps = [s.isoformat() for s in task.timestamps()]
        covs = [f"<covariate_{i}>" for i in range(1, task.k + 1)]
        past_cov, past_target = read(folder / FILES[0]), read(folder / FILES[1])
        future_stamps, future_cov = read(folder / FILES[2]), read(folder / FILES[3])
        assert list(past_cov.columns) == ["timestamp", *covs]
        assert list(past_target.columns) == ["timestamp", "<target_1>"]
        assert list(future_stamps.columns) == ["timestamp", "<target_1>"]
        assert list(future_cov.columns) == ["timestamp", *covs]
        assert past_cov["timestamp"].tolist() == stamps[: task.context_length]
        assert past_target["timestamp"].tolist() == stamps[: task.context_length]
        assert future_stamps["timestamp"].tolist() == stamps[task.context_length :]
        assert future_cov["timestamp"].tolist() == stamps[task.context_length :]
        assert future_stamps["<target_1>"].isna().all()
        got = past_target["<target_1>"].to_numpy(np.float32)
        assert np.array_equal(got, task.history_target)
        assert np.array_equal(past_cov[covs].to_numpy(np.float32).T, task.history_covariates)
        assert np.array_equal(future_cov[covs].to_numpy(np.float32).T, task.future_covariates)


def test_the_csvs_are_dated_from_the_sumo_start_plus_the_window_offset(exported):
    (out, _), _, tasks = exported
    task = tasks[0]
    past = read(out / TASKS / task_folder_name(0) / FILES[1])
    expected = np.datetime64("2024-02-05T00:00:00") + np.timedelta64(300 * task.start_step, "s")
    assert past["timestamp"][0] == str(expected)
    future = read(out / TASKS / task_folder_name(0) / FILES[2])
    last = expected + np.timedelta64(300 * (task.context_length + task.prediction_length - 1), "s")
    assert future["timestamp"].iloc[-1] == str(last)


def test_task_folders_hide_names_and_truth(exported):
    (out, _), _, tasks = exported
    for position, task in enumerate(tasks):
        folder = out / TASKS / task_folder_name(position)
        assert folder.name == f"task-{position + 1:06d}"  # the path names nothing either
        secrets = [task.target, task.simulator, *task.covariates, task.task_id]
        secrets += [u for u in task.units.values() if u and len(u) > 2]
        for path in folder.iterdir():
            text = path.read_text(encoding="utf-8")
            for secret in secrets:
                assert secret not in text, (path.name, secret)
        future = read(folder / FILES[2])
        assert future["<target_1>"].isna().all()  # the truth is blank
        prompt = (folder / "prompt.txt").read_text(encoding="utf-8")
        assert "<target_1>" in prompt and "</target_1>" in prompt
        assert all(name in prompt for name in FILES)


def test_key_holds_the_mapping_the_truth_and_the_description(exported, llm_corpus):
    (out, _), _, tasks = exported
    lines = [json.loads(line) for line in (out / KEY).read_text().splitlines()]
    covariate_units_seen: set[str] = set()
    with Corpus(llm_corpus) as corpus:
        describer = Describer(corpus)
        by_target = covariate_units(corpus.attrs)
        assert [line["task_id"] for line in lines] == [t.task_id for t in tasks]
        for position, (line, task) in enumerate(zip(lines, tasks, strict=True)):
            assert line["folder"] == f"{TASKS}/{task_folder_name(position)}"
            assert line["variables"]["<target_1>"] == {
                "name": task.target,
                "unit": task.units[task.target],
            }
            names = [line["variables"][f"<covariate_{i}>"]["name"] for i in range(1, task.k + 1)]
            assert tuple(names) == task.covariates
            units = task_units(task, by_target)  # what the fev and gluonts exports write
            got = [line["variables"][f"<covariate_{i}>"]["unit"] for i in range(1, task.k + 1)]
            assert got == [units[name] for name in task.covariates]
            covariate_units_seen.update(got)
            assert np.array_equal(np.array(line["future_target"], np.float32), task.future_target)
            assert np.array_equal(
                np.array(line["counterfactual_future"], np.float32), task.counterfactual_future
            )
            assert line["history_last_value"] == float(task.history_target[-1])
            assert line["description"] == describer.describe(task)
            assert line["scenario_text"] == describer.text(task)
    assert covariate_units_seen - {""}, "no covariate unit at all: the check above proves nothing"


def test_scenario_file_is_the_anonymised_future_event(exported, llm_corpus):
    (out, _), _, tasks = exported
    with Corpus(llm_corpus) as corpus:
        describer = Describer(corpus)
        for position, task in enumerate(tasks):
            text = (out / TASKS / task_folder_name(position) / "scenario.txt").read_text()
            names = {f"<covariate_{i}>" for i in range(1, task.k + 1)}
            assert text.startswith("From ") and text.endswith(".\n")
            assert all(name in text for name in names)
            assert "target" not in text  # no word on how the target responds
            dummies = {c: f"<covariate_{i}>" for i, c in enumerate(task.covariates, 1)}
            assert text == describer.text(task, names=dummies, units=False, relations=False) + "\n"


def test_written_twice_byte_identical(exported):
    (one, two), _, _ = exported

    def digest(root):
        return {
            str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*"))
            if p.is_file()
        }

    assert digest(one) == digest(two)


def test_a_perfect_model_scores_zero_through_the_prompt(exported):
    """End to end: prompt -> an answer built from the key -> parse -> exactly the truth."""
    (out, _), _, tasks = exported
    lines = [json.loads(line) for line in (out / KEY).read_text().splitlines()]
    for line, task in zip(lines, tasks, strict=True):
        prompt = inline_prompt(out / line["folder"])
        for name in FILES:
            assert (out / line["folder"] / name).read_text() in prompt
        pairs = list(zip(line["future_timestamps"], line["future_target"], strict=True))
        random.Random(0).shuffle(pairs)
        result = forecast_with_retries(
            lambda _p, pairs=pairs: answer(pairs),
            prompt,
            line["future_timestamps"],
            line["history_last_value"],
            sleep=lambda s: None,
        )
        assert result.attempts == 1 and not result.imputed
        assert np.array_equal(result.point.astype(np.float32), task.future_target)


def test_the_documented_template_is_the_one_used():
    from pathlib import Path

    from whatif_bench.evaluation.llm_prompt import TEMPLATE

    doc = (Path(__file__).resolve().parents[1] / "docs" / "EXPORT_LLM.md").read_text()
    assert "```text\n" + TEMPLATE + "```" in doc


def test_space_separated_timestamps_are_accepted():
    stamps = stamps_of(2)
    text = answer([(str(s), 1.5) for s in stamps], sep="; ")
    assert parse_response(text, stamps).values["<target_1>"].tolist() == [1.5, 1.5]
