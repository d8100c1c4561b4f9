"""Mend 10 (``fetch_loop.py``): a record goes to the agents directly only when Faust's own
conductor would hand it over without waiting. Each case runs the real conductor of a real
Faust app (no broker): where ``ConductorWaits.none_for`` says yes, the conductor's hand-over
finishes at its first step; where it says no, the hand-over waits, as Faust's race expects."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
from agent_tools import Worker
from faust.types import TP, Message

from stream.kafka.mends.fetch_loop import ConductorWaits

TOPIC = "traces-in"


def record(offset: int) -> Message:
    return Message(TOPIC, 0, offset, 0.0, 0, {}, b"k", b"v", None)


def finishes_at_once(coro: Coroutine[Any, Any, Any]) -> bool:
    """Run ``coro`` to its first wait: True if it finished without one."""
    try:
        coro.send(None)
    except StopIteration:
        return True
    coro.close()
    return False


async def conductor_for(worker: Worker) -> tuple[Any, Any, TP]:
    app = worker[0]
    channel = app.topic(TOPIC, key_serializer="raw", value_serializer="raw")
    app.topics.add(channel)
    tp = TP(TOPIC, 0)
    await app.topics.on_partitions_assigned({tp})
    app.flow_control.resume()
    return app, channel, tp


def fill(queue: asyncio.Queue[Any]) -> None:
    while not queue.full():
        queue.put_nowait(None)


async def hold(lock: asyncio.Lock) -> None:
    await lock.acquire()


WAITS: dict[str, Callable[[Any, Any], Any]] = {
    "flow suspended (a rebalance)": lambda app, channel: app.flow_control.suspend(),
    "the agent's queue full": lambda app, channel: fill(channel.queue),
    "the conductor re-indexing": lambda app, channel: hold(app.topics._tp_to_callback_lock),
    "the producer's buffer over its size": lambda app, channel: over_its_size(app.producer.buffer),
}


def over_its_size(buffer: Any) -> None:
    """A table write waiting in Faust's producer buffer, past its size: the conductor
    flushes it first (``flush_atmost`` waits for a message sent; no producer runs here, so
    its wait is stood in for by an event never set)."""
    buffer.max_messages = 0
    buffer.pending.put_nowait(object())
    never = asyncio.Event()

    async def flush_atmost(max_messages: int | None) -> int:
        await never.wait()
        return 0

    buffer.flush_atmost = flush_atmost


async def test_a_record_is_handed_over_directly_when_nothing_can_wait(worker: Worker) -> None:
    app, channel, tp = await conductor_for(worker)
    assert ConductorWaits(app).none_for(tp)
    assert finishes_at_once(app.topics.on_message(record(0)))
    assert channel.queue.qsize() == 1  # it reached the agent's queue


@pytest.mark.parametrize("wait", list(WAITS))
async def test_through_fausts_race_whenever_the_conductor_would_wait(
    worker: Worker, wait: str
) -> None:
    app, channel, tp = await conductor_for(worker)
    made = WAITS[wait](app, channel)
    if asyncio.iscoroutine(made):
        await made
    assert not ConductorWaits(app).none_for(tp)
    assert not finishes_at_once(app.topics.on_message(record(1)))
