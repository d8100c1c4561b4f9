"""The records a topic received in a time range (``stream/kafka/time_range.py``), on the
embedded broker: timestamps out of order, and a topic still being written."""

from __future__ import annotations

import asyncio
import time

from aiokafka import AIOKafkaProducer

from stream.kafka.broker import EmbeddedBroker
from stream.kafka.io import ensure_topics
from stream.kafka.time_range import read_range

from .harness import Names


async def test_a_record_past_the_end_does_not_hide_the_ones_after_it(
    broker: EmbeddedBroker, names: Names
) -> None:
    await ensure_topics(broker.bootstrap, [names.traces], 1)
    base = int(time.time() * 1000) - 60_000
    stamps = [base, base + 50_000, base + 1_000, base + 2_000]  # in, past the end, in, in
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
    await producer.start()
    try:
        for n, stamp in enumerate(stamps):
            await producer.send_and_wait(names.traces, str(n).encode(), timestamp_ms=stamp)
    finally:
        await producer.stop()
    found = [r.value async for r in read_range(broker.bootstrap, names.traces, base, base + 10_000)]
    assert found == [b"0", b"2", b"3"]


async def test_a_range_up_to_now_ends_on_a_topic_still_written(
    broker: EmbeddedBroker, names: Names
) -> None:
    await ensure_topics(broker.bootstrap, [names.traces], 2)
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
    await producer.start()
    for n in range(10):
        await producer.send_and_wait(names.traces, f"before-{n}".encode(), key=str(n).encode())
    writing = True

    async def keep_writing() -> None:
        n = 0
        while writing:
            await producer.send_and_wait(names.traces, f"after-{n}".encode(), key=str(n).encode())
            n += 1
            await asyncio.sleep(0.1)

    writer = asyncio.ensure_future(keep_writing())
    try:
        await asyncio.sleep(0.5)
        started = time.monotonic()
        start_ms = int(time.time() * 1000) - 3_600_000
        found = [
            r.value
            async for r in read_range(broker.bootstrap, names.traces, start_ms, None, idle_s=2.0)
        ]
        assert time.monotonic() - started < 10  # not held by the writes going on
        assert {f"before-{n}".encode() for n in range(10)} <= set(found)
    finally:
        writing = False
        await writer
        await producer.stop()
