"""The user's surface against a real worker on the real broker: the HTTP API, `dreamstream.client`
(sync and async) and `dream mcp` driven by the MCP Python SDK's own client."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from dreamstream.client import AsyncClient, Client, DreamAPIError
from dreamstream.streams.dev.localrun import WorkerProcess

pytestmark = pytest.mark.kafka
TOKEN = "t0ken-for-tests"
DREAM = str(Path(sys.executable).with_name("dream"))


@pytest.fixture(scope="module")
def worker(kafka: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerProcess]:
    w = WorkerProcess(kafka, f"api-{uuid.uuid4().hex[:10]}", tmp_path_factory.mktemp("api"), {"DREAM_API_TOKEN": TOKEN})
    w.start()
    yield w
    w.stop()


def url(w: WorkerProcess) -> str:
    return f"http://127.0.0.1:{w.port}"


def test_http_add_read_current_first_history_and_undo(worker: WorkerProcess) -> None:
    assert httpx.get(f"{url(worker)}/v1/memories", params={"user": "ana"}).status_code == 401
    with Client(url(worker), token=TOKEN) as dream:
        first = dream.add("ana", "Ana lives in Lisbon.", created_at="2026-01-04T10:00:00Z")
        dream.wait_for(first)
        moved = dream.add("ana", "Ana moved to Porto last month.", created_at="2026-03-01T10:00:00Z")
        dream.wait_for(moved)
        dream.add_many([{"user_id": "ana", "text": f"Ana's note {n}: she keeps bees.", "app_id": "garden",
                         "created_at": f"2026-02-0{n}T10:00:00Z"} for n in range(1, 4)])
        found = dream.search("ana", "where does ana live", limit=5)
        assert found.memories[0].label == "current" and found.memories[0].memory_id == moved.memory_id
        old = next(m for m in found.memories if m.memory_id == first.memory_id)
        assert old.label == "history" and old.replaced_by and old.replaced_by["memory_id"] == moved.memory_id
        assert [m.memory_id for m in dream.search("ana", "where does ana live", latest_only=True).memories
                ].count(first.memory_id) == 0
        history = dream.history(first.memory_id, "ana")
        assert history["superseded_by"]["memory_id"] == moved.memory_id and history["decisions"]
        # filters and cursor pagination
        deadline = time.monotonic() + 60
        while len(dream.list("ana", app_id="garden").memories) < 3:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        page1 = dream.list("ana", limit=2)
        page2 = dream.list("ana", limit=2, cursor=page1.next_cursor)
        assert page1.next_cursor and len(page1.memories) == 2
        assert not {m.memory_id for m in page1.memories} & {m.memory_id for m in page2.memories}
        assert [m.label for m in page1.memories] == ["current", "current"]  # current facts first
        # undo through the API: in another user's name (or none) it is refused and nothing changes
        [decision] = history["decisions"]
        with pytest.raises(DreamAPIError) as foreign_undo:
            dream.undo(decision["decision_id"], "bo")
        assert foreign_undo.value.status == 404 and "for user bo" in foreign_undo.value.message
        headers = {"Authorization": f"Bearer {TOKEN}"}
        for params in ({}, {"user": "ana", "bogus": "1"}):
            refused = httpx.post(f"{url(worker)}/v1/decisions/{decision['decision_id']}/undo", params=params,
                                 headers=headers)
            assert refused.status_code == 400, refused.text
        assert dream.get(first.memory_id, "ana").status == "superseded"
        events = dream.undo(decision["decision_id"], "ana")
        assert any(e["memory_id"] == first.memory_id and e["to_status"] == "active" for e in events)
        assert dream.get(first.memory_id, "ana").status == "active"
        with pytest.raises(DreamAPIError) as gone:
            dream.get("m-does-not-exist", "ana")
        assert gone.value.status == 404
        # another user's memory is not there for this user, by id or by history, as an unknown one
        for read in (dream.get, dream.history):
            with pytest.raises(DreamAPIError) as foreign:
                read(first.memory_id, "bo")
            assert foreign.value.status == 404 and foreign.value.message == f"no memory {first.memory_id}"
        with pytest.raises(DreamAPIError) as bad:
            dream.add("ana", "   ")
        assert bad.value.status == 400 and "empty_text" in bad.value.message


def test_http_errors_are_json_with_a_reason(worker: WorkerProcess) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    bad = httpx.post(f"{url(worker)}/v1/memories", content=b"{not json", headers=headers)
    assert bad.status_code == 400 and bad.json()["error"].startswith("invalid_json")
    missing = httpx.post(f"{url(worker)}/v1/memories", json={"text": "no user"}, headers=headers)
    assert missing.status_code == 400 and "user_id" in missing.json()["error"]
    limit = httpx.get(f"{url(worker)}/v1/memories", params={"user": "ana", "limit": "0"}, headers=headers)
    assert limit.status_code == 400 and "limit" in limit.json()["error"]
    no_user = httpx.get(f"{url(worker)}/v1/memories/m-1", headers=headers)
    assert no_user.status_code == 400 and "user" in no_user.json()["error"]
    # A body past the server's limit was a 500 with a traceback in the log.
    many = [{"user_id": "ana", "text": "Ana keeps notes. " * 70} for _ in range(1000)]
    huge = httpx.post(f"{url(worker)}/v1/memories", json=many, headers=headers, timeout=60)
    assert huge.status_code == 413 and huge.json()["error"].startswith("oversize: the body is over")
    big = httpx.post(f"{url(worker)}/v1/memories", json={"user_id": "ana", "text": "Big.",
                                                          "metadata": {"note": "x" * 70_000}}, headers=headers)
    assert big.status_code == 400 and big.json()["error"].startswith("oversize")
    spec = httpx.get(f"{url(worker)}/v1/openapi.json").json()
    assert spec["openapi"].startswith("3.1") and "/v1/memories/{memory_id}/history" in spec["paths"]
    # An unknown path and a method a page lacks came back as aiohttp's plain text.
    nowhere = httpx.get(f"{url(worker)}/v1/nowhere", headers=headers)
    assert nowhere.status_code == 404 and nowhere.json()["error"].startswith("not found")
    wrong = httpx.post(f"{url(worker)}/v1/stats", headers=headers)
    assert wrong.status_code == 405 and wrong.json()["error"].startswith("method not allowed")
    assert wrong.headers["Allow"]
    typo = httpx.get(f"{url(worker)}/v1/memories/m-1", params={"user": "ana", "usr": "x"}, headers=headers)
    assert typo.status_code == 400 and "usr" in typo.json()["error"]
    # A parameter a write does not take was ignored (an add answered 202, a pass ran).
    for method, path, body in (("POST", "/v1/memories", {"user_id": "ana", "text": "Ana hums."}),
                               ("POST", "/v1/consolidations", {"user": "ana", "mode": "dry_run"}),
                               ("POST", "/v1/consolidations/plan-x/approve", {}),
                               ("DELETE", "/v1/users/ana", None)):
        unknown = httpx.request(method, f"{url(worker)}{path}", params={"bogus": "1", "confirm": "ana"}, json=body,
                                headers=headers)
        assert unknown.status_code == 400 and "'bogus'" in unknown.json()["error"], (path, unknown.text)
    # The operations pages answer without a token (probes, scrapers) and show no memory or user.
    for page in ("/v1/stats", "/v1/consumer", "/v1/openapi.json"):
        assert httpx.get(f"{url(worker)}{page}").status_code == 200
    assert httpx.get(f"{url(worker)}/v1/stats", params={"detail": "1"}).status_code == 401
    # A repeated parameter read its first value; a consolidation read dry_run "no" as a dry run.
    twice = httpx.get(f"{url(worker)}/v1/memories", params=[("user", "ana"), ("user", "bo")], headers=headers)
    assert twice.status_code == 400 and "'user' is given more than once" in twice.json()["error"]
    no = httpx.post(f"{url(worker)}/v1/consolidations", json={"user": "ana", "mode": "light", "dry_run": "no"},
                    headers=headers)
    assert no.status_code == 400 and no.json()["error"] == "dry_run must be true or false"
    scoped = httpx.post(f"{url(worker)}/v1/consolidations", json={"user": "ana", "mode": "full", "app": "chat"},
                        headers=headers)
    assert scoped.status_code == 400 and "runs over all of a user's apps" in scoped.json()["error"]
    dots = httpx.post(f"{url(worker)}/v1/consolidations", json={"user": "../x", "mode": "light"}, headers=headers)
    assert dots.status_code == 400 and "user must be printable" in dots.json()["error"]
    # Erasing a user id no user can have waited 30 s, answered "queued", and was then dead-lettered.
    start = time.monotonic()
    ghost = httpx.delete(f"{url(worker)}/v1/users/%20ana", params={"confirm": " ana"}, headers=headers, timeout=60)
    assert ghost.status_code == 400 and "user must be printable" in ghost.json()["error"]
    assert time.monotonic() - start < 5


def test_ids_with_url_characters_name_their_own_memory_and_a_taken_id_is_refused(worker: WorkerProcess) -> None:
    """`#`, `?` and `%` are allowed in ids: the client escapes them, so a delete names that memory and not
    the one its id starts with. An id already stored as another memory is a 409 at once, not a 202 and a
    wait that never ends (ingest would dead-letter it)."""
    with Client(url(worker), token=TOKEN) as dream:
        plain = dream.add("ida", "Ida keeps bees on her roof.", memory_id="m", wait=True)
        odd = dream.add("ida", "Ida plays the cello.", memory_id="m#1?x=%2F", wait=True)
        assert dream.get(odd.memory_id, "ida").text == "Ida plays the cello."
        assert dream.delete(odd.memory_id, "ida")["status"] == "deleted"
        assert dream.get(plain.memory_id, "ida").status == "active"
        assert dream.history(odd.memory_id, "ida")["memory"]["memory_id"] == "m#1?x=%2F"
        with pytest.raises(DreamAPIError) as taken:
            dream.add("bo", "Bo likes tea.", memory_id="m")
        assert taken.value.status == 409 and "memory_id_conflict" in str(taken.value)
        assert dream.add("ida", "Ida keeps bees on her roof.", memory_id="m").memory_id == "m"  # the same: a resend

    # Two adds at once with one new id and other words: both were accepted (neither was stored yet) and ingest
    # dead-lettered one after its 202.
    async def race() -> list[int]:
        async with AsyncClient(url(worker), token=TOKEN) as dream:
            async def add(text: str) -> int:
                try:
                    await dream.add("ida", text, memory_id="m-race")
                    return 202
                except DreamAPIError as exc:
                    return exc.status
            return sorted(await asyncio.gather(add("Ida is vegan."), add("Ida eats meat daily.")))

    assert asyncio.run(race()) == [202, 409]


def test_the_async_client(worker: WorkerProcess) -> None:
    async def go() -> None:
        async with AsyncClient(url(worker), token=TOKEN) as dream:
            added = await dream.add_many([{"user_id": "bo", "text": "Bo drinks green tea."},
                                          {"user_id": "bo", "text": "Bo runs on Sundays."}])
            for a in added:
                await dream.wait_for(a)
            page = await dream.search("bo", "what does bo drink")
            assert page.memories[0].text == "Bo drinks green tea."
            assert (await dream.get(added[1].memory_id, "bo")).label == "current"

    asyncio.run(go())


def test_an_agent_uses_dream_mcp_through_the_sdk_client(worker: WorkerProcess) -> None:
    from mcp.client.client import Client as MCPClient
    from mcp.client.stdio import StdioServerParameters

    params = StdioServerParameters(command=DREAM, args=["mcp", "--url", url(worker), "--token", TOKEN],
                                   env={**os.environ, "HF_HUB_OFFLINE": "1"})

    def payload(result: Any) -> dict[str, Any]:
        structured = getattr(result, "structured_content", None) or getattr(result, "structuredContent", None)
        if structured:
            return dict(structured.get("result", structured))
        out: dict[str, Any] = json.loads(result.content[0].text)
        return out

    def failed(result: Any) -> bool:
        return bool(getattr(result, "is_error", None) or getattr(result, "isError", None))

    async def go() -> None:
        down = StdioServerParameters(command=DREAM, args=["mcp", "--url", "http://127.0.0.1:9"],
                                     env={**os.environ, "HF_HUB_OFFLINE": "1"})
        async with MCPClient(down) as agent:  # no worker there: a tool error saying so, in one line
            result = await agent.call_tool("add_memory", {"user_id": "cy", "text": "Cy is allergic to nuts."})
            assert failed(result)
            assert result.content[0].text.endswith("no worker at http://127.0.0.1:9: connection refused")
        async with MCPClient(params) as agent:
            tools = {t.name for t in (await agent.list_tools()).tools}
            assert tools == {"add_memory", "search_memories", "list_memories", "get_memory", "memory_history",
                             "update_memory", "delete_memory"}
            added = payload(await agent.call_tool("add_memory", {"user_id": "cy", "text": "Cy is allergic to nuts."}))
            assert added["status"] == "accepted"
            for _ in range(300):
                result = await agent.call_tool("get_memory", {"user_id": "cy", "memory_id": added["memory_id"]})
                if not failed(result):
                    break
                await asyncio.sleep(0.2)
            got = payload(result)
            assert got["text"] == "Cy is allergic to nuts." and got["label"] == "current"
            # An argument the tool does not take was dropped (the metadata stored nothing); a wrong type was
            # pydantic's four lines with a URL.
            extra = await agent.call_tool("add_memory", {"user_id": "cy", "text": "Cy swims.", "metadata": {}})
            assert failed(extra) and "add_memory takes no argument 'metadata'" in extra.content[0].text
            typed = await agent.call_tool("get_memory", {"user_id": 5, "memory_id": added["memory_id"]})
            assert failed(typed) and typed.content[0].text.strip().splitlines() == [
                "get_memory: user_id: Input should be a valid string"]
            schema = next(t for t in (await agent.list_tools()).tools if t.name == "add_memory")
            assert (getattr(schema, "input_schema", None) or schema.inputSchema)["additionalProperties"] is False
            # A refusal is a tool error with the API's one-line reason, not a successful result.
            foreign = await agent.call_tool("get_memory", {"user_id": "dee", "memory_id": added["memory_id"]})
            assert failed(foreign) and foreign.content[0].text.endswith(f"404: no memory {added['memory_id']}")
            found = payload(await agent.call_tool("search_memories", {"user_id": "cy", "query": "allergies"}))
            assert found["memories"][0]["memory_id"] == added["memory_id"]
            history = payload(await agent.call_tool("memory_history",
                                                    {"user_id": "cy", "memory_id": added["memory_id"]}))
            assert history["memory"]["memory_id"] == added["memory_id"]
            fixed = payload(await agent.call_tool("update_memory", {"user_id": "cy", "memory_id": added["memory_id"],
                                                                    "text": "Cy is allergic to peanuts."}))
            assert fixed["status"] == "accepted" and fixed["replaces"] == added["memory_id"]
            for _ in range(300):
                rows = payload(await agent.call_tool("list_memories", {"user_id": "cy"}))["memories"]
                if [r["label"] for r in rows] == ["current", "history"]:
                    break
                await asyncio.sleep(0.2)
            assert [r["text"] for r in rows] == ["Cy is allergic to peanuts.", "Cy is allergic to nuts."]
            first = payload(await agent.call_tool("list_memories", {"user_id": "cy", "limit": 1}))
            second = payload(await agent.call_tool("list_memories", {"user_id": "cy", "limit": 1,
                                                                     "cursor": first["next_cursor"]}))
            assert [r["text"] for r in first["memories"] + second["memories"]] == [r["text"] for r in rows]
            gone = payload(await agent.call_tool("delete_memory", {"user_id": "cy", "memory_id": fixed["memory_id"]}))
            assert gone["status"] == "deleted" and gone["decision_id"].startswith("del-")
            left = payload(await agent.call_tool("list_memories", {"user_id": "cy"}))["memories"]
            assert [r["memory_id"] for r in left] == [added["memory_id"]]  # the old version, still history
            # It names what replaced it, not the deleted words.
            assert left[0]["replaced_by"] == {"memory_id": fixed["memory_id"], "status": "deleted"}
            everything = payload(await agent.call_tool("list_memories", {"user_id": "cy", "include_merged": True}))
            assert [r["memory_id"] for r in everything["memories"]] == [added["memory_id"]]  # deleted: hidden in all
            blank = await agent.call_tool("search_memories", {"user_id": "cy", "query": "  "})
            assert failed(blank) and "a search needs a query" in blank.content[0].text
            for bad in (".", ".."):  # a URL drops or climbs these: a one-line tool error, not the listing
                dotted = await agent.call_tool("get_memory", {"user_id": "cy", "memory_id": bad})
                assert failed(dotted) and "cannot name a memory" in dotted.content[0].text

    asyncio.run(go())


def test_the_readme_cli_commands_work_beside_the_running_worker(worker: WorkerProcess) -> None:
    """`dream get`, `search`, `provenance` and `undo` on the store the worker holds go through its API
    (found from the store's lock), as the README's "read it back" section runs them."""
    import subprocess

    def dream(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([DREAM, *args], env=worker.env, capture_output=True, text=True, timeout=120)

    with Client(url(worker), token=TOKEN) as api:
        first = api.add("eve", "Eve lives in Ghent.", created_at="2026-01-04T10:00:00Z")
        api.wait_for(first)
        moved = api.add("eve", "Eve moved to Leuven last month.", created_at="2026-03-01T10:00:00Z")
        api.wait_for(moved)
        [decision] = api.history(first.memory_id, "eve")["decisions"]
    got = dream("get", "--user", "eve")
    assert got.returncode == 0 and got.stderr == "", got.stderr
    assert got.stdout.splitlines()[0].startswith("[current ]") and moved.memory_id in got.stdout.splitlines()[0]
    found = dream("search", "--user", "eve", "where does eve live", "--json")
    assert found.returncode == 0 and json.loads(found.stdout.splitlines()[0])["memory_id"] == moved.memory_id
    history = dream("provenance", first.memory_id, "--user", "eve")
    assert history.returncode == 0 and "superseded by" in history.stdout
    assert dream("provenance", first.memory_id).stderr.strip().endswith("add --user USER (see `dream provenance -h`)")
    assert dream("undo", decision["decision_id"]).stderr.strip().endswith("add --user USER (see `dream undo -h`)")
    foreign = dream("undo", decision["decision_id"], "--user", "ana")
    assert foreign.returncode == 1 and f"no decision {decision['decision_id']} for user ana" in foreign.stderr
    undone = dream("undo", decision["decision_id"], "--user", "eve")
    assert undone.returncode == 0 and f"{first.memory_id}: superseded -> active" in undone.stdout
    again = dream("undo", decision["decision_id"], "--user", "eve")
    assert again.returncode == 1 and again.stderr.strip() == (
        f"Error: 409: decision {decision['decision_id']} was already undone")
    held = dream("export")  # a command that must own the store is refused, in one line
    assert held.returncode == 1 and "is in use by worker pid" in held.stderr


def test_delete_undo_and_erase_over_http_with_their_status_events(worker: WorkerProcess) -> None:
    """A soft delete hides a memory from every read and keeps it; undo brings it back; erasing a user
    needs its confirmation and deletes everything of that user, nobody else's. Each is on memory.status."""
    from dreamstream.streams.dev.localrun import consume_all, produce

    with Client(url(worker), token=TOKEN) as dream:
        kept = dream.add("fay", "Fay plays the cello.")
        gone = dream.add("fay", "Fay's locker code is 4711.")
        other = dream.add("gus", "Gus plays the cello too.")
        for added in (kept, gone, other):
            dream.wait_for(added)
        deleted = dream.delete(gone.memory_id, "fay")
        assert deleted["status"] == "deleted" and deleted["status_events"][0]["to_status"] == "deleted"
        for flags in ({}, {"latest_only": True}, {"include_merged": True}):
            assert [m.memory_id for m in dream.list("fay", **flags).memories] == [kept.memory_id]
        assert dream.get(gone.memory_id, "fay").status == "deleted"  # kept, by id
        with pytest.raises(DreamAPIError) as twice:
            dream.delete(gone.memory_id, "fay")
        assert twice.value.status == 409
        with pytest.raises(DreamAPIError) as foreign:
            dream.delete(other.memory_id, "fay")  # another user's memory is not there for fay
        assert foreign.value.status == 404 and dream.get(other.memory_id, "gus").status == "active"
        back = dream.undo(deleted["decision_id"], "fay")
        assert [(e["from_status"], e["to_status"]) for e in back] == [("deleted", "active")]
        assert {m.memory_id for m in dream.list("fay").memories} == {kept.memory_id, gone.memory_id}
        # Any producer of memory.added could erase a user with a raw record (and name the API as its issuer):
        # with a token set, only the worker's signed erase runs; a forged one is a dead letter.
        forged = {"type": "user.erase", "event_id": "erase-forged", "user_id": "fay", "request": "forged",
                  "issued_by": "api"}
        asyncio.run(produce(worker.kafka, worker.topics["added"], [json.dumps(forged).encode()]))
        dead = asyncio.run(consume_all(worker.kafka, worker.topics["dead"], 1, timeout=30,
                                       keep=lambda r: b"erase-forged" in base64.b64decode(
                                           json.loads(r.value)["original_b64"])))
        assert [d["reason"] for d in dead] == ["unauthorised"]
        assert len(dream.list("fay").memories) == 2
        unconfirmed = httpx.delete(f"{url(worker)}/v1/users/fay", headers={"Authorization": f"Bearer {TOKEN}"})
        assert unconfirmed.status_code == 400 and "confirm=fay" in unconfirmed.json()["error"]
        assert dream.delete_all("fay") == 2
        assert dream.list("fay").memories == [] and dream.get(other.memory_id, "gus").status == "active"
        # An add accepted just before the erase was stored after it (the erase read the store alone); now the
        # erase travels behind it in the user's partition.
        late = dream.add("fay", "Fay's new locker code is 9090.")
        assert dream.delete_all("fay") in (0, 1)
        time.sleep(3)
        assert dream.list("fay").memories == [] and late.memory_id

    events = asyncio.run(consume_all(worker.kafka, worker.topics["status"], 10**9, timeout=10))
    mine = [(e["action"], e["to_status"]) for e in events if e["user_id"] == "fay"]
    assert ("delete", "deleted") in mine and ("undo", "active") in mine and ("erase", "erased") in mine


def test_an_id_freed_by_a_hard_delete_is_taken_again_at_once(worker: WorkerProcess) -> None:
    """A re-audit: after a hard delete (or an erase) the freed id was refused for five minutes as "just accepted as
    another memory" (the worker's cache of recent adds), although the docs say new words under a freed id are
    stored."""
    with Client(url(worker), token=TOKEN) as dream:
        first = dream.add("ivy", "Ivy grows tomatoes.", memory_id="freed-1")
        dream.wait_for(first)
        dream.delete("freed-1", "ivy", hard=True)
        again = dream.add("jon", "Jon collects stamps.", memory_id="freed-1")
        assert dream.wait_for(again).text == "Jon collects stamps."


def test_update_keeps_the_old_version_as_history_and_undo_reverts_it(worker: WorkerProcess) -> None:
    with Client(url(worker), token=TOKEN) as dream:
        old = dream.add("hal", "Hal works at Acme.", metadata={"type": "user_fact", "team": "infra"})
        dream.wait_for(old)
        new = dream.update(old.memory_id, "hal", text="Hal works at Globex.", metadata={"team": "platform"})
        got = dream.wait_for(new)
        assert got.label == "current" and got.metadata["team"] == "platform" and got.metadata["type"] == "user_fact"
        rows = dream.list("hal").memories
        assert [(m.memory_id, m.label) for m in rows] == [(new.memory_id, "current"), (old.memory_id, "history")]
        assert rows[1].replaced_by and rows[1].replaced_by["memory_id"] == new.memory_id
        [decision] = dream.history(old.memory_id, "hal")["decisions"]
        assert decision["evidence"]["rule"] == "update"
        dream.undo(decision["decision_id"], "hal")
        assert dream.get(old.memory_id, "hal").label == "current"
        assert [m.memory_id for m in dream.list("hal", latest_only=True).memories] == [old.memory_id]  # reverted
        with pytest.raises(DreamAPIError) as bad:
            dream.update(old.memory_id, "ivy", text="Ivy's now.")
        assert bad.value.status == 404


def test_consolidation_item_by_item_over_http_the_client_and_the_cli(worker: WorkerProcess) -> None:
    """A dry run gives the plan's items with ids; approving answers each (one prune applied, the rest
    skipped); `dream consolidate` and `dream stats` beside the worker go through the same API; an add
    with wait=True says what was decided; a hard delete takes its links with it."""
    import subprocess

    def dream(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        return subprocess.run([DREAM, *args], env=worker.env, capture_output=True, text=True, timeout=120,
                              input=stdin)

    old = "2026-01-02T10:00:00Z"
    notes = [{"user_id": "kit", "text": f"Was halfway through refactor step {n} of the billing module.",
              "created_at": old, "metadata": {"type": "session_state"}} for n in (1, 2, 3)]
    with Client(url(worker), token=TOKEN) as api:
        added = api.add_many(notes)
        for a in added:
            api.wait_for(a)
        plan = api.consolidate("kit")
        prunes = {x["memory"]: x["item"] for x in plan["prunes"]}
        assert set(prunes) >= {a.memory_id for a in added} and plan["report"].startswith("## Dream")
        with pytest.raises(DreamAPIError) as bad:
            api.approve(plan["plan_id"], {prunes[added[0].memory_id]: "A"})
        assert bad.value.status == 400 and "is a prune: answer apply or skip" in bad.value.message
        pid = plan["plan_id"]
        for wrong in (lambda: api.approve(pid, user="ivo"), lambda: api.reject(pid, user="ivo")):
            with pytest.raises(DreamAPIError) as other:  # another user's name: the plan is not theirs, nothing runs
                wrong()
            assert other.value.status == 404 and "is kit's, not ivo's" in other.value.message
        assert [api.get(a.memory_id, "kit").status for a in added] == ["active"] * 3
        done = api.approve(plan["plan_id"], {prunes[added[0].memory_id]: "apply"}, rest="skip", user="kit")
        assert done["pruned"] == 1 and done["status_events"] == 1 and done["decision_id"].startswith("cons-")
        assert [api.get(a.memory_id, "kit").status for a in added] == ["expired", "active", "active"]
        with pytest.raises(DreamAPIError) as gone:
            api.approve(plan["plan_id"])
        # Without ?user another worker may keep it: the answer says how to reach it (an audit read "no plan").
        assert gone.value.status == 404 and "name its user (?user=...)" in gone.value.message
        assert api.stats()["by_status"]["expired"] >= 1

        first = api.add("ivo", "Ivo lives in Ghent.", created_at="2026-01-04T10:00:00Z", wait=True)
        assert first.decided == "stored" and first.memory and first.memory.label == "current"
        moved = api.add("ivo", "Ivo moved to Leuven last month.", created_at="2026-03-01T10:00:00Z", wait=True)
        assert moved.decided == f"supersedes {first.memory_id}", moved.decisions
        gone_for_good = api.delete(moved.memory_id, "ivo", hard=True)  # the links go too: Ghent is current again
        assert gone_for_good["hard"] and len(gone_for_good["status_events"]) == 2
        assert [(m.memory_id, m.label) for m in api.list("ivo").memories] == [(first.memory_id, "current")]

    looked = dream("consolidate", "--user", "kit", "--dry-run")
    assert looked.returncode == 0 and looked.stderr == "", looked.stderr
    assert looked.stdout.count("PRUNE [mem:") == 2 and looked.stdout.endswith("(dry run: no changes made)\n")
    asked = dream("consolidate", "--user", "kit", "--each", stdin="y\nn\n\n")
    assert asked.returncode == 0 and asked.stderr == "", asked.stderr
    assert "Prune it? [Y/n]" in asked.stdout and "Pruned:  1 memories expired" in asked.stdout
    assert "Undo this pass: dream undo cons-" in asked.stdout
    counted = dream("stats", "--json")
    assert counted.returncode == 0 and json.loads(counted.stdout)["by_status"]["expired"] >= 2

    # --yes beside a worker merged the pairs ingest held for a person ("prefers tea" / "prefers coffee" became
    # one memory saying both); without a worker it left them. Both leave them now.
    with Client(url(worker), token=TOKEN) as api:
        tea = api.add("kim", "Kim prefers tea.", created_at="2026-01-04T10:00:00Z", wait=True)
        coffee = api.add("kim", "Kim prefers coffee.", created_at="2026-03-04T10:00:00Z", wait=True)
    unattended = dream("consolidate", "--user", "kim", "--yes")
    assert unattended.returncode == 0 and "MERGE [mem:" in unattended.stdout, unattended.stderr
    assert "Merged:  0 pairs" in unattended.stdout
    with Client(url(worker), token=TOKEN) as api:
        assert [api.get(m.memory_id, "kim").status for m in (tea, coffee)] == ["active", "active"]


def test_an_add_while_the_broker_does_not_answer_is_a_503_and_a_resend_is_stored_once(
        kafka: str, tmp_path: Path) -> None:
    """With the broker down an add hung until it came back (138 s in an audit) while /healthz said ready, and a
    client gave up at its own timeout, taking a stored add for a failed one. Now it answers 503 after
    DREAM_ADD_WAIT_SECONDS; the event may still land, and the resend with the same ids is stored once. The
    broker is the project's own, frozen for a few seconds (SIGSTOP), not a stand-in."""
    import signal

    from tests.conftest import ROOT

    pidfile = Path(os.environ.get("DREAM_KAFKA_HOME", ROOT / ".cache" / "kafka")) / "kafka.pid"
    if not pidfile.exists():  # kafka.sh found another checkout's broker on the port and used it
        pytest.skip("the broker on the port is another checkout's: this test freezes only its own")
    pid = int(pidfile.read_text())
    assert b"kafka" in Path(f"/proc/{pid}/cmdline").read_bytes()  # the broker, not a process that took a stale pid
    from dreamstream.streams.dev.localrun import consume_all

    w = WorkerProcess(kafka, f"api-slow-{uuid.uuid4().hex[:8]}", tmp_path, {"DREAM_API_TOKEN": TOKEN,
                                                                             "DREAM_ADD_WAIT_SECONDS": "2",
                                                                             "DREAM_ERASE_WAIT_SECONDS": "2"})
    w.start()
    try:
        with Client(url(w), token=TOKEN) as dream:
            first = dream.add("sid", "Sid plays the oboe.")
            dream.wait_for(first)
            dream.wait_for(dream.add("tam", "Tam keeps a diary."))
            body = {"user_id": "sid", "text": "Sid sings in a choir.", "event_id": "e-sid-2", "memory_id": "m-sid-2"}
            os.kill(pid, signal.SIGSTOP)
            try:
                started = time.monotonic()
                with pytest.raises(DreamAPIError) as down:
                    dream._call("POST", "/v1/memories", json=body)
                assert down.value.status == 503 and "send it again with the same event_id" in down.value.message
                assert time.monotonic() - started < 10
                # An erase waited for the broker as long as it was down (an audit: 124 s), and a caller's retry
                # wrote a second record. Now a 503 in DREAM_ERASE_WAIT_SECONDS, and a retry waits on the first.
                started = time.monotonic()
                requests = []
                for _ in range(2):
                    with pytest.raises(DreamAPIError) as erase_down:
                        dream.delete_all("tam")
                    assert erase_down.value.status == 503 and "nothing is erased yet" in erase_down.value.message
                    requests.append(erase_down.value.message.split("request ")[1].split()[0])
                assert time.monotonic() - started < 20 and requests[0] == requests[1]
            finally:
                os.kill(pid, signal.SIGCONT)
            deadline = time.monotonic() + 60
            while dream.list("tam").memories and time.monotonic() < deadline:
                time.sleep(0.5)
            assert not dream.list("tam").memories  # the first record, sent once the broker answered, erased tam
            erases = asyncio.run(consume_all(kafka, w.topics["added"], 2, timeout=10,
                                             keep=lambda r: b'"user.erase"' in r.value and b'"tam"' in r.value))
            assert len(erases) == 1
            again = dream._call("POST", "/v1/memories", json=body)
            assert again["accepted"][0]["memory_id"] == "m-sid-2"
            deadline = time.monotonic() + 60
            while len(dream.list("sid").memories) < 2 and time.monotonic() < deadline:
                time.sleep(0.5)
            texts = sorted(m.text for m in dream.list("sid").memories)
            assert texts == ["Sid plays the oboe.", "Sid sings in a choir."]
    finally:
        w.stop()
