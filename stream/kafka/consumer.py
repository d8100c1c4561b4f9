"""Faust's aiokafka consumer, with the seek to committed offsets mended.

After every rebalance Faust drops the records its agents had not taken yet (it clears their
buffers) and seeks each partition back to its committed offset, to fetch them again. But
aiokafka's ``seek_to_committed`` seeks only to a committed offset above 0
(aio-libs/aiokafka#1003): a partition with nothing committed keeps its fetch position, past
the records fetched and dropped, and they are never delivered. They are not committed either,
so the partition shows lag for good. It happens on a partition whose first records are in
flight when a rebalance comes: a new topic, or a worker restarted before it committed a
partition (found by the OpenTelemetry kill -9 test: the spans partition holding a trace's
root span was never read again, so the trace was never whole).

``seek_to_committed`` here seeks such a partition where the group has read it: offset 0 when
0 is committed, and the start of the partition (the app's ``earliest`` reset) when nothing
is. Changelog partitions are left alone: table recovery positions them itself. Every worker
uses it: Faust's ``kafka://`` transport is this one, and the embedded broker's builds on it.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from typing import ClassVar

from aiokafka import AIOKafkaConsumer, TopicPartition
from faust.transport import drivers
from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread, Consumer, Transport
from faust.types import TP

log = logging.getLogger(__name__)


async def seek_to_committed(
    consumer: AIOKafkaConsumer, leave: Collection[str] = (), reset: str = "earliest"
) -> dict[TopicPartition, int | None]:
    """Seek every assigned partition (but those of the ``leave`` topics) to its committed
    offset, as aiokafka's ``seek_to_committed`` does, and also those with 0 or nothing
    committed, which it leaves where the fetcher was. Returns the committed offsets."""
    committed: dict[TopicPartition, int | None] = await consumer.seek_to_committed()
    unmoved = [tp for tp, offset in committed.items() if not offset and tp.topic not in leave]
    for tp in unmoved:
        if committed[tp] == 0:
            consumer.seek(tp, 0)
    nothing = [tp for tp in unmoved if committed[tp] is None]
    if nothing and reset == "earliest":
        await consumer.seek_to_beginning(*nothing)
    if unmoved:
        log.debug("seeked to what the group read: %s", sorted(map(str, unmoved)))
    return committed


class CommittedSeekConsumerThread(AIOKafkaConsumerThread):
    """Faust's consumer thread with ``seek_to_committed`` mended (see the module)."""

    async def seek_to_committed(self) -> Mapping[TP, int]:
        committed: Mapping[TP, int] = await self.call_thread(self._seek_to_committed)
        return committed

    async def _seek_to_committed(self) -> Mapping[TP, int]:
        app = self.transport.app
        committed = await seek_to_committed(
            self._ensure_consumer(),
            leave=app.tables.changelog_topics,
            reset=app.conf.consumer_auto_offset_reset,
        )
        # Faust reads None as "nothing committed" (its own driver returns aiokafka's mapping)
        return committed  # type: ignore[return-value]


class CommittedSeekConsumer(Consumer):
    def _new_consumer_thread(self) -> AIOKafkaConsumerThread:
        return CommittedSeekConsumerThread(self, loop=self.loop, beacon=self.beacon)


class CommittedSeekTransport(Transport):
    """Faust's aiokafka transport with the seek to committed offsets mended."""

    Consumer: ClassVar[type[Consumer]] = CommittedSeekConsumer


drivers.TRANSPORTS["kafka"] = f"{__name__}:CommittedSeekTransport"
