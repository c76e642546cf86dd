"""The ops control contract: commands on `dream.control`, replies on `dream.control.replies`.

A command::

    {"type": "dream.control", "id": "<unique, the correlation id>", "command": "synthesis.enable",
     "args": {"project": "demo"}, "issued_by": "alice", "issued_at": "<ISO time>", "token": "<optional>"}

`parse_command` validates one raw record and raises `InvalidCommand` with a stable reason, so the
control agent can reply and dead-letter without touching anything.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

import orjson

from dreamstream.schemas import contracts
from dreamstream.schemas.errors import InvalidInput
from dreamstream.schemas.events import InvalidEvent, check_id, decode, now_iso
from dreamstream.schemas.schedules import parse_schedule

CONTROL = "dream.control"
REPLY = "dream.control.reply"

COMMANDS: tuple[str, ...] = tuple(contracts.load_schema(CONTROL)["properties"]["command"]["enum"])
"""Every command name, from the dream.control schema: the schema says which args each one needs."""


def _args_of_each() -> dict[str, frozenset[str]]:
    """The arguments each command takes, as the schema lists them (a command it gives none takes none)."""
    out: dict[str, set[str]] = {name: set() for name in COMMANDS}
    for block in contracts.load_schema(CONTROL).get("allOf", []):
        named = block["if"]["properties"]["command"]
        for name in named.get("enum") or [named.get("const")]:
            out[name] |= set(block["then"].get("properties", {}).get("args", {}).get("properties", {}))
    return {name: frozenset(args) for name, args in out.items()}


ARGS: dict[str, frozenset[str]] = _args_of_each()
"""Per command, the arguments it reads: any other is refused (a typo, `projcet=hike`, acted on the default
scope and answered ok)."""
REASONS = ("oversize", "undecodable", "invalid_json", "not_an_object", "unknown_type", "missing_field", "bad_field",
           "unknown_command", "unauthorised", "id_reused")


class InvalidCommand(InvalidInput):
    """A command that cannot be applied; `reason` is one of REASONS, `command_id` where it was readable."""

    def __init__(self, reason: str, message: str, command_id: str | None = None) -> None:
        super().__init__(reason, message)
        self.command_id = command_id


@dataclass(frozen=True)
class Command:
    id: str
    command: str
    args: dict[str, Any] = field(default_factory=dict)
    issued_by: str | None = None
    issued_at: str | None = None

    def fingerprint(self) -> bytes:
        """What makes two deliveries the same command (the token is not part of it)."""
        return orjson.dumps({"command": self.command, "args": self.args}, option=orjson.OPT_SORT_KEYS)


ID_ARGS = ("user", "app", "project")
"""Arguments that name a user or a scope: refused, never repaired, as in memory events (`events.check_id`)."""


def parse_command(raw: bytes | str | dict[str, Any], token: str | None = None) -> Command:
    """A validated command; `token`, when the worker has one configured, must match the command's."""
    try:
        obj: Any = decode(raw)  # the same byte-level checks (size, UTF-8, JSON, object) as memory events
    except InvalidEvent as exc:
        raise InvalidCommand(exc.reason, exc.message) from exc
    cid = obj.get("id")
    if not isinstance(cid, str) or not cid:
        raise InvalidCommand("missing_field", "id (a non-empty string) is required")
    if obj.get("type") != CONTROL:
        raise InvalidCommand("unknown_type", f"type must be {CONTROL!r}", cid)
    if token is not None and obj.get("token") != token:
        raise InvalidCommand("unauthorised", "the command's token does not match the worker's", cid)
    name = obj.get("command")
    if name not in COMMANDS:
        raise InvalidCommand("unknown_command", f"command must be one of {', '.join(sorted(COMMANDS))}", cid)
    found = contracts.problems(CONTROL, obj)
    if found:
        path, keyword, message = min(found)
        raise InvalidCommand("missing_field" if keyword == "required" else "bad_field",
                             f"{name} needs {path}" if keyword == "required" else message, cid)
    args = obj.get("args", {})
    unknown = sorted(set(args) - ARGS[name])
    if unknown:
        takes = ", ".join(sorted(ARGS[name])) or "none"
        raise InvalidCommand("bad_field", f"{name} does not take {', '.join(unknown)[:200]} (it takes: {takes})", cid)
    for key in ID_ARGS:  # as a memory event's ids: "ops|team" and "ops" + app "team\0" must never be one scope
        try:
            check_id(args.get(key), key)
        except InvalidEvent as exc:
            raise InvalidCommand("bad_field", exc.message, cid) from exc
    if name == "consolidate.schedule":
        try:
            parse_schedule(args["schedule"])
        except ValueError as exc:
            raise InvalidCommand("bad_field", str(exc), cid) from exc
    issued_by = obj.get("issued_by")
    return Command(id=cid, command=name, args=dict(args), issued_by=issued_by if isinstance(issued_by, str) else None,
                   issued_at=obj.get("issued_at") if isinstance(obj.get("issued_at"), str) else None)


def reply(command_id: str | None, command: str | None, outcome: str, details: dict[str, Any]) -> dict[str, Any]:
    """The one reply a command gets: outcome is ok, error (it was valid but failed) or rejected (never applied)."""
    return {"type": REPLY, "id": command_id, "command": command, "outcome": outcome, "details": details,
            "at": now_iso()}


def command(name: str, args: dict[str, Any] | None = None, command_id: str | None = None,
            issued_by: str | None = None, token: str | None = None) -> dict[str, Any]:
    """A command record, for `dream control` and tests."""
    out: dict[str, Any] = {"type": CONTROL, "id": command_id or uuid.uuid4().hex, "command": name,
                           "args": args or {}, "issued_by": issued_by, "issued_at": now_iso()}
    if token is not None:
        out["token"] = token
    return out
