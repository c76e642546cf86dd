"""The JSON Schema contracts of every topic, loaded from the package (schemas/json/*.schema.json).

`validate(name, obj)` raises `jsonschema.ValidationError` on the first problem. Names are the
event types: memory.added, pattern.added, memory.status, memory.accessed, dead_letter, synthesis.run, dream.control,
dream.control.reply.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

import jsonschema

SCHEMA_NAMES = ("memory.added", "pattern.added", "memory.status", "memory.accessed", "dead_letter", "synthesis.run",
                "dream.control", "dream.control.reply")


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


def validate(name: str, obj: Any) -> None:
    """Raises jsonschema.ValidationError when obj does not match the named schema."""
    _validator(name).validate(obj)


def is_valid(name: str, obj: Any) -> bool:
    return bool(_validator(name).is_valid(obj))
