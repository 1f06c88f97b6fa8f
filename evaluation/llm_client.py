"""A minimal client of OpenAI-compatible ``/v1/chat/completions`` endpoints (standard library).

``ChatClient.send(prompt)`` makes one request and returns an ``Attempt``: what came back
(status, body text, latency, token usage, ``finish_reason``) and how to treat it: ``"ok"``
(an answer to parse), ``"transient"`` (ask again later: a timeout, a connection error, HTTP 429
or 5xx, a body that is not a chat completion, a truncated answer) or ``"fatal"`` (asking again
cannot help: HTTP 401, 403, 400, 404, 422 and any other 4xx). ``Attempt.network`` says whether
a response came at all (``None``), or the request timed out (``"timeout"``), lost its
connection (``"dropped"``) or could not connect (``"unreachable"``: refused, unknown host, no
route, a certificate refused). It never raises for what the server or the network does; an
exception out of ``send`` is a bug in the client.

Bodies are read as strict JSON (``loads_strict``): ``NaN``, ``Infinity`` and numbers too large
for a float are refused (Python's ``json`` accepts them, but they are not JSON and the records
are written without them), and only non-negative integer token counts are kept from ``usage``.

The API key is read from an environment variable when the client is made, sent only in the
``Authorization`` header, and never kept in a ``repr``, an ``Attempt`` or a message: any
occurrence of it in what the server sends back is replaced by ``[redacted]``.
"""

from __future__ import annotations

import email.utils
import errno
import http.client
import json
import math
import os
import socket
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from whatif_bench.errors import WhatIfError

CHAT_PATH = "/chat/completions"
BATCH_URL = "/v1/chat/completions"  # the ``url`` of a Batch API request line
MAX_BODY_BYTES = 64 * 1024 * 1024  # a chat completion larger than this is not read whole
MAX_RETRY_AFTER_S = 600.0  # a Retry-After longer than this is capped
TRANSIENT_STATUS = frozenset({408, 409, 425, 429})  # 4xx codes that say "try again"
REDACTED = "[redacted]"


class LLMError(WhatIfError):
    """``whatif llm`` cannot run: a bad option, an export or responses folder it cannot use."""


class NonFiniteJSON(ValueError):
    """A text holds ``NaN``, ``Infinity`` or a number beyond a float: not JSON."""


def _refuse_constant(name: str) -> Any:
    raise NonFiniteJSON(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise NonFiniteJSON(f"{text[:40]} is too large for a float")
    return value


def loads_strict(text: str) -> Any:
    """``json.loads`` that refuses ``NaN``, ``Infinity`` and numbers that overflow a float
    (``NonFiniteJSON``, a ``ValueError``), so what it returns can be written back as JSON."""
    return json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)


def clean_usage(usage: Any) -> dict[str, int]:
    """The token counts of a ``usage`` object: its entries that are non-negative integers
    (nested details, strings, fractions, negative numbers are dropped)."""
    if not isinstance(usage, dict):
        return {}
    return {
        str(name): int(value)
        for name, value in usage.items()
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0
    }


def _finite_or_none(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def chat_url(base_url: str) -> str:
    """The chat-completions URL of an API root: ``http://host:8000/v1`` ->
    ``http://host:8000/v1/chat/completions`` (a URL already ending in ``/chat/completions``
    is kept); an ``LLMError`` for anything but an ``http(s)://host...`` URL."""
    text = str(base_url).strip()
    try:
        parts = urllib.parse.urlsplit(text)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as exc:
        raise LLMError(f"--base-url {text[:80]!r} is not a URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise LLMError(
            f"--base-url {text[:80]!r} is not an http:// or https:// URL with a host, e.g. "
            "http://127.0.0.1:8000/v1"
        )
    if parts.query or parts.fragment:
        raise LLMError(f"--base-url {text[:80]!r}: give the API root without ?query or #part")
    path = parts.path.rstrip("/")
    if not path.endswith(CHAT_PATH):
        path += CHAT_PATH
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def request_body(
    model: str, prompt: str, temperature: float | None = None, max_tokens: int | None = None
) -> dict[str, Any]:
    """The JSON body of one chat-completions request: the prompt as the one user message;
    ``temperature`` and ``max_tokens`` only when given (else the server's defaults)."""
    body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": prompt}]}
    if temperature is not None:
        body["temperature"] = temperature
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    return body


@dataclass
class Attempt:
    """One request and what came back.

    ``outcome`` is ``"ok"``, ``"transient"`` or ``"fatal"`` (see the module doc); ``reason``
    says why an attempt is not ok; ``status`` is the HTTP status (``None`` when no response
    came: timeout, connection error); ``body`` the response text as received (key redacted);
    ``latency_s`` the seconds from sending to the last byte read; ``content`` the answer text
    of ``choices[0].message.content``; ``usage`` the server's token counts
    (``prompt_tokens``, ``completion_tokens``, ...); ``retry_after_s`` the server's
    Retry-After in seconds, if it sent one; ``time`` when the request was sent (ISO 8601 UTC).
    """

    outcome: str
    reason: str | None = None
    status: int | None = None
    body: str = ""
    latency_s: float | None = None
    content: str | None = None
    finish_reason: str | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    retry_after_s: float | None = None
    time: str = ""
    network: str | None = None

    @property
    def connection_failed(self) -> bool:
        """No response came because of the connection (not a timeout): the request says
        nothing about the task, only about the endpoint."""
        return self.network in ("dropped", "unreachable")

    def record(self) -> dict[str, Any]:
        """The attempt as a JSON-able dict (the file ``whatif llm run`` writes)."""
        return {
            "outcome": self.outcome,
            "reason": self.reason,
            "status": self.status,
            "network": self.network,
            "latency_s": _finite_or_none(self.latency_s),
            "finish_reason": self.finish_reason,
            "usage": clean_usage(self.usage),
            "retry_after_s": _finite_or_none(self.retry_after_s),
            "time": self.time,
            "body": self.body,
        }

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Attempt:
        """The attempt an attempt file (``record()``) holds, its answer read again from the
        stored body."""
        status = record.get("status")
        stored = record.get("body")
        body = stored if isinstance(stored, str) else ""
        if isinstance(status, int) and not isinstance(status, bool):
            attempt = read_completion(status, body)
        else:
            attempt = cls("transient", str(record.get("reason")), None, body)
        attempt.latency_s = _finite_or_none(record.get("latency_s"))
        attempt.retry_after_s = _finite_or_none(record.get("retry_after_s"))
        attempt.time = str(record.get("time") or "")
        network = record.get("network")
        attempt.network = network if isinstance(network, str) else None
        return attempt


def now_iso() -> str:
    """The current time, ISO 8601 UTC with milliseconds."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """Seconds asked for by a ``Retry-After`` header (a number of seconds or an HTTP date),
    between 0 and ``MAX_RETRY_AFTER_S``; ``None`` when absent or unreadable."""
    if value is None:
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = when.timestamp() - (time.time() if now is None else now)
    if not math.isfinite(seconds):
        return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_S)


def read_completion(status: int, body: str) -> Attempt:
    """Classify a response of ``status`` with the text ``body`` (see the module doc); for a
    2xx chat completion, its answer text, ``finish_reason`` and usage. Shared by the HTTP
    client and the Batch results reader."""
    if not 200 <= status < 300:
        transient = status >= 500 or status in TRANSIENT_STATUS
        return Attempt(
            "transient" if transient else "fatal",
            f"HTTP {status}: {_excerpt(body)}",
            status,
            body,
        )
    try:
        data = loads_strict(body)
        choice = data["choices"][0]
        content = choice["message"]["content"]
    except NonFiniteJSON as exc:
        return Attempt(
            "transient",
            f"HTTP {status} but the body is not JSON ({exc}): {_excerpt(body)}",
            status,
            body,
        )
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        return Attempt(
            "transient", f"HTTP {status} but not a chat completion: {_excerpt(body)}", status, body
        )
    usage = clean_usage(data.get("usage")) if isinstance(data, dict) else {}
    finish = choice.get("finish_reason") if isinstance(choice, dict) else None
    finish = finish if isinstance(finish, str) else None
    if not isinstance(content, str):
        return Attempt(
            "transient", "the answer has no text content", status, body, None, None, finish, usage
        )
    if finish == "length":
        return Attempt(
            "transient",
            "the answer was cut off (finish_reason: length); raise --max-tokens or lower "
            "--max-context",
            status,
            body,
            None,
            content,
            finish,
            usage,
        )
    return Attempt("ok", None, status, body, None, content, finish, usage)


def _excerpt(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return repr(text if len(text) <= limit else text[:limit] + "...")


class ChatClient:
    """Requests to one OpenAI-compatible chat-completions endpoint.

    ``base_url``: the API root (``https://api.openai.com/v1``, ``http://127.0.0.1:8000/v1``);
    ``api_key_env``: the environment variable holding the key (unset or empty: no
    ``Authorization`` header); ``timeout``: seconds a request may take (connect and each read);
    ``temperature``, ``max_tokens``: sent when given.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str = "OPENAI_API_KEY",
        timeout: float = 600.0,
        temperature: float | None = None,
        max_tokens: int | None = None,
    ) -> None:
        self.url = chat_url(base_url)
        self.model = model
        self.api_key_env = api_key_env
        self.timeout = timeout
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.__key = os.environ.get(api_key_env) or None

    def __repr__(self) -> str:
        return (
            f"ChatClient(url={self.url!r}, model={self.model!r}, api_key_env="
            f"{self.api_key_env!r}, key={'set' if self.__key else 'unset'})"
        )

    @property
    def has_key(self) -> bool:
        return self.__key is not None

    def redact(self, text: str) -> str:
        """``text`` with every occurrence of the key replaced by ``[redacted]``."""
        return text.replace(self.__key, REDACTED) if self.__key else text

    def _request(self, prompt: str) -> urllib.request.Request:
        data = json.dumps(
            request_body(self.model, prompt, self.temperature, self.max_tokens), allow_nan=False
        ).encode("utf-8")
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.__key:
            headers["Authorization"] = f"Bearer {self.__key}"
        return urllib.request.Request(self.url, data=data, headers=headers, method="POST")

    def send(self, prompt: str) -> Attempt:
        """One request with ``prompt`` as the user message; see ``Attempt``."""
        request = self._request(prompt)
        sent, started = now_iso(), time.monotonic()
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310
                status = int(response.status)
                raw = response.read(MAX_BODY_BYTES + 1)
                retry = response.headers.get("Retry-After")
        except urllib.error.HTTPError as exc:
            status, retry = int(exc.code), exc.headers.get("Retry-After") if exc.headers else None
            try:
                raw = exc.read(MAX_BODY_BYTES + 1)
            except (OSError, http.client.HTTPException):
                raw = b""
            finally:
                exc.close()
        except TimeoutError:
            return self._no_response(
                f"no answer within --timeout {self.timeout:g} s", sent, started, "timeout"
            )
        except urllib.error.URLError as exc:
            reason = exc.reason
            if isinstance(reason, TimeoutError):
                return self._no_response(
                    f"no answer within --timeout {self.timeout:g} s", sent, started, "timeout"
                )
            return self._no_response(
                f"connection failed: {reason}", sent, started, _network_failure(reason)
            )
        except (ConnectionError, http.client.HTTPException, OSError) as exc:
            return self._no_response(
                f"connection failed: {type(exc).__name__}: {exc}",
                sent,
                started,
                _network_failure(exc),
            )
        latency = time.monotonic() - started
        body = self.redact(raw[:MAX_BODY_BYTES].decode("utf-8", "replace"))
        attempt = read_completion(status, body)
        if len(raw) > MAX_BODY_BYTES:
            attempt = Attempt(
                "transient", f"the response is larger than {MAX_BODY_BYTES:,} bytes", status, body
            )
        attempt.latency_s = latency
        attempt.time = sent
        attempt.retry_after_s = retry_after_seconds(retry)
        if attempt.reason is not None:
            attempt.reason = self.redact(attempt.reason)
        return attempt

    def _no_response(self, reason: str, sent: str, started: float, network: str) -> Attempt:
        return Attempt(
            "transient",
            self.redact(reason),
            latency_s=time.monotonic() - started,
            time=sent,
            network=network,
        )


_UNREACHABLE_ERRNO = frozenset({errno.ENETUNREACH, errno.EHOSTUNREACH, errno.EADDRNOTAVAIL})


def _network_failure(reason: object) -> str:
    """``"unreachable"`` for a failure to connect at all (refused, unknown host, no route, a
    certificate refused), else ``"dropped"`` (the connection was made, then lost)."""
    if isinstance(reason, ConnectionRefusedError | socket.gaierror | ssl.SSLCertVerificationError):
        return "unreachable"
    if isinstance(reason, OSError) and reason.errno in _UNREACHABLE_ERRNO:
        return "unreachable"
    return "dropped"
