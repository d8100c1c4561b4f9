"""What the engine produces for one target: decision records and score events, built here
and nowhere else (one factory for one-verdict, check, rubric and unscored outcomes)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..models import (
    Decision,
    Outcome,
    Scale,
    ScoreEvent,
    Status,
    ThreadInfo,
    TokenUsage,
    score_id,
)
from ..ruleset.schema import AnyRule

OUTCOME_OF_STATUS: dict[Status, Outcome] = {"ok": "scored", "skipped": "skipped", "error": "error"}


@dataclass(slots=True)
class Target:
    """What is scored: a trace, or one close of a thread (its id hashes into score ids)."""

    id: str
    project_name: str
    score_key: str
    thread: ThreadInfo | None = None
    # the OpenTelemetry span a trace assembled from spans is (its root span's id, 16 hex):
    # its scores say it in ``details.otel_span_id``, for their evaluation events
    span_id: str | None = None
    # a tool call (``scope: tool_call``): the trace it belongs to and the tool's name; its
    # scores say both in ``details`` (``trace_id``, ``tool``) and are keyed by the trace
    trace: str | None = None
    tool: str | None = None


def call_score_key(trace_id: str, call_id: str) -> str:
    """What a tool call's score ids hash: a call id is unique in its trace only."""
    return f"{trace_id}\x1f{call_id}"


@dataclass(slots=True)  # not frozen: a frozen __init__ costs a setattr call per field
class Measured:
    """What one rule (or one criterion of a rubric) came to, before it is a score event."""

    status: Status
    status_reason: str | None = None
    raw_value: float | None = None
    label: str | None = None
    reason: str | None = None
    judge_model: str | None = None
    latency_ms: float | None = None
    usage: TokenUsage | None = None
    details: dict[str, Any] | None = None
    # what the decision record says of an ``ok`` score (e.g. the items a fan-out left out);
    # a score not ok says its status_reason
    decision_detail: str | None = None


@dataclass
class RuleOutcome:
    """What one rule decided for one target: always a decision, a score unless filtered out."""

    decision: Decision
    score: ScoreEvent | None
    extra: list[ScoreEvent] = field(default_factory=list)  # a rubric's other scores
    # a shadow judge's outcome: its scores carry the variant; its decision is not published
    # (the rule's decision is its own judge's)
    variant: str | None = None


@dataclass
class TraceResult:
    """Every rule's outcome for one target."""

    outcomes: list[RuleOutcome]

    @property
    def scores(self) -> list[ScoreEvent]:
        scores = []
        for o in self.outcomes:  # a loop: no list made for each outcome (every trace's)
            if o.score is not None:
                scores.append(o.score)
            if o.extra:
                scores.extend(o.extra)
        return scores

    @property
    def decisions(self) -> list[Decision]:
        return [o.decision for o in self.outcomes if o.variant is None]


def score_rule_key(rule: AnyRule, criterion: str | None) -> str:
    """What a score id hashes for the rule: its id, the criterion for rubric scores, and a
    shadow judge's variant (so its scores have ids of their own)."""
    return _rule_key(rule.id, criterion, rule.variant)


def _rule_key(rule_id: str, criterion: str | None, variant: str | None) -> str:
    key = rule_id if criterion is None else f"{rule_id}/{criterion}"
    return key if variant is None else f"{key}@{variant}"


def make_decision(
    rule: AnyRule,
    target: Target,
    outcome: Outcome,
    created_at: datetime,
    detail: str | None = None,
    sid: str | None = None,
) -> Decision:
    """The audit record of what ``rule`` decided for ``target``."""
    # positional: built for every rule and every trace, on the hot path
    return Decision(
        target.id,
        rule.id,
        rule.pack,
        rule.version,
        target.project_name,
        outcome,
        detail,
        sid,
        created_at,
    )


@dataclass(frozen=True, slots=True)
class ScoreShape:
    """Which score of a rule an event is: its criterion (rubrics), scale and direction."""

    criterion: str | None
    scale: Scale
    higher_is_better: bool

    @classmethod
    def of_rule(cls, rule: AnyRule) -> ScoreShape:
        return cls(None, rule.output.scale, rule.output.higher_is_better)


def make_score(
    rule: AnyRule, target: Target, shape: ScoreShape, measured: Measured, created_at: datetime
) -> ScoreEvent:
    """The score event for one measured outcome; its value is normalised only when ok."""
    ok = measured.status == "ok" and measured.raw_value is not None
    raw = measured.raw_value if ok else None
    variant = rule.variant  # read once: a private attribute
    # the model's validator given the fields at once: what ``ScoreEvent(**fields)`` does,
    # without the keyword arguments' unpacking and ``BaseModel.__init__`` (1 us a score)
    return _validated_score(
        {
            "score_id": score_id(
                _rule_key(rule.id, shape.criterion, variant),
                rule.version,
                rule.scope,
                target.score_key,
            ),
            "rule_id": rule.id,
            "pack": rule.pack,
            "rule_version": rule.version,
            "scope": rule.scope,
            "criterion": shape.criterion,
            "target_id": target.id,
            "project_name": target.project_name,
            "value": shape.scale.normalise(raw) if raw is not None else None,
            "raw_value": raw,
            "scale": shape.scale,
            "label": measured.label,
            "reason": measured.reason,
            "higher_is_better": shape.higher_is_better,
            "status": measured.status,
            "status_reason": measured.status_reason,
            "judge_model": measured.judge_model,
            "latency_ms": measured.latency_ms,
            "usage": measured.usage,
            "thread": target.thread,
            "details": _details(target, measured.details),
            "variant": variant,
            "created_at": created_at,
        }
    )


_validated_score: Callable[[dict[str, Any]], ScoreEvent] = (
    ScoreEvent.__pydantic_validator__.validate_python
)


def _details(target: Target, details: dict[str, Any] | None) -> dict[str, Any] | None:
    """A score's details: the measured ones, and what names its target's place (the span a
    trace assembled from spans is; the trace and tool of a call)."""
    if target.span_id is None and target.trace is None:
        return details
    named = dict(details or {})
    if target.span_id is not None:
        named["otel_span_id"] = target.span_id
    if target.trace is not None:
        named["trace_id"] = target.trace
        named["tool"] = target.tool
    return named
