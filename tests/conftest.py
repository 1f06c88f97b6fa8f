"""Shared fixtures and helpers: the shipped registry (loaded once), seeded random generators,
the command line in-process (``run_main``, ``run_cli``) or as the real console script
(``run_whatif``), corpora built once per session, and the quick tier (docs/TESTING.md)."""

from __future__ import annotations

import atexit
import contextlib
import io
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytest

from tests import quick_tier, warm_cli
from tests.marks import needs_mark
from tests.quick_tier import NOT_QUICK, ImportLog

# Every import from here on is recorded for the quick tier's check (below): this file imports
# the package only inside its fixtures and helpers, so the log sees the package's whole tree.
IMPORTS = ImportLog()
IMPORTS.install()


@pytest.fixture(scope="session")
def registry():
    from whatif_bench.relationships import load_registry

    return load_registry()


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(20261129)


def whatif_executable() -> list[str]:
    """The installed ``whatif`` console script (falls back to ``python -m``)."""
    script = shutil.which("whatif", path=os.path.dirname(sys.executable))
    return [script] if script else [sys.executable, "-m", "whatif_bench.cli"]


def sigint_as_ctrl_c() -> None:
    """``preexec_fn`` for a test that sends SIGINT to a command it starts: the child starts with
    SIGINT at its default, so Python turns it into ``KeyboardInterrupt`` as at a terminal. A
    shell starts a background job (``bash dev test &``) with SIGINT ignored, and a child
    inherits that: Python then leaves it ignored and the Ctrl-C tests would wait in vain."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_whatif(*args: str, check: bool = False) -> subprocess.CompletedProcess:
    """Run the real command line and capture its output."""
    return subprocess.run(
        [*whatif_executable(), *args], capture_output=True, text=True, check=check, timeout=300
    )


# ``whatif`` in a new process whose evaluation reports draw one skill plot (as
# ``drawing_one_skill_plot``, imported from this file: the tests folder goes last on the path)
_ONE_SKILL_PLOT_MAIN = f"""
import sys
from pathlib import Path
sys.path.append({str(Path(__file__).resolve().parents[1])!r})
from tests.conftest import drawing_one_skill_plot
from whatif_bench import cli

with drawing_one_skill_plot():
    cli.entry()  # the console script's own: main, then its worker processes ended at once
"""


def run_whatif_drawing_one_skill_plot(*args: str) -> subprocess.CompletedProcess:
    """``run_whatif`` for ``whatif evaluate`` runs whose process is the point (a model that
    crashes, exits or kills its worker must not end the run) but whose five skill plots are not
    (about 1 s of each run): the console script's ``cli.entry`` in a new process, drawing one
    plot; the process is forked from the warm server (``warm_server``)."""
    warm = warm_server()
    return subprocess.run(
        [*warm.python(_ONE_SKILL_PLOT_MAIN, "-P"), *args],
        env=warm.env(dict(os.environ)),
        capture_output=True,
        text=True,
        timeout=300,
    )


def run_main(capsys, *argv: str) -> tuple[object, str, str]:
    """The command line in-process: (exit code, stdout, stderr), with the error-line promises
    checked (no traceback, no ``unexpected`` line)."""
    from whatif_bench.cli import main

    try:
        code: object = main(list(argv))
    except SystemExit as exc:  # argparse usage errors
        code = exc.code
    out, err = capsys.readouterr()
    assert "Traceback" not in err and "unexpected" not in err, err
    return code, out, err


def run_cli(*argv: str, check: bool = False) -> subprocess.CompletedProcess:
    """The command line in-process with ``run_whatif``'s result (``returncode``, ``stdout``,
    ``stderr``; ``check=True`` raises ``CalledProcessError`` on a non-zero exit), for the tests
    of what a command says and writes, where the process itself is not the point. Like
    ``run_whatif`` it checks nothing itself, and it needs no fixture (module fixtures use it
    too). Output of worker processes, or written to the file descriptors, is not captured."""
    from whatif_bench.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code: object = main(list(argv))
        except SystemExit as exc:  # argparse: usage errors, --help
            code = exc.code
    result = subprocess.CompletedProcess(["whatif", *argv], code, out.getvalue(), err.getvalue())
    if check:
        result.check_returncode()
    return result


def every_tenth_task_id(corpus_path) -> list[str]:
    """Every tenth task id of a corpus, in the file's order: every simulator, future, K and C of
    the session corpora. Any ``subset`` of a one- or two-target corpus is all of it (each stratum
    holds one task per target), so tests whose behaviour does not depend on the number of tasks
    pass these as ``task_ids``."""
    from whatif_bench.corpus import Corpus

    with Corpus(corpus_path) as corpus:
        return corpus.task_ids()[::10]


def small_corpus(folder, targets: tuple[str, ...], seed: int = 0):
    """Generate a corpus of ``targets`` from the shipped baselines into ``folder/c.h5`` (one
    process); returns its path."""
    from whatif_bench.generator import GenerationConfig, generate
    from whatif_bench.simulators import shipped_baselines_path

    config = GenerationConfig(
        baselines=str(shipped_baselines_path()),
        out=str(folder / "c.h5"),
        targets=targets,
        seed=seed,
        jobs=1,
    )
    return generate(config, progress=False)


@pytest.fixture(scope="module", autouse=True)
def _forget_user_forms_after_each_module():
    """User forms live in process-wide tables: what a test module registers is forgotten when
    it ends, so a later module may load the same forms module from another path."""
    from whatif_bench.relationships import plugins
    from whatif_bench.relationships.forms import EFFECTS, FORMS

    forms, effects = set(FORMS), set(EFFECTS)
    loaded, origins = set(plugins._loaded), dict(plugins._origins)
    yield
    plugins._forget_new_forms(forms, effects)
    plugins._loaded.intersection_update(loaded)
    for key in set(plugins._origins) - set(origins):
        del plugins._origins[key]


ONE_TARGET = "epanet/pressure_10"  # the target of the one-target corpus below


@pytest.fixture(scope="session")
def one_target_corpus(tmp_path_factory):
    """A corpus of ``ONE_TARGET`` alone, generated once per session for the tests that only
    read it (as an input they check is unchanged)."""
    return small_corpus(tmp_path_factory.mktemp("one-target-corpus"), (ONE_TARGET,))


@pytest.fixture(scope="session")
def one_target_task_id(one_target_corpus) -> str:
    """The first task id of ``one_target_corpus``."""
    from whatif_bench.generator import Corpus

    with Corpus(one_target_corpus) as opened:
        return opened.task_ids()[0]


@contextlib.contextmanager
def drawing_one_skill_plot():
    """While open, evaluation reports draw one skill plot (by simulator) instead of one per axis.

    Drawing the five plots is most of what a small evaluation costs (about 2 s each time); the
    tests that use this check failures, chunks, scores and tables, not the figures, and still
    draw one from their own results (so a figure of failed or partial scores is still drawn).
    The full set is checked in tests/test_evaluate.py and tests/test_figures.py."""
    from whatif_bench.evaluation import report

    draw_every_plot = report._plots

    def plots(per_task, reference, folder):
        # the report's own drawing, over the one axis (the tables still read every slice)
        every_slice = report.slices
        report.slices = lambda: {"simulator": every_slice()["simulator"]}
        try:
            draw_every_plot(per_task, reference, folder)
        finally:
            report.slices = every_slice

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(report, "_plots", plots)
        yield


@pytest.fixture
def one_skill_plot():
    """One test's evaluations draw one skill plot (``drawing_one_skill_plot``)."""
    with drawing_one_skill_plot():
        yield


@pytest.fixture(scope="module")
def one_skill_plot_in_module():
    """A module's evaluations, its module fixtures' too, draw one skill plot; for
    ``pytestmark = pytest.mark.usefixtures("one_skill_plot_in_module")``."""
    with drawing_one_skill_plot():
        yield


# ---- corpora shared by the session (read only: a test that changes one copies it first) ----


@pytest.fixture(scope="session")
def two_target_corpus(tmp_path_factory):
    """``sumo/flow_loop_e_0_near`` and ``epanet/pressure_10``: two simulators, two calendars."""
    return small_corpus(
        tmp_path_factory.mktemp("two-target-corpus"), ("sumo/flow_loop_e_0_near", ONE_TARGET)
    )


@pytest.fixture(scope="session")
def sumo_one_day():
    """``sumo.run(days=1)``: one day of SUMO (about 4 s), run once per session (read only)."""
    from whatif_bench.simulators import sumo

    return sumo.run(days=1)


# ---- a warm ``whatif`` for command lines run as typed (tests/warm_cli.py) ------------------


class WarmWhatif:
    """Runs ``whatif`` and ``python -c`` in processes forked from a warm server
    (``tests/warm_cli.py``): ``argv`` or ``python`` start the command line, ``env`` makes the
    environment it runs with (and a ``bash`` whose ``whatif`` is the warm one).

    A server imports its modules under the environment it starts with, so there is one per set
    of the variables read at import (``warm_cli.import_time_variables``), started for the first
    command that has that set: the worker's own environment changes during a session (after
    tests/test_dask.py's local clusters it holds ``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``,
    ``OPENBLAS_NUM_THREADS`` and ``PYTHONHASHSEED``; other libraries add ``KMP_*``), and a test
    may set such a variable itself. A command whose server could not start runs the real
    script."""

    LIVE_SERVERS = 3  # at most, per process: the one used least recently is stopped first

    def __init__(self) -> None:
        # set of variables -> its server (None: it did not start), the last used last
        self._servers: dict[tuple, _WarmServer | None] = {}

    def socket(self, env: Mapping[str, str]) -> str | None:
        """The socket of the server for ``env``'s import-time variables (started if needed),
        or None if there is none."""
        key = tuple(sorted(warm_cli.import_time_variables(env, every_module=True).items()))
        known = key in self._servers
        server = self._servers.pop(key, None)
        if not known or (server is not None and not server.serving()):  # new, or stopped
            server = _WarmServer.start(env)
        self._servers[key] = server  # now the last used
        serving = [s for s in self._servers.values() if s is not None and s.serving()]
        for old in serving[: -self.LIVE_SERVERS]:
            old.stop()
        return None if server is None else server.socket

    def argv(self) -> list[str]:
        """The start of a ``whatif`` command line: the shim (pass ``env`` too)."""
        return [sys.executable, "-I", "-S", str(WARM_CLI), "whatif"]

    def python(self, code: str, *options: str) -> list[str]:
        """``python [OPTIONS] -c CODE`` in this environment's Python (OPTIONS: ``-P`` or none)
        through the shim (pass ``env`` too): ``sys.argv``, ``sys.path`` and ``__main__`` as
        ``-c`` gives them."""
        return [sys.executable, "-I", "-S", str(WARM_CLI), "python", *options, "-c", code]

    def env(self, env: Mapping[str, str]) -> dict[str, str]:
        """``env`` and what the shim needs: its server's socket (none: the real script runs),
        the real script's path, and for ``bash`` a function ``whatif`` (exported as bash reads
        them) that runs the shim, whatever ``PATH`` holds."""
        shim = " ".join(f'"{part}"' for part in self.argv())
        socket = self.socket(env)
        return {
            **env,
            **({warm_cli.SOCKET_ENV: socket} if socket else {}),
            warm_cli.REAL_ENV: whatif_executable()[0],
            "BASH_FUNC_whatif%%": f'() {{  {shim} "$@"\n}}',
        }


WARM_CLI = Path(__file__).with_name("warm_cli.py")
_WARM = WarmWhatif()  # this process's servers, each started when first needed


def warm_server() -> WarmWhatif:
    """This process's warm servers (``WarmWhatif``); helpers that take no fixture use it."""
    return _WARM


class _WarmServer:
    """One server process of ``tests/warm_cli.py`` and its socket."""

    def __init__(self, process: subprocess.Popen, folder: Path) -> None:
        self.process, self.folder = process, folder
        self.socket = str(folder / "socket")
        self.stopped = False
        atexit.register(self.kill)

    @classmethod
    def start(cls, env: Mapping[str, str]) -> _WarmServer | None:
        """A server started with ``env`` (about 1 s; killed when this process ends), or None
        (with a warning) if it did not start."""
        folder = Path(tempfile.mkdtemp(prefix="whatif-warm-"))
        # run as ``python -c`` with the folder it adds to sys.path taken out again, so the
        # commands see sys.path and sys.flags as the console script does (-P would set a flag)
        start = (
            "import runpy, sys; del sys.path[0]; "
            f"runpy.run_path({str(WARM_CLI)!r}, run_name='__main__')"
        )
        process = subprocess.Popen(
            [sys.executable, "-c", start, "serve", str(folder / "socket")],
            env={key: value for key, value in env.items() if not key.startswith("BASH_FUNC_")},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            text=True,
        )
        server = cls(process, folder)
        assert process.stdout is not None
        if (
            select.select([process.stdout], [], [], 120)[0]
            and process.stdout.readline() == "ready\n"
        ):
            return server
        server.kill()
        warnings.warn(
            "a warm whatif server did not start; its commands run the real script", stacklevel=3
        )
        return None

    def serving(self) -> bool:
        """Whether it takes commands: neither stopped nor ended."""
        return not self.stopped and self.process.poll() is None

    def stop(self) -> None:
        """No more commands (its socket goes at once); it ends once those running have."""
        self.stopped = True
        self.process.terminate()

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()
        if self.process.stdout is not None:  # else left to the collector: a ResourceWarning
            self.process.stdout.close()
        shutil.rmtree(self.folder, ignore_errors=True)


@pytest.fixture(scope="session")
def warm_whatif() -> WarmWhatif:
    """This worker's warm servers (``warm_server``)."""
    return warm_server()


def run_warm(warm: WarmWhatif, *args: str) -> subprocess.CompletedProcess:
    """``run_whatif`` through the warm server: a new process that has not loaded what this
    one has (user forms, models), for tests where that matters but the console script's own
    start does not."""
    return subprocess.run(
        [*warm.argv(), *args],
        env=warm.env(dict(os.environ)),
        capture_output=True,
        text=True,
        timeout=300,
    )


# ---- the quick tier (docs/TESTING.md) -------------------------------------------------------
#
# ``quick`` is every test not marked slow, heavy or containers: conftest adds the marker, so
# ``bash dev test -m quick`` and ``-m "not slow"`` select the same tests. A parametrized test
# marked ``one_quick`` keeps its first case in the quick tier; conftest marks the others slow.
# tests/test_quick_tier.py checks that the quick tier imports every module of the package, from
# what this process imported while the quick tests ran: every ``import`` statement executed (by
# a test, a fixture, the collection of a test file, or the package's own code while a test ran)
# is recorded with who was running, and what importing a module imports in turn at its top level.

ALL_ITEMS = pytest.StashKey[list]()  # every test collected, before -m or -k deselected any
RAN: set[str] = set()  # the tests this process ran (under xdist, this worker's share)
WORKER_PARTS: list[dict | None] = []  # under xdist, on the controller: each worker's part
QUICK_TIER_CHECK = (
    "tests/test_quick_tier.py::test_every_package_module_is_imported_by_the_quick_tier"
)
QUICK_TIER_VERDICT = pytest.StashKey[tuple[str, str]]()  # (outcome, words) for the summary


# marks a test file names in its text when it has tests that carry them
SELECTIVE_MARKS = ("gluonts", "containers")


def pytest_ignore_collect(collection_path, config):
    # the second phase (-m "gluonts and ...") and both phases of the container tier
    # (-m "(containers) and ..."): a test file whose text never names a mark the expression
    # needs holds no test it selects, so it is not imported (tests/marks.py). The first phase
    # of the suite collects every file: the quick tier's check reads what each one imports.
    if collection_path.suffix != ".py" or not collection_path.name.startswith("test_"):
        return None
    expression = config.option.markexpr or ""
    needed = [mark for mark in SELECTIVE_MARKS if needs_mark(expression, mark)]
    if not needed:
        return None
    text = collection_path.read_text(encoding="utf-8")
    return None if all(mark in text for mark in needed) else True


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    first_cases = set()
    for item in items:  # one_quick: every case of the test but its first is slow
        if item.get_closest_marker("one_quick"):
            test = (item.path, getattr(item, "originalname", item.name))
            if test in first_cases:
                item.add_marker(pytest.mark.slow)
            first_cases.add(test)
    for item in items:
        if not any(item.get_closest_marker(name) for name in NOT_QUICK):
            item.add_marker(pytest.mark.quick)
    config.stash[ALL_ITEMS] = list(items)
    # the quick tier's check reads what the tests before it imported: it runs last
    items.sort(key=lambda item: item.nodeid.startswith("tests/test_quick_tier.py::"))


@pytest.hookimpl(wrapper=True)
def pytest_collection(session):
    # pytest keeps each test file, rewritten for its assertion messages, in __pycache__, unless
    # writing bytecode is off (PYTHONDONTWRITEBYTECODE, set on these machines): then every
    # process that collects (each xdist worker, each phase, each pytest a test starts) rewrote
    # all of them again, about 4 CPU s each. The cache is written while collecting only, when
    # little beyond the test files is imported for the first time (`bash dev test` compiles the
    # package beforehand); the setting is the environment's again for the tests themselves.
    writes_bytecode = sys.dont_write_bytecode
    sys.dont_write_bytecode = False
    try:
        return (yield)
    finally:
        sys.dont_write_bytecode = writes_bytecode


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    # a test file is imported when its module collector collects
    previous, IMPORTS.context = IMPORTS.context, f"collect:{collector.path.name}"
    yield
    IMPORTS.context = previous


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef, request):
    previous, IMPORTS.context = IMPORTS.context, f"fixture:{fixturedef.argname}"
    yield
    IMPORTS.context = previous


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    RAN.add(item.nodeid)
    IMPORTS.context = f"test:{item.nodeid}"
    yield
    IMPORTS.context = "between tests"


def this_session(session) -> quick_tier.Session:
    """This process's part of the quick tier's check."""
    return quick_tier.Session(
        IMPORTS,
        [quick_tier.record_of(item) for item in session.config.stash[ALL_ITEMS]],
        {item.nodeid for item in session.items},
        set(RAN),
    )


def distributing(config) -> bool:
    """This is pytest-xdist's controller, handing the tests to worker processes."""
    return config.pluginmanager.getplugin("dsession") is not None


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    # pytest-xdist, on the controller: a worker finished (or crashed, without its part)
    WORKER_PARTS.append(getattr(node, "workeroutput", {}).get("quick_tier"))


def pytest_sessionfinish(session, exitstatus):
    config = session.config
    if hasattr(config, "workerinput"):  # an xdist worker: its part goes to the controller
        config.workeroutput["quick_tier"] = quick_tier.to_message(this_session(session))
        return
    if not distributing(config) or not WORKER_PARTS:
        return  # a plain run: tests/test_quick_tier.py checked it as a test
    if any(part is None for part in WORKER_PARTS):
        config.stash[QUICK_TIER_VERDICT] = ("skipped", "a worker ended without its import log")
        return
    whole = quick_tier.merged(WORKER_PARTS)
    if QUICK_TIER_CHECK not in whole.selected:
        return
    reason = quick_tier.why_not_checked(whole, quick_tier.whole_suite(config))
    if reason:
        config.stash[QUICK_TIER_VERDICT] = ("skipped", reason)
        return
    failure = quick_tier.failure_message(*quick_tier.uncovered(whole))
    if failure:
        config.stash[QUICK_TIER_VERDICT] = ("FAILED", failure)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    else:
        modules = len(quick_tier.package_modules())
        words = f"every one of the package's {modules} modules is imported by a quick test"
        config.stash[QUICK_TIER_VERDICT] = ("passed", words)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    verdict = config.stash.get(QUICK_TIER_VERDICT, None)
    if verdict is not None:
        outcome, words = verdict
        terminalreporter.section(f"quick tier coverage (checked after the workers): {outcome}")
        terminalreporter.line(words, red=outcome == "FAILED", green=outcome == "passed")


@contextlib.contextmanager
def evaluating_only(task_ids):
    """While open, ``whatif evaluate`` in this process scores exactly ``task_ids`` (the API's
    ``task_ids``), for command-line tests whose behaviour does not depend on the number of
    tasks: a ``--subset`` of the session corpora keeps at least one task of every stratum, which
    is all 360 tasks of ``one_target_corpus``. The command is given no ``--subset`` (the API
    refuses both)."""
    from whatif_bench.evaluation import runner

    evaluate = runner.evaluate

    def only(*args, **kwargs):
        return evaluate(*args, **kwargs, task_ids=task_ids)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(runner, "evaluate", only)
        yield
