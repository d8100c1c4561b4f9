"""Every worker's consumer has the seek to committed offsets mended (the seek itself is
tested against the embedded broker: tests/integration/test_consumer_seek.py)."""

from __future__ import annotations

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from faust.transport import drivers
from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread
from faust.types import TP

from stream.app import broker_urls
from stream.kafka.mends.consumer import MendedTransport
from stream.kafka.mends.consumer_thread import MendedConsumerThread
from stream.kafka.mends.tansu import FetchCorrectedConsumerThread, TansuTransport


def test_every_worker_transport_has_the_mended_seek() -> None:
    for url in (*broker_urls("k:9092", "kafka"), *broker_urls("k:9092", "tansu")):
        transport = drivers.by_url(url)
        assert issubclass(transport, MendedTransport), url
    assert issubclass(drivers.by_url(broker_urls("k:9092", "tansu")[0]), TansuTransport)


def test_the_embedded_brokers_consumer_thread_keeps_both_mends() -> None:
    assert issubclass(FetchCorrectedConsumerThread, MendedConsumerThread)


async def test_the_livelock_check_skips_a_partition_being_reset(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Faust's livelock check reads aiokafka's fetch position, which asserts there is one: a
    partition awaiting its reset (as after a seek to its start) crashed the worker (mend 7)."""
    checked: list[TP] = []
    monkeypatch.setattr(
        AIOKafkaConsumerThread, "verify_event_path", lambda self, now, tp: checked.append(tp)
    )
    consumer = AIOKafkaConsumer(bootstrap_servers="127.0.0.1:9", enable_auto_commit=False)
    reset, moving = TopicPartition("traces", 0), TopicPartition("traces", 1)
    consumer.assign([reset, moving])
    state = consumer._subscription.subscription.assignment.state_value
    state(moving).seek(7)
    thread = object.__new__(MendedConsumerThread)  # the check needs no more than the consumer
    thread._consumer = consumer
    with pytest.raises(AssertionError):
        state(reset).position  # noqa: B018 - what Faust reads
    thread.verify_event_path(0.0, TP("traces", 0))
    thread.verify_event_path(0.0, TP("traces", 1))
    assert checked == [TP("traces", 1)]
    await consumer.stop()
