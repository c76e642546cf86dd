"""Declares dreamstream's topics with their partition counts, creating whatever is missing.

Runs before the worker subscribes: Faust only creates its own internal topics, and a consumer
subscribed to a missing topic waits for a metadata refresh before it is assigned anything.
"""

from __future__ import annotations

import asyncio
import logging

from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from dreamstream.streams.settings import Settings

log = logging.getLogger("dreamstream.topics")


def declared(settings: Settings) -> dict[str, int]:
    t = settings.topics
    out = {name: t.partitions for name in (t.memory_added, t.memory_status, t.patterns, t.dead_letters,
                                           t.synthesis_runs, t.memory_accessed, t.control_users)}
    # Commands are few and must be applied in the order sent: one partition.
    out.update({t.control: 1, t.control_replies: 1})
    return out


async def ensure_topics(settings: Settings, timeout: float = 30.0) -> list[str]:
    """Creates missing topics; returns the names it created."""
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap_servers, request_timeout_ms=int(timeout * 1000),
                                **settings.kafka.aiokafka_kwargs())
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        want = declared(settings)
        t = settings.topics
        counts = await partition_counts(admin, [n for n in (t.memory_added, t.control_users) if n in existing])
        for name, n in counts.items():
            if n != t.partitions:
                # The per-user tables' changelogs have DREAM_PARTITIONS partitions: their agents then fail on
                # every record, and a user's commands are not run beside that user's ingest.
                log.error("%s has %d partitions but DREAM_PARTITIONS is %d: set DREAM_PARTITIONS=%d (or recreate "
                          "%s with %d partitions)", name, n, t.partitions, n, name, t.partitions)
        missing = [NewTopic(name, n, 1) for name, n in want.items() if name not in existing]
        if missing:
            await admin.create_topics(missing)
            log.info("created topics %s", ", ".join(t.name for t in missing))
        return [t.name for t in missing]
    finally:
        await admin.close()


async def partition_counts(admin: AIOKafkaAdminClient, names: list[str]) -> dict[str, int]:
    if not names:
        return {}
    return {d["topic"]: len(d["partitions"]) for d in await admin.describe_topics(names) if not d.get("error_code")}


def ensure_topics_sync(settings: Settings) -> list[str]:
    return asyncio.run(ensure_topics(settings))
