"""The foundation adapters' shared rules that need no model library: the mapping of a model's
quantile levels onto the toolkit's nine (``to_nine_levels``), and how the evaluation runs an
adapter (loaded once and untimed, one failing call failing only its tasks, GPUs not forked).
The adapters here are stand-ins for a library (``FoundationForecaster`` subclasses with a
hand-made ``_forecast_group``), to pin the shared behaviour; the real libraries are tested in
``test_foundation_<library>.py``."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from whatif_bench.evaluation import Forecast, evaluate
from whatif_bench.evaluation.foundation.common import FoundationForecaster, to_nine_levels
from whatif_bench.evaluation.metrics import QUANTILE_LEVELS

# the reports draw one skill plot, not five (tests/conftest.py): not what these tests check
pytestmark = pytest.mark.usefixtures("one_skill_plot_in_module")

NINE = np.asarray(QUANTILE_LEVELS)

# a model's levels: strictly increasing in (0, 1), some of them the nine, some not
level_grids = (
    st.lists(
        st.one_of(
            st.sampled_from(QUANTILE_LEVELS),
            st.floats(min_value=0.001, max_value=0.999, allow_nan=False),
        ),
        min_size=1,
        max_size=25,
        unique=True,
    )
    .map(sorted)
    .filter(lambda grid: all(a < b for a, b in zip(grid, grid[1:], strict=False)))
)
values = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)


@st.composite
def model_quantiles(draw):
    """(levels (L,), values (rows, L)): crossed values too, as a model may give."""
    grid = draw(level_grids)
    rows = draw(st.integers(min_value=1, max_value=4))
    table = draw(
        st.lists(
            st.lists(values, min_size=len(grid), max_size=len(grid)), min_size=rows, max_size=rows
        )
    )
    return grid, np.asarray(table, dtype=np.float64)


@settings(max_examples=200, deadline=None)
@given(model_quantiles())
def test_the_nine_are_monotone_and_within_the_models_range(case):
    grid, table = case
    out = to_nine_levels(grid, table)
    assert out.shape == (table.shape[0], 9) and out.dtype == np.float64
    assert np.all(np.diff(out, axis=1) >= 0)
    assert np.all(out >= table.min(axis=1, keepdims=True))
    assert np.all(out <= table.max(axis=1, keepdims=True))


@settings(max_examples=200, deadline=None)
@given(model_quantiles())
@pytest.mark.slow  # about 1 s
def test_a_shared_level_is_taken_exactly_and_the_others_as_a_plain_interpolation(case):
    grid, table = case
    out = to_nine_levels(grid, table)
    ordered = np.sort(table, axis=1)
    for j, level in enumerate(QUANTILE_LEVELS):
        if level in grid:
            assert np.array_equal(out[:, j], ordered[:, grid.index(level)])
        for row in range(table.shape[0]):  # np.interp: linear inside, the nearest end outside
            expected = np.interp(level, grid, ordered[row])
            assert out[row, j] == pytest.approx(expected, rel=1e-12, abs=1e-9)


def test_leading_axes_are_kept_and_the_nine_themselves_map_to_themselves():
    table = np.arange(2 * 3 * 9, dtype=np.float64).reshape(2, 3, 9)
    np.testing.assert_array_equal(to_nine_levels(QUANTILE_LEVELS, table), table)
    chronos = (0.01, 0.05, *QUANTILE_LEVELS, 0.95, 0.99)
    wide = np.concatenate([table[..., :1] - 2, table[..., :1] - 1, table, table[..., -1:] + 1], -1)
    wide = np.concatenate([wide, wide[..., -1:] + 1], axis=-1)
    np.testing.assert_array_equal(to_nine_levels(chronos, wide), table)


@pytest.mark.parametrize(
    ("levels", "shape", "message"),
    [
        ((0.1, 0.5, 0.9), (4, 2), "do not match 3 levels"),
        ((), (4, 0), "do not match 0 levels"),
        ((0.5, 0.1), (4, 2), "must increase strictly in"),
        ((0.1, 0.1), (4, 2), "must increase strictly in"),
        ((0.0, 0.5), (4, 2), "must increase strictly in"),
        ((0.5, 1.0), (4, 2), "must increase strictly in"),
    ],
)
def test_levels_that_do_not_fit_the_values_are_refused(levels, shape, message):
    with pytest.raises(ValueError, match=message):
        to_nine_levels(levels, np.zeros(shape))


class StandIn(FoundationForecaster):
    """A ``FoundationForecaster`` whose "library" repeats the last value, fails on K = 3
    (``fail_k``), sleeps while it loads (``load_s``) or cannot load at all (``broken``)."""

    adapter = "stand-in"
    loads: list[int] = []  # the pid of every load, in the process that made the list
    pids: list[int] = []  # the pid of every call, as seen by this process

    def __init__(self, fail_k=None, load_s=0.0, broken=False, device="cpu") -> None:
        super().__init__("stand-in/model", device=device, name="stand-in")
        self.fail_k, self.load_s, self.broken = fail_k, load_s, broken

    def _load(self):
        import os
        import time

        type(self).loads.append(os.getpid())
        time.sleep(self.load_s)
        if self.broken:
            raise OSError("no such checkpoint")
        return object()

    def _forecast_group(self, tasks):
        import os

        type(self).pids.append(os.getpid())
        if tasks[0].history_covariates.shape[0] == self.fail_k:
            raise RuntimeError("the library choked")
        return [Forecast(point=np.full(t.prediction_length, t.history_target[-1])) for t in tasks]


@pytest.fixture
def fresh():
    StandIn.loads, StandIn.pids = [], []


def test_a_failing_library_call_fails_only_the_tasks_of_that_call(
    one_target_corpus, tmp_path, fresh
):
    result = evaluate(
        one_target_corpus, ["naive", StandIn(fail_k=3)], tmp_path / "o", progress=False
    )
    rows = result.per_task[result.per_task["model"] == "stand-in"]
    failed = rows[rows["failed"] != ""]
    assert set(failed["k"]) == {3} and len(failed) == (rows["k"] == 3).sum() > 0
    assert (
        failed["failed"]
        .str.contains("stand-in failed on these tasks: RuntimeError: the library choked")
        .all()
    )
    assert rows.loc[rows["k"] != 3, "wql"].notna().all()


@pytest.mark.slow  # about 2 s
def test_the_checkpoint_loads_once_untimed_and_a_broken_one_is_not_read_again(
    one_target_corpus, tmp_path, fresh
):
    import os

    slow = StandIn(load_s=1.0)
    result = evaluate(
        one_target_corpus, ["naive", slow], tmp_path / "a", progress=False, model_timeout=None
    )
    rows = result.per_task[result.per_task["model"] == "stand-in"]
    assert StandIn.loads == [os.getpid()] and rows["failed"].eq("").all()
    assert rows["seconds"].sum() < 0.5  # the 1 s load is not inference time
    StandIn.loads = []
    result = evaluate(
        one_target_corpus, ["naive", StandIn(broken=True)], tmp_path / "b", progress=False
    )
    reasons = result.per_task.loc[result.per_task["model"] == "stand-in", "failed"]
    assert reasons.str.startswith("loading the model raised OSError: no such checkpoint").all()
    assert len(reasons) == 360 and StandIn.loads == [os.getpid()]  # two batches, one load


@pytest.mark.slow  # about 1 s
def test_a_model_on_a_gpu_runs_in_this_process_not_a_forked_child(
    one_target_corpus, tmp_path, fresh
):
    import os

    evaluate(one_target_corpus, ["naive", StandIn(device="mps")], tmp_path / "g", progress=False)
    assert StandIn.pids and set(StandIn.pids) == {os.getpid()}  # CUDA and MPS do not survive a fork
    StandIn.pids = []
    evaluate(one_target_corpus, ["naive", StandIn()], tmp_path / "c", progress=False)
    assert StandIn.pids == []  # on the CPU every call ran in a child: none was seen here
