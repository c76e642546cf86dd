"""Precision first: the five error patterns seen on real text, abstention, and the stored features.

Every sentence here was written for these tests. Each memory of a pattern test comes from its own
session (a day apart) unless the test is about one session, so a wrong supersede cannot hide behind
the same-session rule.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from dreamstream.agents import consolidation as cons
from dreamstream.agents import merge_supersede as ms
from dreamstream.agents.decisions import Decision
from dreamstream.schemas.memory import Memory
from dreamstream.streams.core.embedding import Embedder
from dreamstream.streams.core.ingest import Incoming, Processor
from tests.helpers import event, line

APPLIED = ("merge_new", "merge_old", "supersede")


def stream(embedder: Embedder, texts: Sequence[str], *, same_session: bool = False) -> list[list[Decision]]:
    """Decide each text against the earlier ones still active, applying the decisions as ingest does.

    Features come from the embedder's one pass, as at ingest."""
    vecs, feats = embedder.encode_with_features(list(texts))
    active: list[Memory] = []
    out: list[list[Decision]] = []
    for n, (text, vec, feat) in enumerate(zip(texts, vecs, feats, strict=True), start=1):
        at = f"2026-03-01T10:{n:02d}:00Z" if same_session else f"2026-03-{n:02d}T10:00:00Z"
        new = Memory(memory_id=f"m-{n}", user_id="u", text=text, created_at=at, updated_at=at,
                     vector=vec, features=feat.to_payload())
        ds = ms.decide(new, active)
        out.append(ds)
        gone = {t for d in ds if d.action in ("merge_old", "supersede") for t in d.targets}
        if not any(d.action == "merge_new" for d in ds):
            active.append(new)
        active = [m for m in active if m.memory_id not in gone]
    return out


def actions(ds: list[list[Decision]]) -> list[str]:
    return [d.action for step in ds for d in step]


@pytest.mark.parametrize(
    "texts",
    [
        ["Priya works as a nurse in Leeds.", "Priya started a new pottery class on Thursdays."],
        ["Priya plays tennis on weekends.", "Priya joined a book club at the library."],
        ["Priya lives in Leeds.", "Priya moved her desk next to the window."],
        ["Priya loves her garden.", "Priya is now really into birdwatching."],
        ["Priya lives in the city centre.", "Priya left the city for a weekend hike."],
        ["Priya owns a small clothing shop.", "Priya sold clothes at the weekend market."],
        ["Priya plays board games with friends.", "Priya played chess instead of board games last night."],
    ],
)
def test_a_change_word_on_an_added_fact_is_no_update(embedder: Embedder, texts: list[str]) -> None:
    """Pattern 1: "started", "joined", "moved", "now" open added facts as often as updates, and
    "left", "sold", "instead of" also name everyday acts."""
    assert not set(actions(stream(embedder, texts))) & set(APPLIED)


def test_two_statements_of_one_session_both_hold(embedder: Embedder) -> None:
    """Pattern 2: even a slot with another value is not applied within one session; it is asked."""
    ds = stream(embedder, ["Tomas lives in Porto.", "Tomas moved to Braga."], same_session=True)
    assert actions(ds) == ["review"]
    assert ds[1][0].detail["proposal"] == "supersede" and ds[1][0].rule.startswith("same_session:")
    apart = stream(embedder, ["Tomas lives in Porto.", "Tomas moved to Braga."])
    assert actions(apart) == ["supersede"]


def test_a_restatement_is_merged_never_superseded(embedder: Embedder) -> None:
    """Pattern 3: the fuller restatement keeps the barer one as merged, and no supersede happens."""
    ds = stream(embedder, ["Lena bakes sourdough bread every weekend.",
                           "Lena bakes sourdough bread every weekend for her neighbours."])
    assert actions(ds) == ["merge_old"] and ds[1][0].targets == ("m-1",)


@pytest.mark.parametrize(
    "texts",
    [
        ["Aiko volunteers at an animal rescue.", "Aiko volunteers at a soup kitchen."],
        ["Aiko is writing a mystery novel.", "Aiko is reading a mystery novel."],
        ["Aiko enjoys hiking in the Alps.", "Aiko enjoys hiking."],  # fine: the Alps version says it all
        ["Aiko is into rowing.", "Aiko says rowing on the river is colder than she expected."],  # not "into"
    ],
)
def test_different_facts_on_one_topic_are_not_merged(embedder: Embedder, texts: list[str]) -> None:
    """Pattern 4: topic similarity is not sameness; only a kept statement that says it all absorbs."""
    got = actions(stream(embedder, texts))
    if texts[1] == "Aiko enjoys hiking.":
        assert got == ["merge_new"]
    else:
        assert not set(got) & set(APPLIED)


@pytest.mark.parametrize(
    "texts",
    [
        ["Ben is planning a trip to Oslo.", "Ben booked a flight to Oslo."],
        ["Ben has two cats.", "Ben has cats named Pip and Mo."],
        ["Ben works at the harbour office.", "Ben works at the harbour office now, not the depot."],
    ],
)
def test_no_merge_hides_a_newer_state_or_a_detail(embedder: Embedder, texts: list[str]) -> None:
    """Pattern 5: an update said like a restatement, and a merge that would hide a detail."""
    assert not {"merge_new", "merge_old"} & set(actions(stream(embedder, texts)))


@pytest.mark.parametrize(
    "texts",
    [
        ["Lior lives in Haifa.", "Lior is thinking about moving to Eilat."],  # only planned
        ["Lior cut out sugar and switched to honey.", "Lior uses honey instead of sugar now."],  # the same change
        ["Lior plays the cello at home.", "Lior sold his cello case to a neighbour."],  # another object
        ["Lior wants to learn Greek.", "Lior hasn't started learning Greek yet."],  # not done
        ["Lior is packing up his Haifa flat.", "Lior no longer swims at the Haifa pool since the move."],
        ["Lior works night shifts at the bakery.",
         "Lior applied for a day job at a bank that would mean no more night shifts."],  # only possible
        ["Lior hopes to get a summer job at the marina.", "Lior applied for summer jobs at the marina."],  # not got
        ["Lior's choir plans to record an album in May.", "Lior sold tickets for the album launch concert."],
        ["Lior loved the harbour festival when he first moved to Haifa.", "Lior lives in Akko with his sister."],
    ],
)
def test_what_only_looks_like_an_update_supersedes_nothing(embedder: Embedder, texts: list[str]) -> None:
    assert "supersede" not in actions(stream(embedder, texts))


def test_a_breakup_and_a_plan_to_host_are_updates(embedder: Embedder) -> None:
    ds = stream(embedder, ["Lior is dating Noa.", "Lior and Noa broke up."])
    assert actions(ds) == ["supersede"] and ds[1][0].rule == "explicit_end:broke up"
    ds = stream(embedder, ["Lior is planning to host a barbecue in July.", "Lior hosted a barbecue in his garden."])
    assert actions(ds) == ["supersede"] and ds[1][0].rule == "plan_done"


def test_a_plan_now_done_supersedes_the_plan(embedder: Embedder) -> None:
    ds = stream(embedder, ["Ines is looking forward to running the Lisbon half marathon.",
                           "Ines ran the Lisbon half marathon and finished in under two hours."])
    assert actions(ds) == ["supersede"] and ds[1][0].rule == "plan_done"


@pytest.mark.parametrize(
    ("old", "new", "rule"),
    [
        ("Omar drives a Volvo estate.", "Omar sold the Volvo and takes the bus now.", "explicit_end:sold"),
        ("Omar is vegetarian.", "Omar is no longer vegetarian.", "explicit_end:no longer"),
        ("Omar lives in Ghent.", "Omar moved from Ghent to Utrecht.", "explicit_end:moved from"),
        ("Omar works at Deltaware.", "Omar has a job at Fieldstone now.", "slot_change:employer"),
    ],
)
def test_explicit_updates_supersede(embedder: Embedder, old: str, new: str, rule: str) -> None:
    ds = stream(embedder, [old, new])
    assert actions(ds) == ["supersede"] and ds[1][0].rule == rule


def test_someone_else_and_exchanged_roles_are_never_linked(embedder: Embedder) -> None:
    assert actions(stream(embedder, ["Works as a software tester.", "Friend Ravi works as a software tester."])) == []
    assert not actions(stream(embedder, ["Kemal lent the user 40 euros.", "Lent Kemal 40 euros."]))


def test_judging_reads_stored_features_and_never_re_embeds(embedder: Embedder) -> None:
    """Features are computed once, in the ingest pass; a judge over stored memories calls no model."""
    texts = ["Noor lives in Tunis.", "Noor has a dog called Sami.", "Noor moved to Sfax."]
    vecs, feats = embedder.encode_with_features(texts)
    mems = [Memory(memory_id=f"m-{i}", user_id="u", text=t, created_at=f"2026-03-0{i + 1}T10:00:00Z",
                   updated_at="", vector=v, features=f.to_payload())
            for i, (t, v, f) in enumerate(zip(texts, vecs, feats, strict=True))]
    calls: list[list[str]] = []

    def counting(batch: list[str]) -> list:  # type: ignore[type-arg]
        calls.append(batch)
        return embedder.features(batch)

    judge = ms.OfflineJudge(featurize=counting)
    [d] = ms.decide_with(judge, mems[2], mems[:2])
    assert d.action == "supersede" and d.targets == ("m-0",)
    assert calls == []
    legacy = [Memory(**{**m.__dict__, "features": None}) for m in mems[:2]]
    ms.decide_with(judge, mems[2], legacy)
    assert calls == [[m.text for m in legacy]]  # only memories stored without features, once


def test_features_survive_the_store(edge_store, embedder: Embedder) -> None:  # type: ignore[no-untyped-def]
    proc = Processor(edge_store, embedder)
    proc.process([Incoming(line(event(1, "u1", "Sara keeps bees on the roof.", day=1)))])
    [stored] = edge_store.retrieve(["m-u1-1"]).values()
    from dreamstream.agents.alignment import TokenFeatures

    feats = TokenFeatures.from_payload(stored.features)
    assert feats is not None and feats.words == ("sara", "keeps", "bees", "roof")
    assert np.allclose(np.linalg.norm(feats.vecs, axis=1), 1.0, atol=1e-2)


def test_word_features_are_stored_as_int8_and_float16_ones_written_before_still_read(embedder: Embedder) -> None:
    import base64

    from dreamstream.agents.alignment import TokenFeatures

    [f] = embedder.features(["Keeps a sourdough starter named Bubbles in the fridge."])
    payload = f.to_payload()
    assert payload["v"] == 2 and len(base64.b64decode(payload["vecs"])) == len(f.words) * f.vecs.shape[1]
    back = TokenFeatures.from_payload(payload)
    assert back is not None and back.words == f.words and back.names == f.names
    assert np.allclose(np.linalg.norm(back.vecs, axis=1), 1.0, atol=1e-5)
    assert np.abs(back.vecs @ back.vecs.T - f.vecs @ f.vecs.T).max() < 0.005  # word cosines barely move
    v1 = {**payload, "v": 1, "vecs": base64.b64encode(np.asarray(f.vecs, np.float16).tobytes()).decode()}
    old = TokenFeatures.from_payload(v1)  # a store written by an earlier version: read, not recomputed
    assert old is not None and np.allclose(old.vecs, f.vecs, atol=1e-3)
    assert TokenFeatures.from_payload({**payload, "v": 3}) is None  # unknown: the judge computes them anew
    [empty] = embedder.features(["the"])  # no content word at all
    none = TokenFeatures.from_payload(empty.to_payload())
    assert none is not None and none.words == () and none.vecs.shape[0] == 0


def test_an_abstention_is_a_review_item_the_pass_lists_and_resolves(edge_store, embedder: Embedder,  # type: ignore[no-untyped-def]
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Ingest applies nothing for an abstention; the consolidation pass shows it and a person's A
    answer supersedes the older memory, with a status event. (The rule judge, whose abstention here is
    certain: a move within one conversation; the learned judge's own abstentions depend on its training.)"""
    from datetime import UTC, datetime

    from dreamstream.streams.core import consolidation as runner

    monkeypatch.setenv("DREAM_JUDGE", "offline")
    proc = Processor(edge_store, embedder)
    same_run = {"run_id": "chat-7"}
    result = proc.process([
        Incoming(line(event(1, "u1", "Tomas lives in Porto.", day=2, **same_run))),
        Incoming(line(event(2, "u1", "Tomas moved to Braga.", day=2, **same_run))),
    ])
    assert result.decisions == {"review": 1}
    old, new = edge_store.retrieve(["m-u1-1", "m-u1-2"]).values()
    assert old.status == new.status == "active"
    assert new.conflicts[0]["review"] == "supersede" and new.conflicts[0]["with"] == ["m-u1-1"]
    assert [e["action"] for e in result.status_events] == ["review"]

    plan, _ = runner.make_plan(edge_store, "u1", None, {}, now=datetime(2026, 2, 1, tzinfo=UTC))
    assert [(c.a.memory_id, c.b.memory_id) for c in plan.conflicts] == [("m-u1-2", "m-u1-1")]
    assert not plan.merges
    assert "CONFLICT [mem:m-u1-2] vs [mem:m-u1-1]" in cons.render_report(plan)
    runner.apply_plan(edge_store, embedder, plan, choices={0: "A"})
    old = edge_store.retrieve(["m-u1-1"])["m-u1-1"]
    assert old.status == "superseded" and old.superseded_by == "m-u1-2"


def test_ingest_embeds_each_new_memory_once_and_no_stored_one(edge_store, embedder: Embedder,  # type: ignore[no-untyped-def]
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The one model pass per new memory gives its vector and features; the candidates' features
    are read from the store (the judge's legacy path would call the same method)."""
    proc = Processor(edge_store, embedder)
    proc.process([Incoming(line(event(n, "u1", t, day=n))) for n, t in enumerate(
        ["Noor lives in Tunis.", "Noor has a dog called Sami.", "Noor teaches chemistry."], start=1)])
    seen: list[str] = []
    real = embedder.encode_with_features

    def counting(texts):  # type: ignore[no-untyped-def]
        seen.extend(texts)
        return real(texts)

    monkeypatch.setattr(embedder, "encode_with_features", counting)
    result = proc.process([Incoming(line(event(4, "u1", "Noor moved to Sfax.", day=9)))])
    assert result.decisions == {"supersede": 1}
    assert seen == ["Noor moved to Sfax."]


def test_undoing_a_review_item_dismisses_it(edge_store, embedder: Embedder,  # type: ignore[no-untyped-def]
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from dreamstream.agents.consolidation import recorded_reviews

    monkeypatch.setenv("DREAM_JUDGE", "offline")  # a certain abstention (see above)
    proc = Processor(edge_store, embedder)
    result = proc.process([
        Incoming(line(event(1, "u1", "Tomas lives in Porto.", day=2, run_id="chat-7"))),
        Incoming(line(event(2, "u1", "Tomas moved to Braga.", day=2, run_id="chat-7"))),
    ])
    [review] = result.status_events
    active = {m.memory_id: m for m in edge_store.scroll({"user_id": "u1"})}
    assert [(a.memory_id, b.memory_id, p) for a, b, p, _ in recorded_reviews(active)] == [
        ("m-u1-2", "m-u1-1", "supersede")]
    assert proc.undo(review["decision_id"]) == []  # nothing had changed, nothing to revert
    active = {m.memory_id: m for m in edge_store.scroll({"user_id": "u1"})}
    assert recorded_reviews(active) == []


def test_reads_mark_both_sides_of_an_open_review_item(edge_store, embedder: Embedder,  # type: ignore[no-untyped-def]
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """"Tomas lives in Porto." then "Tomas moved to Braga.": the judge leaves the pair to a person, and
    every read says so on both rows (until the item is settled) instead of showing two current facts."""
    from dreamstream.streams.core import memories, reads

    monkeypatch.setenv("DREAM_JUDGE", "offline")
    proc = Processor(edge_store, embedder)
    result = proc.process([
        Incoming(line(event(1, "u1", "Tomas lives in Porto.", day=2, run_id="chat-7"))),
        Incoming(line(event(2, "u1", "Tomas moved to Braga.", day=2, run_id="chat-7"))),
    ])
    [review] = result.status_events
    for mode in ("default", "latest_only"):
        rows = {r["memory_id"]: r for r in reads.get(edge_store, "u1", mode)}
        assert rows["m-u1-2"]["review"] == {"decision_id": review["decision_id"], "proposal": "supersede",
                                            "side": "newer",
                                            "with": {"memory_id": "m-u1-1", "text": "Tomas lives in Porto."}}
        assert rows["m-u1-1"]["review"]["side"] == "older"
        assert rows["m-u1-1"]["review"]["with"]["memory_id"] == "m-u1-2"
    [hit] = reads.search(edge_store, embedder, "u1", "where does Tomas live", limit=1)
    assert hit["review"]["decision_id"] == review["decision_id"]  # the other side found by its decision id
    one = memories.get_memory(edge_store, "m-u1-1", "u1")
    assert one is not None and one["review"]["with"]["memory_id"] == "m-u1-2"
    assert reads.review_note(one["review"]) == 'review: may be replaced by m-u1-2 ("Tomas moved to Braga.")'
    proc.undo(review["decision_id"])  # dismissed: nothing waits any more
    assert not any("review" in r for r in reads.get(edge_store, "u1"))


def test_a_review_mark_names_the_later_said_fact_as_the_replacement(edge_store, embedder: Embedder,  # type: ignore[no-untyped-def]
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The same pair arriving the other way round (the later-said "moved to Braga" first): the marks said the
    late, older "lives in Porto" may replace Braga, and the pass that "A may replace B" (an audit of event time)."""
    from datetime import UTC, datetime

    from dreamstream.agents.consolidation import DEFAULT_RETENTION, analyse
    from dreamstream.streams.core import reads

    monkeypatch.setenv("DREAM_JUDGE", "offline")
    proc = Processor(edge_store, embedder)
    proc.process([Incoming(line(event(2, "u1", "Tomas moved to Braga.", day=2, run_id="chat-7")))])
    result = proc.process([Incoming(line(event(1, "u1", "Tomas lives in Porto.", day=2, run_id="chat-7")))])
    [review] = result.status_events
    rows = {r["memory_id"]: r for r in reads.get(edge_store, "u1")}
    assert (rows["m-u1-2"]["review"]["side"], rows["m-u1-1"]["review"]["side"]) == ("newer", "older")
    assert reads.review_note(rows["m-u1-1"]["review"]) == 'review: may be replaced by m-u1-2 ("Tomas moved to Braga.")'
    plan = analyse(list(edge_store.scroll({"user_id": "u1"})), project="u1", user_id="u1", app_id=None,
                   now=datetime(2026, 2, 1, tzinfo=UTC), retention=DEFAULT_RETENTION)
    [conflict] = plan.conflicts
    assert "B may replace it" in conflict.reason and conflict.likely == "B"  # B: the later said, Braga
    assert review["decision_id"]
