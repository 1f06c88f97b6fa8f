"""``export.background.OrderedWriter``: calls run in one thread in the order given, at most
``depth`` wait, a call's error reaches the caller, and an abandoned writer starts nothing more;
a real export whose background write fails leaves the old export and no temporary folder."""

from __future__ import annotations

import errno
import threading
import time

import pytest

from whatif_bench.export.background import OrderedWriter


def test_calls_run_in_one_thread_in_the_order_given():
    done, threads = [], set()

    def note(number: int) -> None:
        time.sleep(0.002 * (number % 3))  # uneven calls: the order must still hold
        threads.add(threading.get_ident())
        done.append(number)

    with OrderedWriter(depth=3) as writer:
        for number in range(30):
            writer.submit(note, number)
    assert done == list(range(30))
    assert len(threads) == 1 and threading.get_ident() not in threads


def test_no_more_than_depth_calls_wait():
    release, waiting = threading.Event(), []
    with OrderedWriter(depth=2) as writer:
        writer.submit(release.wait)
        writer.submit(waiting.append, 1)
        blocked = threading.Thread(target=writer.submit, args=(waiting.append, 2))
        blocked.start()
        blocked.join(0.2)
        assert blocked.is_alive()  # a third call waits for room
        release.set()
        blocked.join(5)
        assert not blocked.is_alive()
    assert waiting == [1, 2]


@pytest.mark.parametrize("when", ["submit", "finish"])
def test_a_calls_error_reaches_the_caller_and_later_calls_do_not_run(when):
    ran = []

    def fail() -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        with OrderedWriter(depth=1) as writer:
            writer.submit(fail)
            if when == "submit":
                writer.submit(ran.append, 1)  # waits for the failed call: raises
                writer.submit(ran.append, 2)
    assert ran == []


def test_the_calls_queued_after_a_failed_one_do_not_run():
    release, ran = threading.Event(), []

    def fail_when_released() -> None:
        release.wait(5)
        raise OSError(errno.EIO, "Input/output error")

    with pytest.raises(OSError, match="Input/output error"):
        with OrderedWriter(depth=3) as writer:
            writer.submit(fail_when_released)
            writer.submit(ran.append, 1)  # queued behind the call that will fail
            writer.submit(ran.append, 2)
            release.set()
    assert ran == []


def test_leaving_with_an_error_cancels_what_has_not_started():
    release, ran = threading.Event(), []
    with pytest.raises(KeyboardInterrupt):
        with OrderedWriter(depth=3) as writer:
            writer.submit(release.wait, 5)
            writer.submit(ran.append, 1)
            threading.Timer(0.1, release.set).start()
            raise KeyboardInterrupt
    assert ran == []


def test_depth_below_one_is_refused():
    with pytest.raises(ValueError, match="depth must be at least 1, got 0"):
        OrderedWriter(depth=0)
