"""The one OpenAI-compatible chat call the optional LLM parts share (the judge, the pattern writer).

Plain `urllib` against `{base_url}/chat/completions` (Ollama, vLLM, OpenAI and most gateways speak
it), JSON mode, temperature 0, a timeout on every call. Callers treat any exception as "no answer"
and fall back to their offline logic, so an endpoint that is down never stops the stream.
"""

from __future__ import annotations

import json
import re
import urllib.request
from dataclasses import dataclass
from typing import Any

_FENCE = re.compile(r"^```(?:json)?\s*|\s*```$", re.MULTILINE)


class LLMReplyError(ValueError):
    """The endpoint answered, but not with a usable reply."""


@dataclass(frozen=True)
class ChatEndpoint:
    """Where and how to ask: base URL (ending in /v1 for most servers), model name, optional key."""

    base_url: str
    model: str
    api_key: str | None = None
    timeout_s: float = 10.0

    def ask_json(self, messages: list[dict[str, str]]) -> dict[str, Any]:
        """One chat completion in JSON mode; returns the reply's JSON object or raises."""
        body = {"model": self.model, "messages": messages, "temperature": 0,
                "response_format": {"type": "json_object"}}
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        req = urllib.request.Request(self.base_url.rstrip("/") + "/chat/completions",
                                     data=json.dumps(body).encode(), headers=headers, method="POST")
        with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
            payload = json.loads(resp.read().decode("utf-8"))
        return reply_object(payload)


def reply_object(payload: dict[str, Any]) -> dict[str, Any]:
    """The JSON object in a chat-completions response (code fences tolerated), or `LLMReplyError`."""
    try:
        content = payload["choices"][0]["message"]["content"]
        data = json.loads(_FENCE.sub("", str(content)).strip())
    except (KeyError, IndexError, TypeError, json.JSONDecodeError) as exc:
        raise LLMReplyError(f"unreadable reply: {exc}") from exc
    if not isinstance(data, dict):
        raise LLMReplyError("reply is not a JSON object")
    return data
