"""Event models: what comes in (traces) and what goes out (scores, decisions)."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property, lru_cache
from typing import Any, Literal

import orjson
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    ValidationError,
    model_validator,
)

Scope = Literal["trace", "thread", "pair", "tool_call"]
Status = Literal["ok", "skipped", "error"]
Outcome = Literal["filtered", "sampled_out", "skipped", "scored", "error", "deferred"]

SCORE_ID_NAMESPACE = uuid.UUID("6f1c8f5e-3b7a-4c1e-9a57-5d1b2f0c9e11")
_NAMESPACE_BYTES = SCORE_ID_NAMESPACE.bytes


def utcnow() -> datetime:
    return datetime.now(UTC)


class Trace(BaseModel):
    """An LLM trace; field names follow Opik's trace model so exports replay as-is.

    Real exports are taken as they come: only ``id`` is required (a string, not blank; a
    number is not taken, since ids are compared as text downstream). Every other field is
    optional, and a ``null`` or a value of the wrong shape counts as absent (Opik and LangChain exports carry ``"metadata": null``
    and the like); the document itself keeps every field as sent, unknown ones included, for
    rules to read.
    """

    model_config = ConfigDict(extra="allow")

    id: str = Field(min_length=1)
    project_name: str = "default"
    name: str | None = None
    thread_id: str | None = None
    start_time: datetime | None = None
    end_time: datetime | None = None
    input: Any = None
    output: Any = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    tags: list[str] = Field(default_factory=list)
    usage: dict[str, Any] | None = None

    # one validator for the model rather than one a field: pydantic calls a field's Python
    # validator for every trace and every field it names (2 us a trace); this one calls the
    # model's own validation once, and again only when a field of the wrong shape is dropped
    @model_validator(mode="wrap")
    @classmethod
    def _as_taken(cls, data: Any, handler: ModelWrapValidatorHandler[Trace]) -> Trace:
        if not isinstance(data, dict):
            return handler(data)
        taken = _texts_and_tags(data)
        try:
            try:
                return handler(taken)
            except ValidationError as exc:
                fields = {str(error["loc"][0]) for error in exc.errors() if error["loc"]}
                dropped = {field: _ABSENT[field] for field in fields if field in _ABSENT}
                if not dropped:
                    raise
                taken = {**taken, **dropped}
                return handler(taken)
        except ValidationError as exc:  # what is wrong with the id: said of the trace as sent
            if taken is data:
                raise
            errors = exc.errors()
            for error in errors:
                if error["input"] is taken:
                    error["input"] = data
            raise ValidationError.from_exception_data(exc.title, errors) from None  # type: ignore[arg-type]

    @cached_property
    def view(self) -> dict[str, Any]:
        """The trace as one JSON object, as a rule filter's ``when`` reads it: every field as
        taken (unknown ones too, such as Opik's ``error_info``, ``total_estimated_cost`` and
        ``duration``), times as ISO 8601 text, and, unless the trace carries a field of that
        name, ``latency_s`` (end minus start time in seconds, else Opik's ``duration`` in
        milliseconds / 1000, else null), ``cost`` (Opik's ``total_estimated_cost``, else null)
        and ``error`` (true when the trace has an ``error_info`` or a span whose status is
        ``error``). Built once, when first read: a trace is not changed after parsing."""
        extra = self.model_extra or {}
        computed = {
            "latency_s": _latency_s(self),
            "cost": _number(extra.get("total_estimated_cost")),
        }
        computed["error"] = bool(extra.get("error_info")) or _span_in_error(extra.get("spans"))
        return {
            **computed,
            **extra,
            "id": self.id,
            "name": self.name,
            "project_name": self.project_name,
            "thread_id": self.thread_id,
            "start_time": self.start_time.isoformat() if self.start_time else None,
            "end_time": self.end_time.isoformat() if self.end_time else None,
            "input": self.input,
            "output": self.output,
            "metadata": self.metadata,
            "tags": self.tags,
            "usage": self.usage,
        }


# the fields whose value, when it does not validate, counts as absent: what it then is
_ABSENT: dict[str, Any] = {"start_time": None, "end_time": None, "usage": None, "metadata": {}}
# the text fields taken as ``_text_or`` says: a missing one is its default
_TEXTS = (("project_name", "default"), ("name", None), ("thread_id", None))


def _texts_and_tags(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with its text fields and tags as they are taken (a blank id is empty, which
    is invalid; a number as text; a lone tag as a list): a copy when one of them changes."""
    taken: dict[str, Any] | None = None
    value = data.get("id")
    if isinstance(value, str) and not value.strip():
        taken = {"id": ""}
    for name, absent in _TEXTS:
        if name in data:
            value = data[name]
            if type(value) is not str or not value:
                taken = taken or {}
                taken[name] = _text_or(value, absent)
    if "metadata" in data and data["metadata"] is None:  # as Opik exports say none
        taken = taken or {}
        taken["metadata"] = {}
    if "tags" in data:
        value = data["tags"]
        if type(value) is not list or any(type(tag) is not str for tag in value):
            taken = taken or {}
            taken["tags"] = _tag_list(value)
    return data if taken is None else {**data, **taken}


def _tag_list(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list):
        return []
    kept = (t for t in value if isinstance(t, str | int | float) and not isinstance(t, bool))
    return [str(t) for t in kept]


def _text_or(value: Any, absent: str | None) -> Any:
    """A text field as taken: text that is not empty, a number as text, else ``absent``."""
    if isinstance(value, str) and value:
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return absent


def _number(value: Any) -> float | None:
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


def _latency_s(trace: Trace) -> float | None:
    start, end = trace.start_time, trace.end_time
    if start is not None and end is not None:
        if (start.tzinfo is None) != (end.tzinfo is None):  # a naive time is taken as UTC
            start, end = (
                start.replace(tzinfo=start.tzinfo or UTC),
                end.replace(tzinfo=end.tzinfo or UTC),
            )
        return (end - start).total_seconds()
    duration_ms = _number((trace.model_extra or {}).get("duration"))
    return duration_ms / 1000 if duration_ms is not None else None


def _span_in_error(spans: Any) -> bool:
    if not isinstance(spans, list):
        return False
    return any(isinstance(span, dict) and span.get("status") == "error" for span in spans)


def parse_trace(raw: bytes | None) -> tuple[Trace, Any]:
    """Decode and validate one trace message; returns the model and the JSON document.

    Raises ``ValueError`` (``orjson.JSONDecodeError`` and pydantic's ``ValidationError`` are
    ones) when the message is not a trace.
    """
    if raw is None:
        raise ValueError("empty message (no value)")
    document = orjson.loads(raw)
    if not isinstance(document, dict):
        raise ValueError(f"a trace must be a JSON object, got {type(document).__name__}")
    return _validated_trace(document), document


# the model's validator, as ``Trace.model_validate`` calls it, without its Python frame
_validated_trace: Callable[[Any], Trace] = Trace.__pydantic_validator__.validate_python


def score_id(rule_id: str, rule_version: int, scope: str, target_id: str) -> str:
    """Deterministic id: a redelivered event yields the same id (idempotent downstream).

    A UUIDv5 (RFC 4122: SHA-1 of namespace + name) of rule id, version, scope and target,
    formatted directly: ``uuid.uuid5`` builds objects that cost more than the hash itself. The
    hash of the namespace and the rule's part of the name is taken once a rule (a copy of it
    goes on with the target).
    """
    digest = _rule_hash(rule_id, rule_version, scope).copy()
    digest.update(target_id.encode())
    h = digest.hexdigest()
    # version 5 in the version nibble, RFC 4122's variant in the two top bits of the next
    return f"{h[:8]}-{h[8:12]}-5{h[13:16]}-{_VARIANT[h[16]]}{h[17:20]}-{h[20:32]}"


@lru_cache(maxsize=4096, typed=True)  # a version of 1 and of True are two names
def _rule_hash(rule_id: str, rule_version: int, scope: str) -> Any:
    name = f"{rule_id}\x1f{rule_version}\x1f{scope}\x1f".encode()
    return hashlib.sha1(_NAMESPACE_BYTES + name, usedforsecurity=False)


_VARIANT = {digit: "89ab"[int(digit, 16) & 3] for digit in "0123456789abcdef"}


class Scale(BaseModel):
    """The raw scale a rule scores on."""

    min: float
    max: float

    def normalise(self, raw: float) -> float:
        """``raw`` on 0..1 (a one-point scale normalises to 1)."""
        if self.max == self.min:
            return 1.0
        return (raw - self.min) / (self.max - self.min)


class TokenUsage(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    cached_tokens: int = Field(
        default=0,
        description="Of prompt_tokens, those the provider served from its prompt cache "
        "(usage.prompt_tokens_details.cached_tokens), priced at the cached-input rate",
    )
    batch: bool = Field(
        default=False,
        description="Answered through the provider's Batch API, priced at the batch rate",
    )

    def __add__(self, other: TokenUsage) -> TokenUsage:
        # a sum is batch only when both parts are: a mixed one is priced online, never
        # counted cheaper than it was
        return TokenUsage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            total_tokens=self.total_tokens + other.total_tokens,
            cached_tokens=self.cached_tokens + other.cached_tokens,
            batch=self.batch and other.batch,
        )


class ThreadInfo(BaseModel):
    """What a thread-scope score judged: which close of which thread, and how much of it."""

    kind: Literal["conversation", "session"]
    close_seq: int = Field(description="1 for the first close; a reopened thread closes again")
    close_reason: Literal["end", "inactivity", "inactivity_event_time"]
    turn_count: int = Field(description="Turns the rule saw")
    dropped_turns: int = Field(description="Oldest turns dropped by the thread's size caps")
    truncated_bytes: int = Field(
        default=0,
        description="Bytes cut from turns over SCORER_TURN_MAX_BYTES (marked in the text)",
    )


class ScoreEvent(BaseModel):
    """One score, published on the scores topic (key = target id)."""

    score_id: str
    rule_id: str
    pack: str
    rule_version: int
    scope: Scope
    criterion: str | None = Field(
        default=None,
        description="Rubric rules publish several scores per target: which one this is (a "
        "criterion id, or the rubric's own output such as overall or score); null otherwise",
    )
    target_id: str
    project_name: str
    value: float | None = Field(description="Normalised to 0..1; null unless status is ok")
    raw_value: float | None = None
    scale: Scale
    label: str | None = None
    reason: str | None = None
    higher_is_better: bool
    status: Status
    status_reason: str | None = None
    judge_model: str | None = None
    latency_ms: float | None = None
    usage: TokenUsage | None = None
    thread: ThreadInfo | None = Field(default=None, description="Thread-scope scores only")
    details: dict[str, Any] | None = Field(
        default=None,
        description="Structured detail of an aggregate score (e.g. a rubric's failed checks); "
        "a tool-call score's trace_id (the trace the call is in) and tool (the tool's name)",
    )
    variant: str | None = Field(
        default=None,
        description="A shadow judge's score: the name of the rule's shadow variant that gave "
        "it (its own score id; kept out of the quality metrics and alerts); null for the "
        "rule's own (primary) score",
    )
    created_at: datetime = Field(default_factory=utcnow)

    def to_bytes(self) -> bytes:
        # model_dump_json's bytes, without its decoding to text and our encoding back
        return self.__pydantic_serializer__.to_json(self)

    @property
    def full_name(self) -> str:
        """The score's name where it is shown apart from its rule set (score platforms,
        OpenTelemetry back-ends): the rule id, a rubric's criterion after a dot, a shadow's
        variant after an ``@`` (``code_review.correctness@mini``)."""
        name = self.rule_id if self.criterion is None else f"{self.rule_id}.{self.criterion}"
        return name if self.variant is None else f"{name}@{self.variant}"


# The decision dataclasses keep no __slots__: orjson serialises a dataclass from its __dict__
# at a third of the cost of reading a slotted one field by field (1.9 us a trace's record)
@dataclass
class Decision:
    """Audit record: what the engine decided for one target (trace or thread) and one rule."""

    target_id: str
    rule_id: str
    pack: str
    rule_version: int
    project_name: str
    outcome: Outcome
    detail: str | None = None
    score_id: str | None = None
    created_at: datetime = field(default_factory=utcnow)


@dataclass
class TraceDecisions:
    """One message on the decisions topic: the decision record of every rule for one trace.

    Grouped per trace (key = trace id) so the audit trail costs one message per trace, not
    one per rule; each record stands alone (it repeats the trace id) when flattened. Plain
    dataclasses serialised by orjson: built for every trace, they are on the hot path.
    """

    trace_id: str
    project_name: str
    decisions: list[Decision]
    created_at: datetime = field(default_factory=utcnow)

    def to_bytes(self) -> bytes:
        return orjson.dumps(self)


@dataclass
class ThreadDecisions:
    """One message on the decisions topic per thread close (key = thread id)."""

    thread_id: str
    kind: str
    close_seq: int
    project_name: str
    decisions: list[Decision]
    created_at: datetime = field(default_factory=utcnow)

    def to_bytes(self) -> bytes:
        return orjson.dumps(self)


def stable_fraction(*parts: str) -> float:
    """A number in [0, 1) fixed by its inputs: used for deterministic sampling."""
    digest = hashlib.sha256("\x1f".join(parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64
