"""LLM grouping for synthesis (DREAM_SYNTHESIS_THEMES=llm) against a real local HTTP server speaking
/v1/chat/completions, with the real store and model: what the reader is shown, which of its themes are
kept, and what happens when it fails."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import orjson
import pytest

from dreamstream.agents import synthesis as syn
from dreamstream.agents.llm_reply import LLMReplyError
from dreamstream.agents.theme_reader import MAX_CHARS, LLMThemeReader, ReadTheme, check_themes
from dreamstream.schemas.memory import Memory
from dreamstream.streams import settings
from dreamstream.streams.core import judges, memories
from dreamstream.streams.core import synthesis as runner
from dreamstream.streams.core.ingest import Processor
from dreamstream.streams.core.llm_client import ChatEndpoint
from tests.helpers import FILLER, ChatHandler, chat_server
from tests.unit.test_synthesis_runner import FITNESS, NOW, T0, events, ingest, patterns
from tests.unit.test_synthesis_runner import run as synth_run

THREAD = "User is training for a marathon: weekly mileage, strength work and a tracked plan."
HOME = "User grew up in Valencia and now lives in Lisbon, driving a grey Volvo estate."
FITNESS_WORDS = ("run", "marathon", "weights", "workout", "training")
TEXTS = [
    "Thinking about buying a Garmin watch.",  # a plan a later memory reports done
    FILLER[0],  # their sister's home: someone else's fact
    FITNESS[0],
    "Her brother adopted a dog called Rex.",  # someone else's fact
    *(t for pair in zip(FITNESS[1:], FILLER[1:], strict=False) for t in pair),
    *FILLER[6:12],
    "Lives in Lisbon.",
    "Is allergic to penicillin.",  # FILLER[2] said again: merged at ingest
    "Has a penicillin allergy.",
]


class ThemeChat(ChatHandler):
    """Reads the numbered lines it is shown and answers like a reader would: the fitness lines as one theme,
    plus themes the checks must drop (a restatement, a line it was never shown, too few members)."""

    prompts: ClassVar[list[str]] = []
    systems: ClassVar[list[str]] = []
    wording: ClassVar[str] = THREAD
    mode: ClassVar[str] = "fitness"
    """`fitness` (the theme and the ones the checks drop), `none` (no theme at all), `home` (another theme
    only: where the person lives and comes from)."""

    def answer(self, body: dict[str, Any]) -> str:
        prompt = body["messages"][-1]["content"]
        ThemeChat.prompts.append(prompt)
        ThemeChat.systems.append(body["messages"][0]["content"])
        lines = dict((int(n), t) for n, t in re.findall(r"^(\d+)\. \(\d{4}-\d{2}\) (.*)$", prompt, re.MULTILINE))
        fit = [n for n, t in lines.items() if any(w in t.lower() for w in FITNESS_WORDS)]
        allergy = [n for n, t in lines.items() if "penicillin" in t]
        home = [n for n, t in lines.items() if any(w in t for w in ("Lisbon.", "Valencia", "Volvo"))]
        themes = {"none": lambda: [], "home": lambda: [{"theme": HOME, "members": home}], "fitness": lambda: [
            {"theme": ThemeChat.wording, "members": fit},
            {"theme": "User is allergic to penicillin.", "members": allergy},  # one fact, said twice
            {"theme": "User reads.", "members": [fit[0], fit[1], len(lines) + 5]},  # a line never shown
            {"theme": "User travels.", "members": [fit[0], fit[1]]},  # two members
        ]}[ThemeChat.mode]()
        return json.dumps({"themes": themes})


@pytest.fixture()
def chat() -> Iterator[str]:
    ThemeChat.prompts, ThemeChat.systems, ThemeChat.mode, ThemeChat.wording = [], [], "fitness", THREAD
    with chat_server(ThemeChat) as url:
        yield url


def test_replies_are_checked_theme_by_theme() -> None:
    reply = {"themes": [
        {"theme": "  A   habit.  ", "members": [3, 1, 2, 2]},
        {"theme": "Shown a line it never saw.", "members": [1, 2, 9]},
        {"theme": "Too little.", "members": [1, 2]},
        {"theme": "x" * (MAX_CHARS + 1), "members": [1, 2, 3]},
        {"theme": "", "members": [1, 2, 3]},
        {"theme": "Booleans are no line numbers.", "members": [True, 2, 3]},
        "not an object",
    ]}
    [kept] = check_themes(reply, n_lines=5)
    assert kept.text == "A habit." and kept.members == (0, 1, 2)
    assert check_themes({"themes": []}, n_lines=5) == []  # an answer: no theme
    for unusable in ({"patterns": []}, {"themes": [{"theme": "Counted from 0.", "members": [0, 1, 2]}]},
                     {"themes": [{"theme": "Strings.", "members": ["1", "2", "3"]}]}):
        with pytest.raises(LLMReplyError):
            check_themes(unusable, n_lines=5)


def test_the_reader_groups_from_the_persons_own_current_facts(edge_store: Any, embedder: Any, chat: str,
                                                             tmp_path: Path) -> None:
    ingest(Processor(edge_store, embedder), events("u1", texts=TEXTS))
    state = runner.SynthesisState.load(tmp_path / "state.json")
    runner.enable(state, None, T0)
    reader = LLMThemeReader(ChatEndpoint(chat, "test-model").ask_json)

    def run(now: str) -> runner.RunRecord:
        return synth_run(edge_store, embedder, state, now=now, force=True, read_themes=reader)

    first = run(NOW)
    [prompt] = ThemeChat.prompts
    assert "Is allergic to penicillin" not in prompt  # merged at ingest: not evidence
    system = ThemeChat.systems[0]
    assert "a plan a later line reports done" in system and "A friend's, partner's or child's facts" in system
    # Every other memory, a done plan and other people's facts included: the reader applies the rules its
    # system message states, from the whole record, in time order.
    shown = re.findall(r"^\d+\. \((\d{4}-\d{2})\) (.*)$", prompt, re.MULTILINE)
    assert sorted(t for _, t in shown) == sorted(t for t in TEXTS if t != "Is allergic to penicillin.")
    assert [d for d, _ in shown] == sorted(d for d, _ in shown)

    assert first.ran and first.themes_by == "llm" and not first.theme_fallback and first.themes == 1
    [pattern] = patterns(edge_store)
    assert pattern.text == THREAD and pattern.metadata["text_by"] == "llm"
    by_id = {e["memory_id"]: e["text"] for e in events("u1", texts=TEXTS)}
    assert sorted(by_id[s] for s in pattern.sources) == sorted(
        t for t in TEXTS[1:] if any(w in t.lower() for w in FITNESS_WORDS))

    again = run("2025-04-09T00:00:00Z")  # same evidence: the reader is not asked again, nothing rewritten
    assert len(ThemeChat.prompts) == 1 and not again.ran and again.reason == "unchanged" and not again.events
    assert again.themes_by == "llm"  # its patterns are the reader's: a run record said offline (an audit)
    # Nor in a new process (the state read back from its file, a reader that remembers no reply): a restarted
    # worker or a forced re-run must not let the model's variance reword or retire what it already read.
    restarted = synth_run(edge_store, embedder, runner.SynthesisState.load(tmp_path / "state.json"),
                          now="2025-04-10T00:00:00Z", force=True,
                          read_themes=LLMThemeReader(ChatEndpoint(chat, "test-model").ask_json))
    assert len(ThemeChat.prompts) == 1 and restarted.reason == "unchanged" and not restarted.events
    assert [p.memory_id for p in patterns(edge_store)] == [pattern.memory_id]

    # New evidence: the whole record is read afresh, and the pattern keeps its id as it grows.
    def add(memory_id: str, text: str, created_at: str) -> None:
        ingest(Processor(edge_store, embedder), [{**events("u1", texts=TEXTS)[0], "event_id": f"e-{memory_id}",
                                                  "memory_id": memory_id, "text": text, "created_at": created_at}])

    add("m-new", "Ran the Lisbon half marathon in 1:52.", "2025-04-05T00:00:00Z")
    grown = run("2025-04-20T00:00:00Z")
    assert len(ThemeChat.prompts) == 2 and "Lisbon half marathon" in ThemeChat.prompts[-1]
    assert grown.patterns_updated == 1 and grown.pattern_ids == [pattern.memory_id] and not grown.retired
    [now_pattern] = patterns(edge_store)
    assert "m-new" in now_pattern.sources and now_pattern.memory_id == pattern.memory_id

    # A reading with no theme at all retires nothing (more likely the reader's slip than every theme
    # ending at once). One that names other themes retires the pattern (kept, expired); naming it again
    # brings the same pattern back.
    ThemeChat.mode = "none"
    add("m-quiet", "Took up watercolour painting.", "2025-05-01T00:00:00Z")
    quiet = run("2025-05-10T00:00:00Z")
    assert quiet.themes_by == "llm" and not quiet.retired and [p.memory_id for p in patterns(edge_store)] == [
        pattern.memory_id]
    ThemeChat.mode = "home"
    add("m-other", "Bought a second-hand road bike.", "2025-05-12T00:00:00Z")
    moved = run("2025-05-15T00:00:00Z")
    assert moved.retired == [pattern.memory_id] and [p.text for p in patterns(edge_store)] == [HOME]
    assert edge_store.retrieve([pattern.memory_id])[pattern.memory_id].status == "expired"
    ThemeChat.mode = "fitness"
    add("m-back", "Signed up for the Porto marathon in October.", "2025-05-20T00:00:00Z")
    back = run("2025-06-01T00:00:00Z")
    assert back.pattern_ids == [pattern.memory_id] and [p.memory_id for p in patterns(edge_store)] == [
        pattern.memory_id]

    # The endpoint down: the offline grouping runs, but neither rewrites nor retires the reader's pattern.
    add("m-down", "Swims twice a week at the municipal pool.", "2025-06-05T00:00:00Z")
    down = runner.run_for_user(edge_store, embedder, "u1", "2025-06-10T00:00:00Z", state, force=True,
                               read_themes=LLMThemeReader(ChatEndpoint("http://127.0.0.1:9/v1", "m",
                                                                       timeout_s=1).ask_json))
    assert down.theme_fallback and pattern.memory_id not in down.retired
    assert all(e["memory_id"] != pattern.memory_id for e in down.events)
    # The reader back, the evidence the same: the offline run kept no digest, so the reader reads it again.
    asked = len(ThemeChat.prompts)
    again = run("2025-06-20T00:00:00Z")
    assert again.themes_by == "llm" and len(ThemeChat.prompts) == asked + 1


def first_reading(store: Any, embedder: Any, chat: str, tmp_path: Path) -> tuple[Any, LLMThemeReader, Memory]:
    """u1's memories stored, synthesis on, one reading done: its state, its reader and the fitness pattern."""
    ingest(Processor(store, embedder), events("u1", texts=TEXTS))
    state = runner.SynthesisState.load(tmp_path / "state.json")
    runner.enable(state, None, T0)
    reader = LLMThemeReader(ChatEndpoint(chat, "test-model").ask_json)
    synth_run(store, embedder, state, force=True, read_themes=reader)
    [pattern] = patterns(store)
    return state, reader, pattern


def test_a_reading_retires_no_pattern_it_was_not_shown(edge_store: Any, embedder: Any, chat: str,
                                                       tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A long record shows the reader only its most recent lines: a pattern whose evidence all lies before
    them cannot be named, so that reading does not retire it; one whose evidence it saw and did not name, does."""
    state, reader, fitness = first_reading(edge_store, embedder, chat, tmp_path)
    base = events("u1", texts=TEXTS)[0]
    later = ["Spent Christmas in Valencia with her parents.", "Sold the grey Volvo estate.",
             "Moved to a bigger flat in Lisbon.", "Flew back to Valencia for a cousin's wedding."]
    ingest(Processor(edge_store, embedder), [{**base, "event_id": f"e-late{i}", "memory_id": f"m-late{i}",
                                              "text": t, "created_at": f"2025-07-0{i + 1}T00:00:00Z"}
                                             for i, t in enumerate(later)])
    ThemeChat.mode = "home"
    monkeypatch.setattr(syn, "MAX_LINES", len(later))  # the reader sees the four latest lines only
    moved = synth_run(edge_store, embedder, state, now="2025-07-10T00:00:00Z", force=True, read_themes=reader)
    assert moved.themes_by == "llm" and not moved.retired
    assert sorted(p.text for p in patterns(edge_store)) == sorted([HOME, THREAD])
    assert "Garmin" not in ThemeChat.prompts[-1] and "Volvo" in ThemeChat.prompts[-1]
    # Its evidence deleted, out of the reader's sight: the pattern quoting it is retired with the first delete,
    # and no later reading brings it back.
    for source in fitness.sources[:-2]:
        memories.delete_memory(edge_store, source, "u1")
    assert edge_store.retrieve([fitness.memory_id])[fitness.memory_id].status == "expired"
    gone = synth_run(edge_store, embedder, state, now="2025-07-20T00:00:00Z", force=True, read_themes=reader)
    assert not gone.retired and [p.text for p in patterns(edge_store)] == [HOME]


def test_a_theme_worded_anew_is_stored_and_a_retired_one_comes_back(edge_store: Any, embedder: Any, chat: str,
                                                                      tmp_path: Path) -> None:
    """The same members in new words rewrite the pattern (its event is a new one, not a reused event_id), and
    a retired pattern named again, in other words, is active again with its id."""
    state, reader, first = first_reading(edge_store, embedder, chat, tmp_path)
    base = events("u1", texts=TEXTS)[0]

    def add(i: int, text: str) -> None:
        ingest(Processor(edge_store, embedder), [{**base, "event_id": f"e-x{i}", "memory_id": f"m-x{i}",
                                                  "text": text, "created_at": f"2025-07-0{i}T00:00:00Z"}])

    ThemeChat.mode = "home"
    add(1, "Sold the grey Volvo estate.")
    synth_run(edge_store, embedder, state, now="2025-07-05T00:00:00Z", force=True, read_themes=reader)
    assert edge_store.retrieve([first.memory_id])[first.memory_id].status == "expired"
    ThemeChat.mode, ThemeChat.wording = "fitness", "User keeps training for a marathon, week after week."
    add(2, "Took up watercolour painting.")
    back = synth_run(edge_store, embedder, state, now="2025-07-10T00:00:00Z", force=True, read_themes=reader)
    assert first.memory_id in back.pattern_ids
    now = edge_store.retrieve([first.memory_id])[first.memory_id]
    assert (now.status, now.text, sorted(now.sources)) == ("active", ThemeChat.wording, sorted(first.sources))


def test_a_reading_is_done_again_when_its_patterns_are_gone_or_the_reader_changed(
        edge_store: Any, embedder: Any, chat: str, tmp_path: Path) -> None:
    """The digest of a reading stands only while its patterns are stored and the same reader (model, prompt)
    would read: a crash before the patterns were written, or another model, reads again."""
    ingest(Processor(edge_store, embedder), events("u1", texts=TEXTS))
    state = runner.SynthesisState.load(tmp_path / "state.json")
    runner.enable(state, None, T0)
    reader = LLMThemeReader(ChatEndpoint(chat, "test-model").ask_json, identity="test-model")
    crashed = runner.run_for_user(edge_store, embedder, "u1", NOW, state, force=True, read_themes=reader)
    assert crashed.themes_by == "llm" and crashed.events and not patterns(edge_store)  # never fed to the store
    fresh = LLMThemeReader(ChatEndpoint(chat, "test-model").ask_json, identity="test-model")
    redone = synth_run(edge_store, embedder, runner.SynthesisState.load(tmp_path / "state.json"), force=True,
                       read_themes=fresh)
    assert redone.ran and len(ThemeChat.prompts) == 2 and [p.text for p in patterns(edge_store)] == [THREAD]
    kept = synth_run(edge_store, embedder, runner.SynthesisState.load(tmp_path / "state.json"), force=True,
                     read_themes=LLMThemeReader(ChatEndpoint(chat, "test-model").ask_json, identity="test-model"))
    assert kept.reason == "unchanged" and len(ThemeChat.prompts) == 2
    other = synth_run(edge_store, embedder, runner.SynthesisState.load(tmp_path / "state.json"), force=True,
                      read_themes=LLMThemeReader(ChatEndpoint(chat, "bigger-model").ask_json, identity="bigger"))
    assert other.ran and len(ThemeChat.prompts) == 3 and [p.text for p in patterns(edge_store)] == [THREAD]


def test_a_theme_of_restatements_is_no_pattern(embedder: Any) -> None:
    """Three members that say one thing count once: the reader's theme is dropped, its other one kept."""
    texts = ["Allergic to penicillin.", "Is allergic to penicillin.", "Has an allergy to penicillin.",
             "Runs about 40 km every week.", "Does a long run every Sunday morning.",
             "Follows a twelve-week training plan for the half marathon.", "Drives a grey Volvo estate."]
    mems = [Memory(memory_id=f"m{i}", user_id="u1", text=t, created_at=f"2025-03-0{i + 1}T00:00:00Z",
                   updated_at=f"2025-03-0{i + 1}T00:00:00Z") for i, t in enumerate(texts)]

    def reader(lines: Sequence[tuple[str, str]]) -> list[ReadTheme]:
        assert [t for _, t in lines] == texts
        return [ReadTheme("User is allergic to penicillin.", (0, 1, 2)), ReadTheme(THREAD, (3, 4, 5))]

    [theme] = syn.read_themes(mems, embedder, reader) or []
    assert theme.memory_ids == ("m3", "m4", "m5") and theme.text == THREAD and theme.key == "theme:m3"
    # A reply whose every theme is a restatement is no usable answer (the offline grouping runs), not "none".
    assert syn.read_themes(mems, embedder, lambda lines: reader(lines)[:1]) is None
    assert syn.read_themes(mems, embedder, lambda lines: []) == []


def test_a_readers_sentence_naming_what_the_record_lacks_is_not_the_patterns_text(embedder: Any) -> None:
    """A synthesis audit: a reader's theme over four of Bea's pottery lines was stored saying another user's PIN
    and address. Such a sentence gives way to the members' own wording; an honest one is kept."""
    texts = ["Bea took a wheel-throwing class in Leeds.", "Bea glazes her bowls on Sunday afternoons.",
             "Bea sells mugs at the Kirkgate market.", "Bea bought a second-hand kiln.", "Bea drives a red Fiat."]
    mems = [Memory(memory_id=f"b{i}", user_id="bea", text=t, created_at=f"2025-0{i + 1}-03T00:00:00Z",
                   updated_at=f"2025-0{i + 1}-03T00:00:00Z") for i, t in enumerate(texts)]
    honest = "Bea has kept up pottery since January 2025: a wheel-throwing class in Leeds, then a kiln of her own."
    foreign = "Zed's bank PIN is 4921 and Zed lives at 12 Rua Nova."
    for sentence, kept in ((honest, True), (foreign, False)):
        [theme] = syn.read_themes(mems, embedder, lambda lines, s=sentence: [ReadTheme(s, (0, 1, 2, 3))]) or []
        assert theme.memory_ids == ("b0", "b1", "b2", "b3")
        assert (theme.text == sentence) is kept
        assert "4921" not in theme.text and "Zed" not in theme.text and "Bea" in theme.text


def test_a_theme_given_twice_is_one_pattern_and_anchors_ignore_the_replys_order(embedder: Any) -> None:
    texts = ["Runs about 40 km every week.", "Does a long run every Sunday morning.",
             "Follows a twelve-week training plan for the half marathon.", "Lifts weights three times a week.",
             "Tracks every workout on a Garmin watch.", "Bakes sourdough every weekend.",
             "Keeps a sourdough starter called Gerald.", "Sells loaves at the Saturday market."]
    mems = [Memory(memory_id=f"m{i}", user_id="u1", text=t, created_at=f"2025-03-0{i + 1}T00:00:00Z",
                   updated_at=f"2025-03-0{i + 1}T00:00:00Z") for i, t in enumerate(texts)]
    running = ReadTheme(THREAD, (0, 1, 2, 3))
    again = ReadTheme("User trains for races.", (0, 1, 2, 3, 4))  # the same members and one more
    both = ReadTheme("User runs and bakes every weekend.", (0, 1, 5, 6))  # shares the first member
    baking = ReadTheme("User bakes sourdough.", (5, 6, 7))

    def keyed(order: list[ReadTheme]) -> dict[str, tuple[str, ...]]:
        return {t.key: t.memory_ids for t in syn.read_themes(mems, embedder, lambda lines: order) or []}

    first = keyed([running, again, both, baking])
    assert sorted(first.values()) == [("m0", "m1", "m2", "m3"), ("m0", "m1", "m5", "m6"), ("m5", "m6", "m7")]
    assert keyed([baking, both, running, again]) == first == keyed([again, running, both, baking])


def test_retiring_leaves_what_changed_since_the_run_read_the_store(edge_store: Any, embedder: Any,
                                                                  tmp_path: Path) -> None:
    """A worker applies a run after the reader answered; a pattern deleted meanwhile stays deleted, one
    gone altogether is no error."""
    ingest(Processor(edge_store, embedder), events("u1"))
    state = runner.SynthesisState.load(tmp_path / "state.json")
    runner.enable(state, None, T0)
    record = runner.run_for_user(edge_store, embedder, "u1", NOW, state, force=True)
    ingest(Processor(edge_store, embedder), record.events)
    [pattern] = patterns(edge_store)
    edge_store.update(pattern.memory_id, {"status": "deleted"})
    runner.apply(edge_store, [runner.RunRecord(user_id="u1", retired=[pattern.memory_id, "p-gone"]),
                              runner.RunRecord(user_id="u2", retired=[pattern.memory_id])])
    assert edge_store.retrieve([pattern.memory_id])[pattern.memory_id].status == "deleted"
    edge_store.update(pattern.memory_id, {"status": "active"})
    runner.apply(edge_store, [runner.RunRecord(user_id="u2", retired=[pattern.memory_id])])  # not u2's
    assert edge_store.retrieve([pattern.memory_id])[pattern.memory_id].status == "active"
    runner.apply(edge_store, [runner.RunRecord(user_id="u1", retired=[pattern.memory_id])])
    assert edge_store.retrieve([pattern.memory_id])[pattern.memory_id].status == "expired"


def test_patterns_whose_sources_went_meanwhile_are_not_sent(edge_store: Any, embedder: Any, tmp_path: Path) -> None:
    """A user erased (or a source deleted) while the run decided: its pattern event is dropped, not sent with
    text drawn from what was erased."""
    ingest(Processor(edge_store, embedder), events("u1") + events("u2"))
    state = runner.SynthesisState.load(tmp_path / "state.json")
    runner.enable(state, None, T0)
    first = runner.run_for_user(edge_store, embedder, "u1", NOW, state, force=True)
    second = runner.run_for_user(edge_store, embedder, "u2", NOW, state, force=True)
    assert first.events and second.events
    assert runner.drop_unsourced(edge_store, first) == 0 and first.events  # nothing went
    edge_store.delete([first.events[0]["sources"][0]])
    assert runner.drop_unsourced(edge_store, first) == 1 and not first.events
    wrong = runner.RunRecord(user_id="u1", events=list(second.events))  # sources of another user
    assert runner.drop_unsourced(edge_store, wrong) == len(second.events) and not wrong.events


def test_without_a_usable_answer_the_run_groups_offline(edge_store: Any, embedder: Any, tmp_path: Path) -> None:
    ingest(Processor(edge_store, embedder), events("u1"))
    state = runner.SynthesisState.load(tmp_path / "state.json")
    runner.enable(state, None, T0)
    unreachable = LLMThemeReader(ChatEndpoint("http://127.0.0.1:9/v1", "m", timeout_s=1).ask_json)
    record = runner.run_for_user(edge_store, embedder, "u1", NOW, state, force=True, read_themes=unreachable)
    offline = runner.run_for_user(edge_store, embedder, "u1", NOW, state, force=True)
    assert record.ran and record.themes_by == "offline" and record.theme_fallback
    assert "grouped offline" in record.describe()
    assert [e["sources"] for e in record.events] == [e["sources"] for e in offline.events] != []
    assert all(e["metadata"]["text_by"] == "offline" for e in record.events)


def test_a_replay_says_how_many_runs_the_reader_failed(embedder: Any, tmp_path: Path) -> None:
    from dreamstream.streams.core.replay import replay_with_synthesis
    from dreamstream.streams.store import EdgeStore

    path = tmp_path / "events.jsonl"
    path.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in events("u1")))
    store = EdgeStore(str(tmp_path / "store"))
    try:
        down = LLMThemeReader(ChatEndpoint("http://127.0.0.1:9/v1", "m", timeout_s=1).ask_json)
        summary = replay_with_synthesis(path, store, runner.SynthesisState.load(tmp_path / "state.json"), embedder,
                                        read_themes=down)
    finally:
        store.close()
    assert summary.runs >= 1 and summary.grouped_offline == summary.runs
    assert f"({summary.runs} runs grouped offline: the reader failed)" in summary.describe()


def test_settings_build_the_reader_or_refuse() -> None:
    s = settings.Settings(synthesis_themes="llm", llm_url="http://127.0.0.1:1/v1", llm_model="m")  # type: ignore[call-arg]
    reader = judges.theme_reader_from_settings(s)
    assert isinstance(reader, LLMThemeReader) and judges.theme_reader_from_settings(s) is reader
    assert judges.theme_reader_from_settings(settings.Settings()) is None
    for bad in ({"synthesis_themes": "llm"}, {"synthesis_themes": "clusters"}):
        with pytest.raises(judges.JudgeConfigError, match="DREAM_SYNTHESIS_THEMES"):
            judges.check_settings(settings.Settings(**bad))  # type: ignore[arg-type]
