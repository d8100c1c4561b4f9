"""Scores as OpenTelemetry evaluation events, end to end: spans of an instrumented app (the
OpenTelemetry SDK) and a JSON trace go in, a worker with SCORER_OTEL_EVENTS_TOPIC scores them
with the scripted judge, and the events topic holds one OTLP logs export per score, the span
trace's events parented to its root span, the JSON trace's to nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from fixtures import hub_trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from scripted_judge import MockJudge

from stream.kafka.broker import EmbeddedBroker

from .harness import Names, Worker, produce, read, read_scores, trace_bytes

RULES = 5  # the hub rules a hub-coach-chat trace is judged by

QUESTION = [{"role": "user", "parts": [{"type": "text", "content": "Why do I rush?"}]}]
ANSWER = [
    {
        "role": "assistant",
        "parts": [{"type": "text", "content": "Play with a click on 2 and 4."}],
        "finish_reason": "stop",
    }
]


def app_spans() -> tuple[bytes, str, str]:
    """One export record of an app's trace (a root span and a model call under it), with the
    trace id and the root span's id in hex."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "fretcoach"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("fretcoach.hub")
    with tracer.start_as_current_span("hub-coach-chat") as root:
        root.set_attribute("gen_ai.conversation.id", "conv-events-1")
        with tracer.start_as_current_span("chat gpt-4o-mini") as llm:
            llm.set_attribute("gen_ai.operation.name", "chat")
            llm.set_attribute("gen_ai.input.messages", orjson.dumps(QUESTION).decode())
            llm.set_attribute("gen_ai.output.messages", orjson.dumps(ANSWER).decode())
        context = root.get_span_context()
    provider.shutdown()
    raw = encode_spans(exporter.get_finished_spans()).SerializeToString()
    return raw, f"{context.trace_id:032x}", f"{context.span_id:016x}"


def attributes(record: Any) -> dict[str, Any]:
    return {kv.key: getattr(kv.value, kv.value.WhichOneof("value")) for kv in record.attributes}


async def test_scores_become_evaluation_events_under_the_evaluated_span(
    broker: EmbeddedBroker, names: Names, workers: list[Worker], tmp_path: Path, judge: MockJudge
) -> None:
    judge.script("", '{"score": 0.9, "reason": "Clear and actionable."}')
    events_topic = f"otel-events-{names.suffix}"
    worker = Worker(
        broker.bootstrap,
        names,
        tmp_path,
        OPENAI_BASE_URL=judge.base_url,
        OPENAI_API_KEY="sk-test",
        SCORER_OTLP_GRACE_S="1",
        SCORER_OTEL_EVENTS_TOPIC=events_topic,
    ).start()
    workers.append(worker)
    raw, trace_id, root_span_id = app_spans()
    document = hub_trace(1)
    await produce(broker.bootstrap, names.otlp, [(None, raw)])
    await produce(broker.bootstrap, names.traces, [trace_bytes(document)])

    scores = await read_scores(
        broker.bootstrap, names.scores, until=lambda rs: len(rs) >= 2 * RULES, timeout=120
    )
    assert {s["target_id"] for s in scores} == {trace_id, document["id"]}
    emitted = {s["score_id"]: s for s in scores if s["status"] != "skipped"}
    assert sum(1 for s in emitted.values() if s["target_id"] == trace_id) == RULES
    assert any(s["target_id"] == document["id"] for s in emitted.values())
    records = await read(
        broker.bootstrap, events_topic, until=lambda rs: len(rs) >= len(emitted), timeout=60
    )
    assert len(records) == len(emitted), worker.log()[-3000:]

    seen = set()
    for message in records:
        request = ExportLogsServiceRequest.FromString(message.value)
        (resource_logs,) = request.resource_logs
        (record,) = resource_logs.scope_logs[0].log_records
        got = attributes(record)
        score = emitted[got["scorer.score_id"]]
        seen.add(score["score_id"])
        assert message.key == score["target_id"].encode()
        assert record.event_name == "gen_ai.evaluation.result"
        assert got["gen_ai.evaluation.name"] == score["rule_id"]
        assert got["scorer.status"] == score["status"]
        if score["status"] == "ok":
            assert got["gen_ai.evaluation.score.value"] == score["raw_value"]
        if score["target_id"] == trace_id:  # assembled from spans: under its root span
            assert score["details"]["otel_span_id"] == root_span_id
            assert (record.trace_id.hex(), record.span_id.hex()) == (trace_id, root_span_id)
            assert got["gen_ai.evaluation.explanation"] == "Clear and actionable."
        else:  # sent as JSON: no span to hang it under
            assert (record.trace_id, record.span_id) == (b"", b"")
    assert seen == set(emitted)
