"""Deployment settings from the environment: defaults, prefixes, derived names, secrets."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import SecretStr, ValidationError

from stream.ruleset.location import REPO_RULES_DIR
from stream.settings import DEFAULT_JUDGE_PRICES, ModelPrice, Settings

UNPREFIXED = ("KAFKA_BOOTSTRAP_SERVERS", "OPENAI_BASE_URL", "OPENAI_API_KEY")


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No setting leaks in from the machine running the tests."""
    for name in list(os.environ):
        if name.upper().startswith("SCORER_") or name.upper() in UNPREFIXED:
            monkeypatch.delenv(name)


def test_defaults() -> None:
    s = Settings()

    assert s.kafka_bootstrap_servers is None
    assert s.broker_kind == "kafka"
    assert s.app_id == "llm-trace-scorer"
    assert (s.traces_topic, s.sessions_topic, s.scores_topic) == (
        "llm-traces",
        "coaching-sessions",
        "scores",
    )
    assert (s.decisions_topic, s.dlq_topic) == ("score-decisions", "scorer-dlq")
    assert s.thread_events_topic is None
    assert s.topic_partitions == 4
    assert s.openai_base_url is None
    assert s.openai_api_key is None
    assert s.judge_model == "gpt-4o-mini"
    assert s.judge_structured_output is True
    assert s.judge_prices == DEFAULT_JUDGE_PRICES
    assert s.rules_dir == (REPO_RULES_DIR,)  # the shipped packs alone
    assert s.packs is None
    assert s.data_dir == Path(".scorer-data")
    assert s.thread_inactivity_gap_s == 900.0
    assert s.batch_poll_s == 60.0


def test_the_batch_poll_interval_is_read_and_must_be_positive(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SCORER_BATCH_POLL_S", "15")
    assert Settings().batch_poll_s == 15.0
    monkeypatch.setenv("SCORER_BATCH_POLL_S", "0")
    with pytest.raises(ValidationError, match="batch_poll_s"):
        Settings()


def test_the_default_price_table_is_a_copy() -> None:
    s = Settings()
    s.judge_prices["local-model"] = ModelPrice(input=0, output=0)

    assert "local-model" not in DEFAULT_JUDGE_PRICES
    assert "local-model" not in Settings().judge_prices


def test_prefixed_environment_variables_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCORER_APP_ID", "scorer-eu")
    monkeypatch.setenv("SCORER_BROKER_KIND", "tansu")
    monkeypatch.setenv("SCORER_TOPIC_PARTITIONS", "12")
    monkeypatch.setenv("SCORER_JUDGE_MODEL", "llama3.1:8b")
    monkeypatch.setenv("SCORER_JUDGE_STRUCTURED_OUTPUT", "false")
    monkeypatch.setenv("SCORER_PACKS", '["coaching", "critique"]')
    monkeypatch.setenv("SCORER_JUDGE_PRICES", '{"m": {"input": 1.0, "output": 2.0}}')

    s = Settings()

    assert s.app_id == "scorer-eu"
    assert s.broker_kind == "tansu"
    assert s.topic_partitions == 12
    assert s.judge_model == "llama3.1:8b"
    assert s.judge_structured_output is False
    assert s.packs == ["coaching", "critique"]
    assert s.judge_prices == {"m": ModelPrice(input=1.0, output=2.0)}


def test_unprefixed_standard_names_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "k1:9092,k2:9092")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://localhost:11434/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")

    s = Settings()

    assert s.kafka_bootstrap_servers == "k1:9092,k2:9092"
    assert s.openai_base_url == "http://localhost:11434/v1"
    assert isinstance(s.openai_api_key, SecretStr)
    assert s.openai_api_key.get_secret_value() == "sk-from-env"


def test_standard_names_are_not_read_with_the_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCORER_KAFKA_BOOTSTRAP_SERVERS", "k1:9092")
    monkeypatch.setenv("SCORER_OPENAI_BASE_URL", "http://judge/v1")
    monkeypatch.setenv("SCORER_OPENAI_API_KEY", "sk-prefixed")

    s = Settings()

    assert s.kafka_bootstrap_servers is None
    assert s.openai_base_url is None
    assert s.openai_api_key is None


def test_an_invalid_value_in_the_environment_is_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCORER_THREAD_INACTIVITY_GAP_S", "0")

    with pytest.raises(ValidationError, match="thread_inactivity_gap_s"):
        Settings()


@pytest.mark.parametrize("value", ["0", "-1"])
def test_no_trace_in_flight_at_a_time_is_rejected(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    # a worker that could hold no trace in flight would wait for ever, saying nothing
    monkeypatch.setenv("SCORER_MAX_IN_FLIGHT", value)

    with pytest.raises(ValidationError, match="max_in_flight"):
        Settings()


def test_an_unknown_broker_kind_is_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCORER_BROKER_KIND", "redpanda")

    with pytest.raises(ValidationError):
        Settings()


def test_thread_events_topic_defaults_to_the_app_id() -> None:
    assert Settings().thread_events_topic_name == "llm-trace-scorer-thread-events"
    assert Settings(app_id="eu").thread_events_topic_name == "eu-thread-events"


def test_thread_events_topic_can_be_set(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings(thread_events_topic="internal").thread_events_topic_name == "internal"
    monkeypatch.setenv("SCORER_THREAD_EVENTS_TOPIC", "from-env")
    assert Settings(app_id="eu").thread_events_topic_name == "from-env"


def test_judge_configured_by_url_or_key() -> None:
    assert Settings().judge_configured is False
    assert Settings(openai_base_url="http://localhost:8000/v1").judge_configured is True
    assert Settings(openai_api_key=SecretStr("sk-x")).judge_configured is True


def test_judge_configured_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://localhost:8000/v1")

    assert Settings().judge_configured is True


def test_the_api_key_does_not_show(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-very-secret-123")

    s = Settings()

    assert isinstance(s.openai_api_key, SecretStr)
    assert s.openai_api_key.get_secret_value() == "sk-very-secret-123"
    assert "sk-very-secret-123" not in repr(s)
    assert "sk-very-secret-123" not in str(s)
    assert "sk-very-secret-123" not in s.model_dump_json()


def test_model_price_cost_is_per_million_tokens() -> None:
    price = ModelPrice(input=0.15, output=0.60)

    assert price.cost(1_000_000, 0) == pytest.approx(0.15)
    assert price.cost(2_000, 500) == pytest.approx((2_000 * 0.15 + 500 * 0.60) / 1_000_000)
    with pytest.raises(ValidationError):
        ModelPrice(input=-1, output=0)
