"""``tests/marks.py``: when a ``-m`` expression selects only tests with a mark (the second
phase leaves out the files that never name it)."""

from __future__ import annotations

import pytest

from tests.marks import needs_mark


@pytest.mark.parametrize(
    ("expression", "needed"),
    [
        ("gluonts and not heavy and not containers", True),  # bash dev test, phase 2
        ("(quick) and gluonts and not heavy and not containers", True),  # -m quick
        ("(slow or quick) and gluonts", True),
        ("gluonts", True),
        ("not not gluonts", True),
        ("not gluonts and not heavy and not containers", False),  # phase 1
        ("gluonts or slow", False),
        ("not (gluonts and slow)", False),
        ("(quick) and not gluonts", False),
        ("quick", False),
        ("", False),
        ("gluonts and mark-with-dash", False),  # not plain names: not reasoned about
        ("gluonts and parametrize(x=1)", False),
        ("gluonts and (", False),  # does not parse
        ("gluontsx and quick", False),  # another name
    ],
)
def test_an_expression_needs_the_mark_only_when_no_test_without_it_matches(expression, needed):
    assert needs_mark(expression, "gluonts") is needed


@pytest.mark.parametrize(
    ("expression", "needed"),
    [
        ("(containers) and not gluonts and not heavy", True),  # the container tier, phase 1
        ("(containers) and gluonts and not heavy", True),  # and phase 2
        ("not gluonts and not heavy and not containers", False),  # the suite's phase 1
        ("(quick) and not gluonts and not heavy and not containers", False),  # -m quick
    ],
)
def test_the_container_tiers_expressions_need_the_containers_mark(expression, needed):
    assert needs_mark(expression, "containers") is needed
