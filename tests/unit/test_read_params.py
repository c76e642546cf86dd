"""Read parameters: an unknown one is refused (a typo must not return everything), `threshold` floors a
search's relevance, and any metadata key filters."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from dreamstream.streams.core import memories, reads
from dreamstream.streams.core.ingest import Incoming, Processor
from tests.helpers import event


def test_unknown_parameters_are_refused_known_ones_pass() -> None:
    memories.check_params({"user": "u", "q": "x", "threshold": "0.5", "metadata.topic": "garden", "app_id": "a"})
    for typo in ("usr", "app", "metadata.", "latestonly"):
        with pytest.raises(ValueError, match="unknown parameter"):
            memories.check_params({"user": "u", typo: "1"})


def test_a_limit_is_a_whole_number_in_range_with_the_same_message_for_every_bad_one() -> None:
    """"²" and "٣" are digits to str.isdigit but not to int(): they answered with Python's own message."""
    assert reads.read_query({"user": "u", "limit": "7"}).limit == 7
    for bad in ("²", "٣", "0", "1001", "-1", "x", ""):
        with pytest.raises(ValueError, match="^limit must be a whole number from 1 to"):
            reads.read_query({"user": "u", "limit": bad})


def test_threshold_needs_a_search_and_a_number_from_0_to_1() -> None:
    assert reads.read_query({"user": "u", "q": "x", "threshold": "0.4"}).threshold == 0.4
    for bad in ({"user": "u", "threshold": "0.4"}, {"user": "u", "q": "x", "threshold": "2"},
                {"user": "u", "q": "x", "threshold": "high"}, {"user": "u", "q": "x", "threshold": "nan"}):
        with pytest.raises(ValueError, match="threshold"):
            reads.read_query(bad)


def test_an_empty_search_text_is_an_error_as_in_the_cli() -> None:
    """An audit: `q=` (an unset variable in a URL) answered a plain listing over HTTP, while `dream search ""`
    is an error: the caller asked for a search and got every memory, ranked by nothing it asked."""
    for blank in ("", "  ", "\t"):
        with pytest.raises(ValueError, match="^q is empty"):
            reads.read_query({"user": "u", "q": blank})
    assert reads.read_query({"user": "u"}).text is None


def test_threshold_and_metadata_filters_narrow_a_read(edge_store: Any, embedder: Any) -> None:
    rows = [event(1, "u1", "Keeps bees on the roof.", metadata={"type": "user_fact", "topic": "garden"}),
            event(2, "u1", "Grows tomatoes in pots.", metadata={"type": "user_fact", "topic": "garden"}),
            event(3, "u1", "Works as a tax accountant.", metadata={"type": "user_fact", "topic": "work"})]
    Processor(edge_store, embedder).process([Incoming(raw=orjson.dumps(r)) for r in rows])
    every = memories.list_page(edge_store, embedder, reads.read_query({"user": "u1", "q": "bees"}), {}, None).rows
    floor = (every[0]["relevance"] + every[-1]["relevance"]) / 2
    some = memories.list_page(edge_store, embedder, reads.read_query(
        {"user": "u1", "q": "bees", "threshold": str(floor)}), {}, None).rows
    assert 0 < len(some) < len(every) and all(r["relevance"] >= floor for r in some)
    params = {"user": "u1", "metadata.topic": "garden"}
    garden = memories.list_page(edge_store, embedder, reads.read_query(params), memories.filters(params), None).rows
    assert sorted(r["text"] for r in garden) == ["Grows tomatoes in pots.", "Keeps bees on the roof."]


def test_a_hard_delete_removes_the_memory_and_every_link_to_it(edge_store: Any, embedder: Any) -> None:
    """What it had replaced is current again, a pattern drawn from it goes with it (its text may quote it),
    another user's memory is never touched, and one status event per memory changed says so."""
    import numpy as np

    from dreamstream.schemas.memory import Memory

    texts = ["Lives in Lisbon.", "Moved to Porto.", "Likes the sea.", "Lives in Lisbon."]
    vectors = embedder(texts)
    stamp = "2026-01-01T10:00:00Z"

    def mem(mid: str, i: int, user: str = "u1", **links: Any) -> Memory:
        return Memory(memory_id=mid, user_id=user, text=texts[i], created_at=stamp, updated_at=stamp,
                      vector=np.asarray(vectors[i], dtype=np.float32), **links)

    edge_store.upsert([mem("old", 0, status="superseded", superseded_by="new"),
                       mem("new", 1, supersedes=["old"]),
                       mem("pat", 2, kind="pattern", sources=["new", "old"]),
                       mem("foreign", 3, user="u2", status="superseded", superseded_by="new"),
                       mem("gone", 3, status="deleted", superseded_by="new")])
    assert memories.hard_delete_memory(edge_store, "new", "u2") is None  # not u2's
    events = memories.hard_delete_memory(edge_store, "new", "u1")
    assert events is not None
    assert [(e["memory_id"], e["from_status"], e["to_status"]) for e in events] == [
        ("new", "active", "deleted"), ("pat", "active", "deleted"), ("old", "superseded", "active")]
    got = edge_store.retrieve(["old", "new", "pat", "foreign"])
    assert "new" not in got and "pat" not in got
    assert (got["old"].status, got["old"].superseded_by) == ("active", None)
    assert (got["foreign"].status, got["foreign"].superseded_by) == ("superseded", "new")
    gone = edge_store.retrieve(["gone"])["gone"]
    assert (gone.status, gone.superseded_by) == ("deleted", None)  # unlinked, not brought back


def test_a_hard_delete_of_a_middle_version_keeps_the_older_ones_history_behind_the_newest(
        edge_store: Any, embedder: Any) -> None:
    """Lisbon -> Porto -> Braga, then Porto removed for good: Lisbon became current again beside Braga (an
    outdated value shown as current, and no undo for a hard delete). It stays history, now behind Braga; so
    does a restatement merged into Porto."""
    import numpy as np

    from dreamstream.schemas.memory import Memory

    texts = ["Lives in Lisbon.", "Lives in Porto.", "Lives in Braga.", "Lives in Porto, Portugal."]
    vectors = embedder(texts)
    stamp = "2026-01-01T10:00:00Z"

    def mem(mid: str, i: int, **links: Any) -> Memory:
        return Memory(memory_id=mid, user_id="u1", text=texts[i], created_at=stamp, updated_at=stamp,
                      vector=np.asarray(vectors[i], dtype=np.float32), **links)

    edge_store.upsert([mem("lisbon", 0, status="superseded", superseded_by="porto"),
                       mem("porto", 1, status="superseded", superseded_by="braga", supersedes=["lisbon"],
                           merged_from=["porto2"]),
                       mem("porto2", 3, status="merged", merged_into="porto"),
                       mem("braga", 2, supersedes=["porto"])])
    events = memories.hard_delete_memory(edge_store, "porto", "u1") or []
    assert [(e["memory_id"], e["from_status"], e["to_status"], e["linked_memory_id"]) for e in events] == [
        ("porto", "superseded", "deleted", None), ("lisbon", "superseded", "superseded", "braga"),
        ("porto2", "merged", "superseded", "braga")]
    got = edge_store.retrieve(["lisbon", "porto2", "braga"])
    assert (got["lisbon"].status, got["lisbon"].superseded_by) == ("superseded", "braga")
    assert (got["porto2"].status, got["porto2"].superseded_by) == ("superseded", "braga")
    assert got["braga"].supersedes == ["lisbon", "porto2"] and got["braga"].status == "active"
    assert [r["memory_id"] for r in reads.get(edge_store, "u1", "latest_only")] == ["braga"]


def _dee(edge_store: Any, embedder: Any) -> None:
    """Dee's home moved twice (two history rows), six other current facts, one of them in app crm."""
    rows = [event(1, "dee", "Dee lives in Lisbon.", day=1), event(2, "dee", "Dee moved to Porto.", day=12),
            event(3, "dee", "Dee moved to Madrid last month.", day=24)]
    rows += [event(10 + n, "dee", text, day=2 + n) for n, text in enumerate([
        "Dee works as a nurse at a children's hospital.", "Dee plays the cello in an amateur orchestra.",
        "Dee is allergic to cats.", "Dee's sister is called Ana.", "Dee drinks green tea every morning."])]
    rows.append({**event(20, "dee", "Dee's home address is Calle Mayor 5.", day=26), "app_id": "crm"})
    proc = Processor(edge_store, embedder)
    for r in sorted(rows, key=lambda r: r["created_at"]):
        proc.process([Incoming(raw=orjson.dumps(r))])
    assert [r["label"] for r in reads.get(edge_store, "dee")].count("history") == 2


@pytest.mark.parametrize("limit", [1, 3])
@pytest.mark.parametrize("mode", ["default", "include_merged"])
def test_paging_a_search_shows_every_match_once_current_facts_first_on_each_page(
        edge_store: Any, embedder: Any, limit: int, mode: str) -> None:
    """Pages are slices of one score order (each page re-ranked a larger window and re-sorted it, so a
    history row came back page after page and the current answer never did); the first page is what
    `reads.search` (the CLI on a store) gives."""
    _dee(edge_store, embedder)
    params = {"user": "dee", "q": "where does dee live", "limit": str(limit)}
    if mode == "include_merged":
        params["include_merged"] = "true"
    seen, cursor = [], None
    while True:
        page = memories.list_page(edge_store, embedder, reads.read_query(params), {}, cursor)
        labels = [r["label"] for r in page.rows]
        assert labels == sorted(labels, key=lambda label: label != "current")  # current first on the page
        seen += [r["memory_id"] for r in page.rows]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert len(seen) == len(set(seen)) == 9 and "m-dee-3" in seen
    one = memories.list_page(edge_store, embedder, reads.read_query(params), {}, None).rows
    assert [r["memory_id"] for r in one] == [r["memory_id"] for r in reads.search(
        edge_store, embedder, "dee", "where does dee live", mode, limit)]


def test_a_search_never_shows_a_replaced_fact_without_the_one_that_holds_now(edge_store: Any, embedder: Any) -> None:
    """"Dee lives in Lisbon" matches "lives in Lisbon" best, so `limit` 1 answered with that history row
    alone: the current home, Madrid, ranked too low to be shown. Its heir now comes with it, first."""
    _dee(edge_store, embedder)
    query = "which city does Dee live in, Lisbon?"
    by_score = reads.ranked(edge_store, embedder, "dee", query, "default", lambda sure: len(sure) > 20,
                            keep=lambda _x: False)  # nothing may pull an heir: the plain score order
    assert by_score[0][0].memory_id == "m-dee-1"
    assert [r["memory_id"] for r in reads.search(edge_store, embedder, "dee", query, "default", 1)] == ["m-dee-3"]
    two = reads.search(edge_store, embedder, "dee", query, "default", 2)
    assert [(r["memory_id"], r["label"]) for r in two] == [("m-dee-3", "current"), ("m-dee-1", "history")]
    assert two[1]["replaced_by"]["memory_id"] == "m-dee-3"
    seen, cursor = [], None
    while True:  # pages still show every match once
        page = memories.list_page(edge_store, embedder, reads.read_query({"user": "dee", "q": query, "limit": "2"}),
                                  {}, cursor)
        seen += [r["memory_id"] for r in page.rows]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert seen[0] == "m-dee-3" and len(seen) == len(set(seen)) == 9
    # A filter the heir fails (another app) leaves the history row as it was, with its pointer.
    crm = memories.list_page(edge_store, embedder, reads.read_query({"user": "dee", "q": query, "limit": "1",
                                                                     "app_id": "crm"}), {"app_id": "crm"}, None)
    assert [r["memory_id"] for r in crm.rows] == ["m-dee-20"]


def test_a_filtered_search_finds_the_best_matches_that_pass_the_filter(edge_store: Any, embedder: Any) -> None:
    """Filters were applied after the top rows were cut, so a matching memory outside them was not found
    and the page said there was nothing more."""
    _dee(edge_store, embedder)
    for limit in ("1", "3", "50"):
        params = {"user": "dee", "q": "where does dee live", "limit": limit, "app_id": "crm"}
        page = memories.list_page(edge_store, embedder, reads.read_query(params), memories.filters(params), None)
        assert [r["memory_id"] for r in page.rows] == ["m-dee-20"] and page.next_cursor is None


def test_filters_read_json_values_and_an_empty_one_is_refused(edge_store: Any, embedder: Any) -> None:
    """`false` matches JSON false (it compared Python's "False"), `None` matches no null, and an empty value
    (an unset variable) is an error rather than no filter at all (every app's memories)."""
    _dee(edge_store, embedder)

    def count(**where: str) -> int:
        params = {"user": "dee", **where}
        return len(memories.list_page(edge_store, embedder, reads.read_query(params), memories.filters(params),
                                      None).rows)

    assert count(**{"metadata.pinned": "false"}) == 9 and count(**{"metadata.pinned": "False"}) == 0
    assert count(agent_id="None") == 0 and count(agent_id="null") == 9
    with pytest.raises(ValueError, match="app_id is empty"):
        memories.filters({"user": "dee", "app_id": ""})


def test_the_history_of_a_memory_never_shows_a_soft_deleted_replacements_words(edge_store: Any, embedder: Any) -> None:
    """A read names a deleted replacement without its text (reads.replaced_by); the history view
    (provenance: `dream provenance`, GET .../history, MCP memory_history) showed it."""
    _dee(edge_store, embedder)
    assert memories.delete_memory(edge_store, "m-dee-3", "dee")
    shown = memories.history(edge_store, "m-dee-2", "dee")
    assert shown is not None
    assert shown["superseded_by"] == {"memory_id": "m-dee-3", "text": None, "status": "deleted"}
    assert "Madrid" not in orjson.dumps(shown).decode()


def test_a_memory_added_between_pages_of_a_listing_repeats_and_skips_nothing(edge_store: Any, embedder: Any) -> None:
    """A listing's cursor was a row count: a current fact added between pages sorts ahead of history, so
    the next page showed the last row again and never the one after it (an agent pages while it adds)."""
    _dee(edge_store, embedder)
    params = {"user": "dee", "limit": "8"}  # the first page ends in history: 7 current facts, then 2 history
    first = memories.list_page(edge_store, embedder, reads.read_query(params), {}, None)
    before = [r["memory_id"] for r in reads.get(edge_store, "dee")]
    proc = Processor(edge_store, embedder)
    added = event(30, "dee", "Dee collects old maps.", day=27)
    assert not proc.process([Incoming(raw=orjson.dumps(added))]).dead_letters
    seen = [r["memory_id"] for r in first.rows]
    cursor = first.next_cursor
    while cursor is not None:
        page = memories.list_page(edge_store, embedder, reads.read_query(params), {}, cursor)
        seen += [r["memory_id"] for r in page.rows]
        cursor = page.next_cursor
    assert first.rows[-1]["label"] == "history"
    assert len(seen) == len(set(seen)) and set(before) <= set(seen)
    broken = memories._key_cursor((0, "x", "y"), "t")[:-3] + "!!"
    with pytest.raises(ValueError, match="cursor"):
        memories.list_page(edge_store, embedder, reads.read_query(params), {}, broken)


def test_a_cursor_continues_only_the_read_that_gave_it(edge_store: Any, embedder: Any) -> None:
    """Another user's cursor (or another query's, mode's or filter's) is refused: dee's listing cursor with
    user=bob answered bob's rows after dee's place, silently skipping his first ones (an audit)."""
    _dee(edge_store, embedder)
    params = {"user": "dee", "limit": "2"}
    listing = memories.list_page(edge_store, embedder, reads.read_query(params), {}, None).next_cursor
    search = memories.list_page(edge_store, embedder, reads.read_query({**params, "q": "where does dee live"}), {},
                                None).next_cursor
    assert listing and search
    for other, cursor in (({"user": "bob"}, listing), ({"user": "dee", "latest_only": "1"}, listing),
                          ({"user": "dee", "q": "dee's work"}, search), ({"user": "bob", "q": "where does dee live"},
                                                                       search)):
        with pytest.raises(ValueError, match="cursor belongs to another read"):
            memories.list_page(edge_store, embedder, reads.read_query(other), {}, cursor)
    with pytest.raises(ValueError, match="cursor belongs to another read"):  # a filter added between pages
        memories.list_page(edge_store, embedder, reads.read_query(params), {"app_id": "crm"}, listing)
    assert memories.list_page(edge_store, embedder, reads.read_query({**params, "limit": "5"}), {}, listing).rows
