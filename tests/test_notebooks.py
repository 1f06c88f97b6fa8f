"""The notebooks run top to bottom and every figure they show is labelled.

Two ways: the code cells in order in a fresh interpreter, with Jupyter's rule that a cell's last
expression is shown (fast, no Jupyter needed); and ``jupyter nbconvert --execute`` in a real
kernel (slow; needs the ``notebook`` extra).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))

# Runs the code cells in one namespace; a cell ending in an expression has its value kept, as
# Jupyter shows it. Then writes the labels of every figure shown: those pyplot holds and those
# cells ended with.
RUNNER = r"""
import ast, json, sys
from matplotlib.figure import Figure

cells = json.load(open(sys.argv[1]))
namespace = {"__name__": "__main__"}
shown = []
for number, source in enumerate(cells):
    tree = ast.parse(source)
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    exec(compile(tree, f"<cell {number}>", "exec"), namespace)
    if last is not None:
        value = eval(compile(ast.Expression(last.value), f"<cell {number}>", "eval"), namespace)
        if isinstance(value, Figure):
            shown.append(value)
if "matplotlib.pyplot" in sys.modules:
    pyplot = sys.modules["matplotlib.pyplot"]
    shown += [pyplot.figure(n) for n in pyplot.get_fignums()]
report = []
for figure in shown:
    axes = []
    for axis in figure.axes:
        spec = axis.get_subplotspec()
        axes.append({
            "title": axis.get_title() or axis.get_title(loc="left"),
            "xlabel": axis.get_xlabel(),
            "ylabel": axis.get_ylabel(),
            "bottom": spec.is_last_row(),
            "left": spec.is_first_col(),
        })
    report.append({"suptitle": figure.get_suptitle(), "axes": axes})
json.dump(report, open(sys.argv[2], "w"))
"""


def test_there_is_a_notebook():
    assert NOTEBOOKS


def code_cells(notebook: Path) -> list[str]:
    cells = json.loads(notebook.read_text())["cells"]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]


@pytest.mark.slow  # the whole tour (a corpus, an evaluation, its figures) in a new process
@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs_and_labels_its_figures(notebook, tmp_path):
    (tmp_path / "cells.json").write_text(json.dumps(code_cells(notebook)))
    (tmp_path / "runner.py").write_text(RUNNER)
    env = {**os.environ, "MPLBACKEND": "Agg"}
    result = subprocess.run(
        [sys.executable, "runner.py", "cells.json", "figures.json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    figures = json.loads((tmp_path / "figures.json").read_text())
    assert figures, "the notebook shows no figure"
    for figure in figures:
        assert figure["suptitle"], figure
        for axis in figure["axes"]:
            assert axis["title"], (figure["suptitle"], axis)
            if axis["bottom"]:
                assert axis["xlabel"], (figure["suptitle"], axis)
            if axis["left"]:
                # a unit in brackets; a skill score is a pure number
                label = axis["ylabel"]
                assert label.startswith("skill score") or ("[" in label and label.endswith("]")), (
                    figure["suptitle"],
                    axis,
                )


@pytest.mark.slow
@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs_in_jupyter(notebook, tmp_path):
    for module in ("nbconvert", "ipykernel"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed (pip install -e '.[notebook]')")
    jupyter = Path(sys.executable).with_name("jupyter")
    if not jupyter.is_file():
        pytest.skip(f"no jupyter command beside {sys.executable} (pip install -e '.[notebook]')")
    copy = tmp_path / notebook.name
    copy.write_bytes(notebook.read_bytes())
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}  # the kernel's inline one
    env.update(JUPYTER_PLATFORM_DIRS="1", JUPYTER_DATA_DIR=str(tmp_path / "jupyter-data"))
    result = subprocess.run(
        [
            str(jupyter),
            "nbconvert",
            "--to",
            "notebook",
            "--execute",
            "--ExecutePreprocessor.timeout=300",
            "--output",
            "executed.ipynb",
            notebook.name,
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    cells = json.loads((tmp_path / "executed.ipynb").read_text())["cells"]
    code = [c for c in cells if c["cell_type"] == "code"]
    assert not [o for c in code for o in c["outputs"] if o["output_type"] == "error"]
    for cell in code:  # a cell that shows a figure has a PNG among its outputs
        source = "".join(cell["source"])
        if "plt.show()" in source or "_figure(" in source.strip().splitlines()[-1]:
            assert any("image/png" in o.get("data", {}) for o in cell["outputs"]), source
