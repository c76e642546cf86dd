"""Which judge decides merges and supersedes, and who words patterns: built once from settings.

The agents hold the logic (`agents/merge_supersede.py`, `agents/nli_judge.py`, `agents/llm_judge.py`,
`agents/pattern_writer.py`); this module only reads `DREAM_JUDGE`, `DREAM_NLI_MODEL`, `DREAM_LLM_*`
and `DREAM_SYNTHESIS_TEXT`, so the worker, `dream replay` and `dream synthesize` choose alike.
A misconfiguration is an error at start, not a silent fall back to the offline judge.
"""

from __future__ import annotations

from dreamstream.agents.llm_client import ChatEndpoint
from dreamstream.agents.merge_supersede import Judge, OfflineJudge
from dreamstream.agents.pattern_writer import LLMPatternWriter
from dreamstream.streams.settings import Settings

JUDGES = ("offline", "nli", "llm")
TEXT_WRITERS = ("offline", "llm")


class JudgeConfigError(ValueError):
    """The settings name a judge or writer that cannot be built (unknown name, missing model or URL)."""


def _endpoint(s: Settings, what: str) -> ChatEndpoint:
    if not s.llm_url or not s.llm_model:
        raise JudgeConfigError(f"{what} needs DREAM_LLM_URL and DREAM_LLM_MODEL "
                               "(an OpenAI-compatible endpoint, e.g. http://127.0.0.1:11434/v1 for Ollama)")
    return ChatEndpoint(s.llm_url, s.llm_model, s.llm_api_key, s.llm_timeout)


def offline_judge() -> OfflineJudge:
    from dreamstream.streams.embedding import shared_embedder

    return OfflineJudge(embedder=shared_embedder())


def judge_from_settings(s: Settings) -> Judge | None:
    """The configured judge, or None for the default offline one (built lazily by `decide`)."""
    name = s.judge.strip().lower()
    if name == "offline":
        return None
    if name == "nli":
        if not s.nli_model:
            raise JudgeConfigError("DREAM_JUDGE=nli needs DREAM_NLI_MODEL (a local CrossEncoder NLI model folder)")
        from dreamstream.agents.nli_judge import NLIJudge

        return NLIJudge.from_path(s.nli_model, fallback=offline_judge())
    if name == "llm":
        from dreamstream.agents.llm_judge import LLMJudge

        ep = _endpoint(s, "DREAM_JUDGE=llm")
        return LLMJudge(base_url=ep.base_url, model=ep.model, api_key=ep.api_key, timeout_s=ep.timeout_s,
                        fallback=offline_judge())
    raise JudgeConfigError(f"DREAM_JUDGE={s.judge!r}: expected one of {', '.join(JUDGES)}")


def check_settings(s: Settings) -> None:
    """Raise `JudgeConfigError` now for what would fail later, without loading any model."""
    judge, text = s.judge.strip().lower(), s.synthesis_text.strip().lower()
    if judge not in JUDGES:
        raise JudgeConfigError(f"DREAM_JUDGE={s.judge!r}: expected one of {', '.join(JUDGES)}")
    if judge == "nli" and not s.nli_model:
        raise JudgeConfigError("DREAM_JUDGE=nli needs DREAM_NLI_MODEL (a local CrossEncoder NLI model folder)")
    if judge == "llm":
        _endpoint(s, "DREAM_JUDGE=llm")
    if text not in TEXT_WRITERS:
        raise JudgeConfigError(f"DREAM_SYNTHESIS_TEXT={s.synthesis_text!r}: expected one of {', '.join(TEXT_WRITERS)}")
    if text == "llm":
        _endpoint(s, "DREAM_SYNTHESIS_TEXT=llm")


def pattern_writer_from_settings(s: Settings) -> LLMPatternWriter | None:
    """The configured pattern writer, or None for the offline wording."""
    name = s.synthesis_text.strip().lower()
    if name == "offline":
        return None
    if name == "llm":
        return LLMPatternWriter(_endpoint(s, "DREAM_SYNTHESIS_TEXT=llm"))
    raise JudgeConfigError(f"DREAM_SYNTHESIS_TEXT={s.synthesis_text!r}: expected one of {', '.join(TEXT_WRITERS)}")
