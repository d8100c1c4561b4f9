"""OpenTelemetry spans in, end to end: an app instrumented with the real OpenTelemetry SDK and
the OpenAI instrumentation (``opentelemetry-instrumentation-openai-v2``, message capture on)
calls its model through the real OpenAI SDK (a local scripted server); its spans are exported
as the Collector's Kafka exporter writes them (protobuf and OTLP/JSON, a trace's spans over
several records on any partition), and a worker assembles and scores them with the shipped
rules."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import openai
import orjson
import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from otlp_records import as_otlp_json
from scripted_judge import MockJudge

from stream.kafka.broker import EmbeddedBroker
from stream.otlp.document import NO_CONTENT

from .harness import Names, Worker, produce, read, read_scores, stored_times

HUB_RULES = {
    "hub_actionability",
    "hub_answer_correctness",
    "hub_context_usage_quality",
    "hub_data_groundedness",
    "hub_response_clarity",
}


class App:
    """A coaching app instrumented as its team would: the SDK, the OpenAI instrumentation,
    and a handler span around each model call. Its spans are kept to be exported by hand."""

    def __init__(self, model_url: str) -> None:
        from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider(resource=Resource.create({"service.name": "fretcoach"}))
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.instrumentor = OpenAIInstrumentor()
        self.instrumentor.instrument(tracer_provider=self.provider)
        self.client = openai.OpenAI(base_url=model_url, api_key="sk-app", max_retries=0)
        self.tracer = self.provider.get_tracer("fretcoach.hub")

    def chat(self, conversation: str, question: str) -> None:
        with self.tracer.start_as_current_span("hub-coach-chat") as root:
            root.set_attribute("gen_ai.conversation.id", conversation)
            root.set_attribute("app.user_tier", "pro")
            self.client.chat.completions.create(
                model="gpt-4o-mini",
                messages=[
                    {"role": "system", "content": "You are FretCoach's practice coach."},
                    {"role": "user", "content": question},
                ],
            )

    def finished(self) -> list[ReadableSpan]:
        spans = list(self.exporter.get_finished_spans())
        self.exporter.clear()
        return spans

    def close(self) -> None:
        self.instrumentor.uninstrument()
        self.provider.shutdown()


@pytest.fixture
def app_model() -> Iterator[MockJudge]:
    """The app's own model provider (not the judge)."""
    with MockJudge() as model:
        model.script("", "Slow down and loop the bar.")  # newest scripts are tried first
        model.script("rush the upbeat", "Practise with a click on 2 and 4, at 60 bpm.")
        model.script("left hand", "Keep the thumb behind the neck and relax the wrist.")
        yield model


@contextmanager
def instrumented(
    model: MockJudge, monkeypatch: pytest.MonkeyPatch, *, capture: bool
) -> Iterator[App]:
    """The app, with message capture on or off (the instrumentation reads the environment;
    the semantic-convention opt-in once per process)."""
    with monkeypatch.context() as env:
        env.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
        mode = "SPAN_ONLY" if capture else "NO_CONTENT"
        env.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", mode)
        app = App(model.base_url)
        try:
            yield app
        finally:
            app.close()


def as_proto(spans: list[ReadableSpan]) -> bytes:
    """One export record, as the Collector's exporter writes ``otlp_proto``."""
    return encode_spans(spans).SerializeToString()


def as_json(spans: list[ReadableSpan]) -> bytes:
    """One export record in ``otlp_json``."""
    return as_otlp_json(as_proto(spans))


def trace_id(spans: list[ReadableSpan]) -> str:
    context = spans[0].context
    assert context is not None
    return f"{context.trace_id:032x}"


def by_rule(scores: list[dict[str, Any]], target: str) -> dict[str, dict[str, Any]]:
    return {s["rule_id"]: s for s in scores if s["target_id"] == target}


async def test_spans_from_an_instrumented_app_are_assembled_and_scored(
    broker: EmbeddedBroker,
    names: Names,
    workers: list[Worker],
    tmp_path: Path,
    judge: MockJudge,
    app_model: MockJudge,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    judge.script("Practise with a click", '{"score": 0.9, "reason": "Actionable and clear."}')
    judge.script("thumb behind the neck", '{"score": 0.8, "reason": "Sound advice."}')
    with instrumented(app_model, monkeypatch, capture=True) as app:
        app.chat("conv-otlp-1", "Why do I rush the upbeat?")
        first = app.finished()
        app.chat("conv-otlp-2", "How should my left hand sit?")
        second = app.finished()
    with instrumented(app_model, monkeypatch, capture=False) as app:
        app.chat("conv-otlp-3", "Why do I rush the upbeat?")
        silent = app.finished()
    # the model call's span ends first and is exported before its root: two records
    llm, root = (next(s for s in first if s.parent), next(s for s in first if not s.parent))
    records = [
        (None, as_proto([llm])),
        (None, as_json(second)),
        (None, as_proto(silent)),
        (None, b"\x0a\x03not an export batch"),
        (None, as_proto([root])),
    ]
    worker = Worker(
        broker.bootstrap,
        names,
        tmp_path,
        OPENAI_BASE_URL=judge.base_url,
        OPENAI_API_KEY="sk-test",
        SCORER_OTLP_GRACE_S="1",
    ).start()
    workers.append(worker)
    # unkeyed, as the exporter's default
    sent = await produce(broker.bootstrap, names.otlp, records)

    ids = [trace_id(first), trace_id(second), trace_id(silent)]
    expected = 3 * len(HUB_RULES)
    scores = await read_scores(
        broker.bootstrap, names.scores, until=lambda rs: len(rs) >= expected, timeout=120
    )
    # each trace once, though its spans came in several records on several partitions
    assert len(scores) == len({s["score_id"] for s in scores}) == expected

    for trace, question, answer in [
        (ids[0], "Why do I rush the upbeat?", "Practise with a click on 2 and 4, at 60 bpm."),
        (ids[1], "How should my left hand sit?", "Keep the thumb behind the neck"),
    ]:
        scored = by_rule(scores, trace)
        assert set(scored) == HUB_RULES
        assert {s["status"] for s in scored.values()} == {"ok"}
        assert {s["project_name"] for s in scored.values()} == {"fretcoach"}
        prompts = [p for p in judge.prompts() if question in p]
        assert len(prompts) == len(HUB_RULES) and all(answer in p for p in prompts)
    assert by_rule(scores, ids[0])["hub_response_clarity"]["reason"] == "Actionable and clear."

    silent_scores = by_rule(scores, ids[2])
    assert set(silent_scores) == HUB_RULES
    for score in silent_scores.values():
        assert score["status"] == "skipped"
        assert "input.messages[-1].content" in score["status_reason"]
        assert NO_CONTENT in score["status_reason"]

    # the assembled traces, each with the Kafka time of its last span record
    assembled = await read(
        broker.bootstrap, f"{names.group}-otlp-traces", until=lambda rs: len(rs) >= 3
    )
    documents = {orjson.loads(r.value)["id"]: (orjson.loads(r.value), r) for r in assembled}
    first_trace, record = documents[ids[0]]
    assert first_trace["otlp"] == {
        "span_count": 2,
        "root_missing": False,
        "dropped_spans": 0,
        "cut_spans": 0,
    }
    assert first_trace["thread_id"] == "conv-otlp-1"
    times = await stored_times(broker.bootstrap, names.otlp, sent)
    assert record.timestamp == max(times[0], times[4])
    assert documents[ids[1]][1].timestamp == times[1]

    (dead,) = await read(broker.bootstrap, names.dlq, until=lambda rs: len(rs) >= 1)
    headers = dict(dead.headers)
    assert headers["scorer.error.reason"] == b"invalid_event"
    assert b"not a valid OTLP export batch" in headers["scorer.error"]
    assert dead.value == b"\x0a\x03not an export batch"

    page = worker.metrics()
    assert 'scorer_otlp_traces_assembled_total{root="ended"} 3.0' in page
    assert 'scorer_otlp_spans_total{outcome="kept"} 6.0' in page


async def test_a_trace_half_gathered_survives_a_kill_and_is_scored_whole_after_the_restart(
    broker: EmbeddedBroker,
    names: Names,
    workers: list[Worker],
    tmp_path: Path,
    judge: MockJudge,
    app_model: MockJudge,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with instrumented(app_model, monkeypatch, capture=True) as app:
        app.chat("conv-otlp-9", "Why do I rush the upbeat?")
        spans = app.finished()
    llm, root = (next(s for s in spans if s.parent), next(s for s in spans if not s.parent))
    env = {"OPENAI_BASE_URL": judge.base_url, "OPENAI_API_KEY": "sk-test"}
    first = Worker(broker.bootstrap, names, tmp_path, **env).start()
    workers.append(first)
    await produce(broker.bootstrap, names.otlp, [(None, as_proto([llm]))])
    deadline = time.monotonic() + 60
    while "scorer_otlp_traces_gathering 1.0" not in first.scrape():
        assert time.monotonic() < deadline, first.log()[-3000:]
        await asyncio.sleep(0.5)
    await asyncio.sleep(2)  # the table's changelog write is flushed (Faust commits each second)
    first.kill()  # kill -9: nothing is flushed at exit

    second = Worker(broker.bootstrap, names, tmp_path, **env).start()
    workers.append(second)
    await produce(broker.bootstrap, names.otlp, [(None, as_proto([root]))])
    scores = await read_scores(
        broker.bootstrap, names.scores, until=lambda rs: len(rs) >= len(HUB_RULES), timeout=120
    )
    otlp = [line for line in second.scrape().splitlines() if "otlp" in line and "#" not in line]
    said = [line for line in second.log().splitlines() if "HTTP Request" not in line][-15:]
    assert {s["rule_id"] for s in scores} == HUB_RULES, (otlp, said)
    assert {s["status"] for s in scores} == {"ok"}, second.log()[-3000:]
    prompts = [p for p in judge.prompts() if "Why do I rush the upbeat?" in p]
    # the model's answer was on the span gathered before the kill
    assert prompts and all("Practise with a click on 2 and 4" in p for p in prompts)
