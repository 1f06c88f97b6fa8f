"""Noticing a Ctrl-C wherever it lands, so that a command interrupted by one says so.

Python raises ``KeyboardInterrupt`` in whatever Python code the main thread runs next. Two
places in the compiled libraries the toolkit calls do not pass it on:

- a ``ctypes`` callback (llvmlite calls back into Python while numba compiles a kernel):
  Python prints the exception as "ignored" and the caller goes on, so the Ctrl-C is lost and
  the command runs on, or numba later fails on the half-made kernel (``RuntimeError: no
  compiled object yet``);
- a callback of a numba kernel (``_numba_unpickle``, which boxes the arrays a kernel returns):
  the kernel goes on with the exception set and Python reports a ``SystemError`` ("...
  returned a result with an exception set") caused by it, one more for every later callback.

``CtrlCWatch`` keeps a note of every SIGINT and, when the interrupt was swallowed as
"ignored", raises it again in the main thread (where it propagates); ``ctrl_c_caused`` tells
whether an exception is one of the above.
"""

from __future__ import annotations

import _thread
import signal
import sys
import threading
from types import FrameType, TracebackType
from typing import Any

# how long after a swallowed interrupt it is raised again (the callback returns well before)
REDELIVER_AFTER_S = 0.01


class CtrlCWatch:
    """A context manager for a command's run in the main thread: inside it, a SIGINT raises
    ``KeyboardInterrupt`` as Python's own handler does and sets ``pressed``; an interrupt
    that Python would print as "Exception ignored" is raised again instead.

    It does nothing where Python's own handler is not the one installed (SIGINT ignored, or
    a program of the caller's with its own handler) or outside the main thread.
    """

    def __init__(self) -> None:
        self.pressed = False
        self._active = False
        self._in_hook = False
        self._previous_hook = sys.unraisablehook

    def __enter__(self) -> CtrlCWatch:
        if (
            threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler
        ):
            self._previous_hook = sys.unraisablehook
            signal.signal(signal.SIGINT, self._on_sigint)
            sys.unraisablehook = self._on_unraisable
            self._active = True
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._active:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            sys.unraisablehook = self._previous_hook
            self._active = False

    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        self.pressed = True
        if self._in_hook:  # raised here it would be lost too
            self._raise_again_soon()
            return
        raise KeyboardInterrupt

    def _on_unraisable(self, unraisable: Any) -> None:
        if not isinstance(unraisable.exc_value, KeyboardInterrupt):
            self._previous_hook(unraisable)
            return
        self.pressed = True  # swallowed by a callback
        self._in_hook = True
        try:
            self._raise_again_soon()
        finally:
            self._in_hook = False

    @staticmethod
    def _raise_again_soon() -> None:
        """Raise ``KeyboardInterrupt`` in the main thread ``REDELIVER_AFTER_S`` from now, once
        the callback has returned: a signal tripped at once would be handled inside the hook."""
        redeliver = threading.Timer(REDELIVER_AFTER_S, _thread.interrupt_main)
        redeliver.daemon = True
        redeliver.start()


def ctrl_c_caused(exc: BaseException) -> bool:
    """Whether ``exc`` is how a numba kernel reports a Ctrl-C that arrived in one of its
    callbacks: ``exc`` and every cause under it are ``SystemError``s down to a
    ``KeyboardInterrupt``."""
    seen: set[int] = set()
    while isinstance(exc, SystemError) and id(exc) not in seen:
        seen.add(id(exc))
        cause = exc.__cause__
        if cause is None:
            return False
        exc = cause
    return isinstance(exc, KeyboardInterrupt) and bool(seen)
