"""The JSON Schema contracts of every topic, loaded from the package (schemas/json/*.schema.json).

The schemas are the one source of truth for the shape of every record: ingest and the control agent
check input against them (`first_problem`) and keep in code only what a schema cannot say (time
zones, nesting depth, a vector's norm, a cron expression). `validate(name, obj)` raises
`jsonschema.ValidationError` on the first problem. Names are the event types: memory.added,
pattern.added, memory.status, memory.accessed, dead_letter, synthesis.run, dream.control,
dream.control.reply.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

import jsonschema
import jsonschema_rs

SCHEMA_NAMES = ("memory.added", "pattern.added", "user.erase", "memory.status", "memory.accessed", "dead_letter",
                "synthesis.run", "dream.control", "dream.control.reply")


def schema_file(name: str) -> str:
    """The file name of a schema, relative to the package's json/ folder."""
    return name if name.endswith(".json") else f"{name}.schema.json"


@cache
def _load(name: str) -> str:
    return resources.files("dreamstream.schemas").joinpath("json", schema_file(name)).read_text("utf-8")


def load_schema(name: str) -> dict[str, Any]:
    """The schema as a fresh dict (callers may mutate it)."""
    schema: dict[str, Any] = json.loads(_load(name))
    return schema


@cache
def _validator(name: str) -> jsonschema.Draft202012Validator:
    schema = load_schema(name)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)


@cache
def _fast(name: str) -> Any:
    """The same schema compiled by jsonschema-rs: a valid record is passed in a hundredth of the time;
    a record it refuses is read again by `jsonschema`, which decides and says why. Where the two differ,
    rs is the more lenient on one thing: its `\\S` does not count \\x1c-\\x1f and \\x85 as space, and
    `parse_memory_event`'s own checks refuse such ids and texts (tests/unit/test_contracts.py)."""
    return jsonschema_rs.validator_for(load_schema(name), validate_formats=True)


def validate(name: str, obj: Any) -> None:
    """Raises jsonschema.ValidationError when obj does not match the named schema."""
    _validator(name).validate(obj)


def is_valid(name: str, obj: Any) -> bool:
    return bool(_validator(name).is_valid(obj))


def _where(error: jsonschema.ValidationError) -> str:
    return ".".join(str(p) for p in error.absolute_path)


def _describe(error: jsonschema.ValidationError) -> str:
    """A short message that never repeats the (possibly huge) offending value."""
    field = _where(error) or "the record"
    kind, expected = error.validator, error.validator_value
    if kind == "required":
        missing = next((k for k in expected if isinstance(error.instance, dict) and k not in error.instance), "?")
        return f"{field + '.' if _where(error) else ''}{missing} is required"
    if kind == "type":
        names = expected if isinstance(expected, list) else [expected]
        return f"{field} must be {' or '.join(str(n) for n in names if n != 'null')}"
    if kind in ("maxLength", "maxItems"):
        return f"{field} is longer than {expected}"
    if kind == "pattern" and expected != "\\S":
        if "[0-9]{4}-" in str(expected):
            shown = repr(error.instance)[:40] if isinstance(error.instance, str) else "this"
            return f"{field} must be ISO 8601 with a time zone (e.g. 2026-03-01T10:00:00Z), not {shown}"
        return f"{field} is not in the expected form"
    if kind in ("minLength", "minItems", "pattern"):
        return f"{field} must not be empty" if kind != "minItems" else f"{field} needs at least {expected} items"
    if kind in ("enum", "const"):
        options = expected if isinstance(expected, list) else [expected]
        return f"{field} must be one of {', '.join(map(str, options))}"
    if kind == "maxProperties":
        return f"{field} has more than {expected} keys"
    if kind in ("minimum", "maximum"):
        return f"{field} must be {'>=' if kind == 'minimum' else '<='} {expected}"
    return f"{field} does not match the {kind} rule"


def problems(name: str, obj: Any) -> list[tuple[str, str, str]]:
    """Every way `obj` misses the named schema, as (field path, validator keyword, short message)."""
    try:
        if _fast(name).is_valid(obj):
            return []
    except Exception:  # noqa: BLE001 - what it cannot read (a lone surrogate), the reference validator reads
        pass
    out = []
    for error in _validator(name).iter_errors(obj):
        path = _where(error)
        if error.validator == "required":  # name the missing field itself
            missing = [k for k in error.validator_value if isinstance(error.instance, dict) and k not in error.instance]
            path = ".".join(filter(None, [path, missing[0] if missing else ""]))
        out.append((path, str(error.validator), _describe(error)))
    return out
