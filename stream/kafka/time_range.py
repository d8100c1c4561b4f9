"""The records a topic received between two times: what ``scorer estimate --topic`` plans
and ``scorer backfill`` scores.

A group-less consumer assigned every partition of the topic starts each at the offset
Kafka's offsets-for-times gives for the start (the first record whose timestamp is at or
after it; none: the partition has nothing that late). A partition is read up to the end
offset the broker gave when the read began, then until a record at or after the end time
(no end: the moment of the call) or ``idle_s`` without a record: a live topic's new
records are past the end, and the embedded broker's end offsets can fall a record batch
short (design record 03). Records outside [start, end) are skipped, wherever they are: a
producer's timestamps need not be in order. Records are yielded with their partition and
offset, in each partition's order. A record before the start is skipped where the broker's
offsets-for-times starts earlier than asked: the embedded broker answers it with the
partition's first offset whatever the time (design record 03), so a range there reads the
topic from its start.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, TopicPartition

from ..errors import ScorerError
from .io import groupless_consumer
from .security import KafkaSecurity


@dataclass(frozen=True)
class Ranged:
    """One record of the range."""

    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes


async def read_range(
    bootstrap: str,
    topic: str,
    start_ms: int,
    end_ms: int | None,
    security: KafkaSecurity | None = None,
    idle_s: float = 2.0,
) -> AsyncIterator[Ranged]:
    """Every record of ``topic`` with a timestamp in [``start_ms``, ``end_ms``) (None: up
    to the moment of the call)."""
    end_ms = int(time.time() * 1000) if end_ms is None else end_ms
    consumer = groupless_consumer(bootstrap, security)
    await consumer.start()
    try:
        partitions = await _partitions(consumer, topic)
        starts = await consumer.offsets_for_times({tp: start_ms for tp in partitions})
        reading = {tp for tp, found in starts.items() if found is not None}
        if not reading:
            return
        consumer.assign(list(reading))
        for tp in reading:
            found = starts[tp]
            assert found is not None
            consumer.seek(tp, found.offset)
        ends = await consumer.end_offsets(list(reading))
        loop = asyncio.get_running_loop()
        heard = dict.fromkeys(reading, loop.time())  # when each partition last gave a record
        past_end: set[TopicPartition] = set()  # gave a record at or after the end time
        while reading:
            batch = await consumer.getmany(*reading, timeout_ms=200)
            for tp, records in batch.items():
                if records:
                    heard[tp] = loop.time()
                for record in records:  # a producer's timestamps need not be in order
                    if record.timestamp >= end_ms:
                        past_end.add(tp)
                    elif record.value is not None and record.timestamp >= start_ms:
                        yield Ranged(
                            tp.partition, record.offset, record.timestamp, record.key, record.value
                        )
            for tp in list(reading):
                if await consumer.position(tp) < ends[tp]:
                    continue  # what was there when the read began is not all read yet
                # read up to that end: done once a later record is past the end time, or
                # none comes (the embedded broker's end can fall a batch short: record 03)
                if tp in past_end or loop.time() - heard[tp] >= idle_s:
                    reading.discard(tp)
                    consumer.pause(tp)
    finally:
        await consumer.stop()


async def json_records(
    bootstrap: str,
    topic: str,
    start_ms: int,
    end_ms: int | None = None,
    security: KafkaSecurity | None = None,
) -> AsyncIterator[dict[str, Any]]:
    """The JSON objects among ``topic``'s records in the range (score events, as the scores
    topic holds them); a record that is not one is skipped."""
    async for record in read_range(bootstrap, topic, start_ms, end_ms, security):
        try:
            document = orjson.loads(record.value)
        except orjson.JSONDecodeError:
            continue
        if isinstance(document, dict):
            yield document


async def _partitions(consumer: AIOKafkaConsumer, topic: str) -> list[TopicPartition]:
    if topic not in await consumer.topics():  # fetches the cluster's metadata
        raise ScorerError(f"topic {topic!r} not found on the broker")
    numbers = consumer.partitions_for_topic(topic)
    if not numbers:
        raise ScorerError(f"topic {topic!r} not found on the broker")
    return [TopicPartition(topic, n) for n in sorted(numbers)]
