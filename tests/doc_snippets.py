"""The code blocks of the README and docs/, and how the tests run them (tests/test_doc_snippets.py).

Every ``bash`` and ``python`` block runs as written, in reading order, in one scratch folder per
page, so a block may use what an earlier block of its page wrote. A block may say how in an HTML
comment on the line right above its fence (invisible on GitHub, read by the tests)::

    <!-- snippet: small-corpus; replace "count=100_000" "count=256" -->

Its directives, separated by ``;``:

- ``small-corpus``: ``whatif-corpus.h5`` in the folder is a small corpus of two targets
  (``sumo/flow_loop_e_0_near``, ``epanet/pressure_10``), not the default corpus that
  ``bash dev corpus`` writes. A block that reads ``whatif-corpus.h5`` without saying so fails:
  no such file.
- ``replace "OLD" "NEW"``: run with ``OLD`` replaced by ``NEW`` (a smaller count, a local
  server's address); ``OLD`` must be in the block, so a stale directive fails.
- ``env export``: run in ``.venv-export`` (pandas 2: GluonTS, TabPFN-TS) instead of the
  suite's own environment.
- ``llm-server``: a local OpenAI-compatible server answers on ``$WHATIF_TEST_LLM_URL``.
- ``continues``: a ``python`` block that goes on from the page's previous ``python`` block
  (its names): it runs as that block's code followed by its own.
- ``not run: REASON``: shown, not run; the reason must say why (a cluster on other machines,
  the package index, a command that is itself the test suite).
- ``run by: tests/FILE.py``: run by that test file, which must read this page.

Other fenced blocks (``toml``, ``json``, ``text``, output) are not run; ``toml`` blocks must
parse.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
RUNNABLE = ("bash", "python")
FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<language>[\w+-]*)[ \t]*$")
DIRECTIVE = re.compile(r"^\s*<!--\s*snippet:\s*(?P<body>.*?)\s*-->\s*$")
KNOWN = ("small-corpus", "replace", "env", "llm-server", "continues", "not run", "run by")


class DirectiveError(ValueError):
    """A ``<!-- snippet: ... -->`` comment the tests cannot follow."""


@dataclass(frozen=True)
class Snippet:
    """One fenced block of a page: ``line`` is the 1-based line of its opening fence."""

    page: Path
    line: int
    language: str
    code: str
    directives: tuple[str, ...] = ()
    replacements: tuple[tuple[str, str], ...] = field(default=())

    @property
    def where(self) -> str:
        return f"{_shown(self.page)}:{self.line}"

    @property
    def runnable(self) -> bool:
        return self.language in RUNNABLE

    def has(self, key: str) -> bool:
        return any(
            d == key or d.startswith(key + ":") or d.startswith(key + " ") for d in self.directives
        )

    def value(self, key: str) -> str | None:
        for directive in self.directives:
            if directive.startswith(key + ":"):
                return directive[len(key) + 1 :].strip()
            if directive.startswith(key + " "):
                return directive[len(key) :].strip()
        return None

    def code_to_run(self) -> str:
        """The block with its ``replace`` directives applied (each must match)."""
        code = self.code
        for old, new in self.replacements:
            if old not in code:
                raise DirectiveError(f"{self.where}: replace {old!r}: not in the block")
            code = code.replace(old, new)
        return code


def parse_directives(body: str, where: str) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """Split a directive comment's body into directives and (old, new) replacements."""
    directives: list[str] = []
    replacements: list[tuple[str, str]] = []
    for part in (p.strip() for p in body.split(";")):
        if not part:
            continue
        if not any(
            part == k or part.startswith(k + ":") or part.startswith(k + " ") for k in KNOWN
        ):
            raise DirectiveError(f"{where}: unknown snippet directive {part!r}; known: {KNOWN}")
        if part.startswith("replace"):
            words = shlex.split(part[len("replace") :])
            if len(words) != 2:
                raise DirectiveError(f"{where}: replace takes two quoted strings: {part!r}")
            replacements.append((words[0], words[1]))
        elif part.startswith("env") and part.split()[1:] != ["export"]:
            raise DirectiveError(f"{where}: the only other environment is 'env export': {part!r}")
        elif part.startswith(("not run", "run by")) and not part.partition(":")[2].strip():
            raise DirectiveError(f"{where}: {part.partition(':')[0]!r} needs a text after ':'")
        directives.append(part)
    return tuple(directives), tuple(replacements)


def page_snippets(page: Path) -> list[Snippet]:
    """Every fenced block of ``page``, with the directives of the comment right above it."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found: list[Snippet] = []
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        indent = opening["indent"]
        end = index + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        body = [
            line[len(indent) :] if line.startswith(indent) else line
            for line in lines[index + 1 : end]
        ]
        where = f"{_shown(page)}:{index + 1}"
        comment = DIRECTIVE.match(lines[index - 1]) if index > 0 else None
        directives, replacements = parse_directives(comment["body"], where) if comment else ((), ())
        found.append(
            Snippet(
                page,
                index + 1,
                opening["language"],
                "\n".join(body) + "\n",
                directives,
                replacements,
            )
        )
        index = end + 1
    return found


def _shown(page: Path) -> str:
    """``page`` relative to the repository when it is in it."""
    return str(page.relative_to(ROOT)) if page.is_relative_to(ROOT) else str(page)


def all_snippets() -> list[Snippet]:
    return [snippet for page in PAGES for snippet in page_snippets(page)]
