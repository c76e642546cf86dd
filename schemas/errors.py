"""One error tree: every error dreamstream raises on purpose is a `DreamError`.

Callers (the CLI, the worker's agents, the HTTP pages) catch `DreamError` to report a one-line reason;
anything else is a bug and keeps its traceback. The subclasses stay `ValueError`s where the cause is a
bad value, so code written against ValueError keeps working.
"""

from __future__ import annotations


class DreamError(Exception):
    """Base of dreamstream's own errors."""


class InvalidInput(DreamError, ValueError):
    """A record that cannot be processed; `reason` is a short machine-readable code for its dead letter."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message


class ConfigError(DreamError, ValueError):
    """A setting that is missing, malformed or inconsistent; raised at start, before any work."""


class CommandFailed(DreamError):
    """A valid ops command that could not be carried out (an unknown decision, plan or schedule)."""


class ModelReplyError(DreamError, ValueError):
    """An optional model endpoint answered, but not with a usable reply."""


class StoreError(DreamError):
    """The store refused or failed a call (disk full, unwritable, unreachable). Transient by nature:
    ingest reads the batch again after a pause instead of dead-lettering valid events."""


class StoreLocked(StoreError):
    """The embedded store folder is held by another process (a running worker)."""
