"""``manual_stream.py``: a stream with manual acks read and acked as Faust reads and acks it.

Each case runs a real Faust app's conductor and stream (no broker) twice, once through Faust's
path (``Stream.events``, ``await Stream.ack``) and once through the mend's, and compares what
the agents and the commit depend on: which events are yielded and in what order, the current
event while one is handled, the records tracked as unacked, the sensors told, and the
consumer's acked offsets (what the commit reads)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Callable
from typing import Any

import faust
import pytest
from agent_tools import Worker
from faust.sensors import Sensor
from faust.streams import Stream
from faust.types import TP, EventT
from faust.types.tuples import ConsumerMessage

from stream.kafka.mends import manual_stream

TOPIC = "traces-in"
TP0, TP1 = TP(TOPIC, 0), TP(TOPIC, 1)


class Recording(Sensor):
    """A sensor that writes down what it is told of each event."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, TP, int]] = []

    def on_stream_event_in(self, tp: TP, offset: int, stream: Any, event: Any) -> None:
        self.calls.append(("in", tp, offset))

    def on_message_in(self, tp: TP, offset: int, message: Any) -> None:
        self.calls.append(("message in", tp, offset))

    def on_stream_event_out(
        self, tp: TP, offset: int, stream: Any, event: Any, state: Any = None
    ) -> None:
        self.calls.append(("out", tp, offset))

    def on_message_out(self, tp: TP, offset: int, message: Any) -> None:
        self.calls.append(("message out", tp, offset))


async def manual_stream_of(worker: Worker) -> tuple[faust.App, Stream[bytes]]:
    """The stream an in-order agent reads (its topic's iterator, manual acks), with the
    conductor handing it what the consumer fetches."""
    app = worker[0]
    topic = app.topic(TOPIC, key_serializer="raw", value_serializer="raw", partitions=2)
    channel = topic.clone(is_iterator=True)  # as an agent's actor reads its topic
    app.topics.add(channel)
    await app.topics._update_indices()  # as the conductor's subscriber: acks on for TOPIC
    await app.topics.on_partitions_assigned({TP0, TP1})
    app.flow_control.resume()
    stream = app.stream(channel).noack()  # as forward.in_order
    assert manual_stream.readable(stream)
    return app, stream


def fetched(app: faust.App, tp: TP, offset: int, generation: int | None = None) -> ConsumerMessage:
    """A record as the consumer hands it over (``Consumer._to_message``)."""
    return ConsumerMessage(
        tp.topic,
        tp.partition,
        offset,
        0.0,
        0,
        {},
        b"k",
        b"v%d" % offset,
        None,
        tp=tp,
        generation_id=app.consumer_generation_id if generation is None else generation,
    )


def faust_events(stream: Stream[bytes]) -> AsyncIterator[EventT[bytes]]:
    return stream.events()  # type: ignore[return-value]


READS: dict[str, Callable[[Stream[bytes]], AsyncIterator[EventT[bytes]]]] = {
    "faust": faust_events,
    "mended": manual_stream.events,
}


async def acked_by_faust(stream: Stream[bytes], events: list[EventT[bytes]]) -> None:
    for event in events:
        await stream.ack(event)


async def acked_by_the_mend(stream: Stream[bytes], events: list[EventT[bytes]]) -> None:
    manual_stream.ack_events(stream, events)


ACKS = {"faust": acked_by_faust, "mended": acked_by_the_mend}


@pytest.mark.parametrize("read", READS)
async def test_the_events_yielded_are_faust_s(worker: Worker, read: str) -> None:
    """In order, each the current event while handled, tracked as unacked and told to the
    sensors; a record of an earlier generation (fetched before a rebalance) passed over and
    left unacked, as Faust's Cython iterator does."""
    app, stream = await manual_stream_of(worker)
    sensor = Recording()
    app.sensors.add(sensor)
    stale = fetched(app, TP0, 3, generation=app.consumer_generation_id - 1)
    records = [fetched(app, TP0, 0), fetched(app, TP1, 7), fetched(app, TP0, 1), stale]
    records.append(fetched(app, TP0, 2))
    for record in records:
        await app.topics.on_message(record)

    seen: list[tuple[TP, int, bytes]] = []
    async for event in READS[read](stream):
        assert stream.current_event is event
        assert faust.current_event() is event
        seen.append((event.message.tp, event.message.offset, event.value))
        if len(seen) == 4:
            break

    assert seen == [(TP0, 0, b"v0"), (TP1, 7, b"v7"), (TP0, 1, b"v1"), (TP0, 2, b"v2")]
    assert stream.events_total == 4
    unacked = app.consumer.unacked
    assert {(m.tp, m.offset) for m in unacked} == {(TP0, 0), (TP1, 7), (TP0, 1), (TP0, 2)}
    assert not stale.acked and not stale.tracked
    assert sensor.calls == [
        call
        for tp, offset in [(TP0, 0), (TP1, 7), (TP0, 1), (TP0, 2)]
        for call in (("message in", tp, offset), ("in", tp, offset))
    ]


@pytest.mark.parametrize("ack", ACKS)
@pytest.mark.parametrize("quiet", [True, False], ids=["quiet sensors", "a sensor listening"])
async def test_the_acks_are_faust_s(worker: Worker, ack: str, quiet: bool) -> None:
    """The same offsets made committable, each message's last ack counted once (one read
    by two channels needs both), and the sensors told the same."""
    app, stream = await manual_stream_of(worker)
    sensor = Recording()
    if not quiet:
        app.sensors.add(sensor)
    assert manual_stream.quiet_acks(app.sensors) is quiet
    records = [fetched(app, TP0, offset) for offset in range(4)] + [fetched(app, TP1, 9)]
    for record in records:
        await app.topics.on_message(record)
    records[2].incref()  # a second channel reads it too: one ack is not its last
    events: list[EventT[bytes]] = []
    async for event in manual_stream.events(stream):
        events.append(event)
        if len(events) == len(records):
            break
    sensor.calls.clear()

    await ACKS[ack](stream, events[:3])
    await ACKS[ack](stream, [events[0], *events[3:]])  # an event acked again: nothing more

    consumer: Any = app.consumer
    assert list(consumer._acked[TP0]) == [0, 1, 3]
    assert consumer._acked_index[TP0] == {0, 1, 3}
    assert list(consumer._acked[TP1]) == [9]
    assert consumer._n_acked == 4
    assert [(m.offset, m.acked, m.refcount) for m in records] == [
        (0, True, 0),
        (1, True, 0),
        (2, False, 1),
        (3, True, 0),
        (9, True, 0),
    ]
    assert {(m.tp, m.offset) for m in consumer.unacked} == {(TP0, 2)}
    outs = [(TP0, 0), (TP0, 1), (TP0, 2), (TP0, 0), (TP0, 3), (TP1, 9)]
    last = {(TP0, 0), (TP0, 1), (TP0, 3), (TP1, 9)}
    expected = []
    for position, (tp, offset) in enumerate(outs):
        expected.append(("out", tp, offset))
        if (tp, offset) in last and position != 3:  # the second ack of 0 is not a last one
            expected.append(("message out", tp, offset))
    assert sensor.calls == (expected if not quiet else [])


async def test_the_event_loop_turns_while_records_are_ready(worker: Worker) -> None:
    """Other tasks run while the stream has records ready: at least every ``YIELD_EVERY``
    records (Faust: before every record)."""
    app, stream = await manual_stream_of(worker)
    for offset in range(5 * manual_stream.YIELD_EVERY):
        await app.topics.on_message(fetched(app, TP0, offset))
    turns = 0
    taken_at_turns: list[int] = []
    taken = 0

    async def other() -> None:
        nonlocal turns
        while True:
            await asyncio.sleep(0)
            turns += 1
            taken_at_turns.append(taken)

    task = asyncio.create_task(other())
    async for _ in manual_stream.events(stream):
        taken += 1
        if taken == 5 * manual_stream.YIELD_EVERY:
            break
    task.cancel()
    gaps = [b - a for a, b in itertools.pairwise(taken_at_turns)]
    assert turns >= 4 and max(gaps) <= manual_stream.YIELD_EVERY


async def test_a_stream_it_cannot_read_so_is_read_by_faust(worker: Worker) -> None:
    app, stream = await manual_stream_of(worker)
    acking = app.stream(stream.channel)  # acks on: Faust acks each record itself
    assert not manual_stream.readable(acking)
    assert not manual_stream.readable(stream.filter(lambda value: True))  # a processor


def test_a_hook_replaced_on_the_sensor_itself_is_not_quiet() -> None:
    sensor = Sensor()
    assert manual_stream.quiet_acks([sensor])
    sensor.on_message_out = lambda *args: None  # type: ignore[method-assign]
    assert not manual_stream.quiet_acks([sensor])  # Faust's delegate would call it
