"""Optional LLM wording for pattern memories; the offline text of `synthesis.pattern_text` otherwise.

Synthesis finds the theme and its evidence offline either way; only the sentence differs. The model
gets the theme's evidence (the person's own current facts, oldest first with their month) and must answer
`{"pattern": "..."}`: a sentence naming the thread, then the supporting details, claiming nothing the
memories do not say.
A failed call or an unusable answer keeps the offline text, so a run never fails on the endpoint.
The call itself is injected (`ask`, e.g. `ChatEndpoint.ask_json`): this module does no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dreamstream.agents.llm_reply import AskJSON, LLMReplyError

SYSTEM_PROMPT = """You write one long-term memory that generalises several short memories about \
the same person. Answer with JSON only: {"pattern": "<text>"}. Start with one sentence that names \
what links the memories (a habit, a direction, a recurring activity), using the person's name as the \
memories use it ("User" when they use none). Then give the concrete supporting details, each one \
traceable to a memory. The memories are listed oldest first with their month: read them in that \
order and never state an earlier state as current. At most 70 words; add nothing the memories do \
not support."""

MAX_CHARS = 450
MAX_EVIDENCE = 12
"""Memories shown to the model per theme: enough to see the pattern, a bounded prompt."""


def check_pattern(data: dict[str, object]) -> str:
    """The sentence in a reply object, or `LLMReplyError` when it is missing, empty or overlong."""
    text = data.get("pattern")
    if not isinstance(text, str) or not text.strip():
        raise LLMReplyError("reply has no pattern sentence")
    text = " ".join(text.split())
    if len(text) > MAX_CHARS:
        raise LLMReplyError(f"pattern sentence longer than {MAX_CHARS} characters")
    return text


@dataclass(frozen=True)
class LLMPatternWriter:
    """Words a theme's pattern through one JSON-mode chat call (`ask`); `None` means: keep the offline text."""

    ask: AskJSON
    name: str = "llm"

    def messages(self, label: str, texts: Sequence[str]) -> list[dict[str, str]]:
        lines = [f"Shared words: {label}", "Memories, oldest first:"] + [f"- {t}" for t in texts[-MAX_EVIDENCE:]]
        return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "\n".join(lines)}]

    def __call__(self, label: str, texts: Sequence[str]) -> str | None:
        try:
            return check_pattern(self.ask(self.messages(label, texts)))
        except Exception:  # noqa: BLE001 - any failure means: keep the offline wording
            return None
