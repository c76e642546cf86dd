"""Choosing judges and the pattern writer from settings, and LLM-worded patterns, against a real local
HTTP server speaking /v1/chat/completions (the store and the model are real too)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar

import pytest

from dreamstream.agents.learned_judge import LearnedJudge
from dreamstream.agents.llm_judge import LLMJudge
from dreamstream.agents.merge_supersede import OfflineJudge
from dreamstream.agents.pattern_writer import LLMPatternWriter
from dreamstream.streams import settings
from dreamstream.streams.core import judges
from dreamstream.streams.core import synthesis as runner
from dreamstream.streams.core.ingest import Incoming, Processor
from dreamstream.streams.core.llm_client import ChatEndpoint
from tests.helpers import ChatHandler, chat_server
from tests.unit.test_synthesis_runner import NOW, T0, events, ingest, patterns
from tests.unit.test_synthesis_runner import run as synth_run

SENTENCE = "User follows a structured running and strength routine aimed at a marathon."


class PatternChat(ChatHandler):
    """Answers every chat call with `reply`; counts the calls and keeps the prompts."""

    reply: ClassVar[str] = json.dumps({"pattern": SENTENCE})
    prompts: ClassVar[list[str]] = []

    def answer(self, body: dict[str, Any]) -> str:
        PatternChat.prompts.append(body["messages"][-1]["content"])
        return PatternChat.reply


@pytest.fixture()
def chat() -> Iterator[str]:
    PatternChat.reply = json.dumps({"pattern": SENTENCE})
    PatternChat.prompts = []
    with chat_server(PatternChat) as url:
        yield url


def configured(**env: str | None) -> settings.Settings:
    return settings.Settings(**env)  # type: ignore[arg-type]


def test_settings_choose_the_judge_and_refuse_half_configurations() -> None:
    learned = judges.judge_from_settings(configured())
    assert isinstance(learned, LearnedJudge) and learned.rules.featurize is not None
    offline = judges.judge_from_settings(configured(judge="offline"))
    assert isinstance(offline, OfflineJudge) and offline.featurize is not None
    llm = judges.judge_from_settings(configured(judge="llm", llm_url="http://127.0.0.1:1/v1", llm_model="m"))
    assert isinstance(llm, LLMJudge)
    endpoint = getattr(llm.ask, "__self__", None)  # the settings' endpoint, asked through its ask_json
    assert isinstance(endpoint, ChatEndpoint) and endpoint.model == "m"
    with pytest.raises(judges.JudgeConfigError, match="DREAM_LLM_URL"):
        judges.judge_from_settings(configured(judge="llm"))
    with pytest.raises(judges.JudgeConfigError, match="DREAM_NLI_MODEL"):
        judges.judge_from_settings(configured(judge="nli"))
    with pytest.raises(judges.JudgeConfigError, match="expected one of"):
        judges.judge_from_settings(configured(judge="gpt"))
    with pytest.raises(judges.JudgeConfigError, match="DREAM_SYNTHESIS_TEXT"):
        judges.pattern_writer_from_settings(configured(synthesis_text="llm"))
    assert judges.pattern_writer_from_settings(configured()) is None
    judges.check_settings(configured(judge="llm", synthesis_text="llm", llm_url="http://h/v1", llm_model="m"))
    for bad in (configured(judge="nli"), configured(synthesis_text="poem"), configured(synthesis_text="llm")):
        with pytest.raises(judges.JudgeConfigError):
            judges.check_settings(bad)  # what the worker runs at start, before any model loads


def test_an_llm_judge_from_settings_decides_through_the_processor(edge_store: Any, embedder: Any, chat: str,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """DREAM_JUDGE=llm reaches ingest: a contradiction the model reports becomes a supersede."""
    monkeypatch.setenv("DREAM_JUDGE", "llm")
    monkeypatch.setenv("DREAM_LLM_URL", chat)
    monkeypatch.setenv("DREAM_LLM_MODEL", "test-model")
    PatternChat.reply = json.dumps({"duplicates": [], "new_more_complete": False, "contradicted": [1]})
    proc = Processor(edge_store, embedder)
    first = {"type": "memory.added", "event_id": "j1", "memory_id": "j1", "user_id": "u1",
             "text": "Works as a nurse at the city hospital.", "created_at": "2025-01-01T00:00:00Z"}
    second = {**first, "event_id": "j2", "memory_id": "j2", "text": "Started a new job as a paramedic.",
              "created_at": "2025-02-01T00:00:00Z"}
    result = proc.process([Incoming(raw=json.dumps(e).encode()) for e in (first, second)])
    assert PatternChat.prompts and "paramedic" in PatternChat.prompts[-1]
    got = edge_store.retrieve(["j1", "j2"])
    assert got["j1"].status == "superseded" and got["j1"].superseded_by == "j2"
    [ev] = [e for e in result.status_events if e["memory_id"] == "j1"]
    assert ev["evidence"]["judge"] == "llm"


def test_llm_worded_patterns_are_written_once_per_evidence(edge_store: Any, embedder: Any, chat: str,
                                                           tmp_path: Path) -> None:
    ingest(Processor(edge_store, embedder), events("u1"))
    state = runner.SynthesisState.load(tmp_path / "state.json")
    runner.enable(state, None, T0)
    writer = LLMPatternWriter(ChatEndpoint(chat, "test-model").ask_json)

    def run(now: str) -> runner.RunRecord:
        return synth_run(edge_store, embedder, state, now=now, force=True, write_text=writer)

    first = run(NOW)
    stored = patterns(edge_store)
    assert first.patterns_written == len(stored) >= 1 and first.text_fallbacks == 0
    assert all(p.text == SENTENCE and p.metadata["text_by"] == "llm" for p in stored)
    assert any("Garmin" in prompt for prompt in PatternChat.prompts)  # the model saw the evidence
    for prompt in PatternChat.prompts:  # oldest first, each after its month: it can tell what holds now
        months = re.findall(r"^- \((\w{3}) (\d{4})\) ", prompt, re.MULTILINE)
        assert months and "Memories, oldest first:" in prompt
        order = [(int(y), datetime.strptime(m, "%b").month) for m, y in months]
        assert order == sorted(order)
    calls = len(PatternChat.prompts)

    again = run("2025-04-09T00:00:00Z")  # same evidence: nothing rewritten, the model not asked again
    assert again.patterns_unchanged == len(stored) and not again.events
    assert len(PatternChat.prompts) == calls


def test_a_failing_writer_keeps_the_offline_text(edge_store: Any, embedder: Any, chat: str, tmp_path: Path) -> None:
    ingest(Processor(edge_store, embedder), events("u1"))
    state = runner.SynthesisState.load(tmp_path / "state.json")
    runner.enable(state, None, T0)
    PatternChat.reply = json.dumps({"summary": "not the field asked for"})
    record = runner.run_for_user(edge_store, embedder, "u1", NOW, state, force=True,
                                 write_text=LLMPatternWriter(ChatEndpoint(chat, "test-model").ask_json))
    unreachable = ChatEndpoint("http://127.0.0.1:9/v1", "m", timeout_s=1)
    down = runner.run_for_user(edge_store, embedder, "u1", NOW, state, force=True,
                               write_text=LLMPatternWriter(unreachable.ask_json))
    for r in (record, down):
        assert r.ran and r.events and r.text_fallbacks == len(r.events)
        assert all(e["metadata"]["text_by"] == "offline" and ". User " in e["text"] for e in r.events)
        assert "worded offline" in r.describe()


def test_a_pattern_worded_offline_in_an_outage_is_worded_again_once_the_writer_answers(
        edge_store: Any, embedder: Any, chat: str, tmp_path: Path) -> None:
    """An audit: after one run with the writer down, its offline sentences were "unchanged" for good: the
    writer, up again, was never asked. A run asks again; and after one failure it stops asking in that run."""
    ingest(Processor(edge_store, embedder), events("u1"))
    state = runner.SynthesisState.load(tmp_path / "state.json")
    runner.enable(state, None, T0)
    unreachable = ChatEndpoint("http://127.0.0.1:9/v1", "m", timeout_s=1)
    down = synth_run(edge_store, embedder, state, now=NOW, force=True,
                     write_text=LLMPatternWriter(unreachable.ask_json))
    stored = patterns(edge_store)
    assert stored and all(p.metadata["text_by"] == "offline" for p in stored)
    assert down.text_fallbacks == len(stored)
    PatternChat.prompts.clear()
    up = synth_run(edge_store, embedder, state, now="2025-04-09T00:00:00Z", force=True,
                   write_text=LLMPatternWriter(ChatEndpoint(chat, "test-model").ask_json))
    assert up.patterns_updated == len(stored) and len(PatternChat.prompts) == len(stored)
    assert all(p.text == SENTENCE and p.metadata["text_by"] == "llm" for p in patterns(edge_store))
