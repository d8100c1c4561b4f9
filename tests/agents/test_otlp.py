"""The OpenTelemetry agents: no record stops the spans agent or the assembly agent; each one
they cannot use is dead-lettered, with the error, and counted."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from agent_tools import Worker, counted, dead_letters, settled

from stream.agents import otlp
from stream.agents.otlp import register_otlp_agents
from stream.delivery.publisher import Send
from stream.otlp.events import AssemblyEvent, progress, tick

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN = {
    "traceId": TRACE_ID,
    "spanId": "00f067aa0ba902b7",
    "name": "chat gpt-4o-mini",
    "startTimeUnixNano": "1700000000000000000",
    "endTimeUnixNano": "1700000001000000000",
}


def export(span: dict[str, Any]) -> bytes:
    """One OTLP/JSON export record of one span."""
    return orjson.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]})


async def test_a_spans_record_of_the_wrong_types_is_dead_lettered_and_the_next_is_read(
    worker: Worker, sent: list[Send]
) -> None:
    app, topics, settings, metrics = worker
    register_otlp_agents(app, topics, settings, metrics)
    # the record that stopped the spans agent: JSON, but a field of the wrong type
    poison = export({**SPAN, "attributes": [{"key": "k", "value": {"doubleValue": {}}}]})

    async with app.agents["read-spans"].test_context() as agent:
        events = [await agent.put(raw) for raw in (poison, export(SPAN))]
        await settled(lambda: all(event.message.acked for event in events))

    (letter,) = dead_letters(sent, topics)
    assert letter["value"] == poison.decode()
    assert letter["scorer.error.reason"] == "invalid_event"
    assert letter["scorer.error"] == (
        "not a valid OTLP export batch: resourceSpans[0].scopeSpans[0].spans[0].attributes[0]"
        ".value.doubleValue: expected a number, got an object"
    )
    (forwarded,) = [value for topic, _, value, _ in sent if topic is topics.otlp_assembly]
    assert AssemblyEvent.from_bytes(forwarded).trace_id == TRACE_ID
    assert counted(metrics, "scorer_dlq_messages_total", reason="invalid_event") == 1


async def test_a_bug_met_converting_a_spans_record_dead_letters_it(
    worker: Worker, sent: list[Send], monkeypatch: pytest.MonkeyPatch
) -> None:
    app, topics, settings, metrics = worker

    def broken(raw: bytes, encoding: str) -> Any:
        raise AttributeError("'int' object has no attribute 'get'")

    monkeypatch.setattr(otlp, "decode", broken)
    register_otlp_agents(app, topics, settings, metrics)

    async with app.agents["read-spans"].test_context() as agent:
        event = await agent.put(export(SPAN))
        await settled(lambda: event.message.acked)

    (letter,) = dead_letters(sent, topics)
    assert letter["scorer.error.reason"] == "engine_error"
    assert "AttributeError: 'int' object has no attribute 'get'" in letter["scorer.error"]


async def test_an_assembly_event_that_fails_is_dead_lettered_and_the_next_is_applied(
    worker: Worker, sent: list[Send], monkeypatch: pytest.MonkeyPatch
) -> None:
    app, topics, settings, metrics = worker
    assembler = register_otlp_agents(app, topics, settings, metrics)
    applied: list[dict[str, float]] = []

    def apply_progress(partition: int, positions: dict[str, float], arrival: float) -> None:
        if not positions:
            raise KeyError("otlp_spans:0")  # a bug the event meets
        applied.append(positions)

    monkeypatch.setattr(assembler, "progress", apply_progress)
    records = [b"not an event", progress(5.0, {}), progress(6.0, {"otlp_spans:0": 5.5})]

    async with app.agents["assemble-traces"].test_context() as agent:
        events = [await agent.put(raw) for raw in records]
        await settled(lambda: applied != [])
        await agent.put(tick(7.0))  # the stream acks an event when the agent takes the next
        await settled(lambda: all(event.message.acked for event in events))

    invalid, failed = dead_letters(sent, topics)
    assert (invalid["value"], invalid["scorer.error.reason"]) == ("not an event", "invalid_json")
    assert invalid["scorer.error"].startswith("not valid JSON")
    assert (
        failed["value"] == records[1].decode() and failed["scorer.error.reason"] == "engine_error"
    )
    assert failed["scorer.error"] == "assembling traces failed: KeyError: 'otlp_spans:0'"
    assert applied == [{"otlp_spans:0": 5.5}]
