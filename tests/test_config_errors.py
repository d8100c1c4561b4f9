"""A settings mistake read as the user can act on it: one problem a line, named by the
environment variable as it was set, never a secret's value (not even pydantic's echo of the
input a model-level check refused)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import BaseModel, ValidationError
from pydantic_settings import SettingsError

from stream.config_errors import config_error, env_name
from stream.errors import ConfigError
from stream.kafka.security import KafkaSecurity
from stream.settings import Settings

SECRET = "hunter2-very-secret"


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith(("SCORER_", "KAFKA_", "OPENAI_")):
            monkeypatch.delenv(name)


def problems(monkeypatch: pytest.MonkeyPatch, **env: str) -> list[str]:
    """What building the settings from ``env`` says, as the CLI prints it."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises((ValidationError, SettingsError)) as caught:
        Settings()
    error = config_error(caught.value)
    assert isinstance(error, ConfigError)
    return error.problems


@pytest.mark.parametrize(
    ("env", "said"),
    [
        (
            {"KAFKA_SECURITY_PROTOCOL": "SSL", "KAFKA_SSL_CAFILE": "/x/ca.pem"},
            ["KAFKA_SSL_CAFILE: no such file: /x/ca.pem"],
        ),
        (
            {"KAFKA_SECURITY_PROTOCOL": "TLS"},
            [
                "KAFKA_SECURITY_PROTOCOL: input should be 'PLAINTEXT', 'SSL', 'SASL_PLAINTEXT' "
                "or 'SASL_SSL' (got 'TLS')"
            ],
        ),
        (
            {"KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "KAFKA_SASL_USERNAME": "scorer"},
            [
                "KAFKA_SECURITY_PROTOCOL=SASL_SSL needs KAFKA_SASL_PASSWORD (KAFKA_SASL_MECHANISM=PLAIN)"
            ],
        ),
        (
            {"KAFKA_SSL_CHECK_HOSTNAME": "maybe"},
            [
                "KAFKA_SSL_CHECK_HOSTNAME: input should be a valid boolean, unable to interpret input (got 'maybe')"
            ],
        ),
        (  # every bad value of the model, one line each
            {"SCORER_JUDGE_TIMEOUT_S": "soon", "SCORER_STORE": "disk"},
            [
                "SCORER_JUDGE_TIMEOUT_S: input should be a valid number, unable to parse string "
                "as a number (got 'soon')",
                "SCORER_STORE: input should be 'memory' or 'rocksdb' (got 'disk')",
            ],
        ),
        (  # inside a JSON setting: the path to the value
            {"SCORER_JUDGE_BUDGETS": '[{"rule": "r", "usd": "lots"}]'},
            [
                "SCORER_JUDGE_BUDGETS[0].usd: input should be a valid number, unable to parse "
                "string as a number (got 'lots')"
            ],
        ),
        (  # not JSON at all: pydantic-settings' own error, named as set
            {"SCORER_JUDGE_BUDGETS": "five dollars a day"},
            ["SCORER_JUDGE_BUDGETS: not valid JSON (Expecting value: line 1 column 1 (char 0))"],
        ),
        (  # a check across settings says it in its own words
            {"SCORER_TURN_MAX_BYTES": "200000", "SCORER_THREAD_MAX_BYTES": "100000"},
            ["SCORER_TURN_MAX_BYTES (200000) must not exceed SCORER_THREAD_MAX_BYTES (100000)"],
        ),
        (  # the unprefixed names keep their own spelling
            {"SCORER_TOPIC_PARTITIONS": "four"},
            [
                "SCORER_TOPIC_PARTITIONS: input should be a valid integer, unable to parse "
                "string as an integer (got 'four')"
            ],
        ),
    ],
)
def test_each_problem_is_one_line_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], said: list[str]
) -> None:
    assert sorted(problems(monkeypatch, **env)) == sorted(said)


def test_the_name_is_spelt_as_the_user_set_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # the names are case-insensitive; the message uses the user's spelling, not ours
    assert problems(monkeypatch, scorer_judge_timeout_s="x")[0].startswith(
        "scorer_judge_timeout_s: "
    )
    assert env_name(Settings, "openai_api_key", {}) == "OPENAI_API_KEY"
    assert env_name(Settings, "web_port", {"Scorer_Web_Port": "1"}) == "Scorer_Web_Port"


@pytest.mark.parametrize(
    "env",
    [
        # the model-level check echoes every input, the password among them
        {"KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "KAFKA_SASL_PASSWORD": SECRET},
        {
            "KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
            "KAFKA_SASL_MECHANISM": "OAUTHBEARER",
            "KAFKA_SASL_PASSWORD": SECRET,
        },
        {"KAFKA_SSL_CERTFILE": "/etc/hostname", "KAFKA_SSL_KEY_PASSWORD": SECRET},
    ],
)
def test_a_secret_is_never_shown(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError) as caught:
        Settings()
    assert SECRET in str(caught.value)  # what pydantic alone would have printed
    error = config_error(caught.value)
    assert error is not None and error.problems
    assert all(SECRET not in problem for problem in error.problems)
    assert SECRET not in str(error)


def test_a_file_that_is_not_readable_or_not_a_file(tmp_path: Path) -> None:
    with pytest.raises(ValidationError) as caught:
        KafkaSecurity(ssl_cafile=tmp_path, ssl_certfile=tmp_path / "nope.pem")
    error = config_error(caught.value, environ={})
    assert error is not None
    assert sorted(error.problems) == [
        f"KAFKA_SSL_CAFILE: {tmp_path} is not a file",
        f"KAFKA_SSL_CERTFILE: no such file: {tmp_path / 'nope.pem'}",
    ]


def test_a_ca_file_that_holds_no_certificate_is_named(tmp_path: Path) -> None:
    not_pem = tmp_path / "ca.pem"
    not_pem.write_text("not a certificate\n")
    security = KafkaSecurity(security_protocol="SSL", ssl_cafile=not_pem)
    with pytest.raises(ConfigError, match=rf"^KAFKA_SSL_CAFILE: {not_pem} holds no PEM"):
        security.ssl_context()


def test_a_validation_error_of_another_model_is_not_a_settings_mistake() -> None:
    class Other(BaseModel):
        n: int

    with pytest.raises(ValidationError) as caught:
        Other(n="x")  # type: ignore[arg-type]
    assert config_error(caught.value) is None
    assert config_error(SettingsError("something else")) is None


def test_a_secret_fields_own_bad_value_is_not_echoed() -> None:
    with pytest.raises(ValidationError) as caught:
        KafkaSecurity(sasl_password=987654321)  # type: ignore[arg-type]
    assert "987654321" in str(caught.value)
    error = config_error(caught.value, environ={})
    assert error is not None
    assert error.problems == ["KAFKA_SASL_PASSWORD: input should be a valid string"]
