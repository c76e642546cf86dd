"""The `dream` command as a person at a shell meets it: one-line errors, no silent surprises."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dreamstream.streams.core import reads
from dreamstream.streams.core.ingest import Incoming, Processor
from tests.unit.test_crash_consistency import GOOD

DREAM = str(Path(sys.executable).with_name("dream"))
ENV = {**os.environ, "HF_HUB_OFFLINE": "1"}


def dream(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([DREAM, *args], capture_output=True, text=True, timeout=300, env=ENV)


def test_a_mistyped_store_is_an_error_not_an_empty_store(tmp_path: Path) -> None:
    out = dream("get", "--user", "u", "--store", str(tmp_path / "typo"))
    assert out.returncode == 1 and len(out.stderr.strip().splitlines()) == 1
    assert out.stderr.startswith(f"Error: no store at {tmp_path / 'typo'}")
    assert not (tmp_path / "typo").exists()


def test_a_store_path_that_is_a_file_and_an_out_that_is_a_folder_get_one_line_errors(tmp_path: Path) -> None:
    """An audit: `get` and `undo` on a --store that is a file answered NotADirectoryError, `export --out .`
    IsADirectoryError."""
    afile = tmp_path / "notes.txt"
    afile.write_text("hello")
    for args in (["get", "--user", "u"], ["undo", "d-1"], ["export", "--out", str(tmp_path / "x.jsonl")]):
        out = dream(*args, "--store", str(afile))
        assert out.returncode == 1 and out.stderr.startswith(f"Error: no store at {afile}"), (args, out.stderr)
    folder = dream("export", "--store", str(afile), "--out", str(tmp_path))
    assert folder.returncode == 2 and "is a folder: name the file to write" in folder.stderr


def test_a_file_without_a_single_event_fails_the_replay(tmp_path: Path) -> None:
    csv = tmp_path / "memories.csv"
    csv.write_text("user,text\nu-1,likes tea\nu-1,lives in Porto\n")
    out = dream("replay", str(csv), "--store", str(tmp_path / "store"))
    assert out.returncode == 1
    assert "Error: none of the 3 lines of" in out.stderr and "is a memory event" in out.stderr
    assert not (tmp_path / "store").exists()  # an audit: the failed replay left an empty store folder
    (tmp_path / "given").mkdir()
    assert dream("replay", str(csv), "--store", str(tmp_path / "given")).returncode == 1
    assert (tmp_path / "given").is_dir() and not any((tmp_path / "given").iterdir())  # the user's folder stays
    # Fixed, the file replays cleanly: the dead letters of the failed run no longer read as this run's.
    csv.write_text('{"type": "memory.added", "event_id": "e-1", "memory_id": "m-1", "user_id": "u", '
                   '"text": "Likes tea.", "created_at": "2026-01-01T00:00:00Z"}\n')
    assert (tmp_path / "memories.csv.deadletter.jsonl").exists()
    clean = dream("replay", str(csv), "--store", str(tmp_path / "store"))
    assert clean.returncode == 0 and "stored 1" in clean.stdout
    assert not (tmp_path / "memories.csv.deadletter.jsonl").exists()


def test_a_replay_runs_the_cycle_collector_rarely(tmp_path: Path) -> None:
    """Ingest allocates millions of short-lived objects (store hits); at Python's default thresholds the
    collector scanned the model and tables hundreds of times a second (core/ingest.py GC_THRESHOLDS)."""
    events = tmp_path / "events.jsonl"
    events.write_bytes(b"\n".join(GOOD[:2]) + b"\n")
    code = ("import gc, sys; from dreamstream.streams.cli.main import dream\n"
            "try:\n    dream(sys.argv[1:], standalone_mode=False)\nexcept SystemExit:\n    pass\n"
            "print(gc.get_threshold())")
    out = subprocess.run([sys.executable, "-c", code, "replay", str(events), "--store", str(tmp_path / "s")],
                         capture_output=True, text=True, timeout=300, env=ENV)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "(100000, 50, 100)"


def test_an_unknown_decision_is_one_line(tmp_path: Path, embedder: Any) -> None:
    from dreamstream.streams.store import EdgeStore

    store = EdgeStore(tmp_path / "store")
    Processor(store, embedder).process([Incoming(raw=r) for r in GOOD[:2]])
    store.close()
    out = dream("undo", "d-nope", "--store", str(tmp_path / "store"))
    assert out.returncode == 1 and out.stderr.strip() == "Error: no decision d-nope"


def test_reads_list_current_facts_before_history(edge_store: Any, embedder: Any) -> None:
    Processor(edge_store, embedder).process([Incoming(raw=r) for r in GOOD[:12]])  # Ana moved: m001 is history
    rows = reads.search(edge_store, embedder, "user-ana", "where does the user live", limit=5)
    labels = [r["label"] for r in rows]
    assert "history" in labels and labels == sorted(labels, key=lambda x: x == "history")
    assert rows[0]["label"] == "current"
    listed = [r["label"] for r in reads.get(edge_store, "user-ana")]
    assert listed.index("history") > max(i for i, x in enumerate(listed) if x == "current")


def test_a_deleted_replacement_is_named_but_its_text_is_not_shown(edge_store: Any, embedder: Any) -> None:
    """History replaced by a memory the user deleted says so, without the deleted words (an MCP audit read
    a deleted correction's text through `replaced_by`)."""
    from dreamstream.streams.core import memories

    Processor(edge_store, embedder).process([Incoming(raw=r) for r in GOOD[:12]])  # Ana moved: m001 is history
    history = [r for r in reads.get(edge_store, "user-ana") if r["label"] == "history"]
    now = history[0]["replaced_by"]
    assert now["text"] and now["status"] == "active"
    memories.delete_memory(edge_store, now["memory_id"], "user-ana")
    rows = [r for r in reads.get(edge_store, "user-ana", "include_merged")
            + reads.search(edge_store, embedder, "user-ana", "where does the user live", limit=20)
            if r["memory_id"] == history[0]["memory_id"]]
    assert len(rows) == 2
    for r in rows:
        assert r["replaced_by"] == {"memory_id": now["memory_id"], "status": "deleted"}


def test_mcp_over_http_listens_only_on_this_machine(tmp_path: Path) -> None:
    """The transport has no authentication of its own and calls the API with its token: an address other
    machines reach would hand every user's memory to anyone who can connect."""
    for host in ("0.0.0.0", "192.0.2.7", "example.org"):
        out = subprocess.run([DREAM, "mcp", "--transport", "streamable-http", "--host", host],
                             capture_output=True, text=True, timeout=60, env=ENV)  # before: it served
        assert out.returncode == 2 and "no authentication of its own" in out.stderr


def test_mcp_over_http_on_a_taken_port_is_one_line() -> None:
    """uvicorn's own failure was a log of several lines and exit status 3."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        for host in ("127.0.0.1", "[127.0.0.1]"):
            out = subprocess.run([DREAM, "mcp", "--transport", "streamable-http", "--host", host, "--port", str(port)],
                                 capture_output=True, text=True, timeout=60, env=ENV)
            assert out.returncode == 1 and out.stderr.strip().splitlines() == [
                f"Error: cannot listen on 127.0.0.1 port {port}: Address already in use"]


def test_mcp_over_http_logs_nothing_per_call() -> None:
    """uvicorn's access log wrote a line per call to stdout (the README: nothing is logged per call)."""
    import socket
    import time

    import httpx

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([DREAM, "mcp", "--transport", "streamable-http", "--port", str(port),
                               "--url", "http://127.0.0.1:9"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=ENV)
    hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}}
    try:
        answered = None
        for _ in range(150):
            try:
                answered = httpx.post(f"http://127.0.0.1:{port}/mcp", json=hello, timeout=5,
                                      headers={"accept": "application/json, text/event-stream"})
                break
            except httpx.TransportError:
                time.sleep(0.2)
        assert answered is not None and answered.status_code == 200
    finally:
        server.terminate()
        out, err = server.communicate(timeout=30)
    assert "POST /mcp" not in out + err


def test_stats_and_provenance_print_tables_and_json(tmp_path: Path, embedder: Any) -> None:
    import json

    from dreamstream.streams.store import EdgeStore

    store = EdgeStore(tmp_path / "store")
    Processor(store, embedder).process([Incoming(raw=r) for r in GOOD[:12]])
    store.close()
    table = dream("stats", "--store", str(tmp_path / "store"))
    assert table.returncode == 0 and table.stdout.startswith("12 memories of 1 user\n")
    assert "STATUS" in table.stdout and "superseded" in table.stdout
    assert json.loads(dream("stats", "--json", "--store", str(tmp_path / "store")).stdout)["memories"] == 12
    prov = dream("provenance", "demo-m009", "--store", str(tmp_path / "store"))
    assert prov.returncode == 0 and "supersedes  demo-m001" in prov.stdout and "DECISION" in prov.stdout
    as_json = json.loads(dream("provenance", "demo-m009", "--json", "--store", str(tmp_path / "store")).stdout)
    assert as_json["supersedes"][0]["memory_id"] == "demo-m001"


def test_messages_that_used_to_lie_or_sprawl(tmp_path: Path) -> None:
    """A busy port and Faust's own -p are one line each (one port setting); exclusive flags are a
    usage error, not an exception type; a date that is not a date says so."""
    import socket

    from dreamstream.schemas.events import InvalidEvent
    from dreamstream.streams.core.memories import new_event

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        out = subprocess.run([DREAM, "worker"], capture_output=True, text=True, timeout=120,
                             env={**ENV, "DREAM_HTTP_PORT": str(port), "DREAM_STORE": str(tmp_path / "s")})
    assert out.returncode == 1 and out.stderr.strip().splitlines() == [
        f"Error: port {port} on 127.0.0.1 is in use (Address already in use; another worker?): "
        "set DREAM_HTTP_PORT to a free one"]
    flag = dream("worker", "-p", "6067")
    assert flag.returncode == 1 and "DREAM_HTTP_PORT" in flag.stderr and len(flag.stderr.strip().splitlines()) == 1
    both = dream("get", "--user", "u", "--latest-only", "--include-merged", "--store", str(tmp_path / "s"))
    assert both.returncode == 2 and both.stderr.strip().splitlines() == [
        "Error: --latest-only and --include-merged exclude each other (see `dream get -h`)"]
    # click's usage errors came as three lines (usage, hint, error): one now, naming where help is
    unknown = dream("get", "--bogus")
    assert unknown.returncode == 2 and unknown.stderr.strip().splitlines() == [
        "Error: No such option: --bogus Did you mean --user? (see `dream get -h`)"]
    assert dream("nosuch").stderr.strip().splitlines() == ["Error: No such command 'nosuch'. (see `dream -h`)"]
    assert dream("--version").returncode == 0
    try:
        new_event({"user_id": "u", "text": "x", "created_at": "yesterday"})
    except InvalidEvent as exc:
        assert exc.message.startswith("created_at must be ISO 8601 with a time zone")
        assert "'yesterday'" in exc.message
    else:
        raise AssertionError("yesterday was taken for a date")


def test_an_undo_that_changed_no_status_still_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    from dreamstream.streams.cli.main import print_undone

    print_undone("d-1", [])
    print_undone("d-2", [{"memory_id": "m-1", "from_status": "superseded", "to_status": "active"}])
    assert capsys.readouterr().out.splitlines() == [
        "d-1: undone (no status changed: a review item dismissed, or its memories changed since)",
        "m-1: superseded -> active (undo of d-2)"]


def test_synthesis_says_who_groups_and_what_that_is_worth(tmp_path: Path) -> None:
    """Opting in to synthesis shows whether a model or the offline grouping will read, so the trade is seen."""
    store = str(tmp_path / "s")
    typo = dream("synthesis", "enable", "--store", store)  # no store there yet: an error, no folder made
    assert typo.returncode == 1 and "no store at" in typo.stderr and not (tmp_path / "s").exists()
    (tmp_path / "one.jsonl").write_text('{"type": "memory.added", "event_id": "e-1", "memory_id": "m-1", '
                                        '"user_id": "u", "text": "Likes tea.", "created_at": "2026-01-01T00:00:00Z"}\n')
    assert dream("replay", str(tmp_path / "one.jsonl"), "--store", store).returncode == 0
    on = dream("synthesis", "enable", "--store", store)
    assert on.returncode == 0 and on.stdout.splitlines()[-1].startswith("grouping: offline (about half")
    llm = subprocess.run([DREAM, "synthesis", "status", "--store", store], capture_output=True, text=True,
                         timeout=300, env={**ENV, "DREAM_SYNTHESIS_THEMES": "llm", "DREAM_LLM_URL": "http://127.0.0.1:9/v1",
                                           "DREAM_LLM_MODEL": "m"})
    assert llm.returncode == 0 and llm.stdout.splitlines()[0].startswith("_default: enabled")
    assert llm.stdout.splitlines()[-1] == "grouping: the LLM theme reader (m at http://127.0.0.1:9/v1)"
    half = subprocess.run([DREAM, "synthesis", "disable", "--store", store], capture_output=True, text=True,
                          timeout=300, env={**ENV, "DREAM_SYNTHESIS_THEMES": " LLM"})
    assert half.returncode == 1 and not half.stdout  # no endpoint: the error a run would give, nothing changed
    assert half.stderr.strip().splitlines() == [half.stderr.strip()] and "DREAM_LLM_URL" in half.stderr
    assert dream("synthesis", "status", "--store", store).stdout.startswith("_default: enabled")


def test_synthesis_settings_beside_a_worker_are_refused_not_written_where_it_never_reads(tmp_path: Path) -> None:
    """An audit: `synthesis enable --store` on the folder a worker held printed "enabled" and wrote a file the
    worker never reads (its settings are in its tables): the user waited for patterns that never came."""
    from dreamstream.streams.store.edge import EdgeStore

    store_dir = tmp_path / "s"
    EdgeStore(store_dir).close()
    held = EdgeStore(store_dir, owner="worker pid 4242 (read it over HTTP at http://127.0.0.1:1)")
    try:
        for action in ("enable", "disable", "status"):
            out = dream("synthesis", action, "--store", str(store_dir))
            assert out.returncode == 1 and len(out.stderr.strip().splitlines()) == 1, (action, out.stderr)
            assert "in use by worker pid 4242" in out.stderr and "dream control synthesis.enable" in out.stderr
        assert not list(store_dir.glob("synthesis*"))
    finally:
        held.close()
    assert dream("synthesis", "enable", "--store", str(store_dir)).returncode == 0  # free again: written
    assert list(store_dir.glob("synthesis*"))


def test_a_schedule_that_ran_with_nothing_to_do_says_so() -> None:
    """An audit: a schedule for a user with no memories fired and answered "No memories found", while the list
    said "last: never ran" (a mistyped user id looked like a schedule not yet due)."""
    from dreamstream.streams.cli.consolidate import schedule_line

    entry = {"schedule_id": "sched-1", "user": "carl", "app": None, "schedule": "daily", "cron": "0 3 * * *",
             "firings": 2, "last_run": {"message": "No memories found for project carl. Nothing to consolidate."}}
    assert schedule_line(entry).endswith("last: No memories found for project carl. Nothing to consolidate.")
    assert schedule_line({**entry, "last_run": {"line": "[dream --auto] project=carl  merged=1"}}).endswith(
        "last: [dream --auto] project=carl  merged=1")
    assert schedule_line({**entry, "last_run": None, "firings": 0}).endswith("last: never ran")


def test_a_control_argument_given_twice_is_a_usage_error_before_anything_is_sent() -> None:
    """An audit: `dream control consolidate.run user=u1 user=carol` ran for carol alone, silently."""
    out = subprocess.run([DREAM, "control", "consolidate.run", "user=u1", "user=carol"], capture_output=True,
                         text=True, timeout=120, env={**ENV, "KAFKA_BOOTSTRAP": "127.0.0.1:1"})
    assert out.returncode == 2 and "user is given twice" in out.stderr and not out.stdout


def test_replay_export_and_reads_refuse_what_would_lose_or_leak(tmp_path: Path) -> None:
    """A dead-letter path that cannot be written stops a replay before anything is stored; an empty --user is
    a usage error (an unset variable must not export everyone); a folder that is no store is no store; a
    byte-order mark does not cost the first event."""
    events = tmp_path / "e.jsonl"
    events.write_bytes(b"\xef\xbb\xbf" + b'{"type": "memory.added", "event_id": "e-1", "memory_id": "m-1", '
                       b'"user_id": "u", "text": "Likes tea.", "created_at": "2026-01-01T00:00:00Z"}\n')
    store = tmp_path / "s"
    lost = dream("replay", str(events), "--store", str(store), "--dead-letters", str(tmp_path / "no" / "x.jsonl"))
    assert lost.returncode == 1 and "cannot write dead letters" in lost.stderr and not store.exists()
    done = dream("replay", str(events), "--store", str(store))
    assert done.returncode == 0 and "stored 1" in done.stdout
    for args in (("export", "--user", ""), ("get", "--user", "")):
        out = dream(*args, "--store", str(store))
        assert out.returncode == 2 and "--user is empty" in out.stderr and not out.stdout
    for user in (" u", "u/..", ".."):  # what no stored user can be: the API's 400, not "(no memories)"
        out = dream("get", "--user", user, "--store", str(store))
        assert out.returncode == 2 and "--user: user must be printable" in out.stderr and not out.stdout
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "todo.txt").write_text("x")
    out = dream("get", "--user", "u", "--store", str(folder))
    assert out.returncode == 1 and out.stderr.startswith(f"Error: no store at {folder}")
    assert sorted(p.name for p in folder.iterdir()) == ["todo.txt"]  # nothing written into it


def test_flags_that_would_act_on_what_the_user_did_not_mean_are_refused(tmp_path: Path, embedder: Any) -> None:
    """A mistyped --retention file is an error (its defaults pruned what the file kept, with --hard-delete for
    good); --schedule with --dry-run published a real schedule; the dead letters never replace the input file;
    provenance --user of another user's memory answers as the API does; no broker is one line."""
    from dreamstream.streams.store import EdgeStore

    store_dir = str(tmp_path / "store")
    store = EdgeStore(store_dir)
    Processor(store, embedder).process([Incoming(raw=r) for r in GOOD[:4]])
    store.close()
    typo = dream("consolidate", "--user", "user-ana", "--store", store_dir, "--auto", "--hard-delete",
                 "--retention", str(tmp_path / "kep.json"))
    assert typo.returncode == 1 and typo.stderr.strip() == f"Error: retention file {tmp_path / 'kep.json'} not " \
        "found: nothing done"
    assert "pruned" not in typo.stdout
    both = dream("consolidate", "--user", "user-ana", "--schedule", "weekly", "--dry-run", "--store", store_dir)
    assert both.returncode == 2 and "--schedule registers a recurring --auto pass" in both.stderr
    events = tmp_path / "events.jsonl"
    events.write_bytes(b"\n".join(GOOD[:2]) + b"\n")
    itself = dream("replay", str(events), "--store", str(tmp_path / "s2"), "--dead-letters", str(events))
    assert itself.returncode == 1 and "is the file being replayed" in itself.stderr
    assert events.read_bytes() == b"\n".join(GOOD[:2]) + b"\n" and not (tmp_path / "s2").exists()
    other = dream("provenance", "demo-m001", "--user", "someone-else", "--store", store_dir)
    assert other.returncode == 1 and other.stderr.strip() == "Error: no memory demo-m001"
    assert dream("provenance", "demo-m001", "--user", "user-ana", "--store", store_dir).returncode == 0
    no_broker = subprocess.run([DREAM, "control", "settings.show", "--timeout", "3"], capture_output=True, text=True,
                               timeout=120, env={**ENV, "KAFKA_BOOTSTRAP": "127.0.0.1:1"})
    assert no_broker.returncode == 1 and no_broker.stderr.startswith("Error: no Kafka broker at 127.0.0.1:1")
    assert len(no_broker.stderr.strip().splitlines()) == 1


def test_every_command_that_prints_data_has_json_for_machines(tmp_path: Path, embedder: Any) -> None:
    """consolidate (a dry run, --light, --full), synthesis status and synthesize: lines for people, and with
    --json one JSON document; a pass that asks at each item has no --json."""
    import json

    from dreamstream.streams.store import EdgeStore

    store_dir = str(tmp_path / "store")
    store = EdgeStore(store_dir)
    Processor(store, embedder).process([Incoming(raw=r) for r in GOOD[:12]])
    store.close()
    light = dream("consolidate", "--light", "--dry-run", "--store", store_dir)
    assert light.returncode == 0 and light.stdout.startswith("Light consolidation (dry run: no changes made): 12 ")
    as_json = json.loads(dream("consolidate", "--light", "--dry-run", "--json", "--store", store_dir).stdout)
    assert as_json["type"] == "light" and as_json["processed"] == 12
    for mode in ("--light", "--full"):  # an audit: --app was taken and ignored (a --full merged every app's)
        scoped = dream("consolidate", mode, "--user", "user-ana", "--app", "chat", "--dry-run", "--store", store_dir)
        assert scoped.returncode == 2 and "they run over all of a user's apps" in scoped.stderr
    for mode in ("--light", "--dry-run"):  # an empty --app (an unset variable) ran over every app
        empty = dream("consolidate", mode, "--user", "user-ana", "--app", "", "--store", store_dir)
        assert empty.returncode == 2 and "--app is empty" in empty.stderr
    plan = json.loads(dream("consolidate", "--user", "user-ana", "--dry-run", "--json", "--store", store_dir).stdout)
    assert plan["project"] == "user-ana"
    asks = dream("consolidate", "--user", "user-ana", "--json", "--store", store_dir)
    assert asks.returncode == 2 and "--json is for a run that asks nothing" in asks.stderr
    status = json.loads(dream("synthesis", "status", "--json", "--store", store_dir).stdout)
    assert status["projects"] == {} and status["users_synthesised"] == 0
    runs = json.loads(dream("synthesize", "--user", "user-ana", "--json", "--store", store_dir).stdout)["runs"]
    assert [(r["user_id"], r["ran"]) for r in runs] == [("user-ana", False)]


def test_values_that_mean_nothing_are_refused_before_anything_is_written(tmp_path: Path) -> None:
    """An empty search, a batch of 0, an empty file, an --out in no folder, and a replay into a folder of other
    things (the engine's files went in among them) are one-line errors."""
    events = tmp_path / "events.jsonl"
    events.write_bytes(b"\n".join(GOOD[:2]) + b"\n")
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "x.txt").write_text("mine")
    into = dream("replay", str(events), "--store", str(tmp_path / "notes"))
    assert into.returncode == 1 and "is not a store" in into.stderr
    assert [p.name for p in (tmp_path / "notes").iterdir()] == ["x.txt"]
    assert dream("replay", str(events), "--store", str(tmp_path / "s"), "--batch-size", "0").returncode == 2
    (tmp_path / "empty.jsonl").write_text("\n")
    empty_file = dream("replay", str(tmp_path / "empty.jsonl"), "--store", str(tmp_path / "s"))
    assert empty_file.returncode == 1 and "has no lines" in empty_file.stderr and not (tmp_path / "s").exists()
    assert dream("replay", str(events), "--store", str(tmp_path / "s")).returncode == 0
    empty = dream("search", "--user", "user-ana", "  ", "--store", str(tmp_path / "s"))
    assert empty.returncode == 2 and "TEXT is empty" in empty.stderr
    nowhere = dream("export", "--store", str(tmp_path / "s"), "--out", str(tmp_path / "no" / "x.jsonl"))
    assert nowhere.returncode == 2 and "no folder" in nowhere.stderr


def test_a_reminder_of_conflicts_goes_once_none_waits(tmp_path: Path, embedder: Any) -> None:
    """`--auto` over a store with nothing to do returned before the pass that expires an old reminder, and an
    interactive pass that answered the conflict did not expire it: "1 contradiction needs review" stayed a
    current memory (and synthesis evidence) with nothing left to review."""
    import orjson

    from dreamstream.streams.store import EdgeStore

    store = EdgeStore(tmp_path / "store")
    evs = [{"type": "memory.added", "event_id": f"e{i}", "memory_id": f"c-{i}", "user_id": "cy", "text": text,
            "created_at": f"2025-0{i}-10T10:00:00Z", "metadata": {"type": "project_decision", "confidence": c}}
           for i, (text, c) in enumerate([("Cy's team deploys on Fridays.", 0.6), ("Cy's office is in Porto.", 0.9)],
                                         start=1)]
    Processor(store, embedder).process([Incoming(raw=orjson.dumps(e)) for e in evs])
    store.update("c-2", {"conflicts": [{"decision_id": "d-review-1", "with": ["c-1"], "review": "supersede",
                                        "evidence": {}}]})  # what ingest keeps when its judge abstains
    store.close()
    at = ("--user", "cy", "--store", str(tmp_path / "store"))

    def reminders() -> list[str]:
        shown = dream("get", *at, "--latest-only", "--json")
        rows = [orjson.loads(line) for line in shown.stdout.splitlines() if line.strip()]
        return [r["memory_id"] for r in rows if r["memory_id"].startswith("dream-reminder")]

    assert dream("consolidate", *at, "--auto").returncode == 0 and len(reminders()) == 1
    answered = subprocess.run([DREAM, "consolidate", *at], input="a\ny\n", capture_output=True, text=True,
                              timeout=300, env=ENV)
    assert answered.returncode == 0 and "1 contradictions resolved" in answered.stdout
    assert reminders() == []
    assert dream("consolidate", *at, "--auto").returncode == 0 and reminders() == []


def test_a_line_break_in_a_memory_cannot_print_a_row_of_its_own(tmp_path: Path, embedder: Any) -> None:
    import orjson

    from dreamstream.streams.store import EdgeStore

    store = EdgeStore(tmp_path / "store")
    forged = "Mo likes jazz.\n[current ] m-0000000000000000  2026-01-01  Mo is an administrator."
    Processor(store, embedder).process([Incoming(raw=orjson.dumps({
        "type": "memory.added", "event_id": "e-1", "memory_id": "m-1", "user_id": "mo", "text": forged,
        "created_at": "2026-01-01T00:00:00Z"}))])
    store.close()
    shown = dream("get", "--user", "mo", "--store", str(tmp_path / "store"))
    assert shown.returncode == 0 and len(shown.stdout.strip().splitlines()) == 1
    assert "Mo likes jazz. ⏎ [current ] m-0000000000000000" in shown.stdout


def test_a_history_row_says_when_what_replaced_it_was_deleted(capsys: pytest.CaptureFixture[str]) -> None:
    """The table named the deleted replacement ("-> superseded by C") as if it could be found; it is in no
    read mode. The JSON row says `replaced_by.status`; the table now says it too."""
    from dreamstream.streams.cli.common import print_rows

    base = {"label": "history", "created_at": "2026-01-01T10:00:00Z", "text": "Lives in Porto."}
    gone, kept = {"memory_id": "c", "status": "deleted"}, {"memory_id": "y", "status": "active"}
    print_rows([{**base, "memory_id": "b", "superseded_by": "c", "replaced_by": gone},
                {**base, "memory_id": "a", "superseded_by": "b", "replaced_by": gone},
                {**base, "memory_id": "x", "superseded_by": "y", "replaced_by": kept}], as_json=False)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith("-> superseded by c (deleted)")
    assert lines[1].endswith("-> superseded by b (now c, deleted)")
    assert lines[2].endswith("-> superseded by y")


def test_a_hard_deleting_pass_says_what_it_deleted_and_offers_no_undo_it_cannot_do(tmp_path: Path) -> None:
    """An audit: a pass of deletions only printed "undo it with: dream undo cons-…", an undo that then failed;
    and a pruned memory kept because others link to it was reported "deleted permanently"."""
    import json

    events = tmp_path / "events.jsonl"
    rows = [("j1", "Jo is debugging the login page today.", "2025-01-04", "session_state"),
            ("j2", "Jo has the checkout test failing right now.", "2025-01-05", "session_state"),
            ("j3", "Jo lives in Galway.", "2025-01-06", "user_fact")]
    events.write_text("".join(json.dumps({"type": "memory.added", "event_id": f"e-{i}", "memory_id": i, "user_id": "jo",
                                          "text": t, "created_at": f"{d}T10:00:00Z", "metadata": {"type": k}}) + "\n"
                              for i, t, d, k in rows))
    retention = tmp_path / "retention.json"
    retention.write_text('{"session_state": 1}')
    store = str(tmp_path / "store")
    assert dream("replay", str(events), "--store", store).returncode == 0
    env = {**ENV, "KAFKA_BOOTSTRAP": "127.0.0.1:1", "DREAM_DATA_DIR": str(tmp_path / "data")}
    out = subprocess.run([DREAM, "consolidate", "--user", "jo", "--store", store, "--auto", "--hard-delete",
                          "--retention", str(retention)], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr
    assert "dream undo" not in out.stdout + out.stderr and "pass cons-" in out.stderr
    assert "pruned=2" in out.stdout and "2 memories were deleted permanently" in out.stdout
    files = [p for p in Path(store).rglob("*") if p.is_file()]
    assert not any(b"checkout test failing" in p.read_bytes() for p in files)  # out of the engine's files too
    assert any(b"Jo lives in Galway" in p.read_bytes() for p in files)
    compacted = dream("compact", "--store", store)
    assert compacted.returncode == 0 and "1 memories kept" in compacted.stdout


def test_synthesis_settings_a_store_cannot_write_are_one_line(tmp_path: Path, embedder: Any) -> None:
    """An audit: `dream synthesis enable` on a read-only store printed `Error: OSError: [Errno 30] ...` where every
    other command says in one line that the store cannot write."""
    from dreamstream.streams.store import EdgeStore

    store_dir = tmp_path / "store"
    EdgeStore(store_dir).close()
    (store_dir / "synthesis_state.json.tmp").mkdir()  # the settings' next write fails, as on a read-only disk
    out = dream("synthesis", "enable", "--store", str(store_dir))
    assert out.returncode == 1 and out.stderr.startswith("Error: the store cannot write its synthesis settings")
    assert len(out.stderr.strip().splitlines()) == 1
