"""A Ctrl-C ends a command as an interrupt (exit 130, its note, no output) even where a compiled
library loses it (a ``ctypes`` callback, as llvmlite's while numba compiles), turns it into
another error, or reports it as a chain of ``SystemError``s (a numba kernel's callbacks)."""

from __future__ import annotations

import ctypes
import signal
import sys
import threading
import time

import pytest

from tests.conftest import run_cli
from whatif_bench.ctrl_c import CtrlCWatch, ctrl_c_caused

ARGS = ("stream", "--seed", "3", "--count", "50", "--simulators", "epanet")
INTERRUPTED = "interrupted; no shards were kept; --out is unchanged"
UNEXPECTED = "error: unexpected SystemError: "
CALLBACK = ctypes.CFUNCTYPE(None)


def _press_ctrl_c_in_a_callback() -> None:
    """Call C code that calls back into Python, where a SIGINT arrives: Python raises the
    interrupt inside the callback, prints it as "ignored" and returns to the caller."""

    def body() -> None:
        signal.raise_signal(signal.SIGINT)
        for _ in range(100):  # the handler runs on one of these steps, inside the callback
            pass

    CALLBACK(body)()


def _spin(seconds: float) -> None:
    """Run Python steps (where a pending interrupt is raised) for ``seconds``."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


@pytest.fixture(autouse=True)
def pythons_own_sigint_handler():
    """Python's own SIGINT handler, as an interactive run has it: a test runner started in the
    background (``cmd &``, as a CI script may) inherits SIGINT ignored."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.fixture
def unraisable(monkeypatch) -> list:
    """What reaches ``sys.unraisablehook`` (pytest's own would turn it into a warning)."""
    seen: list = []
    monkeypatch.setattr(sys, "unraisablehook", lambda report: seen.append(report.exc_value))
    return seen


def test_without_the_watch_a_ctrl_c_in_a_callback_is_lost(unraisable):
    _press_ctrl_c_in_a_callback()
    _spin(0.2)  # no KeyboardInterrupt
    assert [type(exc) for exc in unraisable] == [KeyboardInterrupt]


def test_the_watch_raises_a_ctrl_c_lost_in_a_callback_again(unraisable):
    with CtrlCWatch() as watch:
        with pytest.raises(KeyboardInterrupt):
            _press_ctrl_c_in_a_callback()
            _spin(5)
        assert watch.pressed
    assert unraisable == []  # nothing printed as "ignored"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert sys.unraisablehook is not None and unraisable == []


def test_the_watch_passes_other_unraisable_errors_on_and_puts_the_hooks_back(unraisable):
    hook = sys.unraisablehook

    def failing() -> None:
        raise ValueError("not an interrupt")

    with CtrlCWatch() as watch:
        CALLBACK(failing)()
        _spin(0.1)
    assert [type(exc) for exc in unraisable] == [ValueError]
    assert not watch.pressed
    assert sys.unraisablehook is hook
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_plain_ctrl_c_under_the_watch_is_a_keyboard_interrupt():
    with CtrlCWatch() as watch:
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
            _spin(5)
    assert watch.pressed


def test_the_watch_leaves_an_ignored_sigint_ignored(monkeypatch):
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with CtrlCWatch() as watch:
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            signal.raise_signal(signal.SIGINT)
            _spin(0.1)
        assert not watch.pressed
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


def test_the_watch_does_nothing_outside_the_main_thread():
    handlers = []

    def run() -> None:
        with CtrlCWatch():
            handlers.append(signal.getsignal(signal.SIGINT))

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert handlers == [signal.default_int_handler]


def test_a_command_whose_ctrl_c_a_callback_lost_is_interrupted(tmp_path, monkeypatch):
    """Seen with a Ctrl-C while numba compiled the stream's kernels: the command ran on."""
    from whatif_bench.stream import shards

    def loses_the_interrupt(*args, **kwargs):
        _press_ctrl_c_in_a_callback()
        _spin(10)
        raise AssertionError("the Ctrl-C was lost")

    monkeypatch.setattr(shards, "write_shards", loses_the_interrupt)
    result = run_cli(*ARGS, "--out", str(tmp_path / "s"))
    assert (result.returncode, result.stderr) == (130, INTERRUPTED + "\n")
    assert not (tmp_path / "s").exists()


def test_a_command_whose_ctrl_c_a_library_turned_into_another_error_is_interrupted(
    tmp_path, monkeypatch
):
    """Seen with a Ctrl-C while numba compiled: ``RuntimeError: no compiled object yet``."""
    from whatif_bench.stream import shards

    def turns_it_into_an_error(*args, **kwargs):
        try:
            signal.raise_signal(signal.SIGINT)
            _spin(10)
        except KeyboardInterrupt:
            raise RuntimeError("no compiled object yet for <Library '_slot_entropy'>") from None

    monkeypatch.setattr(shards, "write_shards", turns_it_into_an_error)
    result = run_cli(*ARGS, "--out", str(tmp_path / "s"))
    assert (result.returncode, result.stderr) == (130, INTERRUPTED + "\n")


def _system_errors_over(cause: BaseException | None, depth: int) -> SystemError:
    """``depth`` chained ``SystemError``s over ``cause``, as a numba kernel's callbacks leave
    them."""
    error: SystemError | None = None
    for _ in range(depth):
        outer = SystemError("<function _numba_unpickle> returned a result with an exception set")
        outer.__cause__ = cause if error is None else error
        error = outer
    assert error is not None
    return error


@pytest.mark.parametrize(
    ("cause", "depth", "code", "message"),
    [
        (KeyboardInterrupt(), 1, 130, INTERRUPTED),
        # seen in CI: every later callback of the same kernel chained one more SystemError
        (KeyboardInterrupt(), 7, 130, INTERRUPTED),
        (ValueError("a real fault"), 1, 1, UNEXPECTED),
        (ValueError("a real fault"), 7, 1, UNEXPECTED),
        (None, 3, 1, UNEXPECTED),
    ],
    ids=["ctrl-c", "ctrl-c-under-a-chain", "other-cause", "other-cause-under-a-chain", "no-cause"],
)
def test_a_ctrl_c_that_a_kernel_reports_as_system_errors_is_an_interrupt(
    tmp_path, monkeypatch, cause, depth, code, message
):
    """A Ctrl-C raised in a numba kernel's callback comes back as a chain of ``SystemError``s
    ("... returned a result with an exception set") over the ``KeyboardInterrupt`` (seen under
    load: ``CPUDispatcher(<function _draw_slots>)`` over ``_numba_unpickle``): the command
    says it was interrupted. Any other chain is an error."""
    from whatif_bench.stream import shards

    def raises(*args, **kwargs):
        raise _system_errors_over(cause, depth)

    monkeypatch.setattr(shards, "write_shards", raises)
    result = run_cli(*ARGS, "--out", str(tmp_path / "s"))
    assert result.returncode == code
    assert result.stderr.startswith(message), result.stderr
    assert not (tmp_path / "s").exists()


def test_a_system_error_that_causes_itself_is_not_a_ctrl_c():
    looped = SystemError("a loop")
    looped.__cause__ = looped
    assert not ctrl_c_caused(looped)
    assert not ctrl_c_caused(KeyboardInterrupt())  # main catches that one itself
    assert ctrl_c_caused(_system_errors_over(KeyboardInterrupt(), 2))
