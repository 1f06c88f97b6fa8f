"""``whatif llm run``: ask an OpenAI-compatible endpoint every task of an ``llm`` export.

Layout of a responses folder (``RESPONSES_DIR``)::

    .whatif-output.json                 identity record, kind ``llm-responses``
    manifest.json                       model, endpoint, --max-context, the export and the
                                        SHA-256 of its key: what a resumed run must match
    key.jsonl                           a copy of the export's key (the truth ``score`` checks)
    attempts/<task>/attempt-NNN.json    one file per request: status, body text, latency,
                                        token usage, finish_reason, time, outcome, reason
    answers/<task>.json                 the final record of a task: its values, or the naive
                                        forecast with ``imputed`` and the reasons

``<task>`` is the export's task folder name (``task-000001``). Every file is written under a
temporary name and renamed (``outputs.write_text_atomic``); the folder is locked for the
whole run (``outputs.output_lock``). A task with a final record is done: a second run asks
only the others. See docs/EXPORT_LLM.md, "Running an LLM".
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import statistics
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from whatif_bench._version import __version__
from whatif_bench.evaluation.llm_client import Attempt, ChatClient, LLMError, now_iso
from whatif_bench.export.llm_prompt import (
    FILES,
    FatalModelError,
    growing_wait,
    parse_response,
    render_prompt,
)
from whatif_bench.outputs import (
    MANIFEST,
    OutputError,
    check_folder_kind,
    check_regular,
    make_folder,
    output_lock,
    read_identity,
    real_path,
    write_identity,
    write_text_atomic,
)

KIND = "llm-responses"
EXPORT_KIND = "export-llm"
KEY = "key.jsonl"
ANSWERS = "answers"
ATTEMPTS = "attempts"
FORMAT = "whatif-llm-responses/1"
DEFAULT_MAX_WAIT_S = 60.0  # growing_wait's own cap
# the settings a resumed run must repeat; anything else (concurrency, timeout, attempts) may change
IDENTITY_FIELDS = ("model", "base_url", "max_context", "key_sha256")


# ---- the export ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Export:
    """An ``llm`` export folder read for a run: its key lines in export order and the SHA-256
    of ``key.jsonl``'s bytes."""

    path: Path
    lines: list[dict[str, Any]]
    key_text: str
    key_sha256: str

    def folder(self, line: dict[str, Any]) -> Path:
        return self.path / line["folder"]


def task_name(line: dict[str, Any]) -> str:
    """A key line's task folder name (``task-000001``)."""
    return Path(line["folder"]).name


def open_export(path: str | os.PathLike) -> Export:
    """The ``llm`` export at ``path``, or an ``LLMError`` saying why it is not one."""
    if os.fspath(path) == "":
        raise LLMError("EXPORT_DIR: the path is empty")
    folder = check_regular(path, "export")
    if not folder.exists():
        raise LLMError(
            f"{folder}: no such export folder (make one with whatif export --format llm)"
        )
    if not folder.is_dir():
        raise LLMError(
            f"{folder}: is not a folder; give the folder whatif export --format llm wrote"
        )
    record = read_identity(folder)
    if record is None or record.get("kind") != EXPORT_KIND or not (folder / MANIFEST).is_file():
        what = f"a whatif {record['kind']} output" if record else "not a whatif output"
        raise LLMError(
            f"{folder}: is {what}, not a finished llm export (whatif export --format llm)"
        )
    try:
        raw = (folder / KEY).read_bytes()
        text = raw.decode("utf-8")
        lines = [json.loads(line) for line in text.splitlines() if line.strip()]
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise LLMError(f"{folder / KEY}: cannot be read as the export's key ({exc})") from None
    needed = ("task_id", "folder", "future_timestamps", "history_last_value", "variables")
    for number, line in enumerate(lines, 1):
        if not isinstance(line, dict) or any(name not in line for name in needed):
            raise LLMError(f"{folder / KEY}, line {number}: not a key line of an llm export")
    if not lines:
        raise LLMError(f"{folder / KEY}: holds no task")
    return Export(folder, lines, text, hashlib.sha256(raw).hexdigest())


def _targets_and_covariates(line: dict[str, Any]) -> tuple[list[str], list[str]]:
    def number(dummy: str) -> int:
        return int(dummy.rstrip(">").rsplit("_", 1)[1])

    dummies = list(line["variables"])
    targets = sorted((d for d in dummies if d.startswith("<target_")), key=number)
    covariates = sorted((d for d in dummies if d.startswith("<covariate_")), key=number)
    return targets, covariates


def _tail(table: str, rows: int) -> tuple[str, int]:
    """The CSV text with its header and only its last ``rows`` rows, and the rows kept."""
    lines = table.splitlines()
    header, body = lines[0], lines[1:]
    kept = body[-rows:]
    return "\n".join([header, *kept]) + "\n", len(kept)


def task_prompt(export: Export, line: dict[str, Any], max_context: int | None = None) -> str:
    """The text sent for one task: the prompt followed by its four tables in fenced ``csv``
    blocks (``llm_prompt.inline_prompt``'s layout).

    ``max_context`` (N): the two past tables keep only their last N rows and the prompt is
    rendered again (``render_prompt``) with the shorter context length; ``None`` sends
    ``prompt.txt`` and the tables as exported.
    """
    folder = export.folder(line)
    try:
        tables = {name: (folder / name).read_text(encoding="utf-8") for name in FILES}
        prompt = (folder / "prompt.txt").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise LLMError(f"{folder}: cannot read the task's files ({exc})") from None
    if max_context is not None:
        past_c, kept = _tail(tables["past_covariates.csv"], max_context)
        past_t, kept_t = _tail(tables["past_target.csv"], max_context)
        tables["past_covariates.csv"], tables["past_target.csv"] = past_c, past_t
        targets, covariates = _targets_and_covariates(line)
        stamps = list(line["future_timestamps"])
        last_past = past_t.splitlines()[-1].split(",", 1)[0]
        import pandas as pd

        interval = pd.Timestamp(stamps[0]) - pd.Timestamp(last_past)
        prompt = render_prompt(targets, covariates, kept_t, stamps, int(interval.total_seconds()))
    parts = [prompt]
    for name in FILES:
        parts.append(f"\n{name}:\n```csv\n{tables[name]}```\n")
    return "".join(parts)


# ---- the responses folder -----------------------------------------------------------------


def model_file_name(model: str) -> str:
    """``model`` with every character outside letters, digits and ``. _ + - =`` (``@`` too)
    replaced by ``-``, at most 150 characters: safe in a file name."""
    safe = "".join(c if c.isascii() and (c.isalnum() or c in "._+-=@") else "-" for c in model)
    return safe.lstrip(".")[:150] or "model"


def _dump(data: Any) -> str:
    return json.dumps(data, indent=1, sort_keys=True, allow_nan=False) + "\n"


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise LLMError(f"{path}: cannot be read ({exc}); delete it or use a new --out") from None


class Responses:
    """A responses folder, opened for writing under its lock (``responses_folder``)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def answer_path(self, name: str) -> Path:
        return self.path / ANSWERS / f"{name}.json"

    def done(self) -> set[str]:
        """The task folder names with a final record."""
        folder = self.path / ANSWERS
        if not folder.is_dir():
            return set()
        return {p.stem for p in folder.glob("task-*.json") if p.is_file()}

    def write_attempt(self, name: str, record: dict[str, Any]) -> int:
        """Write one attempt's record; returns its number (1, 2, ... across runs)."""
        folder = self.path / ATTEMPTS / name
        with self._lock:
            make_folder(folder)
            number = len(list(folder.glob("attempt-*.json"))) + 1
            path = folder / f"attempt-{number:03d}.json"
            write_text_atomic(path, _dump(record), lock=False)
        return number

    def write_answer(self, name: str, record: dict[str, Any]) -> None:
        make_folder(self.path / ANSWERS)
        write_text_atomic(self.answer_path(name), _dump(record), lock=False)


def _within(inner: str, outer: str) -> bool:
    return inner == outer or inner.startswith(outer.rstrip(os.sep) + os.sep)


def check_responses_out(out: str | os.PathLike, export: Export) -> Path:
    """``out`` as a responses folder: missing, empty, or one of ours (kind ``llm-responses``);
    never the export or inside it, nor holding it."""
    if os.fspath(out) == "":
        raise LLMError("--out: the path is empty")
    path = check_regular(out, "output")
    if path.is_symlink():
        raise OutputError(f"{path}: is a symbolic link; give the folder itself")
    if path.exists() and not path.is_dir():
        raise OutputError(f"{path}: exists and is not a folder")
    outer, inner = real_path(path), real_path(export.path)
    if _within(outer, inner) or _within(inner, outer):
        raise OutputError(
            f"{path}: is, holds or lies inside the export {export.path}; choose another folder"
        )
    if path.exists():
        check_folder_kind(
            path,
            "whatif llm",
            KIND,
            verb="write into it",
            ignore=(),
            hint="choose another --out",
        )
    return path


def _differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    def shown(field: str, value: Any) -> str:
        if field == "key_sha256":
            return f"export key {str(value)[:12]}"
        return f"{field} {value!r}"

    return [
        f"{shown(f, old.get(f))} (now {shown(f, new.get(f))})"
        for f in IDENTITY_FIELDS
        if old.get(f) != new.get(f)
    ]


@contextlib.contextmanager
def responses_folder(
    out: str | os.PathLike, export: Export, manifest: dict[str, Any], run: dict[str, Any]
) -> Iterator[Responses]:
    """The responses folder ``out`` for writing, locked for the block.

    A new (or empty) folder gets its identity record, the copy of the key and ``manifest``;
    an existing one is resumed only if its manifest has the same ``IDENTITY_FIELDS`` (model,
    endpoint, ``max_context``, export key), else an ``LLMError`` names what changed. ``run``
    (this run's settings) is appended to the manifest's ``runs``.
    """
    path = check_responses_out(out, export)
    with output_lock(path):
        check_responses_out(out, export)  # again, holding the lock
        make_folder(path)
        previous = _read_json(path / MANIFEST) if (path / MANIFEST).is_file() else None
        if previous is not None:
            changed = _differences(previous, manifest)
            if changed:
                raise LLMError(
                    f"{path}: holds responses of another run: {'; '.join(changed)}; use a new "
                    "--out, or repeat that run's options to resume it"
                )
            manifest = previous
        else:
            if read_identity(path) is None:
                write_identity(path, KIND)
            write_text_atomic(path / KEY, export.key_text, lock=False)
        manifest = {**manifest, "runs": [*manifest.get("runs", []), run]}
        write_text_atomic(path / MANIFEST, _dump(manifest), lock=False)
        yield Responses(path)


def base_manifest(
    export: Export, model: str, base_url: str | None, max_context: int | None, source: str
) -> dict[str, Any]:
    """What a responses folder's manifest records about the run that made it."""
    return {
        "format": FORMAT,
        "toolkit_version": __version__,
        "source": source,
        "model": model,
        "base_url": base_url,
        "max_context": max_context,
        "export": str(export.path.resolve()),
        "key_sha256": export.key_sha256,
        "n_tasks": len(export.lines),
    }


def answer_record(
    line: dict[str, Any],
    values: list[float],
    imputed: bool,
    reasons: list[str],
    attempts: int,
    success: Attempt | None,
) -> dict[str, Any]:
    """The final record of one task (``answers/<task>.json``)."""
    usage = success.usage if success is not None else {}
    return {
        "task_id": line["task_id"],
        "folder": line["folder"],
        "imputed": imputed,
        "values": values,
        "reasons": reasons,
        "attempts": attempts,
        "latency_s": success.latency_s if success is not None else None,
        "prompt_tokens": usage.get("prompt_tokens"),
        "completion_tokens": usage.get("completion_tokens"),
        "finish_reason": success.finish_reason if success is not None else None,
        "time": now_iso(),
    }


def naive_values(line: dict[str, Any]) -> list[float]:
    """The naive forecast of a task: its last history value at every future timestamp."""
    return [float(line["history_last_value"])] * len(line["future_timestamps"])


def judge(attempt: Attempt, line: dict[str, Any]) -> list[float] | None:
    """The forecast in an ok attempt's answer, or ``None`` after marking the attempt
    transient with the parser's reason (an unparseable answer is asked again)."""
    if attempt.outcome != "ok":
        return None
    targets, _ = _targets_and_covariates(line)
    parsed = parse_response(attempt.content or "", line["future_timestamps"], targets[:1])
    if not parsed.ok:
        attempt.outcome, attempt.reason = "transient", f"unparseable answer: {parsed.reason}"
        return None
    return [float(v) for v in parsed.array()[0]]


# ---- the run ------------------------------------------------------------------------------


@dataclass
class RunSummary:
    """What a run did: ``tasks`` in its selection, ``answered`` and ``imputed`` among them
    (this run and earlier ones), ``skipped`` already done before it, ``attempts`` made by this
    run, and the median latency in seconds of its successful attempts (``None``: none)."""

    tasks: int
    answered: int
    imputed: int
    skipped: int
    attempts: int
    median_latency_s: float | None
    out: Path

    def line(self, what: str = "llm run") -> str:
        latency = "n/a" if self.median_latency_s is None else f"{self.median_latency_s:.2f} s"
        return (
            f"{what}: {self.tasks:,} tasks: {self.answered:,} answered, {self.imputed:,} "
            f"imputed ({self.skipped:,} done before); {self.attempts:,} attempts, median "
            f"latency {latency}; responses in {self.out}"
        )


def _fatal_message(line: dict[str, Any], attempt: Attempt, client: ChatClient, out: Path) -> str:
    hint = ""
    if attempt.status in (401, 403):
        where = f"${client.api_key_env}" if client.has_key else f"${client.api_key_env} (unset)"
        hint = f"; check the API key in {where}"
    return (
        f"{task_name(line)}: {attempt.reason}{hint}; the run stopped: the answers so far are "
        f"kept in {out}; run the same command again to resume"
    )


class _Task:
    """One task's attempts, as a thread of the pool runs them."""

    def __init__(
        self,
        line: dict[str, Any],
        prompt: Callable[[], str],
        client: ChatClient,
        responses: Responses,
        max_attempts: int,
        max_wait: float,
        stop: threading.Event,
    ) -> None:
        self.line, self.prompt, self.client, self.responses = line, prompt, client, responses
        self.max_attempts, self.max_wait, self.stop = max_attempts, max_wait, stop
        self.latencies: list[float] = []
        self.attempts = 0

    def __call__(self) -> dict[str, Any] | None:
        try:
            return self._ask()
        except BaseException:
            self.stop.set()  # before the pool's thread takes the next task
            raise

    def _ask(self) -> dict[str, Any] | None:
        if self.stop.is_set():
            return None
        name = task_name(self.line)
        prompt = self.prompt()
        reasons: list[str] = []
        for number in range(1, self.max_attempts + 1):
            if self.stop.is_set():
                return None
            try:
                attempt = self.client.send(prompt)
                values = judge(attempt, self.line)
            except Exception as exc:
                raise FatalModelError(
                    f"{name}: the LLM client failed ({type(exc).__name__}: "
                    f"{self.client.redact(str(exc))}); the run stopped; the answers so far are "
                    f"kept in {self.responses.path}"
                ) from None
            self.attempts += 1
            self.responses.write_attempt(
                name, {"task_id": self.line["task_id"], "attempt": number, **attempt.record()}
            )
            if values is not None:
                if attempt.latency_s is not None:
                    self.latencies.append(attempt.latency_s)
                record = answer_record(self.line, values, False, reasons, number, attempt)
                self.responses.write_answer(name, record)
                return record
            if attempt.outcome == "fatal":
                raise FatalModelError(
                    _fatal_message(self.line, attempt, self.client, self.responses.path)
                )
            reasons.append(f"attempt {number}: {attempt.reason}")
            if number < self.max_attempts:
                pause = min(growing_wait(number), self.max_wait)
                if attempt.retry_after_s is not None:
                    pause = max(pause, attempt.retry_after_s)
                if self.stop.wait(pause):
                    return None
        record = answer_record(
            self.line, naive_values(self.line), True, reasons, self.max_attempts, None
        )
        self.responses.write_answer(name, record)
        return record


def _progress_bar(total: int, initial: int, enabled: bool, desc: str):
    from tqdm import tqdm

    return tqdm(
        total=total, initial=initial, disable=not enabled, desc=desc, unit="task", file=sys.stderr
    )


def count_records(responses: Responses, names: list[str]) -> tuple[int, int]:
    """(answered, imputed) among the tasks ``names`` with a final record."""
    answered = imputed = 0
    for name in names:
        path = responses.answer_path(name)
        if path.is_file():
            if _read_json(path).get("imputed"):
                imputed += 1
            else:
                answered += 1
    return answered, imputed


def run(
    export_dir: str | os.PathLike,
    out: str | os.PathLike,
    base_url: str,
    model: str,
    api_key_env: str = "OPENAI_API_KEY",
    concurrency: int = 4,
    max_attempts: int = 10,
    timeout: float = 600.0,
    max_context: int | None = None,
    temperature: float | None = None,
    max_tokens: int | None = None,
    limit: int | None = None,
    max_wait: float = DEFAULT_MAX_WAIT_S,
    progress: bool = False,
) -> RunSummary:
    """Ask ``model`` at ``base_url`` every task of the export (the first ``limit``), with up to
    ``concurrency`` requests at once, and write the responses folder ``out`` (module doc).

    Each task is asked up to ``max_attempts`` times while the failure is transient, waiting
    ``min(growing_wait(n), max_wait)`` seconds after failed attempt ``n`` (at least the
    server's Retry-After); then it is imputed (the naive forecast, with the reasons). A fatal
    failure (``llm_client`` module doc) or a bug in the client stops the run with one
    ``FatalModelError``; what was answered stays on disk and the next run resumes.
    """
    for label, value, low in (
        ("concurrency", concurrency, 1),
        ("max_attempts", max_attempts, 1),
        ("max_context", max_context, 1),
        ("max_tokens", max_tokens, 1),
        ("limit", limit, 1),
    ):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < low
        ):
            raise LLMError(f"{label} must be an integer >= {low}, got {value!r}")
    if not model or not isinstance(model, str):
        raise LLMError("--model is empty; give the model name the endpoint serves")
    client = ChatClient(base_url, model, api_key_env, timeout, temperature, max_tokens)
    export = open_export(export_dir)
    manifest = base_manifest(export, model, client.url, max_context, "run")
    settings = {
        "source": "run",
        "started": now_iso(),
        "toolkit_version": __version__,
        "api_key_env": api_key_env,
        "concurrency": concurrency,
        "max_attempts": max_attempts,
        "timeout_s": timeout,
        "temperature": temperature,
        "max_tokens": max_tokens,
        "limit": limit,
    }
    lines = export.lines[:limit] if limit is not None else export.lines
    names = [task_name(line) for line in lines]
    with responses_folder(out, export, manifest, settings) as responses:
        done = responses.done()
        pending = [line for line in lines if task_name(line) not in done]
        stop = threading.Event()
        tasks = [
            _Task(
                line,
                functools.partial(task_prompt, export, line, max_context),
                client,
                responses,
                max_attempts,
                max_wait,
                stop,
            )
            for line in pending
        ]
        bar = _progress_bar(len(lines), len(lines) - len(pending), progress, "llm run")
        pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="whatif-llm")
        try:
            futures = {pool.submit(task) for task in tasks}
            remaining = set(futures)
            while remaining:
                finished, remaining = wait(remaining, return_when=FIRST_EXCEPTION)
                for future in finished:
                    future.result()  # a fatal failure stops the run here
                    bar.update(1)
        except BaseException:
            stop.set()
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        finally:
            bar.close()
            pool.shutdown(wait=True)
        answered, imputed = count_records(responses, names)
        latencies = [s for task in tasks for s in task.latencies]
        return RunSummary(
            len(lines),
            answered,
            imputed,
            len(lines) - len(pending),
            sum(task.attempts for task in tasks),
            statistics.median(latencies) if latencies else None,
            responses.path,
        )
