"""Every worker's consumer has the seek to committed offsets mended (the seek itself is
tested against the embedded broker: tests/integration/test_consumer_seek.py)."""

from __future__ import annotations

from faust.transport import drivers

from stream.app import broker_urls
from stream.kafka.consumer import MendedConsumerThread, MendedTransport
from stream.kafka.tansu import FetchCorrectedConsumerThread, TansuTransport


def test_every_worker_transport_has_the_mended_seek() -> None:
    for url in (*broker_urls("k:9092", "kafka"), *broker_urls("k:9092", "tansu")):
        transport = drivers.by_url(url)
        assert issubclass(transport, MendedTransport), url
    assert issubclass(drivers.by_url(broker_urls("k:9092", "tansu")[0]), TansuTransport)


def test_the_embedded_brokers_consumer_thread_keeps_both_mends() -> None:
    assert issubclass(FetchCorrectedConsumerThread, MendedConsumerThread)
