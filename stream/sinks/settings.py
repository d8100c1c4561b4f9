"""What a score sink is configured with: one settings class per platform, read from the
environment under the names the platform's own SDK uses for its credentials and address
(``LANGFUSE_HOST``, ``LANGFUSE_PUBLIC_KEY``, ``LANGFUSE_SECRET_KEY``; ``OPIK_URL_OVERRIDE``,
``OPIK_API_KEY``, ``OPIK_WORKSPACE``, ``OPIK_PROJECT_NAME``) and under
``SCORER_SINK_LANGFUSE_*`` / ``SCORER_SINK_OPIK_*`` for how the sink runs. Being
``BaseSettings`` under ``stream``, a mistake in them ends in one line per problem
(``stream/config_errors.py``); the keys are ``SecretStr``, never shown."""

from __future__ import annotations

from typing import Literal

from pydantic import AliasChoices, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

LANGFUSE_CLOUD = "https://cloud.langfuse.com"  # the Langfuse SDK's default host
OPIK_CLOUD = "https://www.comet.com/opik/api"  # the Opik SDK's default (Comet's cloud)
OPIK_LOCAL = "http://localhost:5173/api"  # `opik configure --use_local`: a local Opik


class SinkSettings(BaseSettings):
    """What every sink takes; each platform's class gives it its own prefix."""

    model_config = SettingsConfigDict(extra="ignore")

    # the consumer group (default "<SCORER_APP_ID>-sink-<platform>"): its committed offsets
    # are how far the platform has accepted the scores topic
    group: str | None = Field(default=None, min_length=1)
    # a batch is posted when it holds this many scores or its first one waited batch_wait_s
    batch_size: int = Field(default=100, ge=1, le=1000)  # Opik takes at most 1000 a request
    batch_wait_s: float = Field(default=1.0, ge=0)
    # the value posted: "normalised" (0..1, the scores topic's value) or "raw" (the rule's
    # own scale, such as 1..5); both are in the score's metadata or reason either way
    value: Literal["normalised", "raw"] = "normalised"
    timeout_s: float = Field(default=30.0, gt=0)  # one HTTP request
    # requests in flight at once (Langfuse takes one score a request, Opik a batch)
    concurrency: int = Field(default=8, ge=1, le=64)
    # waits between attempts after a 429, a 5xx or no answer: doubling from base to max,
    # unless the platform says how long (Retry-After); a platform that stays down is retried
    # until it answers, the offsets uncommitted meanwhile (nothing is dropped)
    backoff_base_s: float = Field(default=0.5, gt=0)
    backoff_max_s: float = Field(default=30.0, gt=0)


def _http_url(value: str | None) -> str | None:
    if value is not None and not value.startswith(("http://", "https://")):
        raise ValueError("must be an http:// or https:// URL")
    return value.rstrip("/") if value is not None else None


class LangfuseSinkSettings(SinkSettings):
    """``scorer sink langfuse``: the Langfuse project the keys belong to receives the scores."""

    model_config = SettingsConfigDict(env_prefix="SCORER_SINK_LANGFUSE_", extra="ignore")

    host: str = Field(
        default=LANGFUSE_CLOUD, validation_alias=AliasChoices("LANGFUSE_HOST", "LANGFUSE_BASE_URL")
    )
    public_key: str = Field(min_length=1, validation_alias="LANGFUSE_PUBLIC_KEY")
    secret_key: SecretStr = Field(validation_alias="LANGFUSE_SECRET_KEY")
    # a choice rule's label (yes/no, Excellent...Unacceptable) as a CATEGORICAL score (yes/no,
    # true/false, pass/fail as BOOLEAN), or "numeric": every score NUMERIC, the label in metadata
    labels: Literal["categorical", "numeric"] = "categorical"

    @field_validator("host")
    @classmethod
    def _host_is_a_url(cls, value: str) -> str:
        url = _http_url(value)
        assert url is not None
        return url

    @field_validator("secret_key")
    @classmethod
    def _secret_not_blank(cls, value: SecretStr) -> SecretStr:
        if not value.get_secret_value().strip():
            raise ValueError("must not be empty")
        return value


class OpikSinkSettings(SinkSettings):
    """``scorer sink opik``: a local Opik (no key) or Comet's cloud (key and workspace)."""

    model_config = SettingsConfigDict(env_prefix="SCORER_SINK_OPIK_", extra="ignore")

    url: str | None = Field(default=None, validation_alias="OPIK_URL_OVERRIDE")
    api_key: SecretStr | None = Field(default=None, validation_alias="OPIK_API_KEY")
    workspace: str | None = Field(default=None, min_length=1, validation_alias="OPIK_WORKSPACE")
    # the project of a score whose trace named none (the scores topic says "default" then);
    # unset: Opik's default project
    project_name: str | None = Field(
        default=None, min_length=1, validation_alias="OPIK_PROJECT_NAME"
    )

    @field_validator("url")
    @classmethod
    def _url_is_a_url(cls, value: str | None) -> str | None:
        return _http_url(value)

    @model_validator(mode="after")
    def _cloud_needs_a_workspace(self) -> OpikSinkSettings:
        if self.api_key is not None and self.workspace is None:
            raise ValueError(
                "OPIK_API_KEY is set (Comet's cloud) but OPIK_WORKSPACE is not: set it to the "
                "workspace the traces are in"
            )
        return self

    @property
    def base_url(self) -> str:
        """OPIK_URL_OVERRIDE, else Comet's cloud with a key, else a local Opik."""
        if self.url is not None:
            return self.url
        return OPIK_CLOUD if self.api_key is not None else OPIK_LOCAL
