"""Deployment configuration, from the environment (rules are data, not settings)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from .kafka.security import KafkaSecurity
from .models import TokenUsage
from .ruleset.filters import PackFilter
from .ruleset.loader import load_rules
from .ruleset.schema import RuleSet

REPO_RULES_DIR = Path(__file__).resolve().parent.parent / "rules"


class ModelPrice(BaseModel):
    """What a judge model costs, in US dollars per million tokens."""

    model_config = ConfigDict(extra="forbid")

    input: float = Field(ge=0)
    output: float = Field(ge=0)

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (prompt_tokens * self.input + completion_tokens * self.output) / 1_000_000


# List prices (USD per million tokens) of common judge models, for the estimated-cost metric.
# SCORER_JUDGE_PRICES (JSON) replaces this table; a local model costs what its GPU costs,
# so it has no entry and no cost is estimated for it.
DEFAULT_JUDGE_PRICES = {
    "gpt-4o-mini": ModelPrice(input=0.15, output=0.60),
    "gpt-4o": ModelPrice(input=2.50, output=10.00),
    "gpt-4.1-nano": ModelPrice(input=0.10, output=0.40),
    "gpt-4.1-mini": ModelPrice(input=0.40, output=1.60),
    "gpt-4.1": ModelPrice(input=2.00, output=8.00),
}


WINDOW_S = {"hour": 3600, "day": 86_400}


class Budget(BaseModel):
    """One budget: for a rule or for a model, in USD or tokens, per hour or day."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rule: str | None = None
    model: str | None = None
    usd: float | None = Field(default=None, gt=0)
    tokens: int | None = Field(default=None, gt=0)
    window: Literal["hour", "day"] = "day"

    @model_validator(mode="after")
    def _one_of_each(self) -> Budget:
        if (self.rule is None) == (self.model is None):
            raise ValueError("a budget is for a rule or for a model: give exactly one")
        if (self.usd is None) == (self.tokens is None):
            raise ValueError("a budget counts usd or tokens: give exactly one")
        return self

    def describe(self) -> str:
        whose = f"rule {self.rule}" if self.rule else f"model {self.model}"
        amount = f"${self.usd:g}" if self.usd is not None else f"{self.tokens} tokens"
        return f"{whose}: {amount} per {self.window}"


class Settings(BaseSettings):
    """Everything a deployment sets; secrets come from the environment only."""

    model_config = SettingsConfigDict(env_prefix="SCORER_", extra="ignore")

    # Kafka. The standard names are read without the prefix.
    kafka_bootstrap_servers: str | None = Field(
        default=None, validation_alias="KAFKA_BOOTSTRAP_SERVERS"
    )
    # TLS / SASL of the cluster, from the KAFKA_* names (stream/kafka/security.py)
    kafka: KafkaSecurity = Field(default_factory=KafkaSecurity)
    # "tansu": the embedded broker (Faust transport with its end-offset defect corrected).
    # Set by the CLI when it starts the embedded broker; a real cluster keeps "kafka".
    broker_kind: Literal["kafka", "tansu"] = "kafka"
    app_id: str = "llm-trace-scorer"
    traces_topic: str = "llm-traces"
    sessions_topic: str = "coaching-sessions"
    scores_topic: str = "scores"
    decisions_topic: str = "score-decisions"
    dlq_topic: str = "scorer-dlq"
    thread_events_topic: str | None = None  # None: "<app_id>-thread-events"
    topic_partitions: int = 4
    session_timeout_s: float = 30.0

    # Judge: any OpenAI-compatible endpoint.
    openai_base_url: str | None = Field(default=None, validation_alias="OPENAI_BASE_URL")
    openai_api_key: SecretStr | None = Field(default=None, validation_alias="OPENAI_API_KEY")
    judge_model: str = "gpt-4o-mini"
    judge_timeout_s: float = 60.0
    judge_max_attempts: int = 5
    judge_backoff_base_s: float = 0.5
    judge_backoff_max_s: float = 30.0
    judge_max_concurrency: int = 32
    # a judge unavailable this long (connection errors, timeouts, 5xx, 429 on every call)
    # turns the traces waiting for it into error scores; until then they wait unacked
    judge_outage_max_s: float = Field(default=3600.0, gt=0)
    # the most a prompt may carry (tokens estimated at 4 characters each); a rule may set its
    # own (judge.max_prompt_tokens); past it the largest variable is cut in the middle
    judge_max_prompt_tokens: int = Field(default=32_000, gt=0)
    # spend budgets (JSON list): [{"rule": "r", "usd": 5, "window": "day"},
    # {"model": "gpt-4o", "tokens": 2000000, "window": "hour"}]; a spent one skips its rules
    judge_budgets: list[Budget] = Field(default_factory=list)
    judge_structured_output: bool = True
    judge_prices: dict[str, ModelPrice] = Field(default_factory=lambda: dict(DEFAULT_JUDGE_PRICES))

    # Worker.
    rules_dir: Path = REPO_RULES_DIR
    packs: list[str] | None = None  # None: every pack under rules_dir
    # a deployment's filters over the packs' own (JSON): {"fretcoach": {"projects": ["prod"],
    # "trace_names": {"hub-coach-chat": ["hub-chat-v2"]}}}; the rule files stay as shipped
    pack_filters: dict[str, PackFilter] = Field(default_factory=dict)
    # a trace rule that matched none of this many traces in a row is reported silent (a
    # warning naming what it saw instead, and scorer_rule_silent); 0: never
    silent_after_traces: int = Field(default=500, ge=0)
    max_in_flight: int = 512  # traces per worker being scored at once
    web_port: int = 6066
    lag_interval_s: float = Field(default=15.0, gt=0)  # how often consumer lag is measured
    web_host: str = "127.0.0.1"
    data_dir: Path = Path(".scorer-data")
    # where the thread table lives between restarts: "memory" (rebuilt from its changelog
    # at every start) or "rocksdb" (local files under data_dir, read at a restart; needs the
    # rocksdb extra: pip install 'llm-trace-scorer[rocksdb]')
    store: Literal["memory", "rocksdb"] = "memory"

    # Threads (conversations and coaching sessions).
    thread_inactivity_gap_s: float = Field(default=900.0, gt=0)  # like Opik: 15 minutes
    thread_tick_s: float = Field(default=1.0, gt=0)  # how often idle threads are looked for
    thread_max_turns: int = Field(default=200, ge=1)
    # the table entry of a thread holds its turns and the document of a close not yet
    # published (about as much again): kept well under Kafka's 1 MB default message size
    thread_max_bytes: int = Field(default=256_000, ge=1024, le=300_000)
    # one turn's text is cut in the middle past this (a visible marker; the thread counts the
    # bytes cut as truncated_bytes), on the way in, before the turn is forwarded or folded
    turn_max_bytes: int = Field(default=64_000, ge=512)
    thread_retention_s: float = Field(default=86_400.0, ge=0)  # then closed threads are forgotten
    # a worker that takes over thread or span-assembly partitions waits this long for a report
    # on each source partition (from whichever worker reads it) before closing a thread, or
    # assembling a trace, that its backlog may still feed; then counts it as read
    unheard_source_wait_s: float = Field(default=300.0, ge=0)

    # OpenTelemetry spans, as the Collector's Kafka exporter writes them ("" turns it off)
    otlp_topic: str = "otlp_spans"
    # the exporter's encoding; "auto" tells them apart (OTLP/JSON is an object)
    otlp_encoding: Literal["auto", "otlp_proto", "otlp_json"] = "auto"
    otlp_grace_s: float = Field(default=5.0, ge=0)  # after the root span, for late children
    otlp_max_wait_s: float = Field(default=600.0, gt=0)  # a trace whose root never comes
    otlp_max_spans: int = Field(default=1000, ge=1)
    # a trace's spans as stored (the table entry): well under Kafka's 1 MB message size
    otlp_max_bytes: int = Field(default=256_000, ge=1024, le=300_000)
    # an assembled trace is remembered this long, so a redelivered span of it is dropped
    otlp_retention_s: float = Field(default=600.0, ge=0)

    @model_validator(mode="after")
    def _turn_fits_its_thread(self) -> Settings:
        if self.turn_max_bytes > self.thread_max_bytes:
            raise ValueError(
                f"SCORER_TURN_MAX_BYTES ({self.turn_max_bytes}) must not exceed "
                f"SCORER_THREAD_MAX_BYTES ({self.thread_max_bytes})"
            )
        return self

    @property
    def thread_events_topic_name(self) -> str:
        return self.thread_events_topic or f"{self.app_id}-thread-events"

    @property
    def otlp_assembly_topic(self) -> str:
        """Internal: the spans of each trace, keyed by trace id, where its table is."""
        return f"{self.app_id}-otlp-assembly"

    @property
    def otlp_traces_topic(self) -> str:
        """Internal: traces assembled from spans, read by the trace agent."""
        return f"{self.app_id}-otlp-traces"

    @property
    def judge_configured(self) -> bool:
        return bool(self.openai_base_url or self.openai_api_key)

    def judge_cost(self, model: str, usage: TokenUsage) -> float | None:
        """Estimated US dollars of ``usage`` on ``model``, or None when it has no price."""
        price = self.judge_prices.get(model)
        return price.cost(usage.prompt_tokens, usage.completion_tokens) if price else None

    def ruleset(self, packs: list[str] | None = None) -> RuleSet:
        """The rule set this deployment runs: the packs' rule files (``packs``, or the
        configured ones), with the deployment's pack filters over their own."""
        loaded = load_rules(self.rules_dir, packs if packs is not None else self.packs)
        return loaded.with_pack_filters(self.pack_filters)
