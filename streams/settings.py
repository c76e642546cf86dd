"""Settings, all from the environment (12-factor), with embedded defaults for a laptop."""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass, field
from typing import Any

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


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
    memory_accessed: str = field(default_factory=lambda: _env("DREAM_TOPIC_MEMORY_ACCESSED", "memory.accessed"))
    partitions: int = field(default_factory=lambda: int(_env("DREAM_PARTITIONS", "4")))


def _opt(name: str) -> str | None:
    return os.environ.get(name) or None


@dataclass(frozen=True)
class KafkaSecurity:
    """How the worker authenticates to a secured cluster: TLS (server CA, optional client certificate
    for mTLS) and/or SASL PLAIN / SCRAM. The default, PLAINTEXT, is the local broker's."""

    protocol: str = field(default_factory=lambda: _env("DREAM_KAFKA_SECURITY_PROTOCOL", "PLAINTEXT").upper())
    sasl_mechanism: str = field(default_factory=lambda: _env("DREAM_KAFKA_SASL_MECHANISM", "PLAIN").upper())
    sasl_username: str | None = field(default_factory=lambda: _opt("DREAM_KAFKA_SASL_USERNAME"))
    sasl_password: str | None = field(default_factory=lambda: _opt("DREAM_KAFKA_SASL_PASSWORD"))
    ssl_cafile: str | None = field(default_factory=lambda: _opt("DREAM_KAFKA_SSL_CAFILE"))
    ssl_certfile: str | None = field(default_factory=lambda: _opt("DREAM_KAFKA_SSL_CERTFILE"))
    ssl_keyfile: str | None = field(default_factory=lambda: _opt("DREAM_KAFKA_SSL_KEYFILE"))

    def __post_init__(self) -> None:
        if self.protocol not in SECURITY_PROTOCOLS:
            raise ValueError(f"DREAM_KAFKA_SECURITY_PROTOCOL must be one of {', '.join(SECURITY_PROTOCOLS)}")
        if self.protocol.startswith("SASL_"):
            if self.sasl_mechanism not in SASL_MECHANISMS:
                raise ValueError(f"DREAM_KAFKA_SASL_MECHANISM must be one of {', '.join(SASL_MECHANISMS)}")
            if not (self.sasl_username and self.sasl_password):
                raise ValueError("SASL needs DREAM_KAFKA_SASL_USERNAME and DREAM_KAFKA_SASL_PASSWORD")

    def ssl_context(self) -> ssl.SSLContext | None:
        """A verifying client context (system CAs unless a CA file is given); None without TLS."""
        if not self.protocol.endswith("SSL"):
            return None
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=self.ssl_cafile)
        if self.ssl_certfile:
            context.load_cert_chain(self.ssl_certfile, self.ssl_keyfile)
        return context

    def faust_credentials(self) -> Any:
        """`broker_credentials` for faust.App (None for PLAINTEXT)."""
        import faust

        if self.protocol == "SSL":
            return faust.SSLCredentials(self.ssl_context())
        if self.protocol.startswith("SASL_"):
            return faust.SASLCredentials(username=self.sasl_username, password=self.sasl_password,
                                         ssl_context=self.ssl_context(), mechanism=self.sasl_mechanism)
        return None

    def aiokafka_kwargs(self) -> dict[str, Any]:
        """The same settings for a plain AIOKafkaProducer / AIOKafkaConsumer (the CLI's clients)."""
        if self.protocol == "PLAINTEXT":
            return {}
        out: dict[str, Any] = {"security_protocol": self.protocol, "ssl_context": self.ssl_context()}
        if self.protocol.startswith("SASL_"):
            out.update(sasl_mechanism=self.sasl_mechanism, sasl_plain_username=self.sasl_username,
                       sasl_plain_password=self.sasl_password)
        return out


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
    session_timeout: float = field(default_factory=lambda: float(_env("DREAM_SESSION_TIMEOUT", "30")))
    """Seconds before the group gives a silent worker's partitions away: a crashed worker's
    replacement waits this long for them (Faust's default is 60)."""
    stall_seconds: float = field(default_factory=lambda: float(_env("DREAM_STALL_SECONDS", "30")))
    """An input partition with records waiting and none delivered this long is re-seeked (streams/watchdog.py)."""
    http_host: str = field(default_factory=lambda: _env("DREAM_HTTP_HOST", "127.0.0.1"))
    http_port: int = field(default_factory=lambda: int(_env("DREAM_HTTP_PORT", "6066")))
    synthesis_check_seconds: float = field(default_factory=lambda: float(_env("DREAM_SYNTHESIS_CHECK_SECONDS", "60")))
    synthesis_cadence: str = field(default_factory=lambda: _env("DREAM_SYNTHESIS_CADENCE", "weekly"))
    control_token: str | None = field(default_factory=lambda: os.environ.get("DREAM_CONTROL_TOKEN") or None)
    retention_file: str | None = field(default_factory=lambda: os.environ.get("DREAM_RETENTION_FILE") or None)
    """JSON {metadata.type: days | null} laid over the default retention policies."""
    judge: str = field(default_factory=lambda: _env("DREAM_JUDGE", "offline"))
    """Merge/supersede judge: `offline` (default), `nli` (DREAM_NLI_MODEL) or `llm` (DREAM_LLM_*)."""
    nli_model: str | None = field(default_factory=lambda: os.environ.get("DREAM_NLI_MODEL") or None)
    llm_url: str | None = field(default_factory=lambda: os.environ.get("DREAM_LLM_URL") or None)
    llm_model: str | None = field(default_factory=lambda: os.environ.get("DREAM_LLM_MODEL") or None)
    llm_api_key: str | None = field(default_factory=lambda: os.environ.get("DREAM_LLM_API_KEY") or None)
    llm_timeout: float = field(default_factory=lambda: float(_env("DREAM_LLM_TIMEOUT", "10")))
    synthesis_text: str = field(default_factory=lambda: _env("DREAM_SYNTHESIS_TEXT", "offline"))
    """Pattern wording: `offline` (built from the theme's memories) or `llm` (the DREAM_LLM_* endpoint)."""
    topics: Topics = field(default_factory=Topics)
    kafka: KafkaSecurity = field(default_factory=lambda: KafkaSecurity())

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
