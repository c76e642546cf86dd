"""Settings from the environment: names, defaults, overrides, one-line errors. No broker, no model."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from dreamstream.streams import settings
from dreamstream.streams.settings import KafkaSecurity, Settings, SettingsError, Topics, load

ENV_NAMES = {  # field -> the variable it has always been read from
    "app_id": "DREAM_APP_ID", "broker": "KAFKA_BOOTSTRAP", "store_dir": "DREAM_STORE",
    "data_dir": "DREAM_DATA_DIR", "qdrant_url": "QDRANT_URL", "qdrant_api_key": "QDRANT_API_KEY",
    "qdrant_collection": "DREAM_QDRANT_COLLECTION",
    "batch_size": "DREAM_BATCH_SIZE", "batch_within": "DREAM_BATCH_WITHIN",
    "session_timeout": "DREAM_SESSION_TIMEOUT", "stall_seconds": "DREAM_STALL_SECONDS",
    "min_free_mb": "DREAM_MIN_FREE_MB", "api_token": "DREAM_API_TOKEN",
    "http_host": "DREAM_HTTP_HOST", "http_port": "DREAM_HTTP_PORT",
    "advertised_url": "DREAM_ADVERTISED_URL",
    "add_wait_seconds": "DREAM_ADD_WAIT_SECONDS", "erase_wait_seconds": "DREAM_ERASE_WAIT_SECONDS",
    "synthesis_check_seconds": "DREAM_SYNTHESIS_CHECK_SECONDS", "synthesis_cadence": "DREAM_SYNTHESIS_CADENCE",
    "control_token": "DREAM_CONTROL_TOKEN",
    "erase_secret": "DREAM_ERASE_SECRET", "retention_file": "DREAM_RETENTION_FILE",
    "embed_backend": "DREAM_EMBED_BACKEND", "embed_threads": "DREAM_EMBED_THREADS", "judge": "DREAM_JUDGE",
    "nli_model": "DREAM_NLI_MODEL", "llm_url": "DREAM_LLM_URL", "llm_model": "DREAM_LLM_MODEL",
    "llm_api_key": "DREAM_LLM_API_KEY", "llm_timeout": "DREAM_LLM_TIMEOUT", "synthesis_text": "DREAM_SYNTHESIS_TEXT",
    "synthesis_themes": "DREAM_SYNTHESIS_THEMES",
    "topics.memory_added": "DREAM_TOPIC_MEMORY_ADDED", "topics.memory_status": "DREAM_TOPIC_MEMORY_STATUS",
    "topics.patterns": "DREAM_TOPIC_PATTERNS", "topics.dead_letters": "DREAM_TOPIC_DEAD_LETTERS",
    "topics.synthesis_runs": "DREAM_TOPIC_SYNTHESIS_RUNS", "topics.control": "DREAM_TOPIC_CONTROL",
    "topics.control_replies": "DREAM_TOPIC_CONTROL_REPLIES", "topics.memory_accessed": "DREAM_TOPIC_MEMORY_ACCESSED",
    "topics.control_users": "DREAM_TOPIC_CONTROL_USERS",
    "topics.partitions": "DREAM_PARTITIONS",
    "kafka.protocol": "DREAM_KAFKA_SECURITY_PROTOCOL", "kafka.sasl_mechanism": "DREAM_KAFKA_SASL_MECHANISM",
    "kafka.sasl_username": "DREAM_KAFKA_SASL_USERNAME", "kafka.sasl_password": "DREAM_KAFKA_SASL_PASSWORD",
    "kafka.ssl_cafile": "DREAM_KAFKA_SSL_CAFILE", "kafka.ssl_certfile": "DREAM_KAFKA_SSL_CERTFILE",
    "kafka.ssl_keyfile": "DREAM_KAFKA_SSL_KEYFILE",
}


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No setting from the outer environment leaks in (a developer's shell, CI)."""
    for name in ENV_NAMES.values():
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_every_field_reads_its_historic_variable() -> None:
    table = settings.settings_from_env_table()
    assert {field: env for env, field, _, _ in table} == ENV_NAMES
    assert len({env for env, *_ in table}) == len(table)
    row = {field: (default, doc) for _, field, default, doc in table}
    assert row["topics.partitions"][0] == 4 and "retention" in row["retention_file"][1]


def test_defaults() -> None:
    s = load()
    assert (s.app_id, s.broker, s.store_dir, s.data_dir) == (
        "dreamstream", "kafka://127.0.0.1:9092", str(Path("var", "store")), str(Path("var", "faust")))
    assert (s.batch_size, s.batch_within, s.session_timeout, s.stall_seconds) == (256, 0.05, 30.0, 30.0)
    assert (s.http_host, s.http_port, s.synthesis_check_seconds, s.llm_timeout) == ("127.0.0.1", 6066, 60.0, 10.0)
    assert (s.judge, s.synthesis_text, s.synthesis_cadence, s.synthesis_cadence_days) == (
        "learned", "offline", "weekly", 7.0)
    assert all(getattr(s, f) is None for f in ("qdrant_url", "qdrant_api_key", "control_token", "retention_file",
                                                "nli_model", "llm_url", "llm_model", "llm_api_key"))
    assert (s.topics.memory_added, s.topics.memory_status, s.topics.patterns, s.topics.dead_letters) == (
        "memory.added", "memory.status", "memory.patterns", "memory.deadletter")
    assert (s.topics.synthesis_runs, s.topics.control, s.topics.control_replies, s.topics.memory_accessed) == (
        "dream.synthesis.runs", "dream.control", "dream.control.replies", "memory.accessed")
    assert s.topics.partitions == 4 and s.topics == Topics()
    assert (s.kafka.protocol, s.kafka.sasl_mechanism, s.kafka.sasl_username) == ("PLAINTEXT", "PLAIN", None)
    assert (s.broker_url, s.bootstrap_servers) == ("kafka://127.0.0.1:9092", "127.0.0.1:9092")
    assert isinstance(s.batch_size, int) and isinstance(s.batch_within, float)


def test_overrides_are_read_when_load_is_called(clean_env: pytest.MonkeyPatch) -> None:
    before = load()
    clean_env.setenv("KAFKA_BOOTSTRAP", "b1:9092,kafka://b2:9093")  # a str
    clean_env.setenv("DREAM_JUDGE", "llm")
    clean_env.setenv("DREAM_BATCH_SIZE", "128")  # an int
    clean_env.setenv("DREAM_BATCH_WITHIN", "0.25")  # a float
    clean_env.setenv("DREAM_SYNTHESIS_CADENCE", "2.5")
    clean_env.setenv("DREAM_LLM_URL", "http://127.0.0.1:1/v1")  # an optional, set
    clean_env.setenv("QDRANT_URL", "")  # an optional, empty: unset
    clean_env.setenv("DREAM_CONTROL_TOKEN", "")
    clean_env.setenv("DREAM_TOPIC_MEMORY_ADDED", "tenant-a.memory.added")  # a nested topic
    clean_env.setenv("DREAM_PARTITIONS", "12")
    s = load()
    assert before.judge == "learned" and before.topics.partitions == 4  # read at call time, not import
    assert s.broker == "b1:9092,kafka://b2:9093"
    assert (s.broker_url, s.bootstrap_servers) == ("kafka://b1:9092,kafka://b2:9093", "b1:9092,b2:9093")
    assert (s.judge, s.batch_size, s.batch_within, s.synthesis_cadence_days) == ("llm", 128, 0.25, 2.5)
    assert (s.llm_url, s.qdrant_url, s.control_token) == ("http://127.0.0.1:1/v1", None, None)
    assert (s.topics.memory_added, s.topics.memory_status, s.topics.partitions) == (
        "tenant-a.memory.added", "memory.status", 12)
    assert s.data_dir == before.data_dir


def test_only_the_named_variable_is_read(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Not the field's name, not another case, not a sub-section as JSON, not a .env file."""
    clean_env.setenv("judge", "llm")
    clean_env.setenv("dream_judge", "nli")
    clean_env.setenv("batch_size", "abc")
    clean_env.setenv("topics", '{"partitions": 9}')
    (tmp_path / ".env").write_text("DREAM_JUDGE=llm\nDREAM_PARTITIONS=9\n")
    clean_env.chdir(tmp_path)
    s = load()
    assert (s.judge, s.batch_size, s.topics.partitions) == ("learned", 256, 4)


@pytest.mark.parametrize(("name", "value", "problem"), [
    ("DREAM_BATCH_SIZE", "abc", "valid integer"),
    ("DREAM_HTTP_PORT", "80.5", "valid integer"),
    ("DREAM_LLM_TIMEOUT", "soon", "valid number"),
    ("DREAM_PARTITIONS", "four", "valid integer"),
])
def test_a_bad_value_names_its_variable_in_one_line(
        clean_env: pytest.MonkeyPatch, name: str, value: str, problem: str) -> None:
    clean_env.setenv(name, value)
    with pytest.raises(ValueError) as caught:
        load()
    message = str(caught.value)
    assert isinstance(caught.value, SettingsError)
    assert message.startswith(f"{name}: ") and problem in message and "\n" not in message
    assert value not in message  # the input stays out: it could be a secret


def test_problems_in_one_section_are_joined(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("DREAM_BATCH_SIZE", "abc")
    clean_env.setenv("DREAM_BATCH_WITHIN", "later")
    with pytest.raises(ValueError, match=r"^DREAM_BATCH_SIZE: .*; DREAM_BATCH_WITHIN: [^\n]*$"):
        load()


def test_settings_are_immutable_and_keywords_override(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("DREAM_JUDGE", "nli")
    s = load()
    with pytest.raises(ValueError):
        s.judge = "llm"  # type: ignore[misc]
    changed = Settings(judge="llm", llm_model="m")
    assert (changed.judge, changed.llm_model, changed.batch_size, changed.topics) == ("llm", "m", 256, s.topics)
    assert s.judge == "nli"
    assert Settings(judge="llm", llm_url="").llm_url is None  # keyword arguments win, and validate
    with pytest.raises(ValueError, match="^DREAM_BATCH_SIZE: "):
        Settings(batch_size="many")  # type: ignore[arg-type]


# -- Kafka security (faust's translation of the credentials is checked in test_metrics.py) ---------


def test_plaintext_by_default() -> None:
    sec = KafkaSecurity()
    assert sec.protocol == "PLAINTEXT" and sec.ssl_context() is None and sec.aiokafka_kwargs() == {}


def test_protocol_and_mechanism_are_upper_cased(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("DREAM_KAFKA_SECURITY_PROTOCOL", "sasl_plaintext")
    clean_env.setenv("DREAM_KAFKA_SASL_MECHANISM", "scram-sha-256")
    clean_env.setenv("DREAM_KAFKA_SASL_USERNAME", "dream")
    clean_env.setenv("DREAM_KAFKA_SASL_PASSWORD", "s3cret")
    sec = load().kafka
    assert (sec.protocol, sec.sasl_mechanism) == ("SASL_PLAINTEXT", "SCRAM-SHA-256")
    assert sec.ssl_context() is None
    assert sec.aiokafka_kwargs() == {
        "security_protocol": "SASL_PLAINTEXT", "ssl_context": None, "sasl_mechanism": "SCRAM-SHA-256",
        "sasl_plain_username": "dream", "sasl_plain_password": "s3cret"}


def test_tls_verifies_the_server(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    clean_env.setenv("DREAM_KAFKA_SECURITY_PROTOCOL", "SSL")
    clean_env.setenv("DREAM_KAFKA_SSL_CERTFILE", "")  # empty: no client certificate
    sec = KafkaSecurity()
    assert sec.ssl_certfile is None
    context = sec.ssl_context()
    assert isinstance(context, ssl.SSLContext) and context.verify_mode == ssl.CERT_REQUIRED
    kwargs = sec.aiokafka_kwargs()
    assert kwargs.keys() == {"security_protocol", "ssl_context"} and kwargs["security_protocol"] == "SSL"
    clean_env.setenv("DREAM_KAFKA_SSL_CAFILE", str(tmp_path / "missing-ca.pem"))
    with pytest.raises(FileNotFoundError):  # a wrong CA path fails at start, not at the first fetch
        KafkaSecurity().ssl_context()


def test_sasl_needs_a_user_and_a_password(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("DREAM_KAFKA_SECURITY_PROTOCOL", "SASL_SSL")
    clean_env.setenv("DREAM_KAFKA_SASL_USERNAME", "dream")
    clean_env.setenv("DREAM_KAFKA_SASL_PASSWORD", "")
    with pytest.raises(ValueError, match="^SASL needs DREAM_KAFKA_SASL_USERNAME and DREAM_KAFKA_SASL_PASSWORD$"):
        load()
    clean_env.setenv("DREAM_KAFKA_SASL_PASSWORD", "s3cret")
    clean_env.setenv("DREAM_KAFKA_SASL_MECHANISM", "GSSAPI")
    with pytest.raises(ValueError, match="DREAM_KAFKA_SASL_MECHANISM must be one of PLAIN, SCRAM-SHA-256"):
        KafkaSecurity()
    clean_env.setenv("DREAM_KAFKA_SECURITY_PROTOCOL", "PLAINTEXT")
    assert KafkaSecurity().sasl_mechanism == "GSSAPI"  # the mechanism only matters for SASL, as before


def test_an_unknown_protocol_is_refused_in_one_line(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("DREAM_KAFKA_SECURITY_PROTOCOL", "FOO")
    clean_env.setenv("DREAM_KAFKA_SASL_PASSWORD", "s3cret")
    with pytest.raises(ValueError) as caught:
        load()
    assert str(caught.value) == (
        "DREAM_KAFKA_SECURITY_PROTOCOL: must be one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL")
    assert settings.SECURITY_PROTOCOLS == ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
    assert settings.SASL_MECHANISMS == ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
