"""What the decision layer knows about asking a chat model: the call's shape and how to read a reply.

The agents never talk to a network themselves; whoever builds them injects an `AskJSON` callable
(in production `streams.core.llm_client.ChatEndpoint.ask_json`, in tests anything). Reading the
reply is pure, so it lives here and the I/O side reuses it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from dreamstream.schemas.errors import ModelReplyError

__all__ = ["AskJSON", "LLMReplyError", "reply_object"]

AskJSON = Callable[[list[dict[str, str]]], dict[str, Any]]
"""One chat call in JSON mode: chat messages in, the reply's JSON object out, or an exception."""

_FENCE = re.compile(r"^```(?:json)?\s*|\s*```$", re.MULTILINE)


class LLMReplyError(ModelReplyError):
    """The endpoint answered, but not with a usable reply."""


def reply_object(payload: Any) -> dict[str, Any]:
    """The JSON object in a chat-completions response (code fences tolerated), or `LLMReplyError`."""
    try:
        content = payload["choices"][0]["message"]["content"]
        data = json.loads(_FENCE.sub("", str(content)).strip())
    except (KeyError, IndexError, TypeError, json.JSONDecodeError) as exc:
        raise LLMReplyError(f"unreadable reply: {exc}") from exc
    if not isinstance(data, dict):
        raise LLMReplyError("reply is not a JSON object")
    return data
