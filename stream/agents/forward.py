"""The per-record loop with in-order acks, written once (``register_in_order``), and the
agents that forward each message of an input topic, converted, in order.

The trace agent, the session agent and the spans agent run the same loop; the last two are
the same forwarder: read a message, turn it into the
messages to send (or a dead letter), hand them to the producer, ack offsets in order once
they are on the broker, and record how far the source partition is read.

A converter dead-letters what it knows is invalid input itself (``invalid_event``); whatever
else it raises on a message is a bug that message met (``engine_error``): the message is
dead-lettered with the error and the loop moves on. Raised out of the loop, it would stop the
agent, and the message, never acked, would hold its partition back for good.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime
from functools import partial
from typing import cast

import faust
from faust.streams import Stream
from faust.types import TP, AgentT, Message, StreamT, TopicT

from ..delivery.acking import Pending
from ..delivery.dead_letter import DeadLetters
from ..delivery.ordered import OrderedDelivery
from ..delivery.publisher import Publisher, Send
from ..kafka.mends import manual_stream
from ..observer import Observer
from ..sources.log import SourceLog, source_name

# a message -> what to send for it, and its event time (None: unknown)
Convert = Callable[[Message], tuple[list[Send], datetime | None]]


# one record of an in-order agent: what it sends for it (``OrderedDelivery.deliver``)
Handle = Callable[[OrderedDelivery, TP, Pending, Message], Awaitable[None]]


def register_in_order(
    app: faust.App,
    topic: TopicT,
    name: str,
    handle: Handle,
    *,
    declare: Iterable[TopicT],
    max_in_flight: int,
    sources: SourceLog | None = None,
    observer: Observer | None = None,
    watch_in_flight: bool = False,
) -> AgentT[bytes]:
    """An agent on ``topic`` handing each record to ``handle`` with its place in the
    in-order acks: offsets are acked in order per partition, once what ``handle`` delivered
    for each record is on the broker (the loop every agent that publishes per record runs)."""
    observer = observer or Observer()
    publisher = Publisher(app)
    outputs = list(declare)

    async def run(stream: StreamT[bytes]) -> None:
        manual, delivery = await in_order(
            stream, publisher, outputs, max_in_flight, observer, sources, watch_in_flight
        )
        delivery.start()
        try:
            # Faust's own stream: the manual-stream mend is the batched agent's only (it gave
            # the per-record agents no measurable CPU; design record 54)
            async for event in manual.events():
                tp, entry = delivery.admit_now(event) or await delivery.admit(event)
                await handle(delivery, tp, entry, event.message)
        finally:
            delivery.stop()

    run.__name__ = run.__qualname__ = name.replace("-", "_")  # Faust's label for it
    return app.agent(topic, concurrency=1, name=name)(run)


# records of an in-order agent taken together, each with its place in the in-order acks
Taken = list[tuple[TP, Pending]]
HandleBatch = Callable[[OrderedDelivery, Taken], Awaitable[None]]

# on a quiet stream, the longest a taken record waits for its batch: only when the stream
# holds back a record it then skips (one of a partition given away), since a batch is
# otherwise handed over as soon as nothing more is ready
TAKE_AT_MOST_S = 0.02
# a stream is busy (batches wait to fill) when this many records arrive within the wait
BUSY_BATCH = 8


async def in_order(
    stream: StreamT[bytes],
    publisher: Publisher,
    outputs: list[TopicT],
    max_in_flight: int,
    observer: Observer,
    sources: SourceLog | None,
    watch_in_flight: bool,
    mended: bool = False,
) -> tuple[StreamT[bytes], OrderedDelivery]:
    """An in-order agent's start: its outputs declared, its stream with manual acks, and the
    delivery that acks it in order; ``mended``: the stream read and acked as Faust does, for
    less per record (``mends/manual_stream.py``: the batched agents)."""
    await publisher.declare(outputs)
    manual = cast(Stream[bytes], stream).noack()  # agents get a Stream: StreamT lacks noack
    delivery = OrderedDelivery(
        publisher,
        manual.ack,
        max_in_flight,
        observer,
        held_while_retried(sources),
        ack_all=partial(manual_stream.ack_events, manual) if mended else None,
    )
    if watch_in_flight:
        observer.watch_in_flight(delivery.acker.in_flight)  # read at scrape time
    return manual, delivery


def register_batched(
    app: faust.App,
    topic: TopicT,
    name: str,
    handle: HandleBatch,
    *,
    declare: Iterable[TopicT],
    max_in_flight: int,
    batch_max: int,
    batch_wait_s: float = 0.0,
    sources: SourceLog | None = None,
    observer: Observer | None = None,
    watch_in_flight: bool = False,
) -> AgentT[bytes]:
    """``register_in_order`` taking records in batches: ``handle`` gets up to ``batch_max``
    records at once, each already tracked in the in-order acks (design record 32).

    The stream is read by the agent; batches are handled by a second task. A batch is handed
    over when it is full. Below that, while records arrive slower than ``BUSY_BATCH`` per
    ``batch_wait_s``, it is handed over as soon as nothing more is ready (no latency added
    to a quiet stream); while they arrive faster, once its first record has waited
    ``batch_wait_s`` (what is ready at any moment is a fetch's records at most: waiting is
    what makes a batch). A record waiting for a free slot in flight hands over what is taken
    first.
    """
    observer = observer or Observer()
    publisher = Publisher(app)
    outputs = list(declare)

    async def run(stream: StreamT[bytes]) -> None:
        manual, delivery = await in_order(
            stream, publisher, outputs, max_in_flight, observer, sources, watch_in_flight, True
        )
        queue = getattr(manual.channel, "queue", None)  # what Faust has fetched, not yet read
        nothing_ready: Callable[[], bool] = queue.empty if queue is not None else lambda: True
        taken: Taken = []
        ready = asyncio.Event()
        loop = asyncio.get_running_loop()
        deadline: list[asyncio.TimerHandle] = []  # the taken batch's, while it waits
        pace = Pace()
        waits = False  # whether the taken batch waits to fill (its stream was busy)

        async def handle_batches() -> None:
            while True:
                await ready.wait()
                ready.clear()
                for timer in deadline:
                    timer.cancel()
                deadline.clear()
                batch = taken[:batch_max]
                del taken[:batch_max]
                if taken:
                    ready.set()
                if batch:
                    await handle(delivery, batch)

        delivery.start()
        handling = asyncio.create_task(handle_batches())
        reader = asyncio.current_task()
        # a batch that fails stops the agent (Faust's supervisor restarts it; its records,
        # never acked, come again), as a record's failure did when records went one by one:
        # the reader may be waiting for a record or a slot, so it is woken to raise it
        handling.add_done_callback(
            lambda done: reader.cancel() if reader and _failed_task(done) else None
        )
        try:
            async for event in manual_stream.events(manual):
                if delivery.slots.locked():
                    ready.set()  # a slot frees only once what is taken is handled
                tp, entry = delivery.admit_now(event) or await delivery.admit(event)
                entry.taken_at = pace.arrived()
                taken.append((tp, entry))
                if len(taken) == 1:  # the longest this batch waits
                    waits = pace.busy(batch_wait_s)
                    wait = batch_wait_s if waits else TAKE_AT_MOST_S
                    deadline.append(loop.call_later(wait, ready.set))
                if len(taken) >= batch_max or (not waits and nothing_ready()):
                    ready.set()
        except asyncio.CancelledError:
            if _failed_task(handling):
                raise handling.exception() from None  # type: ignore[misc]
            raise
        finally:
            handling.cancel()
            delivery.stop()
            publisher.stop()

    run.__name__ = run.__qualname__ = name.replace("-", "_")  # Faust's label for it
    return app.agent(topic, concurrency=1, name=name)(run)


def _failed_task(task: asyncio.Task[None]) -> bool:
    return task.done() and not task.cancelled() and task.exception() is not None


class Pace:
    """How fast records arrive: counted over windows of ``WINDOW_S``."""

    WINDOW_S = 0.05

    def __init__(self) -> None:
        self.window_start = 0.0
        self.count = 0
        self.rate = 0.0  # records per second in the last whole window; a new stream is quiet

    def arrived(self) -> float:
        now = time.perf_counter()
        self.count += 1
        if (elapsed := now - self.window_start) >= self.WINDOW_S:
            self.rate = self.count / elapsed if elapsed < 10 * self.WINDOW_S else 0.0
            self.window_start, self.count = now, 0
        return now

    def busy(self, wait_s: float) -> bool:
        """Would ``BUSY_BATCH`` records arrive within ``wait_s``?"""
        return self.rate * wait_s >= BUSY_BATCH


def register_forwarder(
    app: faust.App,
    topic: TopicT,
    name: str,
    convert: Convert,
    *,
    declare: Iterable[TopicT],
    dead_letters: DeadLetters,
    max_in_flight: int,
    sources: SourceLog | None = None,
    observer: Observer | None = None,
) -> AgentT[bytes]:
    """An agent on ``topic`` sending ``convert(message)`` for each message, in order; a
    message ``convert`` raises on goes to ``dead_letters`` with the error."""
    doing = f"converting the message ({name})"

    async def forward(delivery: OrderedDelivery, tp: TP, entry: Pending, message: Message) -> None:
        try:
            sends, moment = convert(message)
        except Exception as exc:  # a bug met this message: never leave it unacked
            sends, moment = dead_letters.engine_failure(message, exc, doing), None
        entry.moment = moment
        await delivery.deliver(tp, entry, sends, [])
        if sources:
            source = source_name(message.topic, message.partition)
            sources.read(source, message.offset, message.timestamp, moment)

    return register_in_order(
        app,
        topic,
        name,
        forward,
        declare=declare,
        max_in_flight=max_in_flight,
        sources=sources,
        observer=observer,
    )


def held_while_retried(sources: SourceLog | None) -> Callable[[TP, Pending, bool], None] | None:
    """For ``OrderedDelivery``: a source is read only up to just before a message of it
    whose sends are being retried (``SourceLog.hold``), until they are delivered."""
    if sources is None:
        return None
    held = sources

    def retrying(tp: TP, entry: Pending, started: bool) -> None:
        source = source_name(tp.topic, tp.partition)
        if started:
            held.hold(source, entry.offset, entry.event.message.timestamp, entry.moment)
        else:
            held.release(source, entry.offset)

    return retrying
