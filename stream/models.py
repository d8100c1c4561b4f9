"""Event models: what comes in (traces) and what goes out (scores, decisions)."""

from __future__ import annotations

import hashlib
import uuid
from datetime import UTC, datetime
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field

Scope = Literal["trace", "thread"]
Status = Literal["ok", "skipped", "error"]
Outcome = Literal["filtered", "sampled_out", "skipped", "scored", "error"]

SCORE_ID_NAMESPACE = uuid.UUID("6f1c8f5e-3b7a-4c1e-9a57-5d1b2f0c9e11")


def utcnow() -> datetime:
    return datetime.now(UTC)


class Trace(BaseModel):
    """An LLM trace; field names follow Opik's trace model so exports replay as-is."""

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

    def as_document(self) -> dict[str, Any]:
        """The JSON document that rule variable paths are evaluated against."""
        return self.model_dump(mode="json")


def score_id(rule_id: str, rule_version: int, scope: str, target_id: str) -> str:
    """Deterministic id: a redelivered event yields the same id (idempotent downstream)."""
    return str(
        uuid.uuid5(SCORE_ID_NAMESPACE, f"{rule_id}\x1f{rule_version}\x1f{scope}\x1f{target_id}")
    )


class Scale(BaseModel):
    """The raw scale a rule scores on."""

    min: float
    max: float


class TokenUsage(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0


class ScoreEvent(BaseModel):
    """One score, published on the scores topic (key = target id)."""

    score_id: str
    rule_id: str
    pack: str
    rule_version: int
    scope: Scope
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
    created_at: datetime = Field(default_factory=utcnow)

    def to_bytes(self) -> bytes:
        return orjson.dumps(self.model_dump(mode="json"))


class Decision(BaseModel):
    """Audit record: what the engine decided for one trace and one rule."""

    trace_id: str
    rule_id: str
    pack: str
    rule_version: int
    project_name: str
    outcome: Outcome
    detail: str | None = None
    score_id: str | None = None
    created_at: datetime = Field(default_factory=utcnow)

    def to_bytes(self) -> bytes:
        return orjson.dumps(self.model_dump(mode="json"))


def stable_fraction(*parts: str) -> float:
    """A number in [0, 1) fixed by its inputs: used for deterministic sampling."""
    digest = hashlib.sha256("\x1f".join(parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64
