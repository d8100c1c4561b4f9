"""The seek to committed offsets after a rebalance, on the embedded broker: records fetched
and then dropped (as Faust drops its agents' buffers at a rebalance) are fetched again,
also from a partition with nothing committed, where aiokafka's own seek leaves the fetcher
past them (aio-libs/aiokafka#1003)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from stream.kafka.broker import EmbeddedBroker
from stream.kafka.io import ensure_topics
from stream.kafka.mends.consumer_thread import seek_to_committed, stamp_fetches_when_sent

from .harness import Names, produce


async def values(consumer: AIOKafkaConsumer, timeout_ms: int = 3000) -> list[bytes]:
    batch = await consumer.getmany(timeout_ms=timeout_ms)
    return [record.value for records in batch.values() for record in records]


async def test_records_fetched_before_a_rebalance_are_fetched_again(
    broker: EmbeddedBroker, names: Names
) -> None:
    topic = f"seek-{names.suffix}"
    await ensure_topics(broker.bootstrap, [topic], 1)
    await produce(broker.bootstrap, topic, [(b"k", b"v0"), (b"k", b"v1")])
    tp = TopicPartition(topic, 0)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        group_id=names.group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    try:
        consumer.assign([tp])
        assert await values(consumer) == [b"v0", b"v1"]  # fetched, then dropped: not committed

        # aiokafka's own seek leaves a partition with nothing committed where it was
        assert await consumer.seek_to_committed() == {tp: None}
        assert await values(consumer, 500) == []

        # the mended one goes back to the start: both records come again
        assert await seek_to_committed(consumer) == {tp: None}
        assert await values(consumer) == [b"v0", b"v1"]

        # a committed offset is sought as before
        await consumer.commit({tp: 1})
        assert await seek_to_committed(consumer) == {tp: 1}
        assert await values(consumer) == [b"v1"]

        # a changelog topic is left where table recovery put it
        await consumer.commit({tp: 0})
        assert await seek_to_committed(consumer, leave={topic}) == {tp: 0}
        assert await values(consumer, 500) == []
        assert await seek_to_committed(consumer) == {tp: 0}
        assert await values(consumer) == [b"v0", b"v1"]
    finally:
        await consumer.stop()


@pytest.mark.parametrize("mended", [False, True])
async def test_a_fetch_answer_is_stamped_with_the_time_its_request_was_sent(
    broker: EmbeddedBroker, names: Names, mended: bool
) -> None:
    """Mend 8: a worker stopped (SIGSTOP) between the broker's answer to a fetch and its
    processing read a stale high watermark stamped with the present (aiokafka's
    ``last_poll_timestamp``), and reported the partition read past a record produced in the
    pause. Here the answer is held after it arrived, a record is produced, then the answer is
    processed: aiokafka stamps it after the record, the mend before the request was sent."""
    topic = f"stamp-{names.suffix}"
    await ensure_topics(broker.bootstrap, [topic], 1)
    await produce(broker.bootstrap, topic, [(b"k", b"v0")])
    tp = TopicPartition(topic, 0)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        group_id=None,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=100,
    )
    await consumer.start()
    if mended:
        stamp_fetches_when_sent(consumer)
    hold, release, held = asyncio.Event(), asyncio.Event(), asyncio.Event()
    send, process = consumer._client.send, consumer._fetcher._proc_fetch_request
    held_request: list[Any] = []
    processed: list[tuple[int, float]] = []  # the held answer's high watermark and stamp

    async def slow_send(node_id: int, request: Any, **kwargs: Any) -> Any:
        response = await send(node_id, request, **kwargs)
        if hold.is_set() and type(request).__name__.startswith("FetchRequest"):
            hold.clear()
            held_request.append(request)
            held.set()
            await release.wait()  # the worker is stopped: the answer waits unprocessed
        return response

    async def proc_fetch_request(assignment: Any, node_id: int, request: Any) -> bool:
        result: bool = await process(assignment, node_id, request)
        if held_request and request is held_request[0]:
            state = assignment.state_value(tp)
            processed.append((state.highwater, state.timestamp / 1000))
        return result

    consumer._client.send = slow_send  # type: ignore[method-assign]
    consumer._fetcher._proc_fetch_request = proc_fetch_request  # type: ignore[method-assign]
    try:
        consumer.assign([tp])
        assert await values(consumer) == [b"v0"]
        hold.set()
        await asyncio.wait_for(held.wait(), 10)
        before = time.time()  # the held request was sent before this
        await produce(broker.bootstrap, topic, [(b"k", b"v1")])  # arrives in the pause
        release.set()
        assert await values(consumer) == [b"v1"]
        ((highwater, stamp),) = processed
        assert highwater == 1  # the answer of before the pause: v1 is not in it
        assert (stamp > before) is not mended  # aiokafka: read up to after v1; the mend: not
    finally:
        await consumer.stop()
