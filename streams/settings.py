"""Settings, all from the environment (12-factor), with embedded defaults for a laptop."""

from __future__ import annotations

import os
from dataclasses import dataclass, field


def _env(name: str, default: str) -> str:
    return os.environ.get(name, default)


@dataclass(frozen=True)
class Topics:
    """Topic names and partition counts. Every topic is keyed by user_id (per-user order)."""

    memory_added: str = field(default_factory=lambda: _env("DREAM_TOPIC_MEMORY_ADDED", "memory.added"))
    memory_status: str = field(default_factory=lambda: _env("DREAM_TOPIC_MEMORY_STATUS", "memory.status"))
    patterns: str = field(default_factory=lambda: _env("DREAM_TOPIC_PATTERNS", "memory.patterns"))
    dead_letters: str = field(default_factory=lambda: _env("DREAM_TOPIC_DEAD_LETTERS", "memory.deadletter"))
    synthesis_runs: str = field(default_factory=lambda: _env("DREAM_TOPIC_SYNTHESIS_RUNS", "dream.synthesis.runs"))
    control: str = field(default_factory=lambda: _env("DREAM_TOPIC_CONTROL", "dream.control"))
    control_replies: str = field(default_factory=lambda: _env("DREAM_TOPIC_CONTROL_REPLIES", "dream.control.replies"))
    partitions: int = field(default_factory=lambda: int(_env("DREAM_PARTITIONS", "4")))


@dataclass(frozen=True)
class Settings:
    app_id: str = field(default_factory=lambda: _env("DREAM_APP_ID", "dreamstream"))
    broker: str = field(default_factory=lambda: _env("KAFKA_BOOTSTRAP", "kafka://127.0.0.1:9092"))
    store_dir: str = field(default_factory=lambda: _env("DREAM_STORE", os.path.join("var", "store")))
    data_dir: str = field(default_factory=lambda: _env("DREAM_DATA_DIR", os.path.join("var", "faust")))
    qdrant_url: str | None = field(default_factory=lambda: os.environ.get("QDRANT_URL") or None)
    qdrant_api_key: str | None = field(default_factory=lambda: os.environ.get("QDRANT_API_KEY") or None)
    batch_size: int = field(default_factory=lambda: int(_env("DREAM_BATCH_SIZE", "64")))
    batch_within: float = field(default_factory=lambda: float(_env("DREAM_BATCH_WITHIN", "0.5")))
    http_host: str = field(default_factory=lambda: _env("DREAM_HTTP_HOST", "127.0.0.1"))
    http_port: int = field(default_factory=lambda: int(_env("DREAM_HTTP_PORT", "6066")))
    synthesis_check_seconds: float = field(default_factory=lambda: float(_env("DREAM_SYNTHESIS_CHECK_SECONDS", "60")))
    synthesis_cadence: str = field(default_factory=lambda: _env("DREAM_SYNTHESIS_CADENCE", "weekly"))
    control_token: str | None = field(default_factory=lambda: os.environ.get("DREAM_CONTROL_TOKEN") or None)
    topics: Topics = field(default_factory=Topics)

    @property
    def synthesis_cadence_days(self) -> float:
        """`weekly` (7), `daily` (1) or a number of days."""
        named = {"weekly": 7.0, "daily": 1.0, "biweekly": 14.0}
        value = self.synthesis_cadence.strip().lower()
        return named[value] if value in named else float(value)

    @property
    def broker_url(self) -> str:
        """Faust wants kafka://host:port; accept a bare host:port list too."""
        return ",".join(b if "://" in b else f"kafka://{b}" for b in self.broker.split(","))

    @property
    def bootstrap_servers(self) -> str:
        """The same brokers as plain host:port for aiokafka."""
        return ",".join(b.split("://", 1)[-1] for b in self.broker.split(","))


def load() -> Settings:
    return Settings()
