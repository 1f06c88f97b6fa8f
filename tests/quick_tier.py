"""The quick tier's coverage check (docs/TESTING.md): which modules of the package the quick
tests imported, from a log of every ``import`` statement run in a pytest process.

tests/conftest.py installs one ``ImportLog`` per pytest process and records who was running
each import: the collection of a test file, a fixture's set-up, or a test. In a plain run
tests/test_quick_tier.py checks the log after every other test. Under pytest-xdist each worker
sends its log and its test records to the controller (``to_message``), which merges them
(``merged``) and runs the same ``uncovered`` check at the session's end.
"""

from __future__ import annotations

import builtins
import importlib
import importlib.util
import sys
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

NOT_QUICK = ("slow", "heavy", "containers")
ROOT = Path(__file__).resolve().parents[1]

# Modules the quick tests do not import in the pytest process, and why. Each entry must still
# be a module and still be missing, so the list cannot outlive its reason.
NOT_IMPORTED_IN_PROCESS: dict[str, str] = {}


def package_modules() -> set[str]:
    """Every module of the package, from pyproject.toml's package-dir (no import)."""
    folders = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    names: set[str] = set()
    for package, folder in folders["package-dir"].items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            names.add(".".join((package, *parts[: -1 if parts[-1] == "__init__" else None])))
    return names


class ImportLog:
    """Who imported what in this process (the package's and the tests' modules only)."""

    def __init__(self) -> None:
        self.context = "start-up"  # the conftest, plugins: shared by every test
        self.top_level: dict[str, set[str]] = {}  # module -> what its top level imports
        self.by_context: dict[str, set[str]] = {}  # context -> modules it imported
        self._import = builtins.__import__
        self._import_module = importlib.import_module

    @staticmethod
    def ours(name: str) -> bool:
        return name.startswith(("whatif_bench", "tests"))

    def record(self, frame, targets) -> None:
        targets = [t for t in targets if self.ours(t)]
        if not targets:
            return
        importer = frame.f_globals.get("__name__", "")
        if frame.f_code.co_name == "<module>" and self.ours(importer):
            self.top_level.setdefault(importer, set()).update(targets)
        self.by_context.setdefault(self.context, set()).update(targets)

    def install(self) -> None:
        def tracked_import(name, globals=None, locals=None, fromlist=(), level=0):
            module = self._import(name, globals, locals, fromlist, level)
            if level:
                name = importlib.util.resolve_name(
                    "." * level + name, (globals or {}).get("__package__") or ""
                )
            if self.ours(name):
                targets = [name]
                for attribute in fromlist or ():
                    value = getattr(module, attribute, None)
                    if isinstance(value, type(sys)):
                        targets.append(value.__name__)
                    elif isinstance(getattr(value, "__module__", None), str):
                        targets.append(value.__module__)
                self.record(sys._getframe(1), targets)
            return module

        def tracked_import_module(name, package=None):
            module = self._import_module(name, package)
            self.record(sys._getframe(1), [module.__name__])
            return module

        builtins.__import__ = tracked_import
        importlib.import_module = tracked_import_module

    def reached(self, contexts) -> set[str]:
        """The modules the given contexts imported, with what those import at their top level."""
        seen: set[str] = set()
        todo = [m for c in contexts for m in self.by_context.get(c, ())]
        while todo:
            name = todo.pop()
            if name not in seen:
                seen.add(name)
                todo.extend(self.top_level.get(name, ()))
                if "." in name:
                    todo.append(name.rsplit(".", 1)[0])  # a module's package runs first
        return seen


@dataclass(frozen=True)
class ItemRecord:
    """What the check needs of one collected test (plain values: it crosses xdist's wire)."""

    nodeid: str
    file: str  # the test file's name, as the ``collect:`` contexts give it
    fixtures: tuple[str, ...]
    quick: bool
    gluonts: bool  # phase 2's, run in .venv-export


def record_of(item) -> ItemRecord:
    return ItemRecord(
        item.nodeid,
        item.path.name,
        tuple(item.fixturenames),
        bool(item.get_closest_marker("quick")),
        bool(item.get_closest_marker("gluonts")),
    )


@dataclass
class Session:
    """One pytest process's part: its log, every test collected (before ``-m`` or ``-k``), the
    ones selected, and the ones it ran (under xdist, a worker runs a share of them)."""

    log: ImportLog
    collected: list[ItemRecord]
    selected: set[str]
    ran: set[str]


def to_message(part: Session) -> dict:
    """``part`` as plain lists and dicts, for a worker's ``workeroutput``."""
    return {
        "by_context": {c: sorted(m) for c, m in part.log.by_context.items()},
        "top_level": {c: sorted(m) for c, m in part.log.top_level.items()},
        "collected": [list(r.__dict__.values()) for r in part.collected],
        "selected": sorted(part.selected),
        "ran": sorted(part.ran),
    }


def merged(messages: Iterable[dict]) -> Session:
    """The workers' parts as one session: every log and every test they ran."""
    log = ImportLog()  # not installed: filled from the messages
    whole = Session(log, [], set(), set())
    for message in messages:
        for attribute in ("by_context", "top_level"):
            table = getattr(log, attribute)
            for key, modules in message[attribute].items():
                table.setdefault(key, set()).update(modules)
        if not whole.collected:  # every worker collects the same tests
            whole.collected = [
                ItemRecord(n, f, tuple(x), q, g) for n, f, x, q, g in message["collected"]
            ]
        whole.selected |= set(message["selected"])
        whole.ran |= set(message["ran"])
    return whole


def why_not_checked(session: Session, asked_for_all: bool) -> str | None:
    """Why the check cannot judge this session (``None`` when it can)."""
    left_out = [
        r.nodeid
        for r in session.collected
        if r.quick and not r.gluonts and r.nodeid not in session.selected
    ]
    if not asked_for_all or left_out:
        return "needs the whole quick tier in this run (bash dev test -m quick, or all)"
    not_run = [
        r.nodeid
        for r in session.collected
        if r.quick and r.nodeid in session.selected and r.nodeid not in session.ran
    ]
    if not_run:
        return f"{len(not_run)} quick test(s) did not run (stopped early?), e.g. {not_run[0]}"
    return None


def uncovered(session: Session) -> tuple[list[str], list[str]]:
    """(the package's modules no quick test imported, the stale ``NOT_IMPORTED_IN_PROCESS``
    entries): a module counts when a quick test, a fixture a quick test uses, or the collection
    of a file holding a quick test imported it, directly or through the top-level imports of
    what it imported."""
    ran = [r for r in session.collected if r.quick and r.nodeid in session.ran]
    contexts = {"start-up"}
    contexts |= {f"test:{r.nodeid}" for r in ran}
    contexts |= {f"collect:{r.file}" for r in ran}
    # a file whose quick tests are phase 2's (gluonts) is collected here too, and run there
    contexts |= {f"collect:{r.file}" for r in session.collected if r.quick and r.gluonts}
    contexts |= {f"fixture:{name}" for r in ran for name in r.fixtures}
    reached = session.log.reached(contexts)
    modules = package_modules()
    missing = sorted(modules - reached - set(NOT_IMPORTED_IN_PROCESS))
    stale = sorted(m for m in NOT_IMPORTED_IN_PROCESS if m not in modules or m in reached)
    return missing, stale


def failure_message(missing: list[str], stale: list[str]) -> str | None:
    """The check's failure in words, or ``None`` when it passes."""
    lines = []
    if missing:
        lines.append(
            f"{len(missing)} module(s) of the package no quick test imports (only slow tests, or "
            "only a subprocess): give each a quick test, or run the command in-process "
            "(run_cli): " + ", ".join(missing)
        )
    if stale:
        lines.append(f"no longer true, remove from NOT_IMPORTED_IN_PROCESS: {stale}")
    return "\n".join(lines) or None


def whole_suite(config) -> bool:
    """The session was asked for the whole tests folder (a phase of ``bash dev test``)."""
    tests = ROOT / "tests"
    asked = [(ROOT / arg).resolve() if not arg.startswith("/") else arg for arg in config.args]
    return (
        all(str(path) in (str(ROOT), str(tests)) for path in asked)
        and not config.getoption("keyword")
        and not config.getoption("deselect")
    )
