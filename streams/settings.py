"""Settings, all from the environment (12-factor), with embedded defaults for a laptop.

Each field reads exactly one environment variable, the one named by its `validation_alias`
(case-sensitive, no `.env` file, no secrets directory). A bad value raises `SettingsError`
(a `ValueError`) whose message is one line naming the variable, e.g.
"DREAM_BATCH_SIZE: Input should be a valid integer, unable to parse string as an integer".
"""

from __future__ import annotations

import hashlib
import os
import ssl
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, ValidationError, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, EnvSettingsSource, PydanticBaseSettingsSource, SettingsConfigDict

from dreamstream.schemas.errors import ConfigError

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class SettingsError(ConfigError):
    """A bad setting: one line, one `ENV_NAME: problem` per problem, joined by "; "."""


def _empty_is_none(value: Any) -> Any:
    return value or None


def _upper(value: Any) -> Any:
    return value.upper() if isinstance(value, str) else value


OptStr = Annotated[str | None, BeforeValidator(_empty_is_none)]
"""An optional setting: unset or set to the empty string reads as None."""


class _ExplicitEnv(EnvSettingsSource):
    """Reads only the variable a field names as its alias: never the field's own name (`judge`),
    and nothing for the sub-sections (`topics`, `kafka`), which read their own variables."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        alias = field.validation_alias
        if not isinstance(alias, str):
            return None, field_name, False
        return self.env_vars.get(alias), alias, False


def _one_line(exc: ValidationError, cls: type[BaseSettings]) -> str:
    parts = []
    for err in exc.errors(include_url=False, include_input=False):  # no input: it may be a password
        loc = list(err["loc"])
        if loc and str(loc[0]) in cls.model_fields:  # a keyword argument (Settings(batch_size=...))
            alias = cls.model_fields[str(loc[0])].validation_alias
            loc[0] = alias if isinstance(alias, str) else loc[0]
        where = ".".join(str(p) for p in loc)
        msg = err["msg"].removeprefix("Value error, ")
        parts.append(f"{where}: {msg}" if where else msg)
    return "; ".join(parts)


class _EnvSettings(BaseSettings):
    model_config = SettingsConfigDict(
        frozen=True,
        case_sensitive=True,  # like os.environ: DREAM_JUDGE, not dream_judge
        populate_by_name=True,  # Settings(judge="llm") passes field names
        env_file=None,
        extra="forbid",
        use_attribute_docstrings=True,  # the docstrings below are the fields' descriptions
    )

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise SettingsError(_one_line(exc, type(self))) from None

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Keyword arguments first, then the process environment; never a .env file or secrets dir."""
        return init_settings, _ExplicitEnv(settings_cls)


class Topics(_EnvSettings):
    """Topic names and partition counts. Every topic is keyed by user_id (per-user order)."""

    memory_added: str = Field(default="memory.added", validation_alias="DREAM_TOPIC_MEMORY_ADDED")
    memory_status: str = Field(default="memory.status", validation_alias="DREAM_TOPIC_MEMORY_STATUS")
    patterns: str = Field(default="memory.patterns", validation_alias="DREAM_TOPIC_PATTERNS")
    dead_letters: str = Field(default="memory.deadletter", validation_alias="DREAM_TOPIC_DEAD_LETTERS")
    synthesis_runs: str = Field(default="dream.synthesis.runs", validation_alias="DREAM_TOPIC_SYNTHESIS_RUNS")
    control: str = Field(default="dream.control", validation_alias="DREAM_TOPIC_CONTROL")
    control_replies: str = Field(default="dream.control.replies", validation_alias="DREAM_TOPIC_CONTROL_REPLIES")
    memory_accessed: str = Field(default="memory.accessed", validation_alias="DREAM_TOPIC_MEMORY_ACCESSED")
    control_users: str = Field(default="dream.control.users", validation_alias="DREAM_TOPIC_CONTROL_USERS")
    """Internal: a user's commands (undo, erase, reprocess, consolidation), forwarded by the control agent to
    the worker that holds the user's memory.added partition. It must have `partitions` partitions."""
    partitions: int = Field(default=4, validation_alias="DREAM_PARTITIONS")


class KafkaSecurity(_EnvSettings):
    """How the worker authenticates to a secured cluster: TLS (server CA, optional client certificate
    for mTLS) and/or SASL PLAIN / SCRAM. The default, PLAINTEXT, is the local broker's."""

    protocol: str = Field(default="PLAINTEXT", validation_alias="DREAM_KAFKA_SECURITY_PROTOCOL")
    """One of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL (any case)."""
    sasl_mechanism: str = Field(default="PLAIN", validation_alias="DREAM_KAFKA_SASL_MECHANISM")
    """One of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (any case); checked only for SASL_* protocols."""
    sasl_username: OptStr = Field(default=None, validation_alias="DREAM_KAFKA_SASL_USERNAME")
    sasl_password: OptStr = Field(default=None, validation_alias="DREAM_KAFKA_SASL_PASSWORD")
    ssl_cafile: OptStr = Field(default=None, validation_alias="DREAM_KAFKA_SSL_CAFILE")
    """The broker's CA bundle; the system CAs without it."""
    ssl_certfile: OptStr = Field(default=None, validation_alias="DREAM_KAFKA_SSL_CERTFILE")
    """A client certificate for mTLS."""
    ssl_keyfile: OptStr = Field(default=None, validation_alias="DREAM_KAFKA_SSL_KEYFILE")

    @field_validator("protocol", "sasl_mechanism", mode="before")
    @classmethod
    def _upper_case(cls, value: Any) -> Any:
        return _upper(value)

    @field_validator("protocol")
    @classmethod
    def _known_protocol(cls, value: str) -> str:
        if value not in SECURITY_PROTOCOLS:
            raise ValueError(f"must be one of {', '.join(SECURITY_PROTOCOLS)}")
        return value

    @model_validator(mode="after")
    def _sasl_complete(self) -> KafkaSecurity:
        if self.protocol.startswith("SASL_"):
            if self.sasl_mechanism not in SASL_MECHANISMS:
                raise ValueError(f"DREAM_KAFKA_SASL_MECHANISM must be one of {', '.join(SASL_MECHANISMS)}")
            if not (self.sasl_username and self.sasl_password):
                raise ValueError("SASL needs DREAM_KAFKA_SASL_USERNAME and DREAM_KAFKA_SASL_PASSWORD")
        return self

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


class Settings(_EnvSettings):
    app_id: str = Field(default="dreamstream", validation_alias="DREAM_APP_ID")
    broker: str = Field(default="kafka://127.0.0.1:9092", validation_alias="KAFKA_BOOTSTRAP")
    """Comma-separated brokers, kafka://host:port or bare host:port."""
    store_dir: str = Field(default=os.path.join("var", "store"), validation_alias="DREAM_STORE")
    data_dir: str = Field(default=os.path.join("var", "faust"), validation_alias="DREAM_DATA_DIR")
    qdrant_url: OptStr = Field(default=None, validation_alias="QDRANT_URL")
    qdrant_api_key: OptStr = Field(default=None, validation_alias="QDRANT_API_KEY")
    qdrant_collection: str = Field(default="dream_memories", validation_alias="DREAM_QDRANT_COLLECTION")
    """The collection on the server (several deployments, or tests, can share one server)."""
    batch_size: int = Field(default=256, validation_alias="DREAM_BATCH_SIZE")
    """Events per ingest batch at most (fewer when DREAM_BATCH_WITHIN passes first): a batch's store reads
    and writes are a few calls, and the model embeds its next chunk while one is decided."""
    batch_within: float = Field(default=0.05, validation_alias="DREAM_BATCH_WITHIN")
    """Seconds a batch waits to fill. Faust's take waits this long after every batch unless the batch
    is full, even with events already waiting, and the worker is idle meanwhile: at 74 events/s a wait
    of 0.3 s held p95 latency at 3.5 s, 0.05 s at 0.48 s. Under a backlog a batch still fills within
    the wait (about 220 events a batch, the same events/s)."""
    session_timeout: float = Field(default=30.0, validation_alias="DREAM_SESSION_TIMEOUT")
    """Seconds before the group gives a silent worker's partitions away: a crashed worker's
    replacement waits this long for them (Faust's default is 60)."""
    stall_seconds: float = Field(default=30.0, validation_alias="DREAM_STALL_SECONDS")
    """An input partition with records waiting and none delivered this long is re-seeked
    (streams/worker/watchdog.py)."""
    min_free_mb: float = Field(default=64.0, validation_alias="DREAM_MIN_FREE_MB")
    """An embedded store stops writing (ingest pauses, retries) below this much free disk: a full disk
    inside the engine's memory-mapped files ends in SIGBUS, not in an error."""
    http_host: str = Field(default="127.0.0.1", validation_alias="DREAM_HTTP_HOST")
    http_port: int = Field(default=6066, validation_alias="DREAM_HTTP_PORT")
    advertised_url: OptStr = Field(default=None, validation_alias="DREAM_ADVERTISED_URL")
    """How the other workers reach this one's API (e.g. http://10.0.3.7:6066): a user's write sent to any
    worker is passed to the one holding the user's partition. Unset: http://DREAM_HTTP_HOST:DREAM_HTTP_PORT,
    and no passing on when that host is 0.0.0.0 (it names no one machine)."""
    add_wait_seconds: float = Field(default=15.0, gt=0, validation_alias="DREAM_ADD_WAIT_SECONDS")
    """How long an add or an update over HTTP waits for the broker to take its event before answering 503
    (the broker down: the event may still be delivered, and a resend with the same ids is stored once)."""
    erase_wait_seconds: float = Field(default=30.0, validation_alias="DREAM_ERASE_WAIT_SECONDS")
    """How long an erase (the API's DELETE, `dream control erase`) waits for ingest to reach it, behind the
    user's queued adds, before answering that it is queued (ingest paused or far behind)."""
    synthesis_check_seconds: float = Field(default=60.0, validation_alias="DREAM_SYNTHESIS_CHECK_SECONDS")
    synthesis_cadence: str = Field(default="weekly", validation_alias="DREAM_SYNTHESIS_CADENCE")
    """`weekly`, `daily`, `biweekly` or a number of days."""
    api_token: OptStr = Field(default=None, validation_alias="DREAM_API_TOKEN")
    """When set, the HTTP API (/v1/...) needs `Authorization: Bearer <token>`; when unset it answers
    loopback clients only."""
    control_token: OptStr = Field(default=None, validation_alias="DREAM_CONTROL_TOKEN")
    erase_secret: OptStr = Field(default=None, validation_alias="DREAM_ERASE_SECRET")
    """The key the workers sign `user.erase` records with (the same on every worker). Unset: derived from
    DREAM_CONTROL_TOKEN and DREAM_API_TOKEN, so rotating a token dead-letters the erases still queued."""
    retention_file: OptStr = Field(default=None, validation_alias="DREAM_RETENTION_FILE")
    """JSON {metadata.type: days | null} laid over the default retention policies."""
    embed_backend: Literal["onnx", "onnx-int8", "torch"] = Field(default="onnx", validation_alias="DREAM_EMBED_BACKEND")
    """The embedding model's runtime: `onnx` (default: ONNX Runtime, fp32, torch's vectors), `onnx-int8`
    (int8 weights: faster, slightly lower merge recall) or `torch` (sentence-transformers; the `torch` extra)."""
    embed_threads: int = Field(default=0, ge=0, validation_alias="DREAM_EMBED_THREADS")
    """Threads the model may use; 0 = one per core."""
    judge: str = Field(default="learned", validation_alias="DREAM_JUDGE")
    """Merge/supersede judge: `learned` (default: the model distilled from bench/corpus), `offline` (the
    rules alone), `nli` (DREAM_NLI_MODEL) or `llm` (DREAM_LLM_*)."""
    nli_model: OptStr = Field(default=None, validation_alias="DREAM_NLI_MODEL")
    llm_url: OptStr = Field(default=None, validation_alias="DREAM_LLM_URL")
    llm_model: OptStr = Field(default=None, validation_alias="DREAM_LLM_MODEL")
    llm_api_key: OptStr = Field(default=None, validation_alias="DREAM_LLM_API_KEY")
    llm_timeout: float = Field(default=10.0, validation_alias="DREAM_LLM_TIMEOUT")
    synthesis_text: str = Field(default="offline", validation_alias="DREAM_SYNTHESIS_TEXT")
    """Pattern wording: `offline` (built from the theme's memories) or `llm` (the DREAM_LLM_* endpoint)."""
    synthesis_themes: str = Field(default="offline", validation_alias="DREAM_SYNTHESIS_THEMES")
    """Pattern grouping: `offline` (sentence closeness and shared words) or `llm` (the DREAM_LLM_* endpoint reads
    the person's whole evidence and names the themes and their wording; offline when it fails)."""
    topics: Topics = Field(default_factory=Topics)
    """Topic names (DREAM_TOPIC_*, DREAM_PARTITIONS)."""
    kafka: KafkaSecurity = Field(default_factory=KafkaSecurity)
    """Broker security (DREAM_KAFKA_*)."""

    @property
    def synthesis_cadence_days(self) -> float:
        """`weekly` (7), `daily` (1) or a number of days."""
        named = {"weekly": 7.0, "daily": 1.0, "biweekly": 14.0}
        value = self.synthesis_cadence.strip().lower()
        return named[value] if value in named else float(value)

    @property
    def erase_key(self) -> bytes | None:
        """The key the worker signs `user.erase` records with: DREAM_ERASE_SECRET, else from its tokens (every
        worker of a group has the same); None when none is set (an open development setup: anyone may erase,
        as through the API)."""
        if self.erase_secret:
            return hashlib.sha256(b"dreamstream user.erase secret\0" + self.erase_secret.encode()).digest()
        if not (self.control_token or self.api_token):
            return None
        secret = f"{self.control_token or ''}\0{self.api_token or ''}".encode()
        return hashlib.sha256(b"dreamstream user.erase\0" + secret).digest()

    @property
    def broker_url(self) -> str:
        """Faust wants kafka://host:port; accept a bare host:port list too."""
        return ",".join(b if "://" in b else f"kafka://{b}" for b in self.broker.split(","))

    @property
    def bootstrap_servers(self) -> str:
        """The same brokers as plain host:port for aiokafka."""
        return ",".join(b.split("://", 1)[-1] for b in self.broker.split(","))


def load() -> Settings:
    """Fresh settings read from the environment now; a bad value raises SettingsError (a ValueError)."""
    return Settings()


def settings_from_env_table() -> list[tuple[str, str, Any, str]]:
    """(environment variable, field, default, description) for every setting, for the docs."""
    rows: list[tuple[str, str, Any, str]] = []

    def walk(cls: type[_EnvSettings], prefix: str) -> None:
        for name, info in cls.model_fields.items():
            if isinstance(info.validation_alias, str):
                rows.append((info.validation_alias, prefix + name, info.default, info.description or ""))
            elif isinstance(info.annotation, type) and issubclass(info.annotation, _EnvSettings):
                walk(info.annotation, f"{prefix}{name}.")

    walk(Settings, "")
    return rows
