"""Optional judge that asks an OpenAI-compatible chat endpoint about the cases the cheap checks leave open.

One structured call per new memory: the open candidates are numbered 1..n and the model answers
with JSON `{"duplicates": [...], "new_more_complete": bool, "contradicted": [...]}`. Anything that
goes wrong (connection, timeout, HTTP error, malformed or out-of-range reply) falls back to the
offline judge's verdicts for that memory, so ingest never blocks on the LLM. The call itself is
injected (`ask`, e.g. `ChatEndpoint.ask_json`): this module does no I/O.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from cachetools import LRUCache

from dreamstream.agents.llm_reply import AskJSON, LLMReplyError, reply_object
from dreamstream.agents.merge_supersede import Judge, OfflineJudge, Verdict
from dreamstream.schemas.memory import Memory

SYSTEM_PROMPT = """You keep one person's long-term memory coherent. You get a NEW memory and numbered \
EXISTING memories of the same person. Answer with JSON only:
{"duplicates": [numbers of existing memories that state the same fact as NEW],
 "new_more_complete": true if NEW states strictly more than every duplicate, else false,
 "contradicted": [numbers of existing memories whose value NEW replaces: the same single-valued \
attribute (home, employer, car, a component's technology...) now has another value, or a \
preference was reversed]}
A second hobby, pet or language, a complementary detail, a repeated event, a trip the other way, \
or a fact about another person is neither a duplicate nor a contradiction. Use [] when none."""

__all__ = ["LLMJudge", "LLMReplyError", "parse_reply"]


FALLBACKS: Counter[str] = Counter()
"""Calls answered by the offline judge instead, by error: a failing endpoint looked like a healthy one (an
audit), its only trace a rule suffix on the decisions it did make. `dream replay` prints the count."""
log = logging.getLogger("dreamstream.judge")


def fell_back(exc: BaseException) -> None:
    """Counts a fallback and says so in the log: at the first of each kind, then every 100th."""
    kind = type(exc).__name__
    FALLBACKS[kind] += 1
    if FALLBACKS[kind] % 100 == 1:
        log.warning("LLM judge failed (%s: %s); the offline judge decides instead (%d such so far)", kind,
                    " ".join(str(exc).split())[:200], FALLBACKS[kind])


@dataclass
class LLMJudge:
    """Escalates open cases to a chat model; `fallback` decides everything else and every failure.

    `ask` is one JSON-mode chat call (one model): replies are cached per judge by prompt, so the same
    open case is asked once.
    """

    ask: AskJSON
    max_candidates: int = 8
    min_cos: float = 0.25
    fallback: Judge = field(default_factory=OfflineJudge)
    cache_size: int = 4096
    name: str = "llm"
    _cache: LRUCache[str, dict[str, Any]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._cache = LRUCache(maxsize=self.cache_size)

    # -- Judge protocol ---------------------------------------------------------------------------
    def judge(self, new: Memory, candidates: Sequence[Memory]) -> list[Verdict]:
        base = self.fallback.judge(new, candidates)
        open_idx = self._open(new, candidates, base)
        if not open_idx:
            return base
        try:
            reply = self._reply(new, [candidates[i] for i in open_idx])
        except Exception as exc:  # noqa: BLE001 - any failure means: keep the offline verdicts
            fell_back(exc)
            return [replace(v, rule=f"{v.rule}|llm_fallback:{type(exc).__name__}") for v in base]
        return self._merge(base, open_idx, reply)

    # -- internals --------------------------------------------------------------------------------
    def _open(self, new: Memory, candidates: Sequence[Memory], base: list[Verdict]) -> list[int]:
        """Candidates worth a model call: not an exact restatement and not clearly far away."""
        scored = [
            (-v.scores.get("cos", 0.0), i)
            for i, v in enumerate(base)
            if v.rule != "exact_text" and v.scores.get("cos", 0.0) >= self.min_cos
        ]
        return [i for _, i in sorted(scored)[: self.max_candidates]]

    def _messages(self, new: Memory, cands: Sequence[Memory]) -> list[dict[str, str]]:
        lines = [f"NEW ({new.created_at[:10]}): {new.text}", "EXISTING:"]
        lines += [f"{n}. ({c.created_at[:10]}) {c.text}" for n, c in enumerate(cands, start=1)]
        return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "\n".join(lines)}]

    def _reply(self, new: Memory, cands: Sequence[Memory]) -> dict[str, Any]:
        """The checked verdict for these candidates, from the cache or one call (not under the lock)."""
        messages = self._messages(new, cands)
        key = hashlib.sha1(json.dumps(messages).encode()).hexdigest()
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        reply = check_reply(self.ask(messages), len(cands))
        self._cache[key] = reply
        return reply

    def _merge(self, base: list[Verdict], open_idx: list[int], reply: dict[str, Any]) -> list[Verdict]:
        out = list(base)
        dups, contra = set(reply["duplicates"]), set(reply["contradicted"])
        for n, i in enumerate(open_idx, start=1):
            v = base[i]
            if n in dups:
                out[i] = Verdict(
                    v.candidate_id, "same", 1.0, "llm_duplicate", v.scores, reply["new_more_complete"]
                )
            elif n in contra:
                out[i] = Verdict(v.candidate_id, "replaces", 1.0, "llm_contradiction", v.scores)
            else:
                out[i] = Verdict(v.candidate_id, "unrelated", 1.0, "llm_unrelated", v.scores)
        return out


def parse_reply(payload: dict[str, Any], n: int) -> dict[str, Any]:
    """Validate a chat-completions response; raise `LLMReplyError` on anything unexpected."""
    return check_reply(reply_object(payload), n)


def check_reply(data: dict[str, Any], n: int) -> dict[str, Any]:
    """The verdict in a reply object, candidate numbers checked against 1..n."""
    # Every key the prompt asks for, of its type: `{}` or another shape read as "nothing related" (an audit),
    # `true` as candidate 1, and "false" as true.
    fuller = data.get("new_more_complete", False)
    if not isinstance(fuller, bool):
        raise LLMReplyError("new_more_complete must be true or false")
    out: dict[str, Any] = {"new_more_complete": fuller}
    if "duplicates" not in data and "contradicted" not in data:
        raise LLMReplyError("the reply has neither a duplicates nor a contradicted list")
    for key in ("duplicates", "contradicted"):
        vals = data.get(key, [])
        if not isinstance(vals, list) or not all(
                isinstance(x, int) and not isinstance(x, bool) and 1 <= x <= n for x in vals):
            raise LLMReplyError(f"{key} must be a list of candidate numbers 1..{n}")
        out[key] = sorted(set(vals))
    if set(out["duplicates"]) & set(out["contradicted"]):
        raise LLMReplyError("a candidate cannot be both duplicate and contradicted")
    return out
