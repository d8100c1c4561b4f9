"""A score as an OpenTelemetry evaluation event: one ``gen_ai.evaluation.result`` log record in
an OTLP logs export, as the Collector's Kafka exporter writes logs (design record 31).

The event follows the GenAI semantic conventions' evaluation event (semantic conventions
v1.38.0, ``docs/gen-ai/gen-ai-events.md``; stability: development): the log record's
``event_name`` is ``gen_ai.evaluation.result``, its attributes

- ``gen_ai.evaluation.name`` (required): the rule id, and a rubric's criterion after a dot
  (``code_review.correctness``, as the score sinks name it);
- ``gen_ai.evaluation.score.value``: the judge's raw value on the rule's own scale, and
  ``gen_ai.evaluation.score.label``: its label (yes/no, pass/fail, a choice's name), when ok;
- ``gen_ai.evaluation.explanation``: the judge's reason;
- ``error.type`` for a failed evaluation (an ``error`` score): the judge error's kind (a closed
  set, ``stream.errors.JudgeError``), a raising check's exception type, else ``_OTHER``;
- ``gen_ai.conversation.id`` for a thread score (the thread is the conversation).

The record is parented to the evaluated span, as the convention asks: a trace assembled from
spans has its root span's id in ``details.otel_span_id`` (the engine sets it) and the trace id
as its target id; the record's ``trace_id`` and ``span_id`` are those. A tool call's score is
parented to the call's ``execute_tool`` (or TOOL) span, in the trace ``details.trace_id``
names. Every other score (a trace sent as JSON, a call read from messages, a thread, a pair)
has none. What the convention does not name is kept
under ``scorer.``: rule id, pack, rule version, criterion, scope, score id, target id, project,
status and its reason, judge model, the normalised value and the scale, and ``scorer.variant``
for a shadow judge's score. A ``skipped`` score is not an evaluation and is not emitted.

``otlp_proto`` is the ``ExportLogsServiceRequest`` as protobuf bytes; ``otlp_json`` is OTLP/JSON
(protobuf's JSON mapping, camelCase names, enums as numbers, trace and span ids in hex).
"""

from __future__ import annotations

import base64
import re
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import orjson
from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import (
    SEVERITY_NUMBER_INFO,
    SEVERITY_NUMBER_WARN,
    LogRecord,
    ResourceLogs,
    ScopeLogs,
)
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

from .. import __version__
from ..models import ScoreEvent

Encoding = Literal["otlp_proto", "otlp_json"]

EVENT_NAME = "gen_ai.evaluation.result"
SERVICE_NAME = "llm-trace-scorer"
SCOPE_NAME = "llm-trace-scorer"
SCHEMA_URL = "https://opentelemetry.io/schemas/1.38.0"
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
OTHER_ERROR = "_OTHER"  # the conventions' error.type when no better one is known

# LogRecord.event_name came with OTLP 1.5: an older opentelemetry-proto (1.27 is allowed) lacks it
_HAS_EVENT_NAME = "event_name" in LogRecord.DESCRIPTOR.fields_by_name
_TRACE_ID = re.compile(r"[0-9a-f]{32}")
_SPAN_ID = re.compile(r"[0-9a-f]{16}")
_JUDGE_ERROR = re.compile(r"judge ([a-z_]+):")
_CHECK_RAISED = re.compile(r"check \S+ raised ([A-Za-z_][\w.]*):")


def emitted(score: ScoreEvent) -> bool:
    """Whether ``score`` becomes an event: an evaluation that gave a result or failed (a
    ``skipped`` one did not evaluate anything)."""
    return score.status != "skipped"


def evaluation_name(score: ScoreEvent) -> str:
    """``gen_ai.evaluation.name``: the rule id, with a rubric's criterion after a dot and a
    shadow judge's variant after an ``@`` (shown beside the rule's own, not as it)."""
    return score.full_name


def error_type(score: ScoreEvent) -> str:
    """``error.type`` of an error score: low cardinality, read from its status reason."""
    reason = score.status_reason or ""
    if match := _JUDGE_ERROR.match(reason):
        return match.group(1)
    if match := _CHECK_RAISED.match(reason):
        return match.group(1)
    return OTHER_ERROR


def parent_of(score: ScoreEvent) -> tuple[bytes, bytes]:
    """The evaluated span's (trace id, span id) as OTLP bytes; empty when it has none."""
    details = score.details or {}
    span = details.get("otel_span_id")
    # a tool call's score: the call's own span (an ``execute_tool`` span) in its trace
    trace = score.target_id if score.scope == "trace" else details.get("trace_id")
    if (
        score.scope not in ("trace", "tool_call")
        or not isinstance(trace, str)
        or not isinstance(span, str)
        or not _SPAN_ID.fullmatch(span.lower())
        or not _TRACE_ID.fullmatch(trace.lower())
        or trace == "0" * 32
        or span == "0" * 16
    ):
        return b"", b""
    return bytes.fromhex(trace.lower()), bytes.fromhex(span.lower())


def _value(value: str | int | float | bool) -> AnyValue:
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    return AnyValue(string_value=value)


def _attributes(pairs: dict[str, str | int | float | bool | None]) -> list[KeyValue]:
    return [KeyValue(key=k, value=_value(v)) for k, v in pairs.items() if v is not None]


def event_attributes(score: ScoreEvent) -> dict[str, str | int | float | bool | None]:
    """The event's attributes (None: left out), the convention's first, then ``scorer.``."""
    ok = score.status == "ok"
    return {
        "gen_ai.evaluation.name": evaluation_name(score),
        "gen_ai.evaluation.score.value": score.raw_value if ok else None,
        "gen_ai.evaluation.score.label": score.label if ok else None,
        "gen_ai.evaluation.explanation": score.reason or None,
        "error.type": error_type(score) if score.status == "error" else None,
        "gen_ai.conversation.id": score.target_id if score.scope == "thread" else None,
        "scorer.rule_id": score.rule_id,
        "scorer.pack": score.pack,
        "scorer.rule_version": score.rule_version,
        "scorer.criterion": score.criterion,
        "scorer.scope": score.scope,
        "scorer.score_id": score.score_id,
        "scorer.target_id": score.target_id,
        "scorer.project_name": score.project_name,
        "scorer.status": score.status,
        "scorer.status_reason": score.status_reason,
        "scorer.judge_model": score.judge_model,
        "scorer.value": score.value if ok else None,
        "scorer.scale.min": score.scale.min,
        "scorer.scale.max": score.scale.max,
        "scorer.higher_is_better": score.higher_is_better,
        "scorer.variant": score.variant,
    }


def log_record(score: ScoreEvent) -> LogRecord:
    """``score`` as one ``gen_ai.evaluation.result`` log record."""
    trace_id, span_id = parent_of(score)
    created = score.created_at
    if created.tzinfo is None:  # a score written without an offset: UTC, as ours are
        created = created.replace(tzinfo=UTC)
    moment = (created - EPOCH) // timedelta(microseconds=1) * 1000
    pairs = event_attributes(score)
    named: dict[str, Any] = {"event_name": EVENT_NAME}
    if not _HAS_EVENT_NAME:  # opentelemetry-proto before OTLP 1.5: the older attribute
        named, pairs = {}, {"event.name": EVENT_NAME, **pairs}
    return LogRecord(
        time_unix_nano=moment,
        observed_time_unix_nano=moment,
        severity_number=SEVERITY_NUMBER_WARN if score.status == "error" else SEVERITY_NUMBER_INFO,
        severity_text="WARN" if score.status == "error" else "INFO",
        attributes=_attributes(pairs),
        trace_id=trace_id,
        span_id=span_id,
        **named,
    )


def export_request(scores: list[ScoreEvent]) -> ExportLogsServiceRequest:
    """An OTLP logs export of ``scores``' events: one resource (the scorer) and one scope."""
    return ExportLogsServiceRequest(
        resource_logs=[
            ResourceLogs(
                resource=Resource(attributes=_attributes({"service.name": SERVICE_NAME})),
                scope_logs=[
                    ScopeLogs(
                        scope=InstrumentationScope(name=SCOPE_NAME, version=__version__),
                        log_records=[log_record(score) for score in scores],
                        schema_url=SCHEMA_URL,
                    )
                ],
                schema_url=SCHEMA_URL,
            )
        ]
    )


def encode(scores: list[ScoreEvent], encoding: Encoding) -> bytes:
    """One Kafka message's value: ``scores``' events in the Collector's ``encoding``."""
    request = export_request(scores)
    if encoding == "otlp_proto":
        return bytes(request.SerializeToString())
    return orjson.dumps(as_otlp_json(request))


def as_otlp_json(request: ExportLogsServiceRequest) -> dict[str, Any]:
    """OTLP/JSON of a logs export: protobuf's JSON mapping with hex ids and numeric enums."""
    document: dict[str, Any] = MessageToDict(request, use_integers_for_enums=True)
    for resource_logs in document.get("resourceLogs", []):
        for scope_logs in resource_logs.get("scopeLogs", []):
            for record in scope_logs.get("logRecords", []):
                for key in ("traceId", "spanId"):
                    if key in record:
                        record[key] = base64.b64decode(record[key]).hex()
    return document


def message_key(score: ScoreEvent) -> bytes:
    """The Kafka key: the target id, a tool call's trace id (a trace's events share its
    partition)."""
    trace = (score.details or {}).get("trace_id") if score.scope == "tool_call" else None
    return (trace if isinstance(trace, str) else score.target_id).encode()
