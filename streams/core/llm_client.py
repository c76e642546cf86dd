"""The one OpenAI-compatible chat call the optional LLM parts share (the judge, the pattern writer).

`POST {base_url}/chat/completions` (Ollama, vLLM, OpenAI and most gateways speak it), JSON mode,
temperature 0, a deadline on every attempt (the whole answer, not only each wait for bytes) and on the
call. Transient failures (connect errors, timeouts, HTTP 429 and 5xx) are retried a few times with a
short backoff, because a busy local server often answers a moment later; anything else (another 4xx, a
malformed reply) would fail the same way again, so it raises at once. Callers treat any exception as "no
answer" and fall back to their offline logic, so an endpoint that is down never stops the stream.
Reading the reply is `agents.llm_reply`'s job.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
from tenacity import Retrying, retry_if_exception, stop_after_attempt, stop_after_delay, wait_exponential

from dreamstream.agents.llm_reply import LLMReplyError, reply_object

__all__ = ["ChatEndpoint", "LLMReplyError"]

MAX_ATTEMPTS = 3
"""Attempts per call: bounds the extra latency on a failing endpoint to a few timeouts."""


def _transient(exc: BaseException) -> bool:
    """Worth another attempt: the server was unreachable, slow, rate-limiting or failing inside."""
    if isinstance(exc, httpx.HTTPStatusError):
        code = exc.response.status_code
        return code == 429 or code >= 500
    # A connection the server closed or broke without an answer is as transient as one it refused.
    return isinstance(exc, (httpx.ConnectError, httpx.TimeoutException, httpx.RemoteProtocolError,
                            httpx.ReadError, httpx.WriteError))


@dataclass(frozen=True)
class ChatEndpoint:
    """Where and how to ask: base URL (ending in /v1 for most servers), model name, optional key.

    Holds one `httpx.Client` (thread-safe, keeps connections alive across calls); build one
    endpoint per configuration and reuse it.
    """

    base_url: str
    model: str
    api_key: str | None = field(default=None, repr=False)
    timeout_s: float = 10.0
    _client: httpx.Client = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        object.__setattr__(self, "_client", httpx.Client(headers=headers, timeout=self.timeout_s))

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/") + "/chat/completions"

    def ask_json(self, messages: list[dict[str, str]]) -> dict[str, Any]:
        """One chat completion in JSON mode; returns the reply's JSON object or raises."""
        body = {"model": self.model, "messages": messages, "temperature": 0,
                "response_format": {"type": "json_object"}}
        return reply_object(self._post(body))

    def _post(self, body: dict[str, Any]) -> Any:
        """The decoded response body; HTTP errors raise (`_transient` decides which are retried). No new
        attempt starts once `timeout_s` has passed since the first, so a call ends within about twice it."""
        for attempt in Retrying(retry=retry_if_exception(_transient),
                                stop=stop_after_attempt(MAX_ATTEMPTS) | stop_after_delay(self.timeout_s),
                                wait=wait_exponential(multiplier=0.2, max=2.0), reraise=True):
            with attempt:
                return self._attempt(body)
        raise AssertionError("unreachable: the last attempt's error is raised")  # pragma: no cover

    def _attempt(self, body: dict[str, Any]) -> Any:
        """One request, whole within `timeout_s`: httpx's timeout bounds each wait for bytes, so a server that
        sent its answer a byte every few seconds held a synthesis run (and every user after it) for minutes."""
        deadline = time.monotonic() + self.timeout_s
        with self._client.stream("POST", self.url, json=body) as resp:
            resp.raise_for_status()
            chunks = []
            for chunk in resp.iter_bytes():
                chunks.append(chunk)
                if time.monotonic() > deadline:
                    raise httpx.ReadTimeout(f"no whole answer within {self.timeout_s:.0f} s", request=resp.request)
        try:
            return json.loads(b"".join(chunks))
        except ValueError as exc:  # a 200 that is not JSON: the server is wrong, not busy
            raise LLMReplyError(f"response body is not JSON: {exc}") from exc

    def close(self) -> None:
        """Release the pooled connections (optional: they also go with the process)."""
        self._client.close()
