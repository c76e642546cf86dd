"""The JSON Schemas, the AsyncAPI document and the compose file agree with the Python side."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from dreamstream.schemas import contracts
from dreamstream.schemas.events import (
    MAX_EVENT_BYTES,
    REASONS,
    InvalidEvent,
    dead_letter,
    parse_memory_event,
    status_event,
)
from dreamstream.schemas.memory import EMBEDDING_DIM, MAX_TEXT_CHARS

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "streams" / "dev" / "sample" / "memories.jsonl"
SCHEMA_DIR = ROOT / "schemas" / "json"
ASYNCAPI = ROOT / "schemas" / "asyncapi.yaml"
COMPOSE = ROOT / "deploy" / "compose.yaml"


def _python_ok(raw: str | dict[str, Any]) -> bool:
    try:
        parse_memory_event(raw)
    except InvalidEvent:
        return False
    return True


def _schema_ok(raw: str | dict[str, Any]) -> bool:
    """What a non-Python consumer can check: size, JSON, then the schema named by `type`."""
    if isinstance(raw, str):
        if len(raw.encode("utf-8")) > MAX_EVENT_BYTES:
            return False
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError:
            return False
    name = raw.get("type") if isinstance(raw, dict) else None
    if name not in ("memory.added", "pattern.added"):
        return False
    return contracts.is_valid(str(name), raw)


def _sample_lines() -> list[str]:
    return [line for line in SAMPLE.read_text("utf-8").splitlines() if line.strip()]


def test_every_schema_loads_and_is_valid_2020_12() -> None:
    import jsonschema

    for name in contracts.SCHEMA_NAMES:
        schema = contracts.load_schema(name)
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        jsonschema.Draft202012Validator.check_schema(schema)
        assert (SCHEMA_DIR / contracts.schema_file(name)).is_file()


def test_sample_shape() -> None:
    lines = _sample_lines()
    assert 30 <= len(lines) <= 60
    good = [json.loads(x) for x in lines if _python_ok(x)]
    assert len(lines) - len(good) == 3
    assert len({e["user_id"] for e in good}) == 3
    times = [parse_memory_event(e).created_at for e in good]
    assert times == sorted(times)
    texts = " ".join(e["text"] for e in good)
    for needle in ("Lisbon", "Berlin", "Subaru", "Tesla", "User has a dog named Rex.",
                   "My dog Rex is a 3-year-old golden retriever.", "Use PostgreSQL for auth",
                   "Auth DB is PostgreSQL"):
        assert needle in texts
    assert any((e.get("metadata") or {}).get("pinned") for e in good)


@pytest.mark.parametrize("index", range(len(_sample_lines())))
def test_sample_line_python_and_schema_agree(index: int) -> None:
    line = _sample_lines()[index]
    assert _python_ok(line) == _schema_ok(line), line[:120]


def test_sample_bad_lines_fail_both_with_expected_reasons() -> None:
    reasons = []
    for line in _sample_lines():
        try:
            parse_memory_event(line)
        except InvalidEvent as exc:
            reasons.append(exc.reason)
            assert not _schema_ok(line)
    assert sorted(reasons) == ["empty_text", "invalid_json", "missing_field"]


def _good() -> dict[str, Any]:
    return {
        "type": "memory.added", "event_id": "e1", "memory_id": "m1", "user_id": "u1",
        "text": "Likes tea.", "created_at": "2025-01-02T03:04:05+01:00",
        "app_id": None, "agent_id": "a", "run_id": None, "project_id": None,
        "metadata": {"type": "preference", "confidence": 0.5, "pinned": True, "extra": [1]},
    }


VARIANTS: list[tuple[str, dict[str, Any]]] = [
    ("as_is", {}),
    ("no_optional", {"app_id": None, "metadata": None}),
    ("embedding", {"embedding": [0.1] * EMBEDDING_DIM}),
    ("short_embedding", {"embedding": [0.1] * (EMBEDDING_DIM - 1)}),
    ("bool_embedding", {"embedding": [True] * EMBEDDING_DIM}),
    ("long_text", {"text": "x" * (MAX_TEXT_CHARS + 1)}),
    ("max_text", {"text": "x" * MAX_TEXT_CHARS}),
    ("blank_text", {"text": " \n\t"}),
    ("text_number", {"text": 3}),
    ("no_zone", {"created_at": "2025-01-02T03:04:05"}),
    ("zulu", {"created_at": "2025-01-02T03:04:05.123Z"}),
    ("not_a_time", {"created_at": "yesterday"}),
    ("null_time", {"created_at": None}),
    ("confidence_high", {"metadata": {"confidence": 1.5}}),
    ("confidence_bool", {"metadata": {"confidence": True}}),
    ("confidence_int", {"metadata": {"confidence": 1}}),
    ("pinned_string", {"metadata": {"pinned": "yes"}}),
    ("metadata_type_int", {"metadata": {"type": 4}}),
    ("metadata_list", {"metadata": [1]}),
    ("app_id_int", {"app_id": 7}),
    ("blank_user", {"user_id": "  "}),
    ("null_user", {"user_id": None}),
    ("long_user", {"user_id": "u" * 257}),
    ("wrong_type", {"type": "memory.removed"}),
    ("pattern_with_sources", {"type": "pattern.added", "sources": ["m0", "m2"]}),
    ("pattern_without_sources", {"type": "pattern.added"}),
    ("pattern_bad_sources", {"type": "pattern.added", "sources": [1]}),
    ("extra_field", {"something_new": {"x": 1}}),
]


@pytest.mark.parametrize(("label", "change"), VARIANTS, ids=[v[0] for v in VARIANTS])
def test_variants_python_and_schema_agree(label: str, change: dict[str, Any]) -> None:
    event = {**_good(), **change}
    assert _python_ok(event) == _schema_ok(event), label


LENIENT = [("fs_text", {"text": "\x1c"}), ("us_user", {"user_id": "\x1f"}), ("nel_event", {"event_id": "\x85"})]
"""Strings jsonschema-rs's `\\S` finds non-blank and Python's `re` blank."""


@pytest.mark.parametrize(("label", "change"), VARIANTS + LENIENT, ids=[v[0] for v in VARIANTS + LENIENT])
def test_the_fast_validator_lets_nothing_through_that_the_reference_one_refuses(label: str,
                                                                                change: dict[str, Any]) -> None:
    event = {**_good(), **change}
    name = str(event["type"]) if event["type"] in ("memory.added", "pattern.added") else "memory.added"
    fast, reference = contracts._fast(name).is_valid(event), contracts.is_valid(name, event)
    if fast and not reference:  # only the documented blank-character case, and the event's own checks refuse it
        assert label in dict(LENIENT) and not _python_ok(event), label
    else:
        assert fast == reference, label


def test_missing_required_fields_fail_both() -> None:
    for field in ("type", "event_id", "memory_id", "user_id", "text", "created_at"):
        event = _good()
        del event[field]
        assert not _python_ok(event) and not _schema_ok(event), field


def test_status_events_validate() -> None:
    evidence = {"similarity": 0.93, "judge": "nli"}
    events = [
        status_event("d1", "m1", "u1", "active", "superseded", "m2", "supersede", evidence),
        status_event("d2", "m3", "u1", "active", "merged", "m4", "merge_new", evidence),
        status_event("d3", "m5", "u1", "active", "active", "m6", "conflict", evidence),
        status_event("d1", "m1", "u1", "superseded", "active", None, "undo", {"undo_of": "d1"}, undo=True),
        status_event("d4", "m7", "u2", None, "merged", "m8", "merge_old", {}),
    ]
    for event in events:
        contracts.validate("memory.status", event)
    assert not contracts.is_valid("memory.status", {**events[0], "to_status": "forgotten"})
    assert not contracts.is_valid("memory.status", {k: v for k, v in events[0].items() if k != "at"})


def test_dead_letters_validate() -> None:
    letters = [
        dead_letter(b'{"type": "memory.added", "text": "trunc', "invalid_json", "boom", "memory.added", 2, 17),
        dead_letter(b"\xff\xfe not utf-8", "undecodable", "bad bytes", "memory.added", 0, 0),
        dead_letter({"type": "x"}, "unknown_type", "nope"),
        dead_letter(None, "processing_error", "store down"),
        dead_letter("\u00e9" * 2000, "oversize", "too big", "memory.patterns", 3, 9),
    ]
    assert letters[1]["original_preview"] is None
    for letter in letters:
        contracts.validate("dead_letter", letter)
    schema_reasons = contracts.load_schema("dead_letter")["properties"]["reason"]["enum"]
    # Memory events' reasons first, then those only the control topic gives.
    from dreamstream.schemas.control import REASONS as CONTROL_REASONS

    assert schema_reasons == [*REASONS, *(r for r in CONTROL_REASONS if r not in REASONS)]
    assert not contracts.is_valid("dead_letter", {**letters[0], "reason": "gremlins"})


def test_every_reason_the_code_dead_letters_with_is_in_the_schema() -> None:
    """An audit: a replayed user.erase was dead-lettered `replayed`, a reason the published schema did not list,
    so a consumer validating against it rejected the record. Every reason literal the code raises or
    dead-letters with must be in the schema's enum."""
    import re

    root = Path(__file__).resolve().parents[2]
    found = {m.group(2) for folder in ("streams", "schemas", "agents") for path in (root / folder).rglob("*.py")
             for m in re.finditer(r'(InvalidEvent|InvalidCommand|_dead|dead_letter)\([^"()]*"([a-z_]+)"',
                                  path.read_text("utf-8"))}
    assert {"replayed", "unauthorised", "bad_field"} <= found
    assert found <= set(contracts.load_schema("dead_letter")["properties"]["reason"]["enum"])


def test_asyncapi_document() -> None:
    doc = yaml.safe_load(ASYNCAPI.read_text("utf-8"))
    assert doc["asyncapi"] == "3.0.0"
    addresses = {ch["address"] for ch in doc["channels"].values()}
    assert addresses == {"memory.added", "memory.patterns", "memory.status", "memory.deadletter",
                         "dream.synthesis.runs", "dream.control", "dream.control.replies", "memory.accessed",
                         "dream.control.users"}
    messages = doc["components"]["messages"]
    seen = set()
    for channel in doc["channels"].values():
        assert channel["messages"]
        for message in channel["messages"].values():
            ref = message["$ref"]
            assert ref.startswith("#/components/messages/")
            payload = messages[ref.rsplit("/", 1)[-1]]["payload"]
            schema_ref = payload["schema"]["$ref"] if "schema" in payload else payload["$ref"]
            target = (ASYNCAPI.parent / schema_ref).resolve()
            assert target.is_file(), schema_ref
            json.loads(target.read_text("utf-8"))
            seen.add(target.name)
    assert seen == {contracts.schema_file(n) for n in contracts.SCHEMA_NAMES}
    for op in doc["operations"].values():
        assert op["action"] in ("send", "receive")
        assert op["channel"]["$ref"].removeprefix("#/channels/") in doc["channels"]


def _has_compose() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        return subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def test_compose_file_parses() -> None:
    doc = yaml.safe_load(COMPOSE.read_text("utf-8"))
    assert {"kafka", "qdrant", "worker", "prometheus", "grafana"} <= set(doc["services"])
    dockerfile = doc["services"]["worker"]["build"]["dockerfile"]
    assert (COMPOSE.parent / dockerfile.removeprefix("deploy/")).is_file()
    assert (COMPOSE.parent / "prometheus" / "prometheus.yml").is_file()
    assert (COMPOSE.parent / "grafana").is_dir()


def test_the_deploy_files_give_the_api_a_token_and_route_the_cron_pass_through_the_workers() -> None:
    """An audit: compose and the Kubernetes files listened on 0.0.0.0 with no DREAM_API_TOKEN, so every caller
    outside the container got 403 while the probes passed; the CronJob's pass opened the Qdrant server itself,
    beside the ingest of the worker holding its user."""
    worker = yaml.safe_load(COMPOSE.read_text("utf-8"))["services"]["worker"]["environment"]
    assert worker["DREAM_HTTP_HOST"] == "0.0.0.0" and worker["DREAM_API_TOKEN"].startswith("${DREAM_API_TOKEN:?")
    k8s = COMPOSE.parent / "k8s"
    assert "DREAM_API_TOKEN" in (k8s / "kustomization.yaml").read_text("utf-8")
    [job] = yaml.safe_load((k8s / "consolidate-cronjob.yaml").read_text("utf-8"))["spec"]["jobTemplate"]["spec"][
        "template"]["spec"]["containers"]
    service = yaml.safe_load((k8s / "worker-service.yaml").read_text("utf-8"))
    assert job["args"][:4] == ["dream", "consolidate", "--url",
                               f"http://{service['metadata']['name']}:{service['spec']['ports'][0]['port']}"]


@pytest.mark.skipif(not _has_compose(), reason="needs the docker client with the compose plugin")
def test_docker_compose_config() -> None:
    result = subprocess.run(["docker", "compose", "-f", str(COMPOSE), "config", "-q"],
                            capture_output=True, text=True, timeout=120, env={**os.environ, "DREAM_API_TOKEN": "t"})
    assert result.returncode == 0, result.stderr


def test_control_commands_and_replies_validate() -> None:
    """Every command `dream control` can build, and the replies the worker gives, match the published schemas."""
    from dreamstream.schemas.control import COMMANDS, InvalidCommand, command, parse_command, reply

    samples = {"retention.set": {"policies": {"session_state": 30, "scratch": None}}, "consolidate.run": {"user": "u"},
               "consolidate.approve": {"plan_id": "p"}, "consolidate.reject": {"plan_id": "p"},
               "undo": {"decision_id": "d"}, "reprocess": {"user": "u"}, "erase": {"user": "u"},
               "consolidate.schedule": {"user": "u", "schedule": "weekly"}, "schedule.remove": {"schedule_id": "s"}}
    for name in COMMANDS:
        body = command(name, samples.get(name, {}))
        contracts.validate("dream.control", body)
        assert parse_command(orjson.dumps(body)).command == name
        contracts.validate("dream.control.reply", reply(body["id"], name, "ok", {}))
    bad = command("retention.set", {"policies": {"session_state": -3}})
    assert not contracts.is_valid("dream.control", bad)
    with pytest.raises(InvalidCommand) as err:
        parse_command(orjson.dumps(bad))
    assert err.value.reason == "bad_field" and err.value.command_id == bad["id"]
    with pytest.raises(InvalidCommand) as err:
        parse_command(orjson.dumps(command("consolidate.schedule", {"user": "u", "schedule": "every full moon"})))
    assert err.value.reason == "bad_field"
    with pytest.raises(InvalidCommand) as err:
        parse_command(orjson.dumps(command("undo")), token=None)
    assert err.value.reason == "missing_field"
    with pytest.raises(InvalidCommand) as err:
        parse_command(orjson.dumps(command("settings.show", token="wrong")), token="secret")
    assert err.value.reason == "unauthorised"
    signed = command("settings.show", token="secret")
    assert parse_command(orjson.dumps(signed), token="secret").command == "settings.show"
    # A user or scope that no memory event could name is refused: "ops" with app "team\0" and "ops|team" shared
    # a schedule id, and the second schedule silently replaced the first.
    for args in ({"user": "ops", "app": "team\u0000", "schedule": "daily"}, {"user": " ops", "schedule": "daily"},
                 {"user": "../x", "schedule": "daily"}):
        with pytest.raises(InvalidCommand) as err:
            parse_command(orjson.dumps(command("consolidate.schedule", args)))
        assert err.value.reason == "bad_field"
    for name in ("erase", "reprocess", "consolidate.run"):
        with pytest.raises(InvalidCommand):
            parse_command(orjson.dumps(command(name, {"user": "u\u0000"})))
    with pytest.raises(InvalidCommand):
        parse_command(orjson.dumps(command("synthesis.enable", {"project": "p\n"})))
    # An argument the command does not read is refused, not ignored (an audit: `synthesis.disable projcet=hike`
    # turned off the default project and answered ok; `consolidate.run aap=chat` ran over every app).
    for name, args in (("synthesis.disable", {"projcet": "hike"}), ("consolidate.run", {"user": "u", "aap": "chat"}),
                       ("settings.show", {"verbose": True})):
        with pytest.raises(InvalidCommand, match="does not take") as err:
            parse_command(orjson.dumps(command(name, args)))
        assert err.value.reason == "bad_field"


def test_every_command_of_the_schema_has_one_handler_in_the_worker() -> None:
    from dreamstream.schemas.control import COMMANDS
    from dreamstream.streams.worker.control import HANDLERS

    assert set(HANDLERS) == set(COMMANDS)
