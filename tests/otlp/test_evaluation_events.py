"""Scores as OpenTelemetry gen_ai.evaluation.result events: what is written, decoded back from
both of the Collector's encodings (protobuf bytes and OTLP/JSON)."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest
from fixtures import as_trace, live_trace, score_event, scorer
from google.protobuf.json_format import ParseDict
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord

from stream import __version__
from stream.models import ScoreEvent, ThreadInfo
from stream.otlp.evaluation import (
    EVENT_NAME,
    OTHER_ERROR,
    SCHEMA_URL,
    emitted,
    encode,
    message_key,
)

TRACE = "5b8efff798038103d269b633813fc60c"
SPAN = "eee19b7ec3c1b174"
WHEN = datetime(2026, 11, 27, 12, 0, 0, 123456, tzinfo=UTC)


def decoded(score: ScoreEvent, encoding: str) -> ExportLogsServiceRequest:
    """What the events topic holds for ``score``, read back as an ExportLogsServiceRequest."""
    raw = encode([score], encoding)  # type: ignore[arg-type]
    if encoding == "otlp_proto":
        return ExportLogsServiceRequest.FromString(raw)
    document = orjson.loads(raw)
    record = document["resourceLogs"][0]["scopeLogs"][0]["logRecords"][0]
    for key in ("traceId", "spanId"):  # OTLP/JSON ids are hex: protobuf's mapping wants base64
        if key in record:
            assert len(record[key]) in (16, 32) and int(record[key], 16) >= 0
            record[key] = base64.b64encode(bytes.fromhex(record[key])).decode()
    return ParseDict(document, ExportLogsServiceRequest())


def only_record(request: ExportLogsServiceRequest) -> LogRecord:
    (resource_logs,) = request.resource_logs
    (scope_logs,) = resource_logs.scope_logs
    (record,) = scope_logs.log_records
    return record


def attributes(record: LogRecord) -> dict[str, Any]:
    def value(v: Any) -> Any:
        return getattr(v, v.WhichOneof("value"))

    return {kv.key: value(kv.value) for kv in record.attributes}


ENCODINGS = ["otlp_proto", "otlp_json"]


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_an_ok_score_of_a_span_sourced_trace_is_an_event_under_its_span(encoding: str) -> None:
    score = score_event(
        target_id=TRACE,
        label="good",
        created_at=WHEN,
        details={"otel_span_id": SPAN},
    )
    request = decoded(score, encoding)
    (resource_logs,) = request.resource_logs
    resource = {kv.key: kv.value.string_value for kv in resource_logs.resource.attributes}
    assert resource == {"service.name": "llm-trace-scorer"}
    scope = resource_logs.scope_logs[0]
    assert (scope.scope.name, scope.scope.version) == ("llm-trace-scorer", __version__)
    assert scope.schema_url == SCHEMA_URL
    record = only_record(request)
    assert record.event_name == EVENT_NAME == "gen_ai.evaluation.result"
    assert (record.trace_id.hex(), record.span_id.hex()) == (TRACE, SPAN)
    assert record.time_unix_nano == record.observed_time_unix_nano == 1795780800123456000
    assert (record.severity_number, record.severity_text) == (9, "INFO")
    assert attributes(record) == {
        "gen_ai.evaluation.name": "answer_quality",
        "gen_ai.evaluation.score.value": 4.0,
        "gen_ai.evaluation.score.label": "good",
        "gen_ai.evaluation.explanation": "clear and correct",
        "scorer.rule_id": "answer_quality",
        "scorer.pack": "demo",
        "scorer.rule_version": 1,
        "scorer.scope": "trace",
        "scorer.score_id": score.score_id,
        "scorer.target_id": TRACE,
        "scorer.project_name": "shop",
        "scorer.status": "ok",
        "scorer.judge_model": "gpt-4o-mini",
        "scorer.value": 0.75,
        "scorer.scale.min": 1.0,
        "scorer.scale.max": 5.0,
        "scorer.higher_is_better": True,
    }
    assert message_key(score) == TRACE.encode()


def test_otlp_json_has_hex_ids_camel_case_names_and_numeric_enums() -> None:
    score = score_event(target_id=TRACE, details={"otel_span_id": SPAN}, created_at=WHEN)
    record = orjson.loads(encode([score], "otlp_json"))["resourceLogs"][0]["scopeLogs"][0][
        "logRecords"
    ][0]
    assert (record["traceId"], record["spanId"]) == (TRACE, SPAN)
    assert record["eventName"] == "gen_ai.evaluation.result"
    assert record["severityNumber"] == 9
    assert record["timeUnixNano"] == "1795780800123456000"  # int64 as a string


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_a_trace_not_from_spans_has_no_parent(encoding: str) -> None:
    record = only_record(decoded(score_event(target_id=TRACE), encoding))
    assert (record.trace_id, record.span_id) == (b"", b"")
    # an id that is not an OpenTelemetry trace id is never taken for one
    not_hex = score_event(details={"otel_span_id": SPAN})  # a UUID target id
    assert only_record(decoded(not_hex, encoding)).trace_id == b""
    bad_span = score_event(target_id=TRACE, details={"otel_span_id": "not-a-span"})
    assert only_record(decoded(bad_span, encoding)).span_id == b""


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_a_thread_score_names_its_conversation_and_has_no_parent(encoding: str) -> None:
    info = ThreadInfo(
        kind="conversation", close_seq=1, close_reason="end", turn_count=2, dropped_turns=0
    )
    score = score_event(
        scope="thread", target_id="conv-7", thread=info, details={"otel_span_id": SPAN}
    )
    record = only_record(decoded(score, encoding))
    assert (record.trace_id, record.span_id) == (b"", b"")
    assert attributes(record)["gen_ai.conversation.id"] == "conv-7"
    assert attributes(record)["scorer.scope"] == "thread"


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        ("judge client_error: 400 the model does not exist", "client_error"),
        ("judge invalid_answer: no verdict in the answer after 3 attempts", "invalid_answer"),
        ("check question_endings raised ZeroDivisionError: division by zero", "ZeroDivisionError"),
        ("the judge was unavailable for longer than the outage limit", OTHER_ERROR),
        (None, OTHER_ERROR),
    ],
)
def test_an_error_score_is_a_failed_evaluation_with_its_error_type(
    reason: str | None, expected: str
) -> None:
    score = score_event(
        status="error", status_reason=reason, value=None, raw_value=None, reason=None
    )
    record = only_record(decoded(score, "otlp_proto"))
    got = attributes(record)
    assert got["error.type"] == expected
    assert "gen_ai.evaluation.score.value" not in got and "scorer.value" not in got
    assert "gen_ai.evaluation.score.label" not in got
    assert got["scorer.status"] == "error"
    assert got.get("scorer.status_reason") == reason
    assert (record.severity_number, record.severity_text) == (13, "WARN")


def test_a_shadow_score_carries_its_variant_and_a_rubric_score_its_criterion() -> None:
    shadow = attributes(only_record(decoded(score_event(variant="mini"), "otlp_json")))
    assert shadow["scorer.variant"] == "mini"
    criterion = score_event(rule_id="code_review", criterion="correctness")
    got = attributes(only_record(decoded(criterion, "otlp_json")))
    assert got["gen_ai.evaluation.name"] == "code_review.correctness"
    assert got["scorer.criterion"] == "correctness"
    assert "scorer.variant" not in got


def test_only_skipped_scores_are_not_emitted() -> None:
    assert emitted(score_event())
    assert emitted(score_event(status="error", value=None, raw_value=None))
    assert not emitted(score_event(status="skipped", value=None, raw_value=None))


def test_a_score_written_without_an_offset_is_read_as_utc() -> None:
    naive = score_event(created_at=WHEN.replace(tzinfo=None))
    assert only_record(decoded(naive, "otlp_proto")).time_unix_nano == 1795780800123456000


async def test_the_engine_says_the_span_a_trace_from_spans_is() -> None:
    document = live_trace()
    spanned = {**document, "root_span_id": SPAN}
    result = await scorer(None).score_trace(as_trace(spanned), spanned)
    ok = next(s for s in result.scores if s.rule_id == "studio_live_coach_feedback_format")
    assert ok.status == "ok" and ok.details is not None
    assert ok.details["otel_span_id"] == SPAN
    skipped = next(s for s in result.scores if s.status == "skipped")
    assert (skipped.details or {})["otel_span_id"] == SPAN
    plain = await scorer(None).score_trace(as_trace(document), document)
    assert all("otel_span_id" not in (s.details or {}) for s in plain.scores)


def test_without_the_event_name_field_the_event_is_named_by_its_attribute(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("stream.otlp.evaluation._HAS_EVENT_NAME", False)
    record = only_record(decoded(score_event(), "otlp_proto"))
    assert record.event_name == ""
    assert attributes(record)["event.name"] == "gen_ai.evaluation.result"


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_a_tool_calls_score_is_parented_to_the_calls_span_in_its_trace(encoding: str) -> None:
    details = {"trace_id": TRACE, "tool": "get_weather", "otel_span_id": SPAN}
    score = score_event(scope="tool_call", target_id="call_1", details=details)
    record = only_record(decoded(score, encoding))
    assert (record.trace_id.hex(), record.span_id.hex()) == (TRACE, SPAN)
    assert attributes(record)["scorer.target_id"] == "call_1"
    assert message_key(score) == TRACE.encode()
    # a call read from the trace's messages has no span: no parent, still its trace's key
    from_messages = score_event(
        scope="tool_call", target_id="call_1", details=details | {"otel_span_id": None}
    )
    assert only_record(decoded(from_messages, encoding)).span_id == b""
    assert message_key(from_messages) == TRACE.encode()
