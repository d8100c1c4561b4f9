"""Publishing a batch of traces' messages as whole record batches (``Publisher.send_batched``,
design record 32), against the embedded broker with aiokafka's own producer: every message
lands in the partition a single send gives it, in order, with its key, value, headers and
time; a batch that fills is split; a message larger than a batch gets a batch of its own."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, cast

from aiokafka import AIOKafkaProducer

from stream.delivery.publisher import Publisher, Send
from stream.kafka.broker import EmbeddedBroker
from stream.kafka.io import ensure_topics, reader
from stream.kafka.mends.partitioning import cached_murmur2_partitioner

from .harness import Names


@dataclass
class Topic:
    name: str

    def get_topic_name(self) -> str:
        return self.name


class FaustProducer:
    """Faust's producer as ``send_batched`` reaches it: the aiokafka producer underneath."""

    def __init__(self, producer: AIOKafkaProducer) -> None:
        self.producer = producer

    def _ensure_producer(self) -> AIOKafkaProducer:
        return self.producer


@dataclass
class App:
    producer: FaustProducer


async def records_of(bootstrap: str, topic: str, idle_s: float = 1.5) -> list[Any]:
    """Every record of ``topic``, until none has come for ``idle_s``."""
    found: list[Any] = []
    async with reader(bootstrap, topic) as consumer:
        loop = asyncio.get_running_loop()
        quiet_since = loop.time()
        while loop.time() - quiet_since < idle_s:
            for batch in (await consumer.getmany(timeout_ms=200)).values():
                found.extend(batch)
                quiet_since = loop.time() if batch else quiet_since
    return found


async def publish_and_read(
    bootstrap: str, names: Names, sends_for: Any, max_batch_size: int
) -> tuple[int, list[Any], list[Any]]:
    """Publish ``sends_for(topic, other)`` in one ``send_batched``; return how many batches
    it made, the records of ``topic`` and (a single send's record, the records of other)."""
    topic, other = f"batched-{names.suffix}", f"batched-other-{names.suffix}"
    await ensure_topics(bootstrap, [topic, other], 4)
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        acks=-1,
        max_batch_size=max_batch_size,
        partitioner=cached_murmur2_partitioner,
    )
    await producer.start()
    try:
        sends = sends_for(Topic(topic), Topic(other))
        publisher = Publisher(cast(Any, App(FaustProducer(producer))))
        futures = await publisher.send_batched(sends, timestamp=1_700_000_000.5)
        assert len(futures) == len(sends)
        await asyncio.gather(*futures)
        batches = len({id(future) for future in futures})
        # where a single send puts the same key: the partition each record must be in
        single = await producer.send_and_wait(topic, b"probe", key=b"trace-7")
    finally:
        await producer.stop()
    records = await records_of(bootstrap, topic)
    others = await records_of(bootstrap, other)
    return batches, [r for r in records if r.value != b"probe"], [single, *others]


def test_a_batch_of_traces_lands_where_single_sends_would_in_order(
    broker: EmbeddedBroker, names: Names
) -> None:
    def sends_for(topic: Topic, other: Topic) -> list[Send]:
        out: list[Send] = []
        for n in range(60):
            key = f"trace-{n % 20}".encode()  # 3 messages of each key, spread over batches
            out.append((cast(Any, topic), key, f"{n}".encode(), {"n": str(n).encode()}))
        out.append((cast(Any, other), b"trace-7", b"decision", None))
        out.append((cast(Any, topic), None, b"keyless", None))
        return out

    # 300 bytes a batch: the 60 messages fill several batches per partition
    batches, records, (single, *others) = asyncio.run(
        publish_and_read(broker.bootstrap, names, sends_for, max_batch_size=300)
    )
    assert batches > 4 + 1 + 1  # more than one per partition: full batches were split
    keyed = [r for r in records if r.key is not None]
    assert sorted(int(r.value) for r in keyed) == list(range(60))
    for record in keyed:
        assert cached_murmur2_partitioner(record.key, [0, 1, 2, 3], [0, 1, 2, 3]) == (
            record.partition
        )
        assert record.headers == (("n", record.value),)
        assert record.timestamp == 1_700_000_000_500
        if record.key == b"trace-7":
            assert record.partition == single.partition  # as aiokafka's own send put it
    for partition in range(4):  # each partition's records in the order they were handed
        values = [int(r.value) for r in keyed if r.partition == partition]
        assert values == sorted(values)
    assert [r.value for r in records if r.key is None] == [b"keyless"]
    assert [(r.key, r.value) for r in others] == [(b"trace-7", b"decision")]


def test_a_message_larger_than_a_batch_gets_a_batch_of_its_own(
    broker: EmbeddedBroker, names: Names
) -> None:
    def sends_for(topic: Topic, other: Topic) -> list[Send]:
        return [
            (cast(Any, topic), b"k", b"small-1", None),
            (cast(Any, topic), b"k", b"x" * 5000, None),
            (cast(Any, topic), b"k", b"small-2", None),
        ]

    batches, records, _ = asyncio.run(
        publish_and_read(broker.bootstrap, names, sends_for, max_batch_size=1024)
    )
    assert batches == 3  # the small ones before it, the large one alone, the one after
    assert [r.value[:7] for r in records] == [b"small-1", b"x" * 7, b"small-2"]
