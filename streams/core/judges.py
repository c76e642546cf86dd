"""Which judge decides merges and supersedes, and who groups and words patterns: built once from settings.

The agents hold the logic (`agents/merge_supersede.py`, `agents/nli_judge.py`, `agents/llm_judge.py`,
`agents/pattern_writer.py`, `agents/theme_reader.py`); this module only reads `DREAM_JUDGE`,
`DREAM_NLI_MODEL`, `DREAM_LLM_*`, `DREAM_SYNTHESIS_TEXT` and `DREAM_SYNTHESIS_THEMES`, so the worker,
`dream replay` and `dream synthesize` choose alike.
A misconfiguration is an error at start, not a silent fall back to the offline judge.
"""

from __future__ import annotations

from functools import cache

from dreamstream.agents.llm_judge import LLMJudge
from dreamstream.agents.merge_supersede import FeaturesOf, Judge, OfflineJudge
from dreamstream.agents.nli_judge import NLIJudge
from dreamstream.agents.pattern_writer import LLMPatternWriter
from dreamstream.agents.theme_reader import LLMThemeReader
from dreamstream.schemas.errors import ConfigError
from dreamstream.streams.core import judge_model
from dreamstream.streams.core.embedding import shared_embedder
from dreamstream.streams.core.llm_client import ChatEndpoint
from dreamstream.streams.settings import Settings

JUDGES = ("learned", "offline", "nli", "llm")
TEXT_WRITERS = ("offline", "llm")
THEME_READERS = ("offline", "llm")


class JudgeConfigError(ConfigError):
    """The settings name a judge or writer that cannot be built (unknown name, missing model or URL)."""


def _endpoint(s: Settings, what: str) -> ChatEndpoint:
    if not s.llm_url or not s.llm_model:
        raise JudgeConfigError(f"{what} needs DREAM_LLM_URL and DREAM_LLM_MODEL "
                               "(an OpenAI-compatible endpoint, e.g. http://127.0.0.1:11434/v1 for Ollama)")
    return _chat_endpoint(s.llm_url, s.llm_model, s.llm_api_key, s.llm_timeout)


@cache
def _chat_endpoint(url: str, model: str, api_key: str | None, timeout_s: float) -> ChatEndpoint:
    """One endpoint (one HTTP connection pool) per configuration: pattern writers are built per run."""
    return ChatEndpoint(url, model, api_key, timeout_s)


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
    themes = s.synthesis_themes.strip().lower()
    if themes not in THEME_READERS:
        raise JudgeConfigError(f"DREAM_SYNTHESIS_THEMES={s.synthesis_themes!r}: expected one of "
                               f"{', '.join(THEME_READERS)}")
    if themes == "llm":
        _endpoint(s, "DREAM_SYNTHESIS_THEMES=llm")


_built: dict[tuple[object, ...], Judge] = {}
"""Judges by configuration: every Processor of the process (ingest, a consolidation pass, a synthesis
feed) shares one, so an NLI model is loaded once and the LLM judge's reply cache is kept."""


def featurizer() -> FeaturesOf:
    """Word features from the process's shared model, for memories stored without them."""
    return lambda texts: shared_embedder().features(texts)


def learned() -> Judge:
    """The shipped learned judge, built once (what synthesis asks about its themes' members, whatever judge
    ingest is configured with)."""
    key = ("learned-shipped",)
    if key not in _built:
        _built[key] = judge_model.learned_judge(featurizer())
    return _built[key]


def judge_from_settings(s: Settings) -> Judge:
    """The configured judge (the learned one unless DREAM_JUDGE says otherwise), built once per configuration."""
    check_settings(s)
    name = s.judge.strip().lower()
    key = (name, s.nli_model, s.llm_url, s.llm_model, s.llm_api_key, s.llm_timeout)
    if key not in _built:
        offline = OfflineJudge(featurize=featurizer())
        if name == "learned":
            _built[key] = judge_model.learned_judge(featurizer())
        elif name == "offline":
            _built[key] = offline
        elif name == "nli":
            try:
                import sentence_transformers  # noqa: F401
            except ImportError:
                raise JudgeConfigError("DREAM_JUDGE=nli needs the torch extra: pip install 'dreamstream[torch]'") \
                    from None
            _built[key] = NLIJudge.from_path(str(s.nli_model), fallback=offline)
        else:
            ep = _endpoint(s, "DREAM_JUDGE=llm")
            _built[key] = LLMJudge(ep.ask_json, fallback=offline)
    return _built[key]


def pattern_writer_from_settings(s: Settings) -> LLMPatternWriter | None:
    """The configured pattern writer, or None for the offline wording."""
    check_settings(s)
    if s.synthesis_text.strip().lower() == "offline":
        return None
    return LLMPatternWriter(_endpoint(s, "DREAM_SYNTHESIS_TEXT=llm").ask_json)


_readers: dict[tuple[object, ...], LLMThemeReader] = {}
READ_TIMEOUT_S = 120.0
"""At least this long for a theme reading: the model reads a person's whole record (up to 400 memories) and
answers with several themes, far more than a judge's one pair. It runs off the ingest path."""


def theme_reader_from_settings(s: Settings) -> LLMThemeReader | None:
    """The configured theme reader (one per configuration, so its memo of replies lasts), or None: group offline."""
    check_settings(s)
    if s.synthesis_themes.strip().lower() == "offline":
        return None
    _endpoint(s, "DREAM_SYNTHESIS_THEMES=llm")
    key = (s.llm_url, s.llm_model, s.llm_api_key, max(s.llm_timeout, READ_TIMEOUT_S))
    if key not in _readers:
        _readers[key] = LLMThemeReader(_chat_endpoint(*key).ask_json,  # type: ignore[arg-type]
                                       identity=str(s.llm_model))
    return _readers[key]
