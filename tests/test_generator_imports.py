"""The generator's modules import each other without a cycle.

The graph is built from the source files with ``ast``, so it sees every import: at the top of a
module, inside a function (a deferred import hides a cycle from Python but not from a reader)
and under ``TYPE_CHECKING``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = "whatif_bench.generator"


def import_graph(folder: Path, package: str) -> dict[str, set[str]]:
    """Module name -> the modules of the same package it imports (names without the package;
    ``__init__`` for the package itself)."""
    modules = {path.stem for path in folder.glob("*.py")}
    graph: dict[str, set[str]] = {}
    for path in sorted(folder.glob("*.py")):
        edges = graph.setdefault(path.stem, set())
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith(package + "."):
                        edges.add(alias.name[len(package) + 1 :].split(".")[0])
            elif isinstance(node, ast.ImportFrom):
                source = node.module or ""
                if node.level:  # relative: "." is the package itself
                    source = package + ("." + source if source else "")
                if source == package:  # from the package: submodules by name, else __init__
                    for alias in node.names:
                        edges.add(alias.name if alias.name in modules else "__init__")
                elif source.startswith(package + "."):
                    edges.add(source[len(package) + 1 :].split(".")[0])
        edges.discard(path.stem)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a list of modules (the first repeated at the end), or None."""
    state: dict[str, str] = {}  # "open" while on the current path, "done" once finished

    def visit(module: str, path: list[str]) -> list[str] | None:
        state[module] = "open"
        for target in sorted(graph.get(module, ())):
            if state.get(target) == "open":
                return [*path[path.index(target) :], target]
            if target not in state:
                found = visit(target, [*path, target])
                if found:
                    return found
        state[module] = "done"
        return None

    for module in sorted(graph):
        if module not in state:
            found = visit(module, [module])
            if found:
                return found
    return None


def test_generator_modules_import_each_other_without_a_cycle():
    graph = import_graph(REPO / "generator", PACKAGE)
    assert {"sweep", "selection", "writer", "types"} <= set(graph)
    assert "types" in graph["writer"] and "types" in graph["selection"]  # the shared types
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


@pytest.mark.parametrize(
    ("files", "cycle"),
    [
        (  # the cycle this test was written against: a deferred import back into the hub
            {
                "sweep.py": "def generate():\n    from whatif_bench.generator.writer import W\n",
                "writer.py": "from whatif_bench.generator.sweep import PairResult\n",
            },
            ["sweep", "writer", "sweep"],
        ),
        (
            {
                "a.py": "from whatif_bench.generator import b\n",
                "b.py": "import whatif_bench.generator.c\n",
                "c.py": "from . import a\n",
            },
            ["a", "b", "c", "a"],
        ),
        (
            {
                "a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                "    from .b import B\n",
                "b.py": "from whatif_bench.generator.a import A\n",
            },
            ["a", "b", "a"],
        ),
    ],
    ids=["deferred", "three-modules", "type-checking"],
)
def test_the_cycle_finder_finds_a_cycle(tmp_path, files, cycle):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    assert find_cycle(import_graph(tmp_path, PACKAGE)) == cycle


def test_the_cycle_finder_accepts_a_diamond(tmp_path):
    files = {
        "top.py": "from whatif_bench.generator import left, right\n",
        "left.py": "from whatif_bench.generator.base import X\n",
        "right.py": "from whatif_bench.generator.base import Y\n",
        "base.py": "import numpy\n",
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    graph = import_graph(tmp_path, PACKAGE)
    assert graph["top"] == {"left", "right"} and find_cycle(graph) is None
