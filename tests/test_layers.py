"""The package's rooms and floors, read from the source with ``ast`` (docs/ARCHITECTURE.md).

Every import counts: at the top of a module, inside a function (deferred for the command
line's start-up, but an edge all the same) and under ``TYPE_CHECKING``. The contract:

- a room imports only rooms on lower floors (``FLOORS``); rooms on one floor never import
  each other;
- no module imports itself back through others (no cycle in the whole package);
- no room imports another room's ``_private`` modules or names (except the package's two
  plumbing modules ``_version`` and ``_lazy``, in ``SHARED_PRIVATE``);
- the corpus room is read only through its public names: ``from whatif_bench.corpus import X``
  with X in its ``__all__``, or the public names of its public modules (``axes``, ...).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = "whatif_bench"

# pyproject.toml's package-dir: the folders that make up the one import package
FOLDERS = {
    "src/whatif_bench": PACKAGE,
    "simulators": f"{PACKAGE}.simulators",
    "relationships": f"{PACKAGE}.relationships",
    "corpus": f"{PACKAGE}.corpus",
    "generator": f"{PACKAGE}.generator",
    "evaluation": f"{PACKAGE}.evaluation",
    "export": f"{PACKAGE}.export",
    "stream": f"{PACKAGE}.stream",
}
# the command line's two modules sit above every room; the rest of src/whatif_bench is core
CLI_MODULES = {f"{PACKAGE}.cli", f"{PACKAGE}.__main__"}
FLOORS = {
    "core": 0,
    "simulators": 1,
    "relationships": 1,
    "corpus": 2,
    "generator": 3,
    "evaluation": 3,
    "export": 4,
    "stream": 4,
    "cli": 5,
}
SHARED_PRIVATE = {f"{PACKAGE}._version", f"{PACKAGE}._lazy"}
ROOMS = set(FLOORS) - {"core", "cli"}


@dataclass(frozen=True)
class Edge:
    """One import: ``source`` module imports ``names`` from ``target`` (a module name), at
    ``line`` of ``path``."""

    source: str
    target: str
    names: tuple[str, ...]
    path: str
    line: int

    def where(self) -> str:
        return f"{self.path}:{self.line}"


def room_of(module: str) -> str:
    """The room of a module name: one of ``FLOORS``."""
    if module in CLI_MODULES:
        return "cli"
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in ROOMS else "core"


def modules_of(folders: dict[Path, str]) -> dict[str, Path]:
    """Module name -> source file, for every ``.py`` file under the folders (a folder's
    ``__init__.py`` is the package itself)."""
    found: dict[str, Path] = {}
    for folder, package in folders.items():
        for path in sorted(folder.rglob("*.py")):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            name = ".".join([package, *parts])
            if folder.name == PACKAGE and parts and parts[0] in ROOMS:
                continue  # (a room folder linked inside src: counted under its own folder)
            found[name] = path
    return found


def edges_of(modules: dict[str, Path], root: Path) -> list[Edge]:
    """Every import of a package module by a package module; ``from PKG import name`` of a
    submodule counts as importing that submodule."""
    edges = []
    for module, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == PACKAGE:
                        edges.append(Edge(module, alias.name, (), _shown(path, root), node.lineno))
            elif isinstance(node, ast.ImportFrom):
                target = node.module or ""
                if node.level:
                    base = module.split(".") if is_package else module.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    target = ".".join([*base, *([node.module] if node.module else [])])
                if target.split(".")[0] != PACKAGE:
                    continue
                names = tuple(alias.name for alias in node.names)
                submodules = [n for n in names if f"{target}.{n}" in modules]
                others = tuple(n for n in names if f"{target}.{n}" not in modules)
                for name in submodules:
                    edges.append(
                        Edge(module, f"{target}.{name}", (), _shown(path, root), node.lineno)
                    )
                if others or not submodules:
                    edges.append(Edge(module, target, others, _shown(path, root), node.lineno))
    return edges


def _shown(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def floor_violations(edges: list[Edge]) -> list[str]:
    """Imports that run sideways or upward between rooms."""
    found = []
    for edge in edges:
        source, target = room_of(edge.source), room_of(edge.target)
        if source != target and FLOORS[target] >= FLOORS[source]:
            way = "sideways" if FLOORS[target] == FLOORS[source] else "upward"
            found.append(f"{edge.where()}: {source} imports {target} ({way}: {edge.target})")
    return found


def private_violations(edges: list[Edge]) -> list[str]:
    """``_private`` modules or names taken from another room."""
    found = []
    for edge in edges:
        if room_of(edge.source) == room_of(edge.target) or edge.target in SHARED_PRIVATE:
            continue
        segments = edge.target.split(".")[1:]
        private = [s for s in segments if s.startswith("_") and not s.startswith("__")]
        private += [n for n in edge.names if n.startswith("_") and not n.startswith("__")]
        if private:
            found.append(f"{edge.where()}: {edge.source} takes {private} from {edge.target}")
    return found


def corpus_surface_violations(
    edges: list[Edge], public_names: set[str], public_modules: set[str]
) -> list[str]:
    """Imports of the corpus room by another room that go past its public names."""
    found = []
    room = f"{PACKAGE}.corpus"
    for edge in edges:
        if room_of(edge.source) == "corpus" or room_of(edge.target) != "corpus":
            continue
        inner = edge.target[len(room) + 1 :] if edge.target != room else ""
        if inner == "":
            wrong = [n for n in edge.names if n not in public_names]
        elif inner in public_modules:
            wrong = [n for n in edge.names if n.startswith("_")]
        else:
            wrong = [f"module {inner}"]
        if wrong:
            found.append(f"{edge.where()}: {edge.source} takes {wrong} from the corpus room")
    return found


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


def module_graph(edges: list[Edge], modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the package modules it imports. Importing a package's name counts as
    importing the package's ``__init__`` only (its lazy names load their modules on use)."""
    graph: dict[str, set[str]] = {module: set() for module in modules}
    for edge in edges:
        if edge.target in modules and edge.target != edge.source:
            graph[edge.source].add(edge.target)
    return graph


def _package() -> tuple[dict[str, Path], list[Edge]]:
    modules = modules_of({REPO / folder: package for folder, package in FOLDERS.items()})
    return modules, edges_of(modules, REPO)


def test_every_folder_of_the_package_is_mapped():
    """The folders here are pyproject.toml's package-dir, so no room escapes the contract."""
    import tomllib

    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    package_dir = config["tool"]["setuptools"]["package-dir"]
    assert {folder: name for name, folder in package_dir.items()} == FOLDERS


def test_rooms_import_only_lower_floors():
    modules, edges = _package()
    assert len(modules) > 100 and len(edges) > 500  # the whole package was read
    assert floor_violations(edges) == []


def test_no_import_cycle_in_the_package():
    modules, edges = _package()
    cycle = find_cycle(module_graph(edges, modules))
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_no_room_takes_another_rooms_private_names():
    _, edges = _package()
    assert private_violations(edges) == []


def test_the_corpus_room_is_read_through_its_public_names():
    import whatif_bench.corpus as corpus

    public_modules = {n for n in corpus.__all__ if (REPO / "corpus" / f"{n}.py").exists()}
    assert {"axes", "fileformat"} <= public_modules
    _, edges = _package()
    used = [e for e in edges if room_of(e.target) == "corpus" and room_of(e.source) != "corpus"]
    assert len(used) > 30  # generator, evaluation, export and stream all read it
    assert corpus_surface_violations(edges, set(corpus.__all__), public_modules) == []
    for name in corpus.__all__:  # every public name resolves
        assert getattr(corpus, name) is not None, name


# ---- the checker itself, on small made-up packages -----------------------------------------


def _tree(tmp_path: Path, files: dict[str, str]) -> tuple[dict[str, Path], list[Edge]]:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    folders = {
        tmp_path / folder: package
        for folder, package in FOLDERS.items()
        if (tmp_path / folder).exists()
    }
    modules = modules_of(folders)
    return modules, edges_of(modules, tmp_path)


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        (  # the arrow this contract removed: relationships' command line into the generator
            {
                "relationships/__init__.py": "",
                "relationships/cli.py": "def add():\n"
                "    from whatif_bench.generator.diagnose_cli import add_relationships_arguments\n",
                "generator/__init__.py": "",
                "generator/diagnose_cli.py": "",
            },
            [
                "relationships/cli.py:2: relationships imports generator (upward: "
                "whatif_bench.generator.diagnose_cli)"
            ],
        ),
        (  # siblings on one floor: the stream's shards writing through the export's Parquet
            {
                "stream/__init__.py": "",
                "stream/shards.py": "from whatif_bench.export.parquet import table\n",
                "export/__init__.py": "",
                "export/parquet.py": "",
            },
            ["stream/shards.py:1: stream imports export (sideways: whatif_bench.export.parquet)"],
        ),
        (  # core reaching up into a room, under TYPE_CHECKING
            {
                "src/whatif_bench/__init__.py": "",
                "src/whatif_bench/outputs.py": "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from whatif_bench.corpus import Corpus\n",
                "corpus/__init__.py": "",
            },
            ["src/whatif_bench/outputs.py:3: core imports corpus (upward: whatif_bench.corpus)"],
        ),
        (  # the command line may import every room; a room may import core
            {
                "src/whatif_bench/cli.py": "from whatif_bench.stream import cli\n",
                "stream/__init__.py": "from whatif_bench._lazy import lazy_exports\n",
                "stream/cli.py": "from whatif_bench.errors import WhatIfError\n",
            },
            [],
        ),
    ],
    ids=["upward-in-a-function", "sideways", "upward-type-checking", "allowed"],
)
def test_the_floor_check_finds_what_runs_upward_or_sideways(tmp_path, files, expected):
    _, edges = _tree(tmp_path, files)
    assert floor_violations(edges) == expected


def test_the_private_check_finds_a_private_name_across_rooms(tmp_path):
    _, edges = _tree(
        tmp_path,
        {
            "generator/__init__.py": "",
            "generator/diagnose_cli.py": "def run():\n"
            "    from whatif_bench.relationships.cli import _relationships_of_files\n",
            "generator/sweep.py": "from whatif_bench.generator.writer import _private_ok\n"
            "from whatif_bench._version import __version__\n",
            "stream/kernels.py": "from whatif_bench.relationships._kernels import apply\n",
        },
    )
    assert private_violations(edges) == [
        "generator/diagnose_cli.py:2: whatif_bench.generator.diagnose_cli takes "
        "['_relationships_of_files'] from whatif_bench.relationships.cli",
        "stream/kernels.py:1: whatif_bench.stream.kernels takes ['_kernels'] from "
        "whatif_bench.relationships._kernels",
    ]


def test_the_corpus_check_finds_imports_past_the_public_names(tmp_path):
    _, edges = _tree(
        tmp_path,
        {
            "corpus/__init__.py": "",
            "corpus/axes.py": "",
            "corpus/reader.py": "from whatif_bench.corpus.axes import _hidden\n",  # inside: fine
            "export/api.py": "from whatif_bench.corpus.reader import Corpus\n"
            "from whatif_bench.corpus import Corpus, secret\n"
            "from whatif_bench.corpus.axes import FUTURES, _table\n"
            "from whatif_bench.corpus import axes\n",
        },
    )
    assert corpus_surface_violations(edges, {"Corpus", "axes"}, {"axes"}) == [
        "export/api.py:1: whatif_bench.export.api takes ['module reader'] from the corpus room",
        "export/api.py:2: whatif_bench.export.api takes ['secret'] from the corpus room",
        "export/api.py:3: whatif_bench.export.api takes ['_table'] from the corpus room",
    ]


@pytest.mark.parametrize(
    ("files", "cycle"),
    [
        (  # a deferred import back into the hub
            {
                "generator/sweep.py": "def generate():\n"
                "    from whatif_bench.generator.writer import W\n",
                "generator/writer.py": "from whatif_bench.generator.sweep import PairResult\n",
            },
            [
                "whatif_bench.generator.sweep",
                "whatif_bench.generator.writer",
                "whatif_bench.generator.sweep",
            ],
        ),
        (  # across rooms, through a relative import
            {
                "relationships/checks.py": "from whatif_bench.relationships import plugins\n",
                "relationships/plugins.py": "def f():\n    from .checks import check\n",
                "relationships/__init__.py": "",
            },
            [
                "whatif_bench.relationships.checks",
                "whatif_bench.relationships.plugins",
                "whatif_bench.relationships.checks",
            ],
        ),
        (
            {
                "generator/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                "    from .b import B\n",
                "generator/b.py": "from whatif_bench.generator.a import A\n",
            },
            ["whatif_bench.generator.a", "whatif_bench.generator.b", "whatif_bench.generator.a"],
        ),
    ],
    ids=["deferred", "submodule-by-name", "type-checking"],
)
def test_the_cycle_finder_finds_a_cycle(tmp_path, files, cycle):
    modules, edges = _tree(tmp_path, files)
    assert find_cycle(module_graph(edges, modules)) == cycle


def test_the_cycle_finder_accepts_a_diamond(tmp_path):
    modules, edges = _tree(
        tmp_path,
        {
            "generator/top.py": "from whatif_bench.generator import left, right\n",
            "generator/left.py": "from whatif_bench.generator.base import X\n",
            "generator/right.py": "from whatif_bench.generator.base import Y\n",
            "generator/base.py": "import numpy\n",
        },
    )
    graph = module_graph(edges, modules)
    assert graph["whatif_bench.generator.top"] == {
        "whatif_bench.generator.left",
        "whatif_bench.generator.right",
    }
    assert find_cycle(graph) is None
