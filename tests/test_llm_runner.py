"""``whatif llm run / batch / batch-read / score`` against a real HTTP server on 127.0.0.1.

The server speaks the chat-completions format: it recognises the task of each prompt (by its
future tables), answers with the truth from the export's key (a perfect model), and follows a
per-task script of misbehaviour (500, 429 with Retry-After, a truncated or unparseable answer,
a slow answer, an answer held until the next ``reset``, a dropped connection, NaN in the body,
401). It records every request, the Authorization headers and the largest number of requests
in flight.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.conftest import run_main, sigint_as_ctrl_c
from whatif_bench.evaluation.llm_client import ChatClient
from whatif_bench.evaluation.llm_prompt import (
    FatalModelError,
    forecast_with_retries,
    inline_prompt,
)

# the reports of llm score and evaluate draw one skill plot, not five (tests/conftest.py): not
# what these tests check
pytestmark = pytest.mark.usefixtures("one_skill_plot_in_module")

KEY_ENV = "WHATIF_TEST_LLM_KEY"
SECRET = "sk-test-5ecret-do-not-write-0123456789"
MODEL = "test/model:v1"


def _block(prompt: str, name: str) -> str:
    match = re.search(re.escape(f"\n{name}:\n```csv\n") + r"(.*?)```", prompt, re.DOTALL)
    assert match is not None, name
    return match.group(1)


def signature(prompt: str) -> tuple[str, str, str]:
    """What tells the tasks of the export apart in a prompt: the future tables and the last
    past row (kept by any --max-context)."""
    last = _block(prompt, "past_covariates.csv").splitlines()[-1]
    return (
        _block(prompt, "future_covariates.csv"),
        _block(prompt, "future_timestamps.csv"),
        last,
    )


def answer_text(line: dict, values) -> str:
    pairs = "\n".join(
        f"({s}, {v!r})" for s, v in zip(line["future_timestamps"], values, strict=True)
    )
    return f"Here it is:\n<target_1>\n{pairs}\n</target_1>\n"


class Server:
    """The scripted endpoint (see the module doc)."""

    def __init__(self, lines: list[dict], signatures: dict) -> None:
        self.lines, self.signatures = lines, signatures
        self.script: dict[str, list[str]] = {}
        self.requests: list[tuple[str, str, float]] = []
        self.auth: list[str | None] = []
        self.prompts: dict[str, str] = {}
        self.in_flight = self.max_in_flight = 0
        self.delay = 0.0
        self.lock = threading.Lock()
        self.generation = 0
        self.wake = threading.Event()  # set by reset: releases the "sleep" answers
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                server.handle(self)

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.http.daemon_threads = True
        self.thread = threading.Thread(target=self.http.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}/v1"

    def reset(self, script: dict[str, list[str]] | None = None, delay: float = 0.0) -> None:
        with self.lock:
            self.script = {k: list(v) for k, v in (script or {}).items()}
            self.requests.clear()
            self.auth.clear()
            self.prompts.clear()
            self.in_flight = self.max_in_flight = 0
            self.delay = delay
            self.generation += 1
            self.wake.set()
            self.wake = threading.Event()

    def count(self, name: str | None = None) -> int:
        return sum(1 for r in self.requests if name is None or r[0] == name)

    def handle(self, handler: BaseHTTPRequestHandler) -> None:
        body = json.loads(handler.rfile.read(int(handler.headers["Content-Length"])))
        prompt = body["messages"][0]["content"]
        line = self.signatures[signature(prompt)]
        name = Path(line["folder"]).name
        with self.lock:
            queue = self.script.get(name, [])
            behaviour = queue.pop(0) if queue else "ok"
            self.requests.append((name, behaviour, time.monotonic()))
            self.auth.append(handler.headers.get("Authorization"))
            self.prompts[name] = prompt
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            generation, wake = self.generation, self.wake
        try:
            time.sleep(self.delay)
            if behaviour == "sleep":
                wake.wait(30)
            self.respond(handler, behaviour, line, body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (a slow answer beyond its timeout)
        finally:
            with self.lock:
                if generation == self.generation:
                    self.in_flight -= 1

    def respond(self, handler, behaviour: str, line: dict, body: dict) -> None:
        headers: dict[str, str] = {}
        status, finish = 200, "stop"
        content = answer_text(line, line["future_target"])
        if behaviour == "drop":  # close the connection without a response
            handler.close_connection = True
            return
        if behaviour == "late401":
            time.sleep(0.5)
            behaviour = "401"
        if behaviour == "naive":
            content = answer_text(line, [line["history_last_value"]] * len(line["future_target"]))
        elif behaviour == "slow":
            time.sleep(1.5)
        elif behaviour == "length":
            content, finish = content[: len(content) // 2], "length"
        elif behaviour == "garbage":
            content = "I am sorry, I cannot forecast this series."
        if behaviour in ("500", "429", "401", "echo"):
            status = int(behaviour) if behaviour != "echo" else 503
            if behaviour == "429":
                headers["Retry-After"] = "1"
            text = json.dumps(
                {"error": {"message": f"refused ({handler.headers.get('Authorization')})"}}
            )
        else:
            text = json.dumps(
                {
                    "id": "chatcmpl-1",
                    "object": "chat.completion",
                    "model": body["model"],
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": content},
                            "finish_reason": finish,
                        }
                    ],
                    "usage": {
                        "prompt_tokens": len(body["messages"][0]["content"]) // 4,
                        "completion_tokens": len(content) // 4,
                    },
                }
            )
            odd = {"prompt_tokens": -3, "completion_tokens": 2.5, "total_tokens": 12, "x": {}}
            if behaviour == "nan":  # json.dumps writes NaN, as some servers do
                text = text.replace('"prompt_tokens": ', '"prompt_tokens": NaN, "was": ')
            elif behaviour == "huge":
                text = text.replace('"prompt_tokens": ', '"prompt_tokens": 1e400, "was": ')
            elif behaviour == "odd-usage":
                text = text[: text.index('"usage"')] + f'"usage": {json.dumps(odd)}}}'
        data = text.encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        for key, value in headers.items():
            handler.send_header(key, value)
        handler.end_headers()
        handler.wfile.write(data)

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


@pytest.fixture(scope="module")
def export(one_target_corpus, tmp_path_factory):
    """The corpus's Replay tasks, exported once with the real ``whatif export --format llm``."""
    from whatif_bench.cli import main

    out = tmp_path_factory.mktemp("llm-export") / "export"
    code = main(
        [
            "export",
            str(one_target_corpus),
            "--format",
            "llm",
            "--out",
            str(out),
            "--futures",
            "replay",
            "--subset",
            "0.01",
        ]
    )
    assert code == 0
    return out


@pytest.fixture(scope="module")
def lines(export) -> list[dict]:
    return [json.loads(t) for t in (export / "key.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def server(export, lines):
    signatures = {signature(inline_prompt(export / line["folder"])): line for line in lines}
    assert len(signatures) == len(lines)  # every task's prompt is recognised
    endpoint = Server(lines, signatures)
    yield endpoint
    endpoint.close()


@pytest.fixture
def endpoint(server, monkeypatch):
    server.reset()
    monkeypatch.setenv(KEY_ENV, SECRET)
    yield server
    # a stopped run leaves its requests in flight behind (daemon threads): let them end here,
    # so that none reaches the server during the next test
    server.reset()  # releases the answers held by "sleep"
    deadline = time.monotonic() + 15
    for thread in threading.enumerate():
        if thread.name.startswith("whatif-llm-"):
            thread.join(max(0.0, deadline - time.monotonic()))
    server.reset()


def name_of(line: dict) -> str:
    return Path(line["folder"]).name


def llm_run(capsys, export, out, server, *extra: str):
    return run_main(
        capsys,
        "llm",
        "run",
        str(export),
        "--base-url",
        server.url,
        "--model",
        MODEL,
        "--out",
        str(out),
        "--api-key-env",
        KEY_ENV,
        "--max-wait",
        "0",
        "--timeout",
        "5",
        *extra,
    )


def answer_of(out: Path, line: dict) -> dict:
    return json.loads((out / "answers" / f"{name_of(line)}.json").read_text())


def attempts_of(out: Path, line: dict) -> list[dict]:
    folder = out / "attempts" / name_of(line)
    return [json.loads(p.read_text()) for p in sorted(folder.glob("attempt-*.json"))]


# ---- run ------------------------------------------------------------------------------------


@pytest.mark.slow  # about 4 s
def test_answers_are_parsed_stored_and_the_prompt_is_the_inline_one(
    capsys, tmp_path, export, lines, endpoint
):
    out = tmp_path / "responses"
    code, stdout, _ = llm_run(capsys, export, out, endpoint, "--limit", "2")
    assert code == 0, stdout
    assert "2 tasks: 2 answered, 0 imputed" in stdout and "2 attempts" in stdout
    for line in lines[:2]:
        record = answer_of(out, line)
        assert not record["imputed"] and record["attempts"] == 1
        assert np.array_equal(np.float32(record["values"]), np.float32(line["future_target"]))
        assert record["latency_s"] > 0 and record["prompt_tokens"] > 0
        assert record["completion_tokens"] > 0 and record["finish_reason"] == "stop"
        (attempt,) = attempts_of(out, line)
        assert attempt["status"] == 200 and attempt["outcome"] == "ok"
        assert json.loads(attempt["body"])["model"] == MODEL
        assert endpoint.prompts[name_of(line)] == inline_prompt(export / line["folder"])
    assert not (out / "answers" / f"{name_of(lines[2])}.json").exists()
    assert endpoint.auth == [f"Bearer {SECRET}"] * 2
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["model"] == MODEL and manifest["max_context"] is None
    assert manifest["base_url"] == endpoint.url + "/chat/completions"
    assert (out / "key.jsonl").read_text() == (export / "key.jsonl").read_text()


def test_transient_failures_are_retried_until_an_answer(capsys, tmp_path, export, lines, endpoint):
    script = ["500", "length", "garbage", "slow", "echo"]
    endpoint.reset({name_of(lines[0]): list(script)})
    out = tmp_path / "responses"
    code, stdout, _ = llm_run(
        capsys, export, out, endpoint, "--limit", "1", "--timeout", "0.5", "--max-context", "8"
    )
    assert code == 0
    record = answer_of(out, lines[0])
    assert not record["imputed"] and record["attempts"] == len(script) + 1
    assert endpoint.count(name_of(lines[0])) == len(script) + 1
    reasons = record["reasons"]
    assert "HTTP 500" in reasons[0] and "finish_reason: length" in reasons[1]
    assert "unparseable answer" in reasons[2] and "--timeout 0.5" in reasons[3]
    assert "HTTP 503" in reasons[4]
    outcomes = [a["outcome"] for a in attempts_of(out, lines[0])]
    assert outcomes == ["transient"] * len(script) + ["ok"]
    assert np.array_equal(np.float32(record["values"]), np.float32(lines[0]["future_target"]))


@pytest.mark.slow  # about 1 s
def test_retry_after_is_honoured(capsys, tmp_path, export, lines, endpoint):
    endpoint.reset({name_of(lines[0]): ["429"]})
    out = tmp_path / "responses"
    code, _, _ = llm_run(capsys, export, out, endpoint, "--limit", "1", "--max-context", "8")
    assert code == 0
    (first, second) = [r[2] for r in endpoint.requests]
    assert second - first >= 0.95  # Retry-After: 1, although --max-wait is 0
    assert attempts_of(out, lines[0])[0]["retry_after_s"] == 1.0


def test_after_max_attempts_the_task_is_imputed_with_the_reasons(
    capsys, tmp_path, export, lines, endpoint
):
    endpoint.reset({name_of(lines[1]): ["garbage"] * 5})
    out = tmp_path / "responses"
    code, stdout, _ = llm_run(
        capsys, export, out, endpoint, "--limit", "2", "--max-attempts", "3", "--max-context", "8"
    )
    assert code == 0 and "1 answered, 1 imputed" in stdout
    record = answer_of(out, lines[1])
    assert record["imputed"] and record["attempts"] == 3 and len(record["reasons"]) == 3
    assert record["values"] == [lines[1]["history_last_value"]] * len(lines[1]["future_target"])
    assert record["latency_s"] is None
    assert endpoint.count(name_of(lines[1])) == 3 and len(attempts_of(out, lines[1])) == 3


def test_401_stops_the_run_at_once_keeping_earlier_answers(
    capsys, tmp_path, export, lines, endpoint
):
    endpoint.reset({name_of(lines[2]): ["401"]})
    out = tmp_path / "responses"
    code, stdout, stderr = llm_run(
        capsys, export, out, endpoint, "--concurrency", "1", "--max-context", "8"
    )
    assert code == 1
    errors = [t for t in stderr.splitlines() if t.startswith("error:")]
    assert len(errors) == 1 and stderr.strip() == errors[0]
    assert "HTTP 401" in errors[0] and f"${KEY_ENV}" in errors[0] and SECRET not in errors[0]
    assert endpoint.count() == 3 and endpoint.count(name_of(lines[2])) == 1  # no retry, no more
    assert answer_of(out, lines[0])["imputed"] is False
    assert answer_of(out, lines[1])["imputed"] is False
    assert not (out / "answers" / f"{name_of(lines[2])}.json").exists()
    assert attempts_of(out, lines[2])[0]["status"] == 401


def test_a_second_run_asks_only_the_unanswered_tasks(capsys, tmp_path, export, lines, endpoint):
    out = tmp_path / "responses"
    endpoint.reset({name_of(lines[3]): ["401"]})
    code, _, _ = llm_run(
        capsys, export, out, endpoint, "--concurrency", "1", "--limit", "6", "--max-context", "8"
    )
    assert code == 1 and endpoint.count() == 4
    endpoint.reset()
    code, stdout, _ = llm_run(capsys, export, out, endpoint, "--limit", "6", "--max-context", "8")
    assert code == 0 and "6 answered" in stdout and "(3 done before)" in stdout
    assert sorted(r[0] for r in endpoint.requests) == [name_of(line) for line in lines[3:6]]
    endpoint.reset()
    code, stdout, _ = llm_run(capsys, export, out, endpoint, "--limit", "6", "--max-context", "8")
    assert code == 0 and endpoint.count() == 0 and "0 attempts" in stdout


@pytest.mark.parametrize(
    ("option", "value", "named"),
    [
        ("--model", "another-model", "model"),
        ("--max-context", "16", "max_context"),
        ("--base-url", "http://127.0.0.1:9/v1", "base_url"),
    ],
)
def test_a_resumed_run_with_other_settings_is_refused(
    capsys, tmp_path, export, endpoint, option, value, named
):
    out = tmp_path / "responses"
    code, _, _ = llm_run(capsys, export, out, endpoint, "--limit", "1", "--max-context", "8")
    assert code == 0
    args = ["--limit", "1", "--max-context", "8", option, value]
    code, _, stderr = llm_run(capsys, export, out, endpoint, *args)
    assert code == 1 and "holds responses of another run" in stderr and named in stderr
    assert endpoint.count() == 1


def test_an_export_with_another_key_is_refused(capsys, tmp_path, export, endpoint):
    import shutil

    other = tmp_path / "other-export"
    shutil.copytree(export, other)
    key = other / "key.jsonl"
    key.write_text("\n".join(key.read_text().splitlines()[::-1]) + "\n")
    out = tmp_path / "responses"
    assert llm_run(capsys, export, out, endpoint, "--limit", "1", "--max-context", "8")[0] == 0
    code, _, stderr = llm_run(capsys, other, out, endpoint, "--limit", "1", "--max-context", "8")
    assert code == 1 and "export key" in stderr


def test_the_key_is_never_written(capsys, tmp_path, export, lines, endpoint):
    endpoint.reset({name_of(lines[0]): ["echo", "401"]})  # the server echoes the header back
    out = tmp_path / "responses"
    code, _, stderr = llm_run(capsys, export, out, endpoint, "--limit", "2", "--max-context", "8")
    assert code == 1 and SECRET not in stderr
    assert f"Bearer {SECRET}" in endpoint.auth
    files = [p for p in out.rglob("*") if p.is_file()]
    assert len(files) >= 4
    for path in files:
        assert SECRET not in path.read_text(), path
    assert "[redacted]" in attempts_of(out, lines[0])[0]["body"]
    client = ChatClient(endpoint.url, MODEL, KEY_ENV)
    assert SECRET not in repr(client) and SECRET not in str(vars(client).keys())


def test_without_the_variable_no_authorization_header_is_sent(
    capsys, tmp_path, export, endpoint, monkeypatch
):
    monkeypatch.delenv(KEY_ENV)
    code, _, _ = llm_run(
        capsys, export, tmp_path / "r", endpoint, "--limit", "1", "--max-context", "8"
    )
    assert code == 0 and endpoint.auth == [None]


def test_concurrency_limit_is_respected(capsys, tmp_path, export, endpoint):
    endpoint.reset(delay=0.15)
    code, _, _ = llm_run(
        capsys,
        export,
        tmp_path / "r",
        endpoint,
        "--limit",
        "8",
        "--concurrency",
        "3",
        "--max-context",
        "8",
    )
    assert code == 0 and endpoint.count() == 8
    assert endpoint.max_in_flight == 3


def test_max_context_shortens_the_prompt_and_its_past_tables(
    capsys, tmp_path, export, lines, endpoint
):
    code, _, _ = llm_run(
        capsys, export, tmp_path / "r", endpoint, "--limit", "1", "--max-context", "5"
    )
    assert code == 0
    prompt = endpoint.prompts[name_of(lines[0])]
    full = inline_prompt(export / lines[0]["folder"])
    assert len(prompt) < len(full) / 4
    for name in ("past_covariates.csv", "past_target.csv"):
        table = _block(prompt, name).splitlines()
        whole = (export / lines[0]["folder"] / name).read_text().splitlines()
        assert table == [whole[0], *whole[-5:]]
    for name in ("future_timestamps.csv", "future_covariates.csv"):
        assert _block(prompt, name) == _block(full, name)
    assert "at 5 past timestamps" in prompt and "at 5 past timestamps" not in full
    assert prompt.split("\npast_covariates.csv:")[0].replace(" 5 past", " X past") == full.split(
        "\npast_covariates.csv:"
    )[0].replace(f" {len(whole) - 1} past", " X past")
    manifest = json.loads((tmp_path / "r" / "manifest.json").read_text())
    assert manifest["max_context"] == 5


BAD_INPUTS = [
    (["MISSING"], 1, "no such export folder"),
    (["NOTEXPORT"], 1, "not a finished llm export"),
    (["EXPORT", "--base-url", "ftp://example.org/v1"], 1, "not an http:// or https:// URL"),
    (["EXPORT", "--base-url", "http://"], 1, "not an http:// or https:// URL"),
    (["EXPORT", "--concurrency", "0"], 2, "--concurrency"),
    (["EXPORT", "--max-context", "0"], 2, "--max-context"),
    (["EXPORT", "--max-attempts", "0"], 2, "--max-attempts"),
    (["EXPORT", "--timeout", "0"], 2, "--timeout"),
    (["EXPORT", "--temperature", "nan"], 2, "--temperature"),
]


@pytest.mark.parametrize(("args", "code", "message"), BAD_INPUTS)
def test_bad_inputs_are_one_error(capsys, tmp_path, export, endpoint, args, code, message):
    (tmp_path / "NOTEXPORT").mkdir()
    (tmp_path / "NOTEXPORT" / "key.jsonl").write_text("{}\n")
    places = {
        "EXPORT": export,
        "MISSING": tmp_path / "missing",
        "NOTEXPORT": tmp_path / "NOTEXPORT",
    }
    args = [str(places[a]) if a in places else a for a in args]
    if "--base-url" not in args:
        args += ["--base-url", endpoint.url]
    got, _, stderr = run_main(
        capsys, "llm", "run", *args, "--model", MODEL, "--out", str(tmp_path / "r")
    )
    assert got == code and message in stderr, stderr
    assert endpoint.count() == 0 and not (tmp_path / "r" / "answers").exists()


def test_a_second_concurrent_run_on_one_folder_is_refused(capsys, tmp_path, export, endpoint):
    from whatif_bench.outputs import output_lock

    out = tmp_path / "r"
    with output_lock(out):
        code, _, stderr = llm_run(capsys, export, out, endpoint, "--limit", "1")
    assert code == 1 and "another whatif run is writing this output" in stderr
    assert endpoint.count() == 0


def test_a_folder_of_someone_else_is_refused(capsys, tmp_path, export, endpoint):
    out = tmp_path / "r"
    out.mkdir()
    (out / "thesis.tex").write_text("mine")
    code, _, stderr = llm_run(capsys, export, out, endpoint, "--limit", "1")
    assert code == 1 and "refusing to write into it" in stderr
    assert endpoint.count() == 0 and sorted(p.name for p in out.iterdir()) == ["thesis.tex"]


# ---- forecast_with_retries ------------------------------------------------------------------


def test_forecast_with_retries_does_not_retry_a_fatal_error():
    calls = []

    def ask(prompt):
        calls.append(prompt)
        if len(calls) == 2:
            raise FatalModelError("HTTP 401")
        raise TimeoutError("slow")

    stamps = pd.date_range("2024-01-01", periods=3, freq="5min")
    with pytest.raises(FatalModelError, match="401"):
        forecast_with_retries(ask, "p", stamps, 1.0, sleep=lambda s: None)
    assert len(calls) == 2


# ---- batch files and scoring ----------------------------------------------------------------


def batch_results(requests: Path, server: Server, results: Path, broken: set[str]) -> None:
    """Send each request line to the server (as a batch service would) and write the results
    file; the tasks in ``broken`` get an error line instead."""
    import urllib.request

    with open(results, "w") as out:
        for text in requests.read_text().splitlines():
            request = json.loads(text)
            if request["custom_id"] in broken:
                item = {
                    "custom_id": request["custom_id"],
                    "response": None,
                    "error": {"code": "server_error", "message": "failed"},
                }
            else:
                sent = urllib.request.Request(
                    server.url + "/chat/completions",
                    data=json.dumps(request["body"]).encode(),
                    headers={"Content-Type": "application/json"},
                )
                with urllib.request.urlopen(sent, timeout=10) as response:  # noqa: S310
                    body = json.loads(response.read())
                item = {
                    "custom_id": request["custom_id"],
                    "response": {"status_code": 200, "body": body},
                    "error": None,
                }
            out.write(json.dumps(item) + "\n")


@pytest.fixture(scope="module")
def scored(one_target_corpus, export, lines, server, tmp_path_factory):
    """Every task asked by ``run`` (two imputed after all attempts fail) and by a batch file
    (the same two erroring), each scored with ``llm score``."""
    import os

    from whatif_bench.cli import main

    server.reset({name_of(lines[i]): ["garbage"] * 2 for i in (4, 7)})
    root = tmp_path_factory.mktemp("llm-scored")
    os.environ.pop(KEY_ENV, None)
    common = ["--max-context", "8"]
    assert (
        main(
            [
                "llm",
                "run",
                str(export),
                "--base-url",
                server.url,
                "--model",
                MODEL,
                "--out",
                str(root / "run"),
                "--max-attempts",
                "2",
                "--max-wait",
                "0",
                *common,
            ]
        )
        == 0
    )
    run_requests = server.count()
    assert (
        main(
            [
                "llm",
                "batch",
                str(export),
                "--model",
                MODEL,
                "--out",
                str(root / "requests.jsonl"),
                *common,
            ]
        )
        == 0
    )
    server.reset()
    batch_results(
        root / "requests.jsonl", server, root / "results.jsonl", {name_of(lines[i]) for i in (4, 7)}
    )
    assert (
        main(
            [
                "llm",
                "batch-read",
                str(export),
                str(root / "results.jsonl"),
                "--out",
                str(root / "batch"),
                "--max-context",
                "8",
            ]
        )
        == 0
    )
    codes = {}
    for source in ("run", "batch"):
        codes[source] = main(
            [
                "llm",
                "score",
                str(root / source),
                "--corpus",
                str(one_target_corpus),
                "--out",
                str(root / f"eval-{source}"),
            ]
        )
    return root, codes, run_requests


@pytest.mark.slow  # about 9 s
def test_the_batch_file_holds_one_valid_request_per_task(scored, export, lines):
    root, _, _ = scored
    requests = [json.loads(t) for t in (root / "requests.jsonl").read_text().splitlines()]
    assert [r["custom_id"] for r in requests] == [name_of(line) for line in lines]
    from whatif_bench.evaluation.llm_runner import open_export, task_prompt

    opened = open_export(export)
    for request, line in zip(requests[:3], lines, strict=False):
        assert request["method"] == "POST" and request["url"] == "/v1/chat/completions"
        assert request["body"]["model"] == MODEL
        assert request["body"]["messages"] == [
            {"role": "user", "content": task_prompt(opened, line, 8)}
        ]


@pytest.mark.slow  # the scored fixture: every task asked by run and by a batch (about 9 s)
def test_score_writes_the_llm_next_to_the_baselines_with_imputed_tasks(scored, lines):
    root, codes, run_requests = scored
    assert codes == {"run": 0, "batch": 0}
    assert run_requests == len(lines) + 2  # two tasks asked twice
    board = pd.read_csv(root / "eval-run" / "leaderboard.csv")
    assert set(board["model"]) == {"naive", "llm-test-model-v1"}
    row = board.set_index("model").loc["llm-test-model-v1"]
    assert row["num_tasks"] == len(lines)
    assert row["num_imputed"] == 2 and row["num_failed"] == 0
    per_task = pd.read_parquet(root / "eval-run" / "per_task.parquet")
    llm = per_task[per_task["model"] == "llm-test-model-v1"].set_index("task_id")
    naive = per_task[per_task["model"] == "naive"].set_index("task_id")
    assert len(llm) == len(lines) and (llm["failed"] == "").all()
    for i in (4, 7):  # imputed: scored as the naive forecast
        task_id = lines[i]["task_id"]
        assert llm.loc[task_id, "wape"] == naive.loc[task_id, "wape"]
    perfect = llm.drop([lines[4]["task_id"], lines[7]["task_id"]])
    assert (perfect["wape"] < 1e-6).all()  # the truth, up to float32 rounding
    assert llm["imputed"].sum() == 2 and not naive["imputed"].any()
    answered = llm.drop([lines[4]["task_id"], lines[7]["task_id"]])
    assert (answered["seconds"] > 0).all()  # the request latency, as LLMAnswers gives it


@pytest.mark.slow
def test_batch_read_and_score_give_the_run_results(scored):
    root, _, _ = scored
    columns = ["task_id", "model", "wql", "wape", "failed"]
    one = pd.read_parquet(root / "eval-run" / "per_task.parquet")[columns]
    two = pd.read_parquet(root / "eval-batch" / "per_task.parquet")[columns]
    key = ["model", "task_id"]
    pd.testing.assert_frame_equal(
        one.sort_values(key).reset_index(drop=True), two.sort_values(key).reset_index(drop=True)
    )
    record = json.loads(next((root / "batch" / "answers").glob("*.json")).read_text())
    assert set(record) >= {"values", "imputed", "reasons", "attempts", "latency_s"}


def test_a_task_without_an_answer_fails_with_the_reason(
    capsys, tmp_path, one_target_corpus, export, lines, endpoint
):
    out = tmp_path / "r"
    assert llm_run(capsys, export, out, endpoint, "--limit", "1", "--max-context", "8")[0] == 0
    from whatif_bench.evaluation.forecasters import NoForecast
    from whatif_bench.evaluation.llm_answers import LLMAnswers

    answers = LLMAnswers(out)
    assert answers.name == "llm-test-model-v1"
    given = answers.forecast(lines[0]["task_id"])
    assert np.array_equal(np.float32(given.point), np.float32(lines[0]["future_target"]))
    assert given.seconds is not None and given.seconds > 0 and not given.imputed
    missing = answers.forecast(lines[1]["task_id"])
    assert isinstance(missing, NoForecast) and lines[1]["task_id"] in missing.reason
    before = answers.params()
    (out / "answers" / f"{name_of(lines[0])}.json").write_text(
        json.dumps({**answer_of(out, lines[0]), "values": [0.0] * len(lines[0]["future_target"])})
    )
    assert LLMAnswers(out).params() != before


def test_score_refuses_another_corpus(capsys, tmp_path, one_target_corpus, export, endpoint):
    out = tmp_path / "r"
    assert llm_run(capsys, export, out, endpoint, "--limit", "1", "--max-context", "8")[0] == 0
    key = out / "key.jsonl"
    first, *rest = key.read_text().splitlines()
    line = json.loads(first)
    line["future_target"] = [v + 1.0 for v in line["future_target"]]
    key.write_text("\n".join([json.dumps(line), *rest]) + "\n")
    code, _, stderr = run_main(
        capsys,
        "llm",
        "score",
        str(out),
        "--corpus",
        str(one_target_corpus),
        "--out",
        str(tmp_path / "e"),
    )
    assert code == 1 and "the export was not made from this corpus" in stderr
    assert not (tmp_path / "e").exists()


# ---- stops, outages and resumes -------------------------------------------------------------


def closed_port_url() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"  # nothing listens there once the probe is closed


def one_error(stderr: str) -> str:
    errors = [t for t in stderr.splitlines() if t.startswith("error:")]
    assert len(errors) == 1 and stderr.strip() == errors[0], stderr
    return errors[0]


@pytest.mark.slow  # about 1 s
def test_a_fatal_stop_does_not_wait_for_requests_in_flight(
    capsys, tmp_path, export, lines, endpoint
):
    endpoint.reset(
        {name_of(lines[0]): ["sleep"], name_of(lines[1]): ["sleep"], name_of(lines[2]): ["late401"]}
    )
    out = tmp_path / "r"
    started = time.monotonic()
    code, _, stderr = llm_run(
        capsys, export, out, endpoint, "--limit", "3", "--concurrency", "3", "--timeout", "60"
    )
    assert time.monotonic() - started < 5  # not the 30 s the two others are held
    assert code == 1 and "HTTP 401" in one_error(stderr)
    assert endpoint.count() == 3  # the two held by the server were left behind
    endpoint.reset()  # they are answered now, after the run has stopped ...
    time.sleep(0.5)
    for line in lines[:2]:  # ... and write nothing into the folder
        assert not (out / "attempts" / name_of(line)).exists()
    assert not (out / "answers").exists() or not list((out / "answers").iterdir())
    code, stdout, _ = llm_run(capsys, export, out, endpoint, "--limit", "3")
    assert code == 0 and "3 answered" in stdout and endpoint.count() == 3


@pytest.mark.slow  # about 1 s
def test_ctrl_c_stops_at_once_and_a_second_run_resumes(capsys, tmp_path, export, lines, endpoint):
    endpoint.reset({name_of(lines[1]): ["sleep"], name_of(lines[2]): ["sleep"]})
    out = tmp_path / "r"
    common = ["--limit", "4", "--max-context", "8", "--api-key-env", KEY_ENV, "--max-wait", "0"]
    command = [sys.executable, "-m", "whatif_bench.cli", "llm", "run", str(export)]
    command += ["--base-url", endpoint.url, "--model", MODEL, "--out", str(out), *common]
    process = subprocess.Popen(
        [*command, "--concurrency", "2", "--timeout", "60"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=sigint_as_ctrl_c,
    )
    try:
        deadline = time.monotonic() + 60
        while endpoint.count() < 3:  # task 1 answered, tasks 2 and 3 held by the server
            assert process.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(0.3)
        sent = time.monotonic()
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=20)
        assert time.monotonic() - sent < 5
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 130, stderr
    assert stderr.strip().splitlines()[-1].startswith("interrupted; the answers so far are kept")
    assert "Traceback" not in stderr
    assert answer_of(out, lines[0])["imputed"] is False
    assert sorted(p.name for p in (out / "answers").iterdir()) == [f"{name_of(lines[0])}.json"]
    endpoint.reset()
    code, stdout, _ = llm_run(capsys, export, out, endpoint, *common)
    assert code == 0 and "4 answered" in stdout and "(1 done before)" in stdout
    assert sorted(r[0] for r in endpoint.requests) == [name_of(line) for line in lines[1:4]]


def test_an_unreachable_endpoint_stops_the_run_instead_of_imputing(
    capsys, tmp_path, export, endpoint
):
    out = tmp_path / "r"
    started = time.monotonic()
    code, _, stderr = run_main(
        capsys,
        "llm",
        "run",
        str(export),
        "--base-url",
        closed_port_url(),
        "--model",
        MODEL,
        "--out",
        str(out),
        "--max-attempts",
        "2",
        "--concurrency",
        "2",
        "--limit",
        "3",
    )
    error = one_error(stderr)
    assert code == 1 and "cannot reach http://127.0.0.1:" in error and "refused" in error
    assert "imputed nothing" in error and time.monotonic() - started < 5
    assert not (out / "answers").exists() or not list((out / "answers").iterdir())


def test_dropped_connections_stop_the_run_and_a_resume_continues_the_attempts(
    capsys, tmp_path, export, lines, endpoint
):
    endpoint.reset({name_of(lines[1]): ["drop"] * 5})
    out = tmp_path / "r"
    args = ["--limit", "2", "--concurrency", "1", "--max-attempts", "2", "--max-context", "8"]
    code, _, stderr = llm_run(capsys, export, out, endpoint, *args)
    error = one_error(stderr)
    assert code == 1 and "cannot reach" in error and "2 attempts in a row" in error
    assert not (out / "answers" / f"{name_of(lines[1])}.json").exists()  # not imputed
    assert [a["network"] for a in attempts_of(out, lines[1])] == ["dropped", "dropped"]
    endpoint.reset()
    code, stdout, _ = llm_run(capsys, export, out, endpoint, *args)
    assert code == 0 and "2 answered, 0 imputed" in stdout and endpoint.count() == 1
    record = answer_of(out, lines[1])
    assert record["attempts"] == 3 and len(record["reasons"]) == 2
    assert [a["attempt"] for a in attempts_of(out, lines[1])] == [1, 2, 3]


def test_many_requests_in_a_row_without_a_response_stop_the_run(
    capsys, tmp_path, export, lines, endpoint
):
    endpoint.reset({name_of(line): ["drop"] * 20 for line in lines[:4]})
    code, _, stderr = llm_run(
        capsys, export, tmp_path / "r", endpoint, "--limit", "4", "--concurrency", "2"
    )
    error = one_error(stderr)
    assert code == 1 and "cannot reach" in error and "4 requests in a row" in error
    assert endpoint.count() <= 6  # 4, and at most the other thread's request in flight


def test_a_task_stopped_mid_retry_continues_its_budget(capsys, tmp_path, export, lines, endpoint):
    endpoint.reset({name_of(lines[0]): ["garbage", "401"]})
    out = tmp_path / "r"
    args = ["--limit", "1", "--max-attempts", "2", "--max-context", "8"]
    assert llm_run(capsys, export, out, endpoint, *args)[0] == 1
    endpoint.reset({name_of(lines[0]): ["garbage"] * 5})
    code, stdout, _ = llm_run(capsys, export, out, endpoint, *args)
    # the garbage answer of the first run counted; the 401 did not: one attempt was left
    assert code == 0 and "1 imputed" in stdout and endpoint.count() == 1
    record = answer_of(out, lines[0])
    assert record["imputed"] and record["attempts"] == 3 and len(record["reasons"]) == 3


def test_a_saved_answer_without_its_final_record_is_not_asked_again(
    capsys, tmp_path, export, lines, endpoint
):
    out = tmp_path / "r"
    args = ["--limit", "1", "--max-context", "8"]
    assert llm_run(capsys, export, out, endpoint, *args)[0] == 0
    before = answer_of(out, lines[0])
    (out / "answers" / f"{name_of(lines[0])}.json").unlink()  # killed between the two writes
    endpoint.reset()
    code, stdout, _ = llm_run(capsys, export, out, endpoint, *args)
    assert code == 0 and endpoint.count() == 0 and "1 answered" in stdout
    after = answer_of(out, lines[0])
    assert {k: v for k, v in after.items() if k != "time"} == {
        k: v for k, v in before.items() if k != "time"
    }


def test_retry_imputed_asks_the_imputed_tasks_again(capsys, tmp_path, export, lines, endpoint):
    endpoint.reset({name_of(lines[0]): ["garbage"] * 2})
    out = tmp_path / "r"
    args = ["--limit", "2", "--max-attempts", "2", "--max-context", "8"]
    code, stdout, _ = llm_run(capsys, export, out, endpoint, *args)
    assert code == 0 and "1 answered, 1 imputed" in stdout
    endpoint.reset()
    assert llm_run(capsys, export, out, endpoint, *args)[0] == 0 and endpoint.count() == 0
    code, stdout, _ = llm_run(capsys, export, out, endpoint, *args, "--retry-imputed")
    assert code == 0 and "2 answered, 0 imputed" in stdout and "(1 done before)" in stdout
    assert [r[0] for r in endpoint.requests] == [name_of(lines[0])]
    record = answer_of(out, lines[0])
    assert record["imputed"] is False and record["attempts"] == 3 and record["reasons"] == []
    assert np.array_equal(np.float32(record["values"]), np.float32(lines[0]["future_target"]))
    endpoint.reset()
    code, _, _ = llm_run(capsys, export, out, endpoint, *args, "--retry-imputed")
    assert code == 0 and endpoint.count() == 0


def test_nan_or_overflow_in_a_body_is_a_transient_bad_answer(
    capsys, tmp_path, export, lines, endpoint
):
    endpoint.reset({name_of(lines[0]): ["nan", "huge", "odd-usage"]})
    out = tmp_path / "r"
    args = ["--limit", "1", "--max-context", "8"]
    code, stdout, stderr = llm_run(capsys, export, out, endpoint, *args)
    assert code == 0 and "1 answered" in stdout, stderr
    first, second, third = attempts_of(out, lines[0])
    assert first["outcome"] == "transient" and "NaN is not a JSON number" in first["reason"]
    assert "NaN" in first["body"]  # kept as received
    assert second["outcome"] == "transient" and "too large" in second["reason"]
    assert third["outcome"] == "ok" and third["usage"] == {"total_tokens": 12}
    record = answer_of(out, lines[0])
    assert record["prompt_tokens"] is None and record["completion_tokens"] is None
    assert llm_run(capsys, export, out, endpoint, *args)[0] == 0  # and resumes


def test_a_closed_responses_folder_refuses_writes(tmp_path):
    from whatif_bench.evaluation.llm_runner import Closed, Responses

    responses = Responses(tmp_path)
    assert responses.write_attempt("task-000001", {"outcome": "ok"}) == 1
    responses.close()
    with pytest.raises(Closed):
        responses.write_attempt("task-000001", {"outcome": "ok"})
    with pytest.raises(Closed):
        responses.write_answer("task-000001", {})
    assert len(list((tmp_path / "attempts" / "task-000001").iterdir())) == 1


# ---- batch results with bad lines, answers of another corpus --------------------------------


def completion(line: dict, usage: str = '{"prompt_tokens": 5}') -> str:
    message = {"role": "assistant", "content": answer_text(line, line["future_target"])}
    choice = {"index": 0, "message": message, "finish_reason": "stop"}
    body = json.dumps({"model": MODEL, "choices": [choice]})[:-1] + f', "usage": {usage}}}'
    return f'{{"custom_id": "{name_of(line)}", "response": {{"status_code": 200, "body": {body}}}}}'


def test_batch_read_imputes_a_result_with_nan_and_resumes(capsys, tmp_path, export, lines):
    results = tmp_path / "results.jsonl"
    results.write_text(completion(lines[0], '{"prompt_tokens": NaN}') + "\n" + completion(lines[1]))
    out = tmp_path / "r"
    command = ["llm", "batch-read", str(export), str(results), "--out", str(out)]
    code, stdout, stderr = run_main(capsys, *command)
    assert code == 0 and "1 answered, 1 imputed" in stdout, stderr
    record = answer_of(out, lines[0])
    assert record["imputed"] and "not JSON (NaN is not a JSON number)" in record["reasons"][0]
    assert answer_of(out, lines[1])["prompt_tokens"] == 5
    code, stdout, _ = run_main(capsys, *command)
    assert code == 0 and "(2 done before)" in stdout


def test_a_bad_batch_result_line_names_the_file(capsys, tmp_path, export, lines):
    results = tmp_path / "results.jsonl"
    results.write_text(completion(lines[0]) + "\n[1, 2]\n")
    code, _, stderr = run_main(
        capsys, "llm", "batch-read", str(export), str(results), "--out", str(tmp_path / "r")
    )
    error = one_error(stderr)
    assert code == 1 and f"{results}, line 2: not a batch result (no custom_id)" in error


@pytest.mark.parametrize("change", ["last value", "steps", "first timestamp"])
@pytest.mark.one_quick  # about 1 s over all its cases
def test_answers_of_another_corpus_are_not_scored(
    capsys, tmp_path, one_target_corpus, export, lines, endpoint, change
):
    from whatif_bench.evaluation.forecasters import Forecast, NoForecast
    from whatif_bench.evaluation.llm_answers import LLMAnswers
    from whatif_bench.generator import Corpus

    out = tmp_path / "r"
    assert llm_run(capsys, export, out, endpoint, "--limit", "2", "--max-context", "8")[0] == 0
    with Corpus(one_target_corpus) as corpus:
        inputs = [corpus[line["task_id"]].input_data() for line in lines[:2]]
    given = LLMAnswers(out).predict(inputs)
    assert all(isinstance(f, Forecast) for f in given)
    key = out / "key.jsonl"
    first, *rest = key.read_text().splitlines()
    line = json.loads(first)
    if change == "last value":
        line["history_last_value"] += 1.0
    elif change == "steps":
        line["future_timestamps"] = line["future_timestamps"][:-1]
    else:
        stamps = pd.DatetimeIndex(line["future_timestamps"]) + pd.Timedelta(hours=1)
        line["future_timestamps"] = [s.isoformat() for s in stamps]
    key.write_text("\n".join([json.dumps(line), *rest]) + "\n")
    changed, same = LLMAnswers(out).predict(inputs)
    assert isinstance(changed, NoForecast) and isinstance(same, Forecast)
    assert f"the answer of {lines[0]['task_id']} was made from another corpus" in changed.reason


@pytest.mark.slow  # about 4 s
def test_evaluate_with_llm_dir_scores_the_answers_as_llm_score_does(
    capsys, scored, lines, one_target_corpus
):
    """``whatif evaluate --models naive,llm:DIR`` on the whole corpus: the exported tasks get
    the scores ``llm score`` gave them; a corpus task the export left out fails, named."""
    root, _, _ = scored
    out = root / "eval-through-evaluate"
    code, _, stderr = run_main(
        capsys,
        "evaluate",
        str(one_target_corpus),
        "--models",
        f"naive,llm:{root / 'run'}",
        "--out",
        str(out),
    )
    per_task = pd.read_parquet(out / "per_task.parquet")
    llm = per_task[per_task["model"] == "llm-test-model-v1"].set_index("task_id")
    exported = [line["task_id"] for line in lines]
    scored_before = pd.read_parquet(root / "eval-run" / "per_task.parquet")
    before = scored_before[scored_before["model"] == "llm-test-model-v1"].set_index("task_id")
    pd.testing.assert_series_equal(llm.loc[exported, "wql"], before.loc[exported, "wql"])
    assert llm.loc[exported, "imputed"].sum() == 2
    left_out = llm.drop(exported)
    assert code == (1 if len(left_out) else 0)
    assert left_out["failed"].str.contains("no answer for").all()
    assert "Traceback" not in stderr
