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
whole run (``outputs.output_lock``), and nothing is written into it once the run has stopped
(``Responses.close``): a request still in flight when the run stops is left behind, its
answer discarded. A task with a final record is done: a second run asks only the others
(and, with ``retry_imputed``, the imputed ones again); a task with attempts but no final
record continues from them (a saved answer is used, the attempt budget is what is left).
See docs/EXPORT_LLM.md, "Running an LLM".
"""

from __future__ import annotations

import collections
import contextlib
import functools
import hashlib
import json
import os
import queue
import statistics
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from whatif_bench._version import __version__
from whatif_bench.evaluation.llm_client import (
    Attempt,
    ChatClient,
    LLMError,
    loads_strict,
    now_iso,
)
from whatif_bench.evaluation.llm_prompt import (
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
# requests in a row, across tasks, that get no response (connection refused or dropped) before
# the run stops as "cannot reach": twice the concurrency (every thread failed twice running,
# after waits of 1 and 2 s), at least 4 (1 + 2 + 4 s of waits with one thread)
MIN_UNREACHABLE_IN_A_ROW = 4


class UnreachableError(FatalModelError):
    """The endpoint cannot be reached: the run stops instead of imputing an outage."""


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
        lines = [loads_strict(line) for line in text.splitlines() if line.strip()]
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
        return loads_strict(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise LLMError(f"{path}: cannot be read ({exc}); delete it or use a new --out") from None


class Closed(Exception):  # noqa: N818 - not an error: the run has stopped
    """Raised by a write into a ``Responses`` that is closed: the run that opened it has
    stopped, and a request left in flight must not write after it."""


class Responses:
    """A responses folder, opened for writing under its lock (``responses_folder``).

    Every write holds ``_lock``; ``close`` (called before the folder's lock is released)
    takes it too, so once it returns nothing more is written: a late write raises ``Closed``.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._closed = False

    def close(self) -> None:
        """Refuse every later write (waiting for one in progress, a single file)."""
        with self._lock:
            self._closed = True

    def answer_path(self, name: str) -> Path:
        return self.path / ANSWERS / f"{name}.json"

    def done(self) -> set[str]:
        """The task folder names with a final record."""
        folder = self.path / ANSWERS
        if not folder.is_dir():
            return set()
        return {p.stem for p in folder.glob("task-*.json") if p.is_file()}

    def answer(self, name: str) -> dict[str, Any]:
        """The final record of a task (an ``LLMError`` if it is not one)."""
        record = _read_json(self.answer_path(name))
        if not isinstance(record, dict):
            raise LLMError(f"{self.answer_path(name)}: not a final record; delete it")
        return record

    def attempts(self, name: str) -> list[dict[str, Any]]:
        """The attempt records of a task on disk, in their order."""
        folder = self.path / ATTEMPTS / name
        records = []
        for path in sorted(folder.glob("attempt-*.json")):
            record = _read_json(path)
            if not isinstance(record, dict):
                raise LLMError(f"{path}: not an attempt record; delete it or use a new --out")
            records.append(record)
        return records

    def write_attempt(self, name: str, record: dict[str, Any]) -> int:
        """Write one attempt's record with its number (1, 2, ... across runs, the files
        already there + 1) as ``attempt``; returns the number."""
        folder = self.path / ATTEMPTS / name
        with self._lock:
            if self._closed:
                raise Closed(name)
            make_folder(folder)
            number = len(list(folder.glob("attempt-*.json"))) + 1
            path = folder / f"attempt-{number:03d}.json"
            write_text_atomic(path, _dump_record(path, {**record, "attempt": number}), lock=False)
        return number

    def write_answer(self, name: str, record: dict[str, Any]) -> None:
        with self._lock:
            if self._closed:
                raise Closed(name)
            make_folder(self.path / ANSWERS)
            path = self.answer_path(name)
            write_text_atomic(path, _dump_record(path, record), lock=False)


def _dump_record(path: Path, record: dict[str, Any]) -> str:
    try:
        return _dump(record)
    except (TypeError, ValueError) as exc:  # a bug: every value written is made JSON-safe
        raise LLMError(f"{path}: cannot write the record ({exc})") from None


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
        responses = Responses(path)
        try:
            yield responses
        finally:
            responses.close()  # before the lock goes: nothing is written after it


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


def _connection_failed(record: dict[str, Any]) -> bool:
    """Whether an attempt record got no response because of the connection (refused,
    dropped); older records without ``network`` are read from their reason."""
    network = record.get("network")
    if "network" in record:
        return network in ("dropped", "unreachable")
    return record.get("status") is None and str(record.get("reason")).startswith(
        "connection failed"
    )


def _counts(record: dict[str, Any]) -> bool:
    """Whether an attempt uses the task's budget (``--max-attempts``): a transient failure
    where the server answered or timed out. A fatal one stops the run and says nothing of the
    task; one without a connection says nothing either (and never leads to imputing)."""
    return record.get("outcome") == "transient" and not _connection_failed(record)


class _Reach:
    """Whether the endpoint can be reached, across the tasks of a run.

    ``note`` returns why the run must stop: the first requests of the run cannot connect at
    all (refused, unknown host, no route: a wrong --base-url or a server that is down), or
    ``limit`` requests in a row, across tasks, got no response (refused or dropped).
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self.answered = False  # a response (any HTTP status) came in this run
        self.in_a_row = 0

    def note(self, attempt: Attempt) -> str | None:
        with self._lock:
            if attempt.network is None:
                self.answered, self.in_a_row = True, 0
                return None
            if not attempt.connection_failed:  # a timeout: the server is there, or slow
                return None
            self.in_a_row += 1
            if attempt.network == "unreachable" and not self.answered:
                return str(attempt.reason)
            if self.in_a_row >= self.limit:
                return f"{attempt.reason} ({self.in_a_row} requests in a row got no response)"
            return None


class _Task:
    """One task's attempts, as a thread of the pool runs them.

    It continues from what is on disk (``Responses.attempts``): a saved answer is used
    without asking again; the budget is ``max_attempts`` less the attempts already counted
    (``_counts``); attempt numbers continue. ``retry_from`` (``--retry-imputed``): the task
    has an imputed record after that many attempts, and is asked again with a whole budget.
    """

    def __init__(
        self,
        line: dict[str, Any],
        prompt: Callable[[], str],
        client: ChatClient,
        responses: Responses,
        max_attempts: int,
        max_wait: float,
        stop: threading.Event,
        reach: _Reach,
        retry_from: int = 0,
    ) -> None:
        self.line, self.prompt, self.client, self.responses = line, prompt, client, responses
        self.max_attempts, self.max_wait, self.stop = max_attempts, max_wait, stop
        self.reach, self.retry_from = reach, retry_from
        self.latencies: list[float] = []
        self.attempts = 0

    def __call__(self) -> dict[str, Any] | None:
        try:
            return self._ask()
        except Closed:
            return None  # the run stopped while this request was in flight: left behind
        except BaseException:
            self.stop.set()  # before the pool's thread takes the next task
            raise

    def _saved_answer(
        self, episode: Sequence[dict[str, Any]], reasons: list[str], last: int
    ) -> dict[str, Any] | None:
        """The final record of a task whose answer was saved as an attempt, but not its
        final record (the run was killed in between)."""
        for record in reversed(episode):
            if record.get("outcome") != "ok":
                continue
            attempt = Attempt.from_record(record)
            values = judge(attempt, self.line)
            if values is not None:
                return answer_record(self.line, values, False, reasons, last, attempt)
        return None

    def _ask(self) -> dict[str, Any] | None:
        if self.stop.is_set():
            return None
        name = task_name(self.line)
        history = self.responses.attempts(name)
        last = len(history)  # the number of the last attempt on disk
        episode = history[min(max(self.retry_from, 0), last) :]
        reasons = [
            f"attempt {r.get('attempt', i)}: {r.get('reason')}"
            for i, r in enumerate(episode, last - len(episode) + 1)
            if r.get("outcome") != "ok"
        ]
        saved = self._saved_answer(episode, reasons, last)
        if saved is not None:
            self.responses.write_answer(name, saved)
            return saved
        counted = sum(1 for r in episode if _counts(r))
        prompt: str | None = None
        tries = dropped = 0  # this run's failed attempts, and its connection failures in a row
        while counted < self.max_attempts:
            if prompt is None:
                prompt = self.prompt()
            if self.stop.is_set():  # checked last thing before sending
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
            unreachable = self.reach.note(attempt)
            if self.stop.is_set():
                return None  # another task stopped the run while this one was asked
            last = self.responses.write_attempt(
                name, {"task_id": self.line["task_id"], **attempt.record()}
            )
            self.attempts += 1
            if values is not None:
                if attempt.latency_s is not None:
                    self.latencies.append(attempt.latency_s)
                record = answer_record(self.line, values, False, reasons, last, attempt)
                self.responses.write_answer(name, record)
                return record
            if attempt.outcome == "fatal":
                raise FatalModelError(
                    _fatal_message(self.line, attempt, self.client, self.responses.path)
                )
            reasons.append(f"attempt {last}: {attempt.reason}")
            if attempt.connection_failed:
                dropped += 1
                if unreachable is None and dropped >= self.max_attempts:
                    unreachable = f"{attempt.reason} ({name}: {dropped} attempts in a row)"
                if unreachable is not None:
                    raise UnreachableError(
                        _unreachable_message(unreachable, self.client, self.responses.path)
                    )
            else:
                dropped = 0
                counted += 1
            tries += 1
            if counted < self.max_attempts:
                pause = min(growing_wait(tries), self.max_wait)
                if attempt.retry_after_s is not None:
                    pause = max(pause, attempt.retry_after_s)
                if self.stop.wait(pause):
                    return None
        record = answer_record(self.line, naive_values(self.line), True, reasons, last, None)
        self.responses.write_answer(name, record)
        return record


def _unreachable_message(reason: str, client: ChatClient, out: Path) -> str:
    return (
        f"cannot reach {client.url}: {reason}; check --base-url and that the server is up; "
        f"the run stopped and imputed nothing: the answers so far are kept in {out}; run the "
        "same command again to resume"
    )


def run_pool(
    tasks: Sequence[Callable[[], Any]],
    concurrency: int,
    stop: threading.Event,
    finished: Callable[[], None] = lambda: None,
) -> None:
    """Run ``tasks`` on ``concurrency`` daemon threads; ``finished()`` after each one.

    The first exception of a task (or a KeyboardInterrupt here) sets ``stop`` and is raised at
    once, without waiting for the tasks still running: their threads are daemons, left to
    end by themselves (a request in flight ends within its timeout, or with the process), and
    take no new task once ``stop`` is set.
    """
    waiting = collections.deque(tasks)
    results: queue.Queue[BaseException | None] = queue.Queue()
    take = threading.Lock()

    def work() -> None:
        while not stop.is_set():
            with take:
                if not waiting:
                    return
                task = waiting.popleft()
            try:
                task()
            except BaseException as exc:  # noqa: BLE001 - handed to the main thread
                stop.set()
                results.put(exc)
                return
            results.put(None)

    threads = [
        threading.Thread(target=work, name=f"whatif-llm-{i + 1}", daemon=True)
        for i in range(min(concurrency, len(tasks)))
    ]
    try:
        for thread in threads:
            thread.start()
        done = 0
        while done < len(tasks):
            try:
                error = results.get(timeout=0.2)
            except queue.Empty:
                if not any(thread.is_alive() for thread in threads) and results.empty():
                    raise RuntimeError("the LLM threads ended before their tasks") from None
                continue
            if error is not None:
                raise error
            done += 1
            finished()
    finally:
        stop.set()


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
    retry_imputed: bool = False,
) -> RunSummary:
    """Ask ``model`` at ``base_url`` every task of the export (the first ``limit``), with up to
    ``concurrency`` requests at once, and write the responses folder ``out`` (module doc).

    Each task is asked up to ``max_attempts`` times while the failure is transient, waiting
    ``min(growing_wait(n), max_wait)`` seconds after failed attempt ``n`` (at least the
    server's Retry-After); then it is imputed (the naive forecast, with the reasons). A fatal
    failure (``llm_client`` module doc) or a bug in the client stops the run with one
    ``FatalModelError``; an endpoint that cannot be reached (``_Reach``; a task whose
    ``max_attempts`` requests in a row got no response) stops it with an ``UnreachableError``
    instead of imputing. A stop does not wait for the requests in flight. What was answered
    stays on disk and the next run resumes; ``retry_imputed`` asks the imputed tasks again.
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
        "retry_imputed": retry_imputed,
    }
    lines = export.lines[:limit] if limit is not None else export.lines
    names = [task_name(line) for line in lines]
    with responses_folder(out, export, manifest, settings) as responses:
        done = responses.done()
        retry_from: dict[str, int] = {}
        if retry_imputed:
            for name in sorted(done & set(names)):
                record = responses.answer(name)
                if record.get("imputed"):
                    number = record.get("attempts")
                    retry_from[name] = number if isinstance(number, int) else 0
        pending = [
            line for line in lines if task_name(line) not in done or task_name(line) in retry_from
        ]
        stop = threading.Event()
        reach = _Reach(max(2 * concurrency, MIN_UNREACHABLE_IN_A_ROW))
        tasks = [
            _Task(
                line,
                functools.partial(task_prompt, export, line, max_context),
                client,
                responses,
                max_attempts,
                max_wait,
                stop,
                reach,
                retry_from.get(task_name(line), 0),
            )
            for line in pending
        ]
        bar = _progress_bar(len(lines), len(lines) - len(pending), progress, "llm run")
        try:
            run_pool(tasks, concurrency, stop, lambda: bar.update(1))
        finally:
            bar.close()
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
