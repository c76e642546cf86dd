"""The worker's global tables: settings the control commands change, kept in Kafka so they survive restarts.

Apart from the agents that write and read them, so none of those agents imports another for a table.
"""

from __future__ import annotations

from dreamstream.streams.worker.app import app

projects_table = app.GlobalTable("synthesis-projects", default=None, partitions=1)
"""project_id (or `_default`) -> {"enabled": bool, "boundary": ISO time}; written by the control agent."""

settings_table = app.GlobalTable("dream-settings", default=None, partitions=1)
""""retention" -> {type: days | None}; "paused" -> bool."""
