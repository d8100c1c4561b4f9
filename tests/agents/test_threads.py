"""The thread agent: a thread event that cannot be folded is dead-lettered, with the error,
and counted; the events after it are folded."""

from __future__ import annotations

import pytest
from agent_tools import Worker, counted, dead_letters, settled
from fixtures import scorer

from stream.agents.threads import register_thread_agent
from stream.delivery.publisher import Send
from stream.threads.events import ThreadEvent, tick


async def test_a_thread_event_that_fails_is_dead_lettered_and_the_next_is_folded(
    worker: Worker, sent: list[Send], monkeypatch: pytest.MonkeyPatch
) -> None:
    app, topics, settings, metrics = worker
    processor = register_thread_agent(app, topics, scorer(), settings, metrics)
    folded: list[float] = []

    def apply(partition: int, event: ThreadEvent) -> list[object]:
        if event.arrival == 2.0:
            raise KeyError("conversation/t-1")  # a bug the event meets
        folded.append(event.arrival)
        return []

    monkeypatch.setattr(processor, "apply", apply)
    records = [b'{"type": "someday"}', tick(2.0), tick(3.0)]

    async with app.agents["fold-threads"].test_context() as agent:
        events = [await agent.put(raw) for raw in records]
        await settled(lambda: folded == [3.0])
        await agent.put(tick(4.0))  # the stream acks an event when the agent takes the next
        await settled(lambda: all(event.message.acked for event in events))

    invalid, failed = dead_letters(sent, topics)
    assert invalid["value"] == '{"type": "someday"}'
    assert invalid["scorer.error.reason"] == "invalid_event"
    assert invalid["scorer.error"].startswith("not a valid thread event: type: Input should be")
    assert failed["value"] == tick(2.0).decode() and failed["scorer.error.reason"] == "engine_error"
    assert failed["scorer.error"] == "folding the thread event failed: KeyError: 'conversation/t-1'"
    assert counted(metrics, "scorer_thread_events_total", type="failed") == 2
    assert counted(metrics, "scorer_dlq_messages_total", reason="engine_error") == 1


async def test_a_paused_partition_is_not_reported_caught_up(
    worker: Worker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Faust pauses every partition while its tables recover after a rebalance: no fetch, so
    the high watermark of the last one says nothing of what arrived since. Such a partition
    is reported read up to its last message (or not read yet), never up to now."""
    from faust.types import TP

    from stream.kafka.mends.faust_state import read_positions
    from stream.sources.log import SourceLog

    app = worker[0]
    owned = [TP("llm-traces", 0), TP("llm-traces", 1)]
    monkeypatch.setattr(app.assignor, "assigned_actives", lambda: set(owned))
    consumer = app.consumer
    monkeypatch.setattr(consumer, "highwater", lambda tp: 10)  # both read to the end
    monkeypatch.setattr(consumer, "_committed_offset", {tp: 10 for tp in owned})
    sources = SourceLog()
    sources.read("llm-traces:0", 9, 100.0, None)
    now = 1000.0
    assert read_positions(app, sources, {"llm-traces"}, now) == {
        "llm-traces:0": (0.0, now),
        "llm-traces:1": (0.0, now),
    }
    monkeypatch.setattr(consumer, "_paused_partitions", set(owned))
    assert read_positions(app, sources, {"llm-traces"}, now) == {
        "llm-traces:0": (0.0, 100.0),  # its last message
        "llm-traces:1": (0.0, 0.0),  # nothing read: a backlog of unknown age
    }
    monkeypatch.setattr(consumer, "_paused_partitions", set())
    monkeypatch.setattr(app, "rebalancing", True)
    assert read_positions(app, sources, {"llm-traces"}, now)["llm-traces:0"] == (0.0, 100.0)
