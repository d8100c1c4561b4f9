"""The seek to committed offsets after a rebalance, on the embedded broker: records fetched
and then dropped (as Faust drops its agents' buffers at a rebalance) are fetched again,
also from a partition with nothing committed, where aiokafka's own seek leaves the fetcher
past them (aio-libs/aiokafka#1003)."""

from __future__ import annotations

from aiokafka import AIOKafkaConsumer, TopicPartition

from stream.kafka.broker import EmbeddedBroker
from stream.kafka.consumer import seek_to_committed
from stream.kafka.io import ensure_topics

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
