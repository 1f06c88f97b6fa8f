"""Every code block of the README and docs/ runs as written (tests/doc_snippets.py says how a
block may ask for small inputs, another environment, or say why it is not run here).

Each page's runnable blocks run in order, as new processes (``bash -e -o pipefail`` or the
environment's ``python``; in the main environment a ``python`` block, and a ``bash`` block's
``whatif``, are forked from the warm server, tests/warm_cli.py), in one scratch folder holding
copies of ``examples/`` and the shipped baselines at ``simulators/data/baselines.h5``, with
``.venv`` linked to this environment. A block fails its page's test with its place (page and
line), its code and the end of its stderr.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.conftest import WarmWhatif
from tests.doc_snippets import (
    KNOWN,
    PAGES,
    ROOT,
    DirectiveError,
    Snippet,
    all_snippets,
    page_snippets,
    parse_directives,
)

EXPORT_ENV = ROOT / ".venv-export"
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "MPLBACKEND": "Agg"}
TIMEOUT_S = 900
# `bash dev test` installs .venv-export in the background while phase 1 runs, and gives the
# set-up's process id here: a block that runs in .venv-export waits for it (a half-installed
# environment has python but not yet every package).
EXPORT_SETUP_PID_ENV = "WHATIF_EXPORT_SETUP_PID"


def wait_for_export_setup(timeout_s: float = 1800.0) -> None:
    """Return once the background set-up of .venv-export (if any) has ended, or after
    ``timeout_s``; ``bash dev test`` itself reports a set-up that failed."""
    pid = os.environ.get(EXPORT_SETUP_PID_ENV, "")
    deadline = time.monotonic() + timeout_s
    while pid.isdigit() and time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
        except (OSError, IndexError):
            return  # ended (and reaped by the shell that started it)
        if state == "Z":  # ended, not yet reaped
            return
        time.sleep(1.0)


# ---- the pages and their directives (quick) -------------------------------------------------


def test_every_directive_is_known_and_every_page_parses():
    snippets = all_snippets()  # raises DirectiveError on an unknown or malformed directive
    assert sum(s.runnable for s in snippets) >= 40
    assert {s.page.name for s in snippets if s.runnable} >= {"README.md", "AUTHORING.md"}


def test_every_block_run_elsewhere_names_a_test_that_reads_its_page():
    for snippet in all_snippets():
        test_file = snippet.value("run by")
        if test_file is None:
            continue
        path = ROOT / test_file
        assert path.is_file(), f"{snippet.where}: run by {test_file}: no such file"
        assert snippet.page.name in path.read_text(encoding="utf-8"), (
            f"{snippet.where}: {test_file} does not read {snippet.page.name}"
        )


def test_every_toml_block_parses():
    for snippet in all_snippets():
        if snippet.language == "toml":
            try:
                tomllib.loads(snippet.code)
            except tomllib.TOMLDecodeError as exc:
                pytest.fail(f"{snippet.where}: not TOML: {exc}")


def test_the_authoring_pages_spec_is_the_example_file_its_commands_read():
    guide = ROOT / "docs" / "AUTHORING.md"
    specs = [s for s in page_snippets(guide) if s.language == "toml" and "[simulator]" in s.code]
    assert [s.code for s in specs] == [(ROOT / "examples" / "lab.toml").read_text(encoding="utf-8")]


@pytest.mark.parametrize(
    "body",
    [
        "smal-corpus",  # a typo
        'replace "only-one"',
        "replace a b c",
        "env main",
        "not run:",
        "run by:   ",
    ],
)
def test_a_malformed_directive_is_refused(body):
    with pytest.raises(DirectiveError):
        parse_directives(body, "PAGE.md:1")


def test_a_stale_replacement_is_refused(tmp_path):
    page = tmp_path / "P.md"
    page.write_text('<!-- snippet: replace "count=9" "count=1" -->\n```python\nx = 1\n```\n')
    (snippet,) = page_snippets(page)
    with pytest.raises(DirectiveError, match="not in the block"):
        snippet.code_to_run()


def test_directives_and_replacements_are_read_from_the_comment_above(tmp_path):
    page = tmp_path / "P.md"
    page.write_text(
        "text\n"
        '<!-- snippet: small-corpus; replace "--count 500" "--count 5"; env export -->\n'
        "```bash\nwhatif stream --count 500  # comment\n```\n"
        "```json\n{}\n```\n"
    )
    first, second = page_snippets(page)
    assert first.line == 3 and first.language == "bash" and first.runnable
    assert first.has("small-corpus") and first.has("env") and not first.has("not run")
    assert first.code_to_run() == "whatif stream --count 5  # comment\n"
    assert second.language == "json" and not second.runnable and second.directives == ()
    assert set(KNOWN) >= {"small-corpus", "replace", "env", "continues", "not run", "run by"}


# ---- running the pages (slow: real generate, evaluate, export, stream) ---------------------


def test_export_blocks_wait_for_the_background_set_up_to_end(monkeypatch):
    setup = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1.5)"])
    monkeypatch.setenv(EXPORT_SETUP_PID_ENV, str(setup.pid))
    started = time.monotonic()
    wait_for_export_setup()
    assert time.monotonic() - started >= 1.0
    assert setup.wait(timeout=10) == 0
    started = time.monotonic()
    wait_for_export_setup()  # ended and reaped: no wait
    monkeypatch.delenv(EXPORT_SETUP_PID_ENV)
    wait_for_export_setup()  # no background set-up: no wait
    assert time.monotonic() - started < 1.0


class LocalChatServer:
    """An OpenAI-compatible chat endpoint on 127.0.0.1 that answers every prompt with text the
    toolkit cannot parse as a forecast, so every task is retried, then imputed (recorded)."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                length = int(self.headers.get("Content-Length", 0))
                self.rfile.read(length)
                body = json.dumps(
                    {
                        "id": "local",
                        "object": "chat.completion",
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": "no forecast"},
                                "finish_reason": "stop",
                            }
                        ],
                        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.http.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


@pytest.fixture(scope="module")
def chat_server() -> Iterator[LocalChatServer]:
    server = LocalChatServer()
    yield server
    server.close()


def scratch_folder(folder: Path) -> Path:
    """A folder laid out as the repository's top as far as the blocks read it."""
    shutil.copytree(ROOT / "examples", folder / "examples")
    (folder / "simulators" / "data").mkdir(parents=True)
    shutil.copy2(ROOT / "simulators" / "data" / "baselines.h5", folder / "simulators" / "data")
    (folder / ".venv").symlink_to(Path(sys.prefix))
    if EXPORT_ENV.is_dir():
        (folder / ".venv-export").symlink_to(EXPORT_ENV)
    return folder


def run_snippet(
    snippet: Snippet,
    folder: Path,
    small_corpus: Path,
    server_url: str,
    before: str = "",
    warm: WarmWhatif | None = None,
) -> None:
    """Run one block in ``folder`` (after ``before``, the code of the block it continues); fail
    with its place, code and stderr if it fails. A block of the main environment runs through
    ``warm`` when given (tests/warm_cli.py): a ``python`` block as ``python -c``, a ``bash``
    block's ``whatif`` commands."""
    code = before + snippet.code_to_run()
    prefix = Path(sys.prefix)
    if snippet.has("env"):
        wait_for_export_setup()
        if not (EXPORT_ENV / "bin" / "python").is_file():
            pytest.skip(f"{snippet.where} runs in .venv-export, which is not set up")
        prefix = EXPORT_ENV
    python = prefix / "bin" / "python"
    if snippet.has("small-corpus") and not (folder / "whatif-corpus.h5").exists():
        shutil.copy2(small_corpus, folder / "whatif-corpus.h5")
    env = {**os.environ, **OFFLINE, "WHATIF_TEST_LLM_URL": server_url}
    env["PATH"] = f"{prefix / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env.pop("VIRTUAL_ENV", None)
    if prefix != Path(sys.prefix):  # the warm servers are this environment's
        warm = None
    if snippet.language == "bash":
        argv = ["bash", "-e", "-o", "pipefail", "-c", code]
    elif warm is not None:
        argv = warm.python(code)
    else:
        argv = [str(python), "-c", code]
    if warm is not None:
        env = warm.env(env)
    try:
        result = subprocess.run(
            argv, cwd=folder, env=env, capture_output=True, text=True, timeout=TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{snippet.where} took over {TIMEOUT_S} s:\n{code}")
    failed = result.returncode != 0 or "Traceback (most recent call last)" in result.stderr
    if failed:
        pytest.fail(
            f"{snippet.where} failed (exit {result.returncode}):\n{code}\n"
            f"--- stdout (end) ---\n{result.stdout[-1500:]}\n"
            f"--- stderr (end) ---\n{result.stderr[-3000:]}",
            pytrace=False,
        )


def run_page(
    page: Path, tmp_path: Path, small_corpus: Path, server_url: str, warm: WarmWhatif
) -> None:
    folder = scratch_folder(tmp_path / "page")
    ran = 0
    python_so_far = ""  # the code of the page's last python block, and of those it continues
    for snippet in page_snippets(page):
        if not snippet.runnable or snippet.has("not run") or snippet.has("run by"):
            continue
        before = ""
        if snippet.has("continues"):
            assert snippet.language == "python" and python_so_far, (
                f"{snippet.where}: 'continues' needs a python block before it on the page"
            )
            before = python_so_far
        run_snippet(snippet, folder, small_corpus, server_url, before, warm)
        if snippet.language == "python":
            python_so_far = before + snippet.code_to_run()
        ran += 1
    assert ran, f"{page.name} has no block to run"


def _pages_to_run() -> list[Path]:
    try:
        snippets = all_snippets()
    except DirectiveError:  # test_every_directive_is_known_and_every_page_parses says where
        return []
    return sorted(
        {s.page for s in snippets if s.runnable and not s.has("not run") and not s.has("run by")}
    )


def _page_test(page: Path):
    @pytest.mark.slow
    def test_the_pages_blocks_run_as_written(
        self, tmp_path, two_target_corpus, chat_server, warm_whatif
    ):
        run_page(page, tmp_path, two_target_corpus, chat_server.url, warm_whatif)

    return test_the_pages_blocks_run_as_written


# One class per page, so pytest-xdist's loadscope gives the pages to different workers.
_page = ROOT
for _page in _pages_to_run():
    _name = "TestPage_" + _page.stem.replace("-", "_")
    globals()[_name] = type(_name, (), {"test_the_pages_blocks_run_as_written": _page_test(_page)})
del _page

assert PAGES  # the README and docs/ exist
