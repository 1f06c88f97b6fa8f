"""What a ``-m`` expression can select, read without collecting a test.

The suite's second phase runs ``-m "gluonts and ..."`` in ``.venv-export``. Collecting a test
file imports it (and torch, transformers, the toolkit...): about 20 s per worker for the whole
folder, though only a few files hold ``gluonts`` tests. ``needs_mark`` says when an expression
selects no test that lacks a given mark, so that ``tests/conftest.py`` can leave out the files
whose text never names it.
"""

from __future__ import annotations

import itertools
import re

from _pytest.mark.expression import Expression

OPERATORS = {"and", "or", "not"}
PLAIN = re.compile(r"[A-Za-z0-9_()\s]*")  # names, parentheses and the three operators only
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def needs_mark(expression: str, mark: str) -> bool:
    """True when the ``-m`` expression ``expression`` is false for every test without the
    mark ``mark``, whatever other marks it has; False when it may select such a test, or when
    it is not made of plain names, parentheses, ``and``, ``or`` and ``not`` (marks with
    arguments, names with dashes: this does not reason about those)."""
    if not PLAIN.fullmatch(expression):
        return False
    names = set(NAME.findall(expression)) - OPERATORS
    if mark not in names:
        return False
    try:
        compiled = Expression.compile(expression)
    except SyntaxError:  # pytest raises it for a malformed expression
        return False
    others = sorted(names - {mark})  # the expression reads no other name
    for values in itertools.product((False, True), repeat=len(others)):
        present = {name for name, value in zip(others, values, strict=True) if value}
        if compiled.evaluate(lambda name, present=present, **_: name in present):
            return False
    return True
