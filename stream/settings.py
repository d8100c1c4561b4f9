"""Deployment configuration, from the environment (rules are data, not settings)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

import orjson
import phonenumbers
from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from .engine.spend import DEFAULT_JUDGE_PRICES, Budget, ModelPrice, judge_cost
from .judge.config import JudgeConfig
from .kafka.security import KafkaSecurity
from .models import TokenUsage
from .redact.detectors import DEFAULT_REGIONS
from .redact.policy import RedactionPolicy, load_entities, unmasked_problems
from .ruleset.filters import PackFilter
from .ruleset.location import RulesDirs

SESSION_TIMEOUT_S = 30.0  # the consumer group's session timeout on a Kafka cluster
TANSU_SESSION_TIMEOUT_S = 10.0  # on the embedded broker (design record 53)

RedactKind = Annotated[str, Field(pattern=r"^[A-Z][A-Z0-9_]*$")]  # a placeholder's name


def default_store() -> Literal["memory", "rocksdb"]:
    """RocksDB where its binding (rocksdict, a dependency with wheels for Linux, macOS and
    Windows) imports, else the memory store."""
    try:
        import rocksdict  # noqa: F401
    except ImportError:
        return "memory"
    return "rocksdb"


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
    # where the embedded broker (no KAFKA_BOOTSTRAP_SERVERS) listens: `scorer worker` takes
    # another free port if this one is in use, `scorer demo --keep-running` insists on it
    embedded_port: int = Field(default=9092, ge=1, le=65535)
    app_id: str = "llm-trace-scorer"
    traces_topic: str = "llm-traces"
    sessions_topic: str = "coaching-sessions"
    scores_topic: str = "scores"
    decisions_topic: str = "score-decisions"
    dlq_topic: str = "scorer-dlq"
    # human labels in (joined with the scores they grade), their joins out (design record 26);
    # "" turns the join off (it reads the scores topic back: one JSON parse per score)
    labels_topic: str = "human-labels"
    agreement_topic: str = "score-agreement"
    # a label and a score meet if the second arrives within this long of the first
    label_retention_s: float = Field(default=7 * 86_400.0, gt=0)
    # each score as an OpenTelemetry gen_ai.evaluation.result event (an OTLP logs export per
    # message, in the Collector's Kafka encodings); "" (the default) turns it off
    otel_events_topic: str = ""
    otel_events_encoding: Literal["otlp_proto", "otlp_json"] = "otlp_proto"
    thread_events_topic: str | None = None  # None: "<app_id>-thread-events"
    # reference documents (design record 50): a compacted topic keyed by reference id, read
    # whole by every worker before it scores; a trace's reference (metadata.reference_id, else
    # its id) joins its document as `reference`. "" (the default) turns it off
    references_topic: str = ""
    # the most the references held may take (keys, JSON values and 120 bytes each); past it
    # the least recently written are dropped, with a warning and a metric
    references_max_bytes: int = Field(default=64 * 2**20, ge=4096)
    topic_partitions: int = 4
    # the consumer group's session timeout; unset: 30 s on a Kafka cluster, 10 s on the
    # embedded broker, whose coordinator holds every JoinGroup for half of it (record 53)
    session_timeout_s: float | None = Field(default=None, gt=0)
    # static group membership (KIP-345, Kafka's group.instance.id): a stable name per worker
    # (a StatefulSet's pod name), so that a worker restarted within its session timeout gets
    # its partitions back without a rebalance. "" (the default): a dynamic member
    instance_id: str = Field(default="", max_length=249, pattern=r"^[A-Za-z0-9._-]*$")
    # how long the producer waits to fill a batch before sending it: Apache Kafka 4.0's own
    # producer default (KIP-1030); 0 sends each record as soon as the sender is free
    producer_linger_ms: float = Field(default=5.0, ge=0, le=1000)

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
    # {"model": "gpt-4o", "tokens": 2000000, "window": "hour"}]; a spent one skips its rules,
    # or, as its "mode" says, lowers their sampling rate ("sample"), judges them with a
    # cheaper model ("fallback": "<model>") or in a batch ("defer") (docs/configuration.md)
    judge_budgets: list[Budget] = Field(default_factory=list)
    judge_structured_output: bool = True
    # the verdict cache (design record 22): a verdict given to the same prompt, model, answer
    # schema and rule version is reused for this long, at most this many per worker (the
    # least recently used go first); 0 for either turns the cache off
    judge_cache_ttl_s: float = Field(default=86_400.0, ge=0)
    judge_cache_max_entries: int = Field(default=100_000, ge=0)
    # the verdicts also kept in the changelog-backed ``verdicts`` table (the store of
    # SCORER_STORE), in the asking record's partition: they survive a restart and move with
    # their partition; false: in memory only
    judge_cache_table: bool = True
    # batch judging (judge.mode: batch, a defer budget): how often a worker polls its pending
    # batches and submits the judge requests it has gathered
    batch_poll_s: float = Field(default=60.0, gt=0)
    # the Batch API's endpoint, when it is not the judge's (OPENAI_BASE_URL)
    batch_base_url: str | None = None
    # how long a batch that cannot be polled, or jobs that cannot be submitted, are tried
    # again before their jobs are judged by ordinary calls
    batch_give_up_s: float = Field(default=1800.0, gt=0)
    judge_prices: dict[str, ModelPrice] = Field(default_factory=lambda: dict(DEFAULT_JUDGE_PRICES))

    # Worker.
    # the folders of rule packs, ':'-separated (as PATH) or a JSON list, searched in order and
    # then the packs installed with the package (the repository's rules/ in a checkout),
    # unless an entry is "no-shipped-packs"; a pack name in two folders stops the start
    rules_dir: Annotated[RulesDirs, NoDecode] = Field(default_factory=lambda: RulesDirs.parse([]))
    # the packs to load (JSON list), whole; ["all"] or all: every pack. None: every pack of
    # your folders, the shipped conversation pack, and the other shipped packs' checks only
    # (docs/design/39-the-packs-a-worker-loads.md)
    packs: Annotated[list[str] | None, NoDecode] = None
    # a deployment's filters over the packs' own (JSON): {"fretcoach": {"projects": ["prod"],
    # "trace_names": {"hub-coach-chat": ["hub-chat-v2"]}}}; the rule files stay as shipped
    pack_filters: dict[str, PackFilter] = Field(default_factory=dict)
    # rule ids switched off (JSON list), as "enabled: false" in their files would; an id that
    # names no loaded rule fails start-up
    disabled_rules: list[str] = Field(default_factory=list)
    # how often the rule files are looked at for changes, reloaded when they changed
    # (validated first: a bad file keeps the running set); 0: only on SIGHUP
    rules_reload_s: float = Field(default=5.0, ge=0)
    # a trace rule that matched none of this many traces in a row is reported silent (a
    # warning naming what it saw instead, and scorer_rule_silent); 0: never
    silent_after_traces: int = Field(default=500, ge=0)
    # what is masked in the judge's copy (a rule's judge.redact, docs/rules.md): the regions
    # whose national phone formats are read (ISO 3166 codes, JSON list); the deployment's
    # own kinds, as regular expressions (JSON: {"TICKET": ["ACME-\\d{5}"]}) and as word
    # lists matched whole and without case (JSON: {"CUSTOMER": ["Contoso"]})
    redact_phone_regions: list[str] = Field(default_factory=lambda: list(DEFAULT_REGIONS))
    redact_patterns: dict[RedactKind, list[str]] = Field(default_factory=dict)
    redact_words: dict[RedactKind, list[str]] = Field(default_factory=dict)
    # redaction required: no rule may send a judge outside SCORER_REDACT_RAW_HOSTS (the hosts
    # of self-hosted judges, JSON list) text with a shipped kind unmasked (start-up fails)
    # a named-entity detector the deployment installed, "module:factory" (docs/rules.md):
    # names and street addresses; unset: none (no model is loaded)
    redact_entities: str | None = None
    redact_required: bool = False
    redact_raw_hosts: list[str] = Field(default_factory=list)
    # the projects the score metrics label by name (JSON list), every other one "other";
    # unset: the projects the rules' filters name and the first metric_project_limit others
    metric_projects: list[Annotated[str, Field(min_length=1)]] | None = None
    # the metrics' DEFAULT_PROJECT_LIMIT (not imported: settings load no metrics library;
    # tests/metrics/test_project_labels.py holds the two equal)
    metric_project_limit: int = Field(default=10, ge=0)
    # the tool-call metrics' DEFAULT_TOOL_LIMIT: tool names labelled as they come, every later
    # one "other" (tests/metrics/test_tool_call_metrics.py holds the two equal)
    metric_tool_limit: int = Field(default=20, ge=0)
    # the tool calls of one trace the tool-call rules score, the first ones; a trace with more
    # says so in a decision per rule (its decision record and its scores stay bounded)
    tool_calls_max: int = Field(default=200, ge=1)
    max_in_flight: int = Field(default=512, ge=1)  # traces per worker being scored at once
    # traces taken from the stream and scored together (their messages sent as one producer
    # batch); while traces arrive fast, a batch waits up to the wait to fill (design record 32)
    trace_batch_max: int = Field(default=64, ge=1)
    trace_batch_wait_ms: float = Field(default=5.0, ge=0, le=1000)
    web_port: int = 6066
    lag_interval_s: float = Field(default=15.0, gt=0)  # how often consumer lag is measured
    # the workers judging with one account share its limits through <app_id>-judge-pace
    # (design record 46); false: each paces alone
    judge_pace_share: bool = True
    web_host: str = "127.0.0.1"
    data_dir: Path = Path(".scorer-data")
    # where the tables live between restarts: "rocksdb" (local files under data_dir, read at a
    # restart) or "memory" (a snapshot under data_dir written at a clean stop, else rebuilt
    # from the changelogs). Default: rocksdb where rocksdict imports, else memory
    store: Literal["memory", "rocksdb"] = Field(default_factory=default_store)
    # the worker's memory budget in MiB: a quarter of it goes to RocksDB (one block cache for
    # every table partition's database, their write buffers charged to it), the rest is the
    # Python process's (design record 37); the memory store's tables are not bounded by it
    memory_mb: int = Field(default=512, ge=256)
    # a data directory holding tables from another broker (a reset or other cluster): "fail"
    # stops the start in one line naming it; "rebuild" discards its tables and rebuilds them
    # from the changelogs (design record 38)
    stale_state: Literal["fail", "rebuild"] = "fail"
    # start on faust-streaming, aiokafka or rocksdict versions the mends were not read
    # against (stream/kafka/mends/library_versions.py), with a warning, instead of stopping
    allow_untested_libraries: bool = False

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

    @field_validator("redact_phone_regions")
    @classmethod
    def _known_regions(cls, regions: list[str]) -> list[str]:
        unknown = [r for r in regions if r not in phonenumbers.SUPPORTED_REGIONS]
        if unknown:
            raise ValueError(f"not regions libphonenumber knows (ISO 3166 codes): {unknown}")
        return regions

    @field_validator("redact_patterns")
    @classmethod
    def _patterns_compile(cls, kinds: dict[str, list[str]]) -> dict[str, list[str]]:
        for kind, expressions in kinds.items():
            for expression in expressions:
                try:
                    re.compile(expression)
                except re.error as exc:
                    message = f"{kind}: {expression!r} is not a regular expression: {exc}"
                    raise ValueError(message) from None
        return kinds

    def redaction_policy(self) -> RedactionPolicy:
        """The detectors a rule's ``judge.redact`` chooses among, as this deployment has them."""
        entities = load_entities(self.redact_entities) if self.redact_entities else None
        return RedactionPolicy(
            self.redact_phone_regions, self.redact_patterns, self.redact_words, entities
        )

    def judge_hosts(self) -> set[str]:
        """The hosts the judges are asked at: the chat (and decisions) endpoint and the Batch
        API's (OpenAI's own where unset)."""
        urls = [self.openai_base_url, self.batch_base_url or self.openai_base_url]
        return {urlsplit(url).hostname or url if url else "api.openai.com" for url in urls}

    def redaction_problems(self, rules: Iterable[tuple[str, bool | list[str]]]) -> list[str]:
        """What stops a worker: a rule's ``judge.redact`` naming a kind no detector finds, or,
        where redaction is required, leaving a kind unmasked for a judge outside the hosts
        allowed raw text. ``rules``: (rule id, ``judge.redact``)."""
        listed = list(rules)
        problems = self.redaction_policy().problems(listed)
        if self.redact_required:
            problems += unmasked_problems(listed, self.judge_hosts(), self.redact_raw_hosts)
        return problems

    @field_validator("packs", mode="before")
    @classmethod
    def _packs_listed(cls, value: object) -> object:
        """A JSON list of pack names, or ``all`` (plain or the only name of the list)."""
        if isinstance(value, str):
            text = value.strip()
            if text == "all":
                return ["all"]
            try:
                value = orjson.loads(text)
            except orjson.JSONDecodeError:
                raise ValueError(
                    'a JSON list of pack names (\'["fretcoach", "critique"]\'), or all'
                ) from None
        if isinstance(value, list) and "all" in value and len(value) > 1:
            raise ValueError('"all" loads every pack: name it alone, or list the packs')
        return value

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
    def agreement_events_topic(self) -> str:
        """Internal: labels and judged scores, keyed by target id, where the join table is."""
        return f"{self.app_id}-agreement-events"

    @property
    def agreement_measure_topic(self) -> str:
        """Internal, one partition: every joined pair, read by the one worker measuring."""
        return f"{self.app_id}-agreement-measure"

    @property
    def judge_pace_topic(self) -> str:
        """Internal, one partition, compacted: each worker's judge pace, read by every one."""
        return f"{self.app_id}-judge-pace"

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

    def memory_share(self, share: float) -> int:
        """``share`` of the memory budget (``SCORER_MEMORY_MB``), in bytes."""
        return int(self.memory_mb * 2**20 * share)

    def judge_cost(self, model: str, usage: TokenUsage) -> float | None:
        """Estimated US dollars of ``usage`` on ``model``, or None when it has no price."""
        return judge_cost(self.judge_prices, model, usage)

    def session_timeout(self) -> float:
        """The session timeout in seconds: as set, else 10 on the embedded broker (Tansu
        answers a JoinGroup only after half of it: a 15 s join at 30) and 30 elsewhere."""
        if self.session_timeout_s is not None:
            return self.session_timeout_s
        return TANSU_SESSION_TIMEOUT_S if self.broker_kind == "tansu" else SESSION_TIMEOUT_S

    def membership(self) -> str:
        """The start-up line on the worker's group membership."""
        said = f"group {self.app_id}, session timeout {self.session_timeout():g} s"
        if not self.instance_id:
            return f"{said}, a dynamic member"
        said = f"{said}, static member {self.instance_id} (SCORER_INSTANCE_ID)"
        if self.broker_kind == "tansu":  # record 53: Tansu does not fence a second holder
            said += "; the embedded broker does not fence two workers given one instance id"
        return said

    def judge_config(self) -> JudgeConfig:
        """What the judge client needs of this deployment."""
        return JudgeConfig(
            base_url=self.openai_base_url,
            api_key=self.openai_api_key,
            model=self.judge_model,
            timeout_s=self.judge_timeout_s,
            max_attempts=self.judge_max_attempts,
            backoff_base_s=self.judge_backoff_base_s,
            backoff_max_s=self.judge_backoff_max_s,
            max_concurrency=self.judge_max_concurrency,
            outage_max_s=self.judge_outage_max_s,
            structured_output=self.judge_structured_output,
            prices=dict(self.judge_prices),
        )
