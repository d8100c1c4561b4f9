"""OTLP export batches from the real OpenTelemetry SDK, encoded as the Collector's Kafka
exporter writes them (protobuf, or OTLP/JSON), read back as the trace rules judge."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from otlp_records import as_otlp_json
from strategies import (
    any_json,
    corrupted,
    decoded_or_refused,
    documents,
    integers,
    json_bytes,
    mutated,
    nested,
    numbers,
    texts,
)

from stream.otlp.decode import decode
from stream.otlp.document import NO_CONTENT, trace_document
from stream.otlp.events import spans_events
from stream.otlp.messages import input_messages
from stream.otlp.spans import Span


def record(build: Callable[[Any], None], service: str = "fretcoach-api") -> bytes:
    """The spans ``build`` makes with a tracer, as one ExportTraceServiceRequest."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    build(provider.get_tracer("test"))
    provider.shutdown()
    return encode_spans(exporter.get_finished_spans()).SerializeToString()


INPUT = [
    {"role": "user", "parts": [{"type": "text", "content": "Why does my timing drift?"}]},
]
OUTPUT = [
    {
        "role": "assistant",
        "parts": [{"type": "text", "content": "You rush the upbeat; play with a click."}],
        "finish_reason": "stop",
    }
]


def genai_agent(tracer: Any) -> None:
    with tracer.start_as_current_span("coach-turn") as root:
        root.set_attribute("gen_ai.conversation.id", "conv-7")
        root.set_attribute("app.user_tier", "pro")
        with tracer.start_as_current_span("chat gpt-4o-mini") as llm:
            llm.set_attribute("gen_ai.operation.name", "chat")
            llm.set_attribute("gen_ai.input.messages", orjson.dumps(INPUT).decode())
            llm.set_attribute("gen_ai.output.messages", orjson.dumps(OUTPUT).decode())
            llm.set_attribute(
                "gen_ai.system_instructions",
                orjson.dumps([{"type": "text", "content": "You are a guitar coach."}]).decode(),
            )
            llm.set_attribute("gen_ai.usage.input_tokens", 42)
            llm.set_attribute("gen_ai.usage.output_tokens", 9)


@pytest.mark.parametrize("encoding", ["otlp_proto", "otlp_json"])
def test_genai_semantic_conventions_become_the_trace(encoding: str) -> None:
    raw = record(genai_agent)
    spans = decode(as_otlp_json(raw) if encoding == "otlp_json" else raw, encoding)  # type: ignore[arg-type]
    assert len(spans) == 2 and len({s.trace_id for s in spans}) == 1
    document = trace_document(spans)
    assert document["id"] == spans[0].trace_id and len(document["id"]) == 32
    assert (document["name"], document["project_name"], document["thread_id"]) == (
        "coach-turn",
        "fretcoach-api",
        "conv-7",
    )
    assert document["input"]["messages"] == [
        {"role": "system", "content": "You are a guitar coach."},
        {"role": "user", "content": "Why does my timing drift?"},
    ]
    assert document["output"]["messages"] == [
        {"role": "assistant", "content": "You rush the upbeat; play with a click."}
    ]
    assert document["usage"] == {"prompt_tokens": 42, "completion_tokens": 9, "total_tokens": 51}
    assert document["metadata"] == {"gen_ai.conversation.id": "conv-7", "app.user_tier": "pro"}
    assert [s["name"] for s in document["spans"]] == ["coach-turn", "chat gpt-4o-mini"]
    assert document["spans"][1]["parent_span_id"] == document["spans"][0]["span_id"]
    assert "content_missing" not in document


def test_both_encodings_read_the_same() -> None:
    raw = record(genai_agent)
    assert trace_document(decode(raw)) == trace_document(decode(as_otlp_json(raw), "otlp_json"))


def test_the_deprecated_flattened_genai_attributes() -> None:
    def build(tracer: Any) -> None:
        with tracer.start_as_current_span("openai.chat") as span:
            span.set_attribute("gen_ai.prompt.0.role", "system")
            span.set_attribute("gen_ai.prompt.0.content", "Be brief.")
            span.set_attribute("gen_ai.prompt.1.role", "user")
            span.set_attribute("gen_ai.prompt.1.content", "Tempo for scales?")
            span.set_attribute("gen_ai.completion.0.role", "assistant")
            span.set_attribute("gen_ai.completion.0.content", "Start at 60 bpm.")
            span.set_attribute("session.id", "sess-3")

    document = trace_document(decode(record(build)))
    assert [m["content"] for m in document["input"]["messages"]] == [
        "Be brief.",
        "Tempo for scales?",
    ]
    assert document["output"]["messages"] == [{"role": "assistant", "content": "Start at 60 bpm."}]
    assert document["thread_id"] == "sess-3"


def test_openinference_attributes_and_the_first_and_last_model_calls() -> None:
    def build(tracer: Any) -> None:
        with tracer.start_as_current_span("agent") as root:
            root.set_attribute("input.value", "plan my practice")
            with tracer.start_as_current_span("llm-1") as first:
                first.set_attribute("llm.input_messages.0.message.role", "user")
                first.set_attribute("llm.input_messages.0.message.content", "plan my practice")
                first.set_attribute("llm.output_messages.0.message.role", "assistant")
                first.set_attribute("llm.output_messages.0.message.content", "calling a tool")
            with tracer.start_as_current_span("llm-2") as last:
                last.set_attribute("llm.input_messages.0.message.role", "tool")
                last.set_attribute("llm.input_messages.0.message.content", '{"minutes": 40}')
                last.set_attribute("llm.output_messages.0.message.role", "assistant")
                last.set_attribute("llm.output_messages.0.message.content", "40 minutes of scales")

    document = trace_document(decode(record(build)))
    # the root's input.value counts as the first call's input: the agent's own request
    assert document["input"]["messages"] == [{"role": "user", "content": "plan my practice"}]
    assert document["output"]["messages"] == [
        {"role": "assistant", "content": "40 minutes of scales"}
    ]
    assert len(document["spans"]) == 3


def test_spans_without_message_content_say_that_capture_is_off() -> None:
    def build(tracer: Any) -> None:
        with tracer.start_as_current_span("chat gpt-4o-mini") as span:
            span.set_attribute("gen_ai.operation.name", "chat")
            span.set_attribute("gen_ai.usage.input_tokens", 12)

    document = trace_document(decode(record(build)))
    assert document["content_missing"] == NO_CONTENT
    assert "input" not in document and "output" not in document


@pytest.mark.parametrize(
    ("raw", "encoding", "says"),
    [
        (b"\xff\xfenot protobuf", "otlp_proto", "not an OTLP"),
        (b"[1, 2]", "otlp_json", "no resourceSpans"),
        (b"{not json", "otlp_json", "not OTLP/JSON"),
    ],
)
def test_what_is_not_an_export_batch_is_refused(raw: bytes, encoding: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        decode(raw, encoding)  # type: ignore[arg-type]


@pytest.mark.parametrize("encoding", ["otlp_proto", "otlp_json"])
def test_a_span_whose_parent_is_in_another_service_is_this_services_root(encoding: str) -> None:
    from opentelemetry import trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    upstream = SpanContext(
        trace_id=0x4BF92F3577B34DA6A3CE929D0E0E4736,
        span_id=0x00F067AA0BA902B7,
        is_remote=True,  # propagated in a traceparent header from the web front end
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )

    def build(tracer: Any) -> None:
        parent = trace.set_span_in_context(NonRecordingSpan(upstream))
        with (
            tracer.start_as_current_span("hub-coach-chat", context=parent),
            tracer.start_as_current_span("chat gpt-4o-mini"),
        ):
            pass

    raw = record(build)
    spans = decode(raw if encoding == "otlp_proto" else as_otlp_json(raw), "auto")
    (root,) = [s for s in spans if s.is_root]
    assert (root.name, root.parent_span_id, root.remote_parent) == (
        "hub-coach-chat",
        "00f067aa0ba902b7",
        True,
    )
    assert trace_document(spans)["name"] == "hub-coach-chat"


def test_auto_tells_the_encodings_apart() -> None:
    raw = record(genai_agent)
    assert decode(raw, "auto") == decode(as_otlp_json(raw), "auto") == decode(raw)
    with pytest.raises(ValueError, match="empty message"):
        decode(b"", "auto")


# -- any bytes on the spans topic: spans, or a ValueError (a dead letter), never a crash ----

UINT64 = st.integers(0, 2**64 - 1)
# protobuf's JSON mapping writes 64-bit integers as decimal strings (numbers are read too)
NANOS = st.one_of(
    UINT64, UINT64.map(str), st.sampled_from(["1e9", "-1", " 5", "0x1f", "18446744073709551616"])
)
IDS = st.one_of(st.binary(min_size=8, max_size=16).map(bytes.hex), texts)


def any_value_of(kind: str, value: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.fixed_dictionaries({kind: value})


def key_values(values: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.fixed_dictionaries({"key": texts, "value": values})


ANY_VALUES: st.SearchStrategy[Any] = st.recursive(
    st.one_of(
        st.just({}),
        any_value_of("stringValue", texts),
        any_value_of("boolValue", st.booleans()),
        any_value_of("intValue", NANOS),
        any_value_of("doubleValue", st.one_of(numbers, st.sampled_from(["NaN", "-Infinity", "x"]))),
        any_value_of("bytesValue", texts),
        st.fixed_dictionaries({"stringValue": texts, "intValue": NANOS}),  # two kinds at once
        any_value_of("stringValueStrindex", st.integers()),  # a kind this decoder does not read
    ),
    lambda inner: st.one_of(
        any_value_of("arrayValue", st.fixed_dictionaries({"values": st.lists(inner, max_size=3)})),
        any_value_of(
            "kvlistValue",
            st.fixed_dictionaries({"values": st.lists(key_values(inner), max_size=3)}),
        ),
    ),
    max_leaves=6,
)
ATTRIBUTES = st.lists(key_values(ANY_VALUES), max_size=2)
SPAN = documents(
    {
        "traceId": IDS,
        "spanId": IDS,
        "parentSpanId": IDS,
        "name": texts,
        "kind": st.one_of(st.integers(0, 5), st.just("SPAN_KIND_CLIENT")),
        "startTimeUnixNano": NANOS,
        "endTimeUnixNano": NANOS,
        "attributes": ATTRIBUTES,
        "events": st.lists(
            documents({"timeUnixNano": NANOS, "name": texts, "attributes": ATTRIBUTES}),
            max_size=1,
        ),
        "links": st.lists(
            documents({"traceId": IDS, "spanId": IDS, "attributes": ATTRIBUTES}), max_size=1
        ),
        "status": documents(
            {
                "code": st.one_of(st.sampled_from([0, 1, 2, "STATUS_CODE_ERROR", "X"]), integers),
                "message": texts,
            }
        ),
        "flags": NANOS,
    },
    required=("traceId", "spanId", "startTimeUnixNano", "attributes"),
)
SCOPE_SPANS = documents(
    {
        "scope": documents({"name": texts, "attributes": ATTRIBUTES}),
        "spans": st.lists(SPAN, min_size=1, max_size=2),
    },
    required=("spans",),
)
RESOURCE_SPANS = documents(
    {
        "resource": documents({"attributes": ATTRIBUTES}),
        "scopeSpans": st.lists(SCOPE_SPANS, min_size=1, max_size=2),
    },
    required=("resource", "scopeSpans"),
)
# export batches of the right shape, down to every field the decoder reads
EXPORTS = documents(
    {"resourceSpans": st.lists(RESOURCE_SPANS, min_size=1, max_size=2)},
    required=("resourceSpans",),
)
IN_A_SPAN = (
    '{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"ab",'
    '"attributes":[{"key":"k","value":@}]}]}]}]}'
)
DEEP_VALUES = st.one_of(
    nested(
        st.integers(1, 1100), '{"arrayValue":{"values":[', '{"stringValue":"x"}', "]}}", IN_A_SPAN
    ),
    nested(
        st.integers(1, 600),
        '{"kvlistValue":{"values":[{"key":"k","value":',
        "{}",
        "}]}}",
        IN_A_SPAN,
    ),
)
OTLP_JSON = st.one_of(
    st.binary(),
    json_bytes(EXPORTS),
    json_bytes(corrupted(EXPORTS)),
    json_bytes(any_json),
    mutated(json_bytes(EXPORTS)),
    DEEP_VALUES,
)


def every_kind_of_value() -> bytes:
    """An export batch built field by field: every attribute value kind, nested, events,
    links, a status and flags (what the SDK's spans do not all reach)."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )
    from opentelemetry.proto.common.v1.common_pb2 import (
        AnyValue,
        ArrayValue,
        KeyValue,
        KeyValueList,
    )

    values = [
        AnyValue(string_value="s"),
        AnyValue(bool_value=True),
        AnyValue(int_value=-(2**63)),
        AnyValue(double_value=float("nan")),
        AnyValue(bytes_value=b"\x00\xff"),
        AnyValue(array_value=ArrayValue(values=[AnyValue(int_value=1), AnyValue()])),
        AnyValue(kvlist_value=KeyValueList(values=[KeyValue(key="k", value=AnyValue())])),
    ]
    attributes = [KeyValue(key=f"a{i}", value=v) for i, v in enumerate(values)]
    request = ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add()
    resource_spans.resource.attributes.extend(attributes)
    span = resource_spans.scope_spans.add().spans.add(
        trace_id=bytes(range(16)),
        span_id=bytes(8),
        parent_span_id=b"\x01" * 8,
        name="chat",
        start_time_unix_nano=2**64 - 1,
        end_time_unix_nano=1,
        flags=0x300,
    )
    span.attributes.extend(attributes)
    span.events.add(name="e", time_unix_nano=5).attributes.extend(attributes)
    span.links.add(trace_id=b"\x02" * 16, span_id=b"\x03" * 8)
    span.status.code = 2
    return request.SerializeToString()


def length_delimited(number: int, payload: bytes) -> bytes:
    """A protobuf field of wire type 2 (a message, a string, bytes), by hand."""
    size, length = len(payload), b""
    while True:
        low, size = size & 0x7F, size >> 7
        length += bytes([low | (0x80 if size else 0)])
        if not size:
            return bytes([number << 3 | 2]) + length + payload


def nested_proto_value(depth: int) -> bytes:
    """A span whose one attribute value is arrays in arrays ``depth`` deep: deeper than the
    protobuf runtime will build, so written by hand."""
    value = length_delimited(1, b"x")  # AnyValue.string_value
    for _ in range(depth):
        value = length_delimited(5, length_delimited(1, value))  # array_value.values
    span = length_delimited(9, length_delimited(1, b"k") + length_delimited(2, value))
    return length_delimited(1, length_delimited(2, length_delimited(2, span)))


def proto_requests() -> st.SearchStrategy[bytes]:
    """Export batches the protobuf runtime writes: every field the decoder reads, any value
    its type allows (empty ids, the largest times, NaN, nested values)."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )
    from opentelemetry.proto.common.v1.common_pb2 import (
        AnyValue,
        ArrayValue,
        KeyValue,
        KeyValueList,
    )
    from opentelemetry.proto.resource.v1.resource_pb2 import Resource as ProtoResource
    from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Status
    from opentelemetry.proto.trace.v1.trace_pb2 import Span as ProtoSpan

    uint64 = st.integers(0, 2**64 - 1)
    values: st.SearchStrategy[Any] = st.recursive(
        st.one_of(
            st.builds(AnyValue),
            st.builds(AnyValue, string_value=texts),
            st.builds(AnyValue, bool_value=st.booleans()),
            st.builds(AnyValue, int_value=st.integers(-(2**63), 2**63 - 1)),
            st.builds(AnyValue, double_value=st.floats()),
            st.builds(AnyValue, bytes_value=st.binary(max_size=8)),
        ),
        lambda inner: st.one_of(
            st.builds(
                lambda vs: AnyValue(array_value=ArrayValue(values=vs)),
                st.lists(inner, max_size=3),
            ),
            st.builds(
                lambda kvs: AnyValue(kvlist_value=KeyValueList(values=kvs)),
                st.lists(st.builds(KeyValue, key=texts, value=inner), max_size=3),
            ),
        ),
        max_leaves=8,
    )
    attributes = st.lists(st.builds(KeyValue, key=texts, value=values), max_size=3)
    spans = st.builds(
        ProtoSpan,
        trace_id=st.binary(max_size=16),
        span_id=st.binary(max_size=8),
        parent_span_id=st.binary(max_size=8),
        name=texts,
        start_time_unix_nano=uint64,
        end_time_unix_nano=uint64,
        attributes=attributes,
        status=st.builds(Status, code=st.integers(0, 2), message=texts),
        flags=st.integers(0, 2**32 - 1),
    )
    requests = st.builds(
        ExportTraceServiceRequest,
        resource_spans=st.lists(
            st.builds(
                ResourceSpans,
                resource=st.builds(ProtoResource, attributes=attributes),
                scope_spans=st.lists(
                    st.builds(ScopeSpans, spans=st.lists(spans, max_size=3)), max_size=2
                ),
            ),
            max_size=2,
        ),
    )
    return requests.map(lambda request: request.SerializeToString())


PROTO_SEEDS = st.sampled_from([record(genai_agent), every_kind_of_value(), nested_proto_value(40)])
OTLP_PROTO = st.one_of(
    st.binary(),
    proto_requests(),
    mutated(st.one_of(PROTO_SEEDS, proto_requests())),
    st.integers(1, 300).map(nested_proto_value),
)


def forwardable(spans: list[Span]) -> None:
    """The read-spans agent writes decoded spans on as assembly events: they must be JSON."""
    for span in spans:
        list(spans_events(span.trace_id, [span.stored()], 0.0))


def batch(span: dict[str, Any]) -> bytes:
    """An OTLP/JSON export batch of one span."""
    # the standard library's JSON: orjson writes no document deeper than 254 levels
    return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}).encode()


def attribute(value: Any) -> bytes:
    """A batch of one span with one attribute of ``value`` (an ``AnyValue``)."""
    return batch({"traceId": "ab", "attributes": [{"key": "k", "value": value}]})


def arrays(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"stringValue": "x"}
    for _ in range(depth):
        value = {"arrayValue": {"values": [value]}}
    return value


# each crashed the decoder, or the read-spans agent writing the spans on (the smallest of each
# kind hypothesis found; the first is the issue's)
CRASHED = [
    (b'{"resourceSpans": 5}', "resourceSpans: expected an array, got a number"),
    (b'{"resourceSpans": [null]}', r"resourceSpans\[0\]: expected an item, got null"),
    (
        b'{"resourceSpans": [{"scopeSpans": [5]}]}',
        r"resourceSpans\[0\].scopeSpans\[0\]: expected an object, got a number",
    ),
    (batch({"status": 5}), "status: expected an object"),
    (batch({"status": {"code": [2]}}), "status.code: expected a status code"),
    (
        batch({"attributes": [{"key": None, "value": {"boolValue": True}}]}),
        r"attributes\[0\].key: expected a string, got null",
    ),
    (attribute({"intValue": [1]}), "value.intValue: expected an integer, got an array"),
    (attribute({"intValue": "18446744073709551616"}), "intValue: 18446744073709551616 is out"),
    (attribute({"doubleValue": {}}), "value.doubleValue: expected a number, got an object"),
    (attribute({"arrayValue": {"values": 1}}), "arrayValue.values: expected an array"),
    (attribute(arrays(300)), "nested deeper than 64 levels"),
]
# each was read as something else (or refused without saying where)
MISREAD = [
    (batch({"traceId": 7, "attributes": "x"}), r"spans\[0\].traceId: expected a string"),
    (batch({"attributes": "x"}), "attributes: expected an array, got a string"),
    (batch({"startTimeUnixNano": "soon"}), "startTimeUnixNano: expected an integer"),
    (batch({"startTimeUnixNano": -1}), "startTimeUnixNano: -1 is out of range"),
    (batch({"flags": []}), "flags: expected an integer, got an array"),
    (attribute({"stringValue": ["x"]}), "value.stringValue: expected a string, got an array"),
    (attribute({"kvlistValue": []}), "kvlistValue: expected an object, got an array"),
    (attribute([{"stringValue": "x"}]), "value: expected an object, got an array"),
    (attribute(arrays(65)), "nested deeper than 64 levels"),
]


@pytest.mark.parametrize(("raw", "says"), CRASHED + MISREAD)
def test_a_batch_with_a_field_of_the_wrong_type_is_refused_saying_where(
    raw: bytes, says: str
) -> None:
    with pytest.raises(ValueError, match=says):
        decode(raw, "otlp_json")


def test_a_batch_of_well_typed_fields_at_their_bounds_is_read() -> None:
    spans = decode(
        batch(
            {
                "traceId": "AB",
                "startTimeUnixNano": "18446744073709551615",
                "endTimeUnixNano": 1.7e18,  # a number, not a string: read too
                "flags": 0x300,
                "status": {"code": "STATUS_CODE_ERROR"},
                "attributes": [
                    {"key": "big", "value": {"intValue": str(-(2**63))}},
                    {"key": "nan", "value": {"doubleValue": "NaN"}},
                    {"key": "deep", "value": arrays(64)},
                    {"key": "empty", "value": {}},
                    {"key": "future", "value": {"stringValueStrindex": 3}},
                    {"value": {"stringValue": "a pair without a key is skipped"}},
                ],
            }
        ),
        "otlp_json",
    )
    (span,) = spans
    assert (span.trace_id, span.status, span.remote_parent) == ("ab", "error", True)
    assert span.start is not None and span.start.year == 2554
    assert span.attributes["big"] == -(2**63) and span.attributes["empty"] is None
    assert set(span.attributes) == {"big", "nan", "deep", "empty", "future"}
    forwardable(spans)


@given(OTLP_JSON)
@example(CRASHED[0][0])
@example(MISREAD[0][0])
def test_any_otlp_json_record_is_spans_or_a_value_error(raw: bytes) -> None:
    spans = decoded_or_refused(lambda r: decode(r, "otlp_json"), raw)
    if not isinstance(spans, ValueError):
        forwardable(spans)


@given(OTLP_PROTO)
def test_any_otlp_proto_record_is_spans_or_a_value_error(raw: bytes) -> None:
    spans = decoded_or_refused(lambda r: decode(r, "otlp_proto"), raw)
    if not isinstance(spans, ValueError):
        forwardable(spans)


@given(st.one_of(OTLP_JSON, OTLP_PROTO))
def test_any_record_read_with_auto_is_spans_or_a_value_error(raw: bytes) -> None:
    spans = decoded_or_refused(lambda r: decode(r, "auto"), raw)
    if not isinstance(spans, ValueError):
        forwardable(spans)


@pytest.mark.parametrize(
    "messages",
    ["5", '{"role": "user"}', '[{"role": "user", "parts": 5}]', '[5, "x", null]', "not json"],
)
def test_malformed_genai_messages_read_as_none_not_as_an_exception(messages: str) -> None:
    """A span whose ``gen_ai.input.messages`` is JSON but not a list of messages, or whose
    message parts are not a list (an instrumentation's bug, or a hostile span), reads as no
    messages (or a message without tool calls): it never raises."""
    read = input_messages({"gen_ai.input.messages": messages})
    assert all(isinstance(m, dict) and "tool_calls" not in m for m in read)
