"""OpenAI Batch-style JSON Lines: ``whatif llm batch`` writes the requests of an ``llm``
export, ``whatif llm batch-read`` reads the results into a responses folder.

A request line::

    {"custom_id": "task-000001", "method": "POST", "url": "/v1/chat/completions",
     "body": {"model": ..., "messages": [{"role": "user", "content": <prompt>}], ...}}

A result line has the same ``custom_id`` and either ``response: {"status_code": 200,
"body": <chat completion>}`` or ``error: {...}``. Results are read into the layout of
``whatif llm run`` (``llm_runner`` module doc), one attempt per task; an error, a non-2xx
status, a line holding ``NaN`` or ``Infinity`` (not JSON), a truncated or an unparseable
answer makes the task imputed, with the reason.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from whatif_bench._version import __version__
from whatif_bench.evaluation.llm_client import (
    BATCH_URL,
    Attempt,
    LLMError,
    NonFiniteJSON,
    loads_strict,
    now_iso,
    read_completion,
    request_body,
)
from whatif_bench.evaluation.llm_runner import (
    RunSummary,
    answer_record,
    base_manifest,
    count_records,
    judge,
    naive_values,
    open_export,
    responses_folder,
    task_name,
    task_prompt,
)
from whatif_bench.outputs import atomic_output, check_output_path

BATCH_BASE_URL = "batch"  # the ``base_url`` a responses folder from a results file records
_CUSTOM_ID = re.compile(r"(?:tasks/)?(task-[0-9]{6})")
MAX_LINE_BYTES = 256 * 1024 * 1024


def _is_request_file(path: Path) -> bool:
    """Whether the existing file ``path`` opens with a request line of ours (so ``batch``
    may replace it); a missing file counts as ours."""
    if not path.exists():
        return True
    try:
        with open(path, encoding="utf-8") as handle:
            first = json.loads(handle.readline(MAX_LINE_BYTES))
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    return (
        isinstance(first, dict)
        and first.get("url") == BATCH_URL
        and isinstance(first.get("custom_id"), str)
        and _CUSTOM_ID.fullmatch(first["custom_id"]) is not None
    )


def write_requests(
    export_dir: str | os.PathLike,
    model: str,
    out: str | os.PathLike,
    max_context: int | None = None,
    temperature: float | None = None,
    max_tokens: int | None = None,
    limit: int | None = None,
) -> int:
    """Write one Batch request per task of the export (the first ``limit``) to ``out``
    (JSON Lines, atomically); returns the number of lines. The prompts are
    ``llm_runner.task_prompt``'s, so ``max_context`` cuts them as ``run`` does. An existing
    ``out`` is replaced only if it is a request file this command wrote."""
    if not model:
        raise LLMError("--model is empty; give the model name the batch endpoint serves")
    export = open_export(export_dir)
    path = check_output_path(out, inputs=[export.path, export.path / "key.jsonl"])
    if not _is_request_file(path):
        raise LLMError(
            f"{path}: exists and is not a request file whatif llm batch wrote; refusing to "
            "replace it: delete it by hand or choose another name"
        )
    lines = export.lines[:limit] if limit is not None else export.lines
    with atomic_output(path, inputs=[export.path]) as tmp:
        with open(tmp, "w", encoding="utf-8", newline="\n") as handle:
            for line in lines:
                body = request_body(
                    model, task_prompt(export, line, max_context), temperature, max_tokens
                )
                request = {
                    "custom_id": task_name(line),
                    "method": "POST",
                    "url": BATCH_URL,
                    "body": body,
                }
                handle.write(json.dumps(request, allow_nan=False) + "\n")
    return len(lines)


def _status(response: Any) -> int | None:
    status = response.get("status_code") if isinstance(response, dict) else None
    return status if isinstance(status, int) and not isinstance(status, bool) else None


def _result_attempt(
    where: str, item: Any, text: str, not_json: str | None = None
) -> tuple[str, Attempt, str | None]:
    """(custom_id, attempt, model named in the body) of one result line (``where``: the file
    and line number, for messages; ``text``: the line). ``not_json``: why the line is not
    strict JSON (``NaN``, ``Infinity``; ``item`` was read leniently): the attempt is unusable,
    with that reason, and keeps the line as its body."""
    if not isinstance(item, dict) or not isinstance(item.get("custom_id"), str):
        raise LLMError(f"{where}: not a batch result (no custom_id)")
    custom_id = item["custom_id"]
    response, error = item.get("response"), item.get("error")
    if not_json is not None:
        reason = f"the result line is not JSON ({not_json})"
        return custom_id, Attempt("transient", reason, _status(response), text.strip()), None
    if error:
        shown = json.dumps(error, sort_keys=True, allow_nan=False)
        return custom_id, Attempt("fatal", f"batch error: {shown[:300]}", body=shown), None
    status = _status(response)
    if status is None or not isinstance(response, dict):
        raise LLMError(f"{where} ({custom_id}): neither a response with a status_code nor an error")
    body = response.get("body")
    body_text = body if isinstance(body, str) else json.dumps(body, allow_nan=False)
    attempt = read_completion(status, body_text)
    model = body.get("model") if isinstance(body, dict) else None
    return custom_id, attempt, model if isinstance(model, str) else None


def read_results(
    export_dir: str | os.PathLike,
    results: str | os.PathLike,
    out: str | os.PathLike,
    model: str | None = None,
    max_context: int | None = None,
) -> RunSummary:
    """Read the Batch results file ``results`` into the responses folder ``out``.

    Every result becomes one attempt file and a final record: the parsed answer, or the naive
    forecast marked imputed with the reason (an ``error``, a non-2xx status, a body that is
    not a chat completion, a truncated or unparseable answer). ``model`` names the model in
    the manifest (default: the ``model`` of the first response body); ``max_context``
    records the setting the requests were written with. Tasks already with a final record
    are kept; a ``custom_id`` that is no task of the export, or a repeated one, is an error.
    """
    export = open_export(export_dir)
    by_name = {task_name(line): line for line in export.lines}
    path = Path(results)
    if os.fspath(results) == "" or not path.is_file():
        raise LLMError(f"{results}: no such results file")
    parsed: list[tuple[dict[str, Any], Attempt]] = []
    seen: set[str] = set()
    named: str | None = None
    try:
        with open(path, encoding="utf-8") as handle:
            for number, text in enumerate(handle, 1):
                if not text.strip():
                    continue
                where = f"{path}, line {number}"
                not_json = None
                try:
                    try:
                        item = loads_strict(text)
                    except NonFiniteJSON as exc:
                        not_json = str(exc)
                        item = json.loads(text)  # for its custom_id; the task is imputed
                except ValueError as exc:
                    raise LLMError(f"{where}: not JSON ({exc})") from None
                custom_id, attempt, body_model = _result_attempt(where, item, text, not_json)
                match = _CUSTOM_ID.fullmatch(custom_id)
                if match is None or match.group(1) not in by_name:
                    raise LLMError(
                        f"{path}, line {number}: custom_id {custom_id[:60]!r} is no task of the "
                        f"export {export.path}"
                    )
                if match.group(1) in seen:
                    raise LLMError(f"{path}, line {number}: {custom_id!r} appears twice")
                seen.add(match.group(1))
                named = named or body_model
                parsed.append((by_name[match.group(1)], attempt))
    except (OSError, UnicodeDecodeError) as exc:
        raise LLMError(f"{path}: cannot be read ({exc})") from None
    model = model or named or "unknown"
    manifest = base_manifest(export, model, BATCH_BASE_URL, max_context, "batch")
    settings = {"source": "batch", "started": now_iso(), "toolkit_version": __version__}
    settings["results"] = str(path.resolve())
    with responses_folder(out, export, manifest, settings) as responses:
        done = responses.done()
        for line, attempt in parsed:
            name = task_name(line)
            if name in done:
                continue
            attempt.time = attempt.time or now_iso()
            values = judge(attempt, line)
            number = responses.write_attempt(name, {"task_id": line["task_id"], **attempt.record()})
            if values is None:
                record = answer_record(
                    line,
                    naive_values(line),
                    True,
                    [f"attempt {number}: {attempt.reason}"],
                    number,
                    None,
                )
                record["prompt_tokens"] = attempt.usage.get("prompt_tokens")
                record["completion_tokens"] = attempt.usage.get("completion_tokens")
            else:
                record = answer_record(line, values, False, [], number, attempt)
            responses.write_answer(name, record)
        names = [task_name(line) for line in export.lines]
        answered, imputed = count_records(responses, names)
        return RunSummary(
            len(names),
            answered,
            imputed,
            len(done),
            len(parsed) - len(done & seen),
            None,
            responses.path,
        )
