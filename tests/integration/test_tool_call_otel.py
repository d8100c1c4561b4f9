"""An agent's tool calls scored one by one, end to end (issue 50's measure): an agent
(``tests/tool_agent.py``) calls its model through the real OpenAI SDK, instrumented by
``opentelemetry-instrumentation-openai-v2`` with message capture on spans, against a local
scripted server playing the model; its spans go to the spans topic through the no-Collector
recipe's exporter (``examples/otel_sdk_to_kafka.py``), and a worker with the default packs
publishes one score per call per rule of the ``tools`` pack. The same conversation written as a
trace in the trace model (OpenAI chat messages, the request's ``tools``) gets the same scores.

Two apps: one that records its agent run as the GenAI conventions say (``opentelemetry-util-genai``:
an ``invoke_agent`` span with ``gen_ai.tool.definitions``, an ``execute_tool`` span per tool
run), and one with the client's instrumentation alone, whose spans carry the calls and their
results (the chat spans' messages) but not the tools declared to the model: the instrumentation
(2.4b0) does not record the request's ``tools``, so there ``tool_declared`` is skipped and no
schema is checked."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletion
from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.util.genai.handler import TelemetryHandler
from scripted_judge import MockJudge
from tool_agent import QUESTION, RULES, Agent, Run, expected, script_model, trace_model

from stream.kafka.broker import EmbeddedBroker

from .harness import Names, Worker, produce, read_scores, trace_bytes
from .test_otel_sdk_recipe import load_example


@pytest.fixture
def app_model() -> Iterator[MockJudge]:
    """The agent's own model (not a judge: the tools pack's checks call none)."""
    with MockJudge() as model:
        script_model(model)
        yield model


def run_agents(recipe: ModuleType, bootstrap: str, topic: str, model_url: str) -> list[Run]:
    """The two apps' runs, their spans exported to ``topic`` by the recipe's exporter."""
    exporter = recipe.KafkaSpanExporter(bootstrap, topic)
    provider = TracerProvider(resource=Resource.create({"service.name": "velo"}))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        client = openai.OpenAI(base_url=model_url, api_key="sk-app", max_retries=0)
        tracer = provider.get_tracer("velo.support")
        traced = Agent(client, tracer, TelemetryHandler(tracer_provider=provider)).run()
        # another user's words: the scripted model's call ids hash the conversation
        bare = Agent(client, tracer).run(f"Hello. {QUESTION}")
    finally:
        instrumentor.uninstrument()
        provider.shutdown()  # the batch processor exports what it holds
    assert exporter.failed_batches == 0
    return [traced, bare]


def verdicts(scores: list[dict[str, Any]]) -> dict[tuple[str, str], tuple[str, Any, Any]]:
    """(call id, rule) -> (status, value, label), each key once."""
    keyed = {(s["target_id"], s["rule_id"]): (s["status"], s["value"], s["label"]) for s in scores}
    assert len(keyed) == len(scores), "a call scored twice by one rule"
    return keyed


async def test_an_instrumented_agents_tool_calls_are_scored_one_by_one(
    broker: EmbeddedBroker,
    names: Names,
    workers: list[Worker],
    tmp_path: Path,
    app_model: MockJudge,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    worker = Worker(broker.bootstrap, names, tmp_path, SCORER_OTLP_GRACE_S="1")
    del worker.env["SCORER_PACKS"]  # the default selection: the tools pack loads by default
    workers.append(worker.start())
    # message capture as the instrumentation documents it: on the spans (span_only)
    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "SPAN_ONLY")
    traced, bare = await asyncio.to_thread(
        run_agents, load_example(), broker.bootstrap, names.otlp, app_model.base_url
    )
    # the model was asked three times a run, each time with the tool results so far
    assert len(app_model.requests) == 6
    assert [m["role"] for m in app_model.requests[2]["body"]["messages"]][-3:] == [
        "assistant",
        "tool",
        "tool",
    ]
    # its tool-call reply is a chat completion as the installed SDK types one
    async with httpx.AsyncClient(base_url=app_model.base_url) as http:
        asked = await http.post("/chat/completions", json=app_model.requests[0]["body"])
    reply = ChatCompletion.model_validate(asked.raise_for_status().json())
    assert reply.choices[0].finish_reason == "tool_calls"
    assert [c.id for c in reply.choices[0].message.tool_calls or []] == [
        call_id for call_id, _ in traced.calls[:2]
    ]

    # the traced app's conversation as a trace in the trace model, to the traces topic
    written = trace_model(traced, f"opik-{uuid.uuid4().hex}")
    await produce(broker.bootstrap, names.traces, [trace_bytes(written)])

    runs = {traced.trace_id: traced, bare.trace_id: bare, written["id"]: traced}
    expected_count = sum(len(run.calls) for run in runs.values()) * len(RULES)
    scores = await read_scores(
        broker.bootstrap,
        names.scores,
        until=lambda rs: sum(s["scope"] == "tool_call" for s in rs) >= expected_count,
        timeout=90,
    )
    calls = [s for s in scores if s["scope"] == "tool_call"]
    assert len(calls) == expected_count
    by_trace: dict[str, list[dict[str, Any]]] = {}
    for score in calls:
        by_trace.setdefault(score["details"]["trace_id"], []).append(score)
    assert set(by_trace) == set(runs)

    for trace_id, run in runs.items():
        tools = dict(run.calls)
        assert len(tools) == 4
        scored = by_trace[trace_id]
        # exactly one score per call per rule, on the call's id, naming its tool
        assert set(verdicts(scored)) == {(call, rule) for call in tools for rule in RULES}
        for score in scored:
            assert score["pack"] == "tools"
            assert score["details"]["tool"] == tools[score["target_id"]]

    # the app that recorded its agent run, and its conversation in the trace model
    from_spans, from_trace = verdicts(by_trace[traced.trace_id]), verdicts(by_trace[written["id"]])
    assert from_spans == from_trace
    for (call, rule), (status, value, label) in from_spans.items():
        want = expected(dict(traced.calls)[call])[rule]
        assert (status, value, label) == ("ok", want, "pass" if want else "fail"), (call, rule)
    failed = {(dict(traced.calls)[c], r) for (c, r), v in from_spans.items() if v[1] == 0.0}
    assert failed == {
        ("check_stock", "tool_call_succeeded"),
        ("track_parcel", "tool_arguments_valid"),
        ("issue_refund", "tool_declared"),
    }
    reasons = {
        (dict(traced.calls)[s["target_id"]], s["rule_id"]): s["reason"]
        for s in by_trace[traced.trace_id]
    }
    assert "missing required property 'carrier'" in reasons["track_parcel", "tool_arguments_valid"]
    assert (
        reasons["issue_refund", "tool_declared"] == "issue_refund is not among the 3 tools declared"
    )

    # the client's instrumentation alone: the calls and their results, not the declared tools
    alone = by_trace[bare.trace_id]
    for score in alone:
        tool, rule = dict(bare.calls)[score["target_id"]], score["rule_id"]
        if rule == "tool_declared":
            assert (score["status"], score["value"]) == ("skipped", None)
            assert "the request declared no tools" in score["status_reason"]
        elif rule == "tool_arguments_valid":
            assert (score["status"], score["value"]) == ("ok", 1.0)
            assert "no schema checked" in score["reason"]
        else:
            assert (score["status"], score["value"]) == ("ok", expected(tool)[rule]), (tool, rule)
