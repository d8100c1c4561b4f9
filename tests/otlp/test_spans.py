"""OTLP export batches from the real OpenTelemetry SDK, encoded as the Collector's Kafka
exporter writes them (protobuf, or OTLP/JSON), read back as the trace rules judge."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from otlp_records import as_otlp_json

from stream.otlp.spans import NO_CONTENT, decode, trace_document


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
