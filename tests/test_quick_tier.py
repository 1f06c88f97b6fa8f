"""The quick tier (``bash dev test -m quick``, docs/TESTING.md) imports every module of the
package: a module that only slow tests (or only subprocesses) import is not checked by it.

What the quick tests imported is recorded by tests/conftest.py (``IMPORTS``) while they run;
this check runs after them (conftest puts it last) and needs the whole tier in the session, so
with ``-k``, ``--deselect`` or a narrower path it skips and says so.
"""

from __future__ import annotations

import pytest

from tests import quick_tier
from tests.conftest import ALL_ITEMS, NOT_QUICK, this_session
from tests.quick_tier import ImportLog, ItemRecord, Session, package_modules


def test_every_package_module_is_imported_by_the_quick_tier(request):
    config, session = request.config, request.session
    if hasattr(config, "workerinput"):
        pytest.skip(
            "pytest-xdist: this worker saw a share of the tests; the controller runs this "
            "check on every worker's log at the session's end (its own summary section)"
        )
    part = this_session(session)
    reason = quick_tier.why_not_checked(part, quick_tier.whole_suite(config))
    if reason:
        pytest.skip(reason)
    failure = quick_tier.failure_message(*quick_tier.uncovered(part))
    assert failure is None, failure


def test_the_quick_tier_is_every_test_not_marked_slow_heavy_or_containers(request):
    for item in request.config.stash[ALL_ITEMS]:
        marked = any(item.get_closest_marker(name) for name in NOT_QUICK)
        assert bool(item.get_closest_marker("quick")) != marked, item.nodeid


def test_the_module_list_reads_every_source_folder():
    modules = package_modules()
    assert {
        "whatif_bench.cli",
        "whatif_bench.simulators.opendc.library",
        "whatif_bench.evaluation.foundation",
        "whatif_bench.stream.cli",
    } <= modules
    assert not any(name.endswith("__init__") for name in modules)


def test_a_module_only_a_slow_test_imports_is_not_reached():
    """The check's own logic on a hand-made log: what the quick contexts imported, with what
    those modules import at their top level and their packages, and nothing else."""
    log = ImportLog()  # not installed: filled by hand
    log.by_context = {
        "start-up": {"whatif_bench"},
        "collect:test_a.py": {"whatif_bench.cli"},
        "test:tests/test_a.py::test_quick": {"whatif_bench.export.cli"},
        "test:tests/test_a.py::test_slow": {"whatif_bench.export.fev"},
    }
    log.top_level = {"whatif_bench.cli": {"whatif_bench.errors"}}
    reached = log.reached({"start-up", "collect:test_a.py", "test:tests/test_a.py::test_quick"})
    assert reached == {
        "whatif_bench",
        "whatif_bench.cli",
        "whatif_bench.errors",
        "whatif_bench.export",
        "whatif_bench.export.cli",
    }
    assert "whatif_bench.export.fev" in log.reached(log.by_context)


def _worker(ran: set[str], by_context: dict[str, set[str]]) -> dict:
    """One xdist worker's message, from a hand-made log, over the same three collected tests."""
    log = ImportLog()  # not installed: filled by hand
    log.by_context = by_context
    log.top_level = {"whatif_bench.cli": {"whatif_bench.errors"}}
    collected = [
        ItemRecord("tests/test_a.py::test_one", "test_a.py", ("fixture_a",), True, False),
        ItemRecord("tests/test_a.py::test_two", "test_a.py", (), True, False),
        ItemRecord("tests/test_b.py::test_slow", "test_b.py", (), False, False),
    ]
    return quick_tier.to_message(Session(log, collected, {r.nodeid for r in collected}, ran))


def test_the_workers_logs_merge_into_the_session_a_plain_run_would_record():
    """Under pytest-xdist each worker sends its part as plain values; the controller's merged
    session reaches what either worker's quick tests imported, and only that."""
    first = _worker(
        {"tests/test_a.py::test_one"},
        {
            "fixture:fixture_a": {"whatif_bench.cli"},
            "test:tests/test_a.py::test_one": {"whatif_bench.export.cli"},
        },
    )
    second = _worker(
        {"tests/test_a.py::test_two", "tests/test_b.py::test_slow"},
        {
            "test:tests/test_a.py::test_two": {"whatif_bench.stream"},
            "test:tests/test_b.py::test_slow": {"whatif_bench.export.fev"},
        },
    )
    whole = quick_tier.merged([first, second])
    assert whole.ran == {
        "tests/test_a.py::test_one",
        "tests/test_a.py::test_two",
        "tests/test_b.py::test_slow",
    }
    assert [r.nodeid for r in whole.collected] == [
        "tests/test_a.py::test_one",
        "tests/test_a.py::test_two",
        "tests/test_b.py::test_slow",
    ]
    assert quick_tier.why_not_checked(whole, asked_for_all=True) is None
    missing, stale = quick_tier.uncovered(whole)
    assert stale == []
    for reached in ("whatif_bench.cli", "whatif_bench.errors", "whatif_bench.export.cli"):
        assert reached not in missing
    assert "whatif_bench.stream" not in missing
    assert "whatif_bench.export.fev" in missing  # only the slow test imported it
    message = quick_tier.failure_message(missing, stale)
    assert message is not None and "whatif_bench.export.fev" in message


@pytest.mark.parametrize(
    ("ran", "whole_suite", "says"),
    [
        ({"tests/test_a.py::test_one"}, True, "did not run"),
        ({"tests/test_a.py::test_one", "tests/test_a.py::test_two"}, False, "whole quick tier"),
    ],
)
def test_a_partial_session_is_not_judged(ran, whole_suite, says):
    whole = quick_tier.merged([_worker(ran, {})])
    reason = quick_tier.why_not_checked(whole, asked_for_all=whole_suite)
    assert reason is not None and says in reason
