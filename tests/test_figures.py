"""The figures: drawn without pyplot, events and units where the data puts them, categories as
bars, every panel labelled. Built from a real (small) corpus, real evaluation results and the
shipped baselines."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import matplotlib
import numpy as np
import pytest
from matplotlib.lines import Line2D

from tests.conftest import drawing_one_skill_plot, small_corpus
from whatif_bench.evaluation import evaluate
from whatif_bench.evaluation.report import SKILL_FLOOR, SLICES, skill_figure
from whatif_bench.generator import Corpus
from whatif_bench.generator.plotting import (
    FUTURE_EVENT,
    HISTORY_EVENT,
    plot_task,
    task_figure,
)
from whatif_bench.relationships.plotting import plot_response, response_figure
from whatif_bench.simulators import read_baselines, shipped_baselines_path
from whatif_bench.simulators.base import Baselines
from whatif_bench.simulators.plot import ZOOM_DAYS, daily_summary, overview_figure, plot_overview

TARGETS = ("sumo/CO2_abs_edge_e2c", "epanet/pressure_10")
ROOT = Path(__file__).resolve().parents[1]
LIBRARY = (
    "src",
    "simulators",
    "relationships",
    "corpus",
    "generator",
    "evaluation",
    "export",
    "stream",
)
# sumo's CO2 target keeps all its pairs; at C1 (prediction 128 steps) an event of 256 steps is
# cut by the window end, and Emax gives several history events
CUT_TASK = "sumo/CO2_abs_edge_e2c/K3-C1-L256-Emax/replay"


@pytest.fixture(scope="module")
def corpus_path(tmp_path_factory):
    return small_corpus(tmp_path_factory.mktemp("figures"), TARGETS)


@pytest.fixture(scope="module")
def per_task(corpus_path, tmp_path_factory):
    out = tmp_path_factory.mktemp("results")
    with drawing_one_skill_plot():  # the per-task scores are what the tests draw from
        return evaluate(
            corpus_path, ["naive", "linear", "ridge"], out, subset=0.05, progress=False
        ).per_task


@pytest.fixture(scope="module")
def pair(corpus_path):
    with Corpus(corpus_path) as corpus:
        yield corpus[CUT_TASK], corpus[CUT_TASK.replace("/replay", "/novel")]


@pytest.fixture
def svg_backend():
    """A non-Agg backend chosen by the user, restored after the test."""
    before = matplotlib.rcParams["backend"]
    matplotlib.use("svg")
    yield
    matplotlib.use(before)


def data_span(axis, patch) -> tuple[float, float]:
    """The x extent of a patch in the axis's data coordinates."""
    to_data = patch.get_transform() - axis.transData
    x = to_data.transform(patch.get_path().vertices)[:, 0]
    return float(x.min()), float(x.max())


def spans(axis, colour: str) -> list[tuple[float, float]]:
    wanted = matplotlib.colors.to_rgb(colour)
    found = [
        data_span(axis, p)
        for p in axis.patches
        if np.allclose(matplotlib.colors.to_rgb(p.get_facecolor()), wanted)
    ]
    return [(round(a, 6), round(b, 6)) for a, b in sorted(found)]  # float error of transforms


def labelled(axis) -> bool:
    return bool(axis.get_title(loc="left") or axis.get_title())


# ---- no pyplot, no backend switch ------------------------------------------------------------


def test_library_code_never_uses_pyplot_or_switches_the_backend():
    forbidden = re.compile(r"matplotlib\.pyplot|from matplotlib import .*pyplot|matplotlib\.use\(")
    offenders = [
        str(path.relative_to(ROOT))
        for folder in LIBRARY
        for path in (ROOT / folder).rglob("*.py")
        if forbidden.search(path.read_text())
    ]
    assert offenders == []


@pytest.mark.slow  # about 7 s
def test_drawing_every_figure_keeps_the_users_backend(
    svg_backend, tmp_path, pair, per_task, registry, corpus_path
):
    pyplot = sys.modules.get("matplotlib.pyplot")
    open_figures = pyplot.get_fignums() if pyplot else None
    task, other = pair
    from whatif_bench.evaluation.report import _plots

    baselines = read_baselines(shipped_baselines_path())["gridlabd"]
    written = [
        plot_task(task, other, tmp_path / "task.png", [corpus_path]),
        plot_overview(baselines, tmp_path / "overview.png"),
        plot_response(registry.get("epanet", "pressure_10"), tmp_path / "curves.png"),
    ]
    _plots(per_task, "naive", tmp_path / "plots")
    written += sorted((tmp_path / "plots").glob("*.png"))
    assert matplotlib.get_backend() == "svg"
    assert len(written) == 3 + len(SLICES) - 1
    assert all(path.read_bytes().startswith(b"\x89PNG") for path in written)
    if pyplot:  # pyplot's list of open figures is untouched
        assert pyplot.get_fignums() == open_figures


# ---- task plots ------------------------------------------------------------------------------


def test_task_plot_shades_the_recipes_event_windows_on_every_panel(pair):
    task, other = pair
    recipe = task.recipe
    length, context = recipe["event_length"], task.context_length
    assert length > task.prediction_length  # the future event is cut by the window end
    history = [(float(s), float(s + length)) for s in recipe["event_starts"]]
    future = [(float(context), float(context + task.prediction_length))]
    figure = task_figure(task, other)
    axes = np.array(figure.axes).reshape(1 + task.k, 2)
    for axis in axes[:, 0]:
        assert spans(axis, HISTORY_EVENT) == history
        assert spans(axis, FUTURE_EVENT) == future
        boundaries = [
            line for line in axis.get_lines() if np.all(np.asarray(line.get_xdata()) == context)
        ]
        assert len(boundaries) == 1  # the forecast start
    for axis in axes[:, 1]:  # the zoom: the last H history steps and the forecast
        assert axis.get_xlim() == pytest.approx(
            (context - task.prediction_length - 0.5, context + task.prediction_length - 0.5)
        )
        assert spans(axis, FUTURE_EVENT) == future


def test_task_plot_labels_every_panel_with_names_and_units(pair, registry):
    task, other = pair
    figure = task_figure(task, other)
    axes = np.array(figure.axes).reshape(1 + task.k, 2)
    relationship = registry.get(task.simulator, task.target)
    units = {c.name: c.unit for c in relationship.covariates}
    assert axes[0, 0].get_ylabel().replace("\n", "") == f"{task.target} [{relationship.unit}]"
    for c, name in enumerate(task.covariates):
        label = axes[1 + c, 0].get_ylabel().replace("\n", "")
        assert label == f"{name} [{units[name]}]"
    assert all(labelled(axis) for axis in figure.axes)
    assert axes[-1, 0].get_xlabel() and axes[-1, 1].get_xlabel()
    assert figure.get_suptitle().startswith(task.task_id.rsplit("/", 1)[0])
    legend = [t.get_text() for t in axes[0, 0].get_legend().get_texts()]
    for entry in (
        "history event",
        "future event",
        "forecast start",
        "replay future",
        "novel future",
    ):
        assert entry in legend


# ---- skill plots -----------------------------------------------------------------------------


@pytest.mark.parametrize("axis", [a for a in SLICES if a != "future"])
@pytest.mark.one_quick  # about 1 s over all its cases
def test_skill_plot_draws_categories_as_bars_never_joined(per_task, axis):
    from whatif_bench.evaluation.report import sliced

    figure = skill_figure(per_task, "naive", axis)
    futures = sorted(per_task["future"].unique())
    simulators = sorted(per_task["simulator"].unique())
    titles = [panel.get_title() for panel in figure.axes]
    expected = [f"future: {f}" for f in futures]
    if axis != "simulator":
        expected += [f"simulator: {s}" for s in simulators]
    assert [t.split(" (")[0] for t in titles] == expected
    for panel, title in zip(figure.axes, expected, strict=True):
        split, value = title.split(": ")
        table = sliced(per_task[per_task[split] == value], SLICES[axis], "naive")
        shown = table[table["model"] != "naive"]
        # the only line is the reference's zero line: no line joins two axis values
        lines = [line for line in panel.get_lines() if isinstance(line, Line2D)]
        assert len(lines) == 1 and set(np.asarray(lines[0].get_ydata(), dtype=float)) == {0.0}
        scores = shown["skill_score"].to_numpy()
        heights = sorted(round(p.get_height(), 9) for p in panel.patches)
        assert heights == sorted(round(max(v, SKILL_FLOOR), 9) for v in scores)
        # a bar cut at the floor has its value written on it
        written = sorted(t.get_text() for t in panel.texts)
        assert written == sorted(f"{v:.3g}" for v in scores if v < SKILL_FLOOR)
        assert panel.get_xlabel()
    assert figure.axes[0].get_ylabel().startswith("skill score vs naive (wQL")
    suptitle = figure.get_suptitle()
    assert ("per simulator" in suptitle) == (axis != "simulator")


LONG_NAME = "a-forecaster-with-a-rather-long-name"


@pytest.mark.parametrize(
    ("axis", "renamed"),
    [*[(a, {}) for a in SLICES if a != "future"], ("simulator", {"ridge": LONG_NAME})],
)
@pytest.mark.one_quick  # about 1 s over all its cases
def test_skill_plot_keeps_every_label_inside_the_figure_and_apart(per_task, axis, renamed):
    """The plot is laid out by hand (fixed margins in inches): every panel with its title, tick
    labels and axis labels, the legend and the title lie inside the saved image, none on another."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    scores = per_task.assign(model=per_task["model"].replace(renamed))
    figure = skill_figure(scores, "naive", axis)
    renderer = FigureCanvasAgg(figure).get_renderer()
    figure.draw(renderer)
    boxes = {f"panel {i}": panel.get_tightbbox(renderer) for i, panel in enumerate(figure.axes)}
    boxes["legend"] = figure.legends[0].get_window_extent(renderer)
    boxes["title"] = figure._suptitle.get_window_extent(renderer)
    canvas = figure.bbox
    for name, box in boxes.items():
        assert canvas.x0 - 0.5 <= box.x0 and box.x1 <= canvas.x1 + 0.5, (name, box, canvas)
        assert canvas.y0 - 0.5 <= box.y0 and box.y1 <= canvas.y1 + 0.5, (name, box, canvas)
    names = list(boxes)
    for i, first in enumerate(names):
        for second in names[i + 1 :]:
            a, b = boxes[first], boxes[second]
            apart = a.x1 <= b.x0 or b.x1 <= a.x0 or a.y1 <= b.y0 or b.y1 <= a.y0
            assert apart, f"{first} {a} overlaps {second} {b}"


# ---- baseline overviews ----------------------------------------------------------------------


def test_daily_summary_matches_a_loop_over_days():
    rng = np.random.default_rng(7)
    values = rng.normal(size=3 * 288 + 100)  # three days of 300 s steps and part of a fourth
    summary = daily_summary(values, 300)
    days = [values[i : i + 288] for i in range(0, values.size, 288)]
    assert summary["min"].tolist() == [d.min() for d in days]
    assert summary["max"].tolist() == [d.max() for d in days]
    np.testing.assert_allclose(summary["mean"], [d.mean() for d in days], rtol=1e-12)
    assert summary["edges"].tolist() == [0.0, 1.0, 2.0, 3.0, (3 * 288 + 100) / 288]


def test_a_month_overview_is_daily_bands_beside_the_first_days():
    sumo = read_baselines(shipped_baselines_path())["sumo"]
    names = list(sumo.series)[:4]
    month = Baselines(
        sumo.simulator,
        sumo.simulator_version,
        sumo.interval_s,
        sumo.start,
        {name: sumo.series[name] for name in names},
        {name: sumo.units[name] for name in names},
        {},
    )
    days = month.n_steps * month.interval_s / 86400
    assert days == 30
    figure = overview_figure(month)
    panels = [axis for axis in figure.axes if axis.get_visible()]
    assert len(panels) == 2 * len(names)
    for index, name in enumerate(names):
        whole, first = panels[2 * index], panels[2 * index + 1]
        assert whole.get_title() == f"{name} [{month.units[name]}]"
        assert whole.get_ylabel() == month.units[name]
        (mean,) = whole.get_lines()
        assert len(mean.get_xdata()) == 30  # one point per day, not 8,640
        (steps,) = first.get_lines()
        assert len(steps.get_xdata()) == ZOOM_DAYS * 86400 // month.interval_s
        assert first.get_title() == f"first {ZOOM_DAYS} days"
    assert "days since" in panels[-2].get_xlabel() and "hours since" in panels[-1].get_xlabel()


# ---- response curves -------------------------------------------------------------------------


def test_response_curves_give_the_units_of_target_and_covariates(registry):
    relationship = registry.get("sumo", "CO2_abs_edge_e2c")
    figure = response_figure(relationship)
    assert len(figure.axes) == relationship.max_k
    for axis, info in zip(figure.axes, relationship.covariates, strict=True):
        assert axis.get_ylabel() == f"CO2_abs_edge_e2c [{relationship.unit}]"
        assert f"{info.base_value:g} {info.unit}" in axis.get_xlabel()
        assert axis.get_title().startswith(info.name)
