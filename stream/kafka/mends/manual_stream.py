"""A stream with manual acks, read and acked as Faust reads and acks it, for less per record
(a cost, not a defect).

The batched in-order agent (``register_batched`` in ``stream/agents/forward.py``: the trace
agent) reads a ``Stream.noack()`` stream and acks each record once the broker has what it
produced; the per-record in-order agents (the forwarders, the OTLP span agents) keep Faust's
own ``events`` and acks (with this module's stream, the OTLP integration test's assembled
trace once in six loaded runs carried a Kafka time 1-5 ms past its last span record's: not
yet explained). Faust (faust-streaming 0.15) pays, per
record: in ``Stream.events`` over ``Stream._c_aiter`` over the Cython ``StreamIterator``
(``faust/_cython/streams.pyx``), a turn of the event loop (``await sleep(0)``) and three
nested coroutines to take it from the channel's queue (``Channel.__anext__``,
``ThrowableQueue.get``, ``FlowControlQueue.get``); and in ``Stream.ack``, a coroutine,
``Event.ack``, ``Message.ack`` and ``Message.decref`` (each taking ``ack_lock``), and two
calls of the sensors, whose hooks for an acked record do nothing here (``QuietMonitor``).

``events`` is ``Stream.events`` for such a stream, as the Cython iterator runs it: the same
checks of each record, in the same order, the same current event, sensors, count and tracking
of the record as unacked; a record of an earlier generation, or taken while flow control is
suspended, is passed over unacked, as there. What differs: a record is taken from the queue
with ``get_nowait`` (what ``asyncio.Queue.get`` calls when the queue holds one), and the
event loop turns every ``YIELD_EVERY`` records and whenever the queue is empty, not before
every record. A stream it cannot read so (acks on, processors, a join, not a channel's
iterator, Faust's Cython iterator not built) is read by Faust's own ``events``.

``ack_events`` is ``Stream.ack`` for many events at once, in their order, under one hold of
``ack_lock``: each message's reference count taken down by one and, at zero, its final ack
(``ConsumerMessage.on_final_ack``: ``Consumer.ack``, the offset marked committable); the
sensors' ``on_stream_event_out`` and ``on_message_out`` called after, unless none of the
app's sensors does anything in them.

Both are fingerprinted in ``tests/kafka/upstream_fingerprints.json``; the tests that show them
doing what Faust's path does are in ``tests/kafka/test_manual_stream.py``.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Iterable
from typing import Any, cast

from faust import streams
from faust.sensors import Sensor
from faust.streams import Stream
from faust.types import ChannelT, EventT, StreamT
from faust.types.tuples import ack_lock

from .monitor import QuietMonitor

log = logging.getLogger(__name__)

YIELD_EVERY = 8  # records taken between two turns of the event loop (Faust: every record)

# the sensors' hooks for an acked event that do nothing
_QUIET_EVENT_OUT = {Sensor.on_stream_event_out, QuietMonitor.on_stream_event_out}
_QUIET_MESSAGE_OUT = {Sensor.on_message_out, QuietMonitor.on_message_out}


def readable(stream: StreamT[Any]) -> bool:
    """Can ``events`` read ``stream`` as Faust's Cython iterator does?"""
    channel = stream.channel
    return (
        getattr(streams, "_CStreamIterator", None) is not None  # Faust's path: _c_aiter
        and isinstance(stream, Stream)
        and not stream.enable_acks
        and not stream._processors
        and stream.join_strategy is None  # Stream.on_merge returns the value
        and type(stream).on_merge is Stream.on_merge
        and isinstance(channel, ChannelT)
        and bool(getattr(channel, "is_iterator", False))  # Channel.__anext__ reads its queue
    )


def events(stream: StreamT[Any]) -> AsyncIterator[EventT[Any]]:
    """``stream.events()`` for a stream with manual acks (``Stream.noack()``), taking what
    is ready without a turn of the event loop before every record."""
    if not readable(stream):
        return cast(AsyncIterator[EventT[Any]], stream.events())
    stream = cast(Stream[Any], stream)
    iterator = _events(stream)
    # as Stream.__aiter__: the stream closes it when it stops
    stream._active_agens.add(iterator)
    return iterator


async def _events(stream: Stream[Any]) -> AsyncGenerator[EventT[Any], None]:
    # Stream._c_aiter, with StreamIterator.next and _prepare_event inlined, and events()
    stream._finalized = True
    started_by_aiter = await stream.maybe_start()
    app = stream.app
    channel: Any = stream.channel
    queue = channel.queue
    errors, empty, take = queue._errors, queue.empty, queue.get_nowait
    slow_get = channel.__anext__
    flow_active = app.flow_control.is_active
    acking_topics = app.topics.acking_topics
    add_unacked = cast(Any, app.consumer)._unacked_messages.add
    on_message_in = stream._on_message_in
    on_stream_event_in = stream._on_stream_event_in
    current = streams._current_event
    ref = weakref.ref
    sleep = asyncio.sleep
    since_yield = YIELD_EVERY
    try:
        while not stream.should_stop:
            if errors:  # ThrowableQueue.get
                raise errors.popleft()
            if empty():
                channel_value = await slow_get()  # waits: the event loop turns
                since_yield = 0
            else:
                if since_yield >= YIELD_EVERY:
                    await sleep(0)
                    since_yield = 0
                    if stream.should_stop:
                        break
                    if errors:
                        raise errors.popleft()
                    if empty():
                        continue
                channel_value = take()
                since_yield += 1
            if not isinstance(channel_value, EventT):
                stream._set_current_event(None)
                continue  # events() yields only events
            event = channel_value
            message = event.message
            tp = message.tp
            offset = message.offset
            if not flow_active() or message.generation_id != app.consumer_generation_id:
                continue  # passed over, unacked (StreamIterator._prepare_event)
            if message.topic in acking_topics and not message.tracked:
                message.tracked = True
                add_unacked(message)
                on_message_in(tp, offset, message)
            on_stream_event_in(tp, offset, stream, event)
            current.set(ref(event))  # Stream._set_current_event
            stream.current_event = event
            try:
                stream.events_total += 1
                yield event
            finally:
                stream.current_event = None
    except StopAsyncIteration:
        return
    finally:
        stream._channel_stop_iteration(channel)
        if started_by_aiter:
            await stream.stop()
            stream.service_reset()


def quiet_acks(sensors: Iterable[Any]) -> bool:
    """Do none of ``sensors`` do anything when an event is acked?"""
    # the instance's hooks (one replaced on the instance, a test's mock, is not quiet)
    return all(
        getattr(sensor.on_stream_event_out, "__func__", None) in _QUIET_EVENT_OUT
        and getattr(sensor.on_message_out, "__func__", None) in _QUIET_MESSAGE_OUT
        for sensor in sensors
    )


def ack_events(stream: StreamT[Any], events: list[EventT[Any]]) -> int:
    """``await stream.ack(event)`` for each of ``events``, in order; returns how many were
    the last ack of their message. An ack that raises is logged, and the rest acked."""
    last: list[bool] = []
    with ack_lock:  # Message.ack and Message.decref take it for each
        for event in events:
            message = event.message
            final = False
            try:
                if not message.acked:
                    refcount = message.refcount = max(message.refcount - 1, 0)
                    if not refcount:
                        final = message.on_final_ack(event.app.consumer)  # Event.ack's
            except Exception:
                log.exception("acking %s@%s failed", message.tp, message.offset)
            last.append(final)
    if not quiet_acks(stream.app.sensors):
        faust_stream = cast(Stream[Any], stream)
        on_stream_event_out = faust_stream._on_stream_event_out
        on_message_out = faust_stream._on_message_out
        for event, final in zip(events, last, strict=True):
            message = event.message
            on_stream_event_out(message.tp, message.offset, stream, event)
            if final:
                on_message_out(message.tp, message.offset, message)
    return sum(last)
