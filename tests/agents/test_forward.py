"""The forwarding loop the session and spans agents share: whatever a converter raises on
one message dead-letters that message, and the partition moves on."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

import pytest
from agent_tools import RecordingPublisher, Worker, counted, dead_letters, settled
from faust.types import Message

from stream.agents.forward import Pace, register_batched, register_forwarder
from stream.delivery.dead_letter import DeadLetters
from stream.delivery.publisher import Send
from stream.sources.log import SourceLog


async def test_a_message_its_converter_raises_on_is_dead_lettered_and_the_rest_go_on(
    worker: Worker, sent: list[Send]
) -> None:
    app, topics, _, metrics = worker
    source, out = app.topic("coaching-sessions"), app.topic("out")

    def convert(message: Message) -> tuple[list[Send], datetime | None]:
        if message.value == b"poison":
            raise AttributeError("'int' object has no attribute 'get'")  # a converter's bug
        return [(out, message.key, message.value, None)], None

    agent = register_forwarder(
        app,
        source,
        "forward-test",
        convert,
        declare=[out],
        dead_letters=DeadLetters(topics.dlq, metrics),
        max_in_flight=4,
        observer=metrics,
    )
    async with agent.test_context() as context:
        events = [await context.put(value, key=b"s-1") for value in (b"a", b"poison", b"b")]
        await settled(lambda: all(event.message.acked for event in events))

    assert [(topic, value) for topic, _, value, _ in sent] == [
        (out, b"a"),
        (topics.dlq, b"poison"),
        (out, b"b"),
    ]
    (letter,) = dead_letters(sent, topics)
    assert letter["scorer.error.reason"] == "engine_error"
    assert letter["scorer.error"] == (
        "converting the message (forward-test) failed: "
        "AttributeError: 'int' object has no attribute 'get'"
    )
    assert letter["scorer.source.offset"] == "1"
    assert counted(metrics, "scorer_dlq_messages_total", reason="engine_error") == 1


async def test_a_message_whose_send_fails_holds_its_source_back_until_it_is_delivered(
    worker: Worker, sent: list[Send], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The send of one message fails (a broker hiccup): while it is sent again, the next
    messages go on, and the source is reported read only up to just before it, so that no
    progress report lets a thread close or a trace be assembled without it."""
    app, topics, _, metrics = worker
    source, out = app.topic("coaching-sessions"), app.topic("out")
    gate = asyncio.Event()

    async def send(self: Any, sends: list[Send], timestamp: float | None = None) -> list[Any]:
        self.sent.extend(sends)
        done = asyncio.get_running_loop().create_future()
        if sends[0][2] == b"lost":
            done.set_exception(RuntimeError("broker hiccup"))
        else:
            done.set_result(None)
        return [done for _ in sends]

    async def send_until_delivered(self: Any, sends: list[Send], timestamp: Any = None) -> None:
        await gate.wait()
        self.sent.extend(sends)

    monkeypatch.setattr(RecordingPublisher, "send", send)
    monkeypatch.setattr(RecordingPublisher, "send_until_delivered", send_until_delivered)
    sources = SourceLog()
    agent = register_forwarder(
        app,
        source,
        "forward-test",
        lambda m: ([(out, m.key, m.value, None)], None),
        declare=[out],
        dead_letters=DeadLetters(topics.dlq, metrics),
        max_in_flight=4,
        sources=sources,
        observer=metrics,
    )
    async with agent.test_context() as context:
        events = [await context.put(value, key=b"s-1") for value in (b"a", b"lost", b"b")]
        await settled(lambda: events[2].message.acked is False and 2 in _offsets(sources))
        name = f"{events[1].message.topic}:{events[1].message.partition}"
        assert set(sources.held[name]) == {events[1].message.offset}
        read = sources.positions({name: (3, 0)}, now=events[2].message.timestamp + 60)
        assert read[name][1] < events[1].message.timestamp  # not past the one being resent
        gate.set()
        await settled(lambda: all(event.message.acked for event in events))
        assert sources.held == {}
    assert [value for _, _, value, _ in sent] == [b"a", b"lost", b"b", b"lost"]


def _offsets(sources: SourceLog) -> set[int]:
    return {read.offset for read in sources.last.values()}


async def test_a_batched_agent_takes_what_has_arrived_in_batches_and_acks_all_in_order(
    worker: Worker, sent: list[Send]
) -> None:
    """``register_batched``: records put while the handler is busy are handed over together
    (at most ``batch_max``), each once, in order; a record acked only once its batch's
    messages are delivered."""
    app, _, _, metrics = worker
    source, out = app.topic("traces-in"), app.topic("out")
    batches: list[list[int]] = []
    busy = asyncio.Event()

    async def handle(delivery: Any, taken: list[Any]) -> None:
        batches.append([entry.offset for _, entry in taken])
        await busy.wait()  # the first batch holds the handler while the rest arrive
        await delivery.deliver_batch(
            [
                (tp, entry, [(out, b"k", entry.event.message.value, None)], [], None)
                for tp, entry in taken
            ]
        )

    agent = register_batched(
        app,
        source,
        "batched-test",
        handle,
        declare=[out],
        max_in_flight=64,
        batch_max=3,
        observer=metrics,
    )
    async with agent.test_context() as context:
        events = [await context.put(f"v{n}".encode(), key=b"t") for n in range(7)]
        await settled(lambda: len(batches) >= 1)
        assert not any(event.message.acked for event in events)  # not delivered yet
        busy.set()
        await settled(lambda: all(event.message.acked for event in events))

    offsets = [offset for batch in batches for offset in batch]
    assert offsets == sorted(offsets) and len(offsets) == len(set(offsets)) == 7
    assert max(len(batch) for batch in batches) == 3  # records waited, taken together
    assert [value for _, _, value, _ in sent] == [f"v{n}".encode() for n in range(7)]
    assert RecordingPublisher.batches == [len(batch) for batch in batches]  # one hand-over each


async def test_a_batch_that_fails_stops_the_agent_with_its_error_and_acks_nothing(
    worker: Worker, sent: list[Send], caplog: pytest.LogCaptureFixture
) -> None:
    """A failing batch stops the agent with the error (Faust's supervisor restarts it), even
    while the reader waits for the next record; nothing of the batch is acked, so it is read
    again."""
    app, _, _, metrics = worker
    source, out = app.topic("traces-in"), app.topic("out")

    async def handle(delivery: Any, taken: list[Any]) -> None:
        raise ConnectionError("the producer refused the batch")

    agent = register_batched(
        app,
        source,
        "failing-test",
        handle,
        declare=[out],
        max_in_flight=2,
        batch_max=2,
        observer=metrics,
    )
    async with agent.test_context() as context:
        first = await context.put(b"v0", key=b"t")
        # the reader was waiting for the next record: the agent stops all the same
        await settled(lambda: "Crashed reason=ConnectionError('the producer refused" in caplog.text)
    assert not first.message.acked


def test_a_stream_is_busy_once_a_batch_would_fill_within_the_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [100.0]
    monkeypatch.setattr("stream.agents.forward.time.perf_counter", lambda: now[0])
    pace = Pace()

    def arrive(count: int, every_s: float) -> None:
        for _ in range(count):
            now[0] += every_s
            pace.arrived()

    assert not pace.busy(0.005)  # a new stream starts quiet
    arrive(1000, 0.0001)  # 10 000 records/s: 50 within 5 ms
    assert pace.busy(0.005)
    assert not pace.busy(0.0)  # no wait: never
    arrive(100, 0.001)  # 1 000/s: 5 within 5 ms
    assert not pace.busy(0.005) and pace.busy(0.01)
    arrive(1000, 0.0001)
    now[0] += 60  # then a minute of silence: the record after it finds a quiet stream
    arrive(1, 0)
    assert not pace.busy(0.005)
