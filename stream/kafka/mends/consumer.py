"""Faust's aiokafka transport with the at-least-once defects of Faust and aiokafka mended.

Every worker uses it: importing this module makes Faust's ``kafka://`` transport this one,
and the embedded broker's (``tansu.py``) builds on it. Each mend is told in full in the
module that holds it; the tests that show the defect and the mend are in
``tests/integration/test_at_least_once.py`` and ``test_consumer_seek.py``.

1. The seek to committed offsets (aio-libs/aiokafka#1003): ``consumer_thread.py``.
2. Records queued while a rebalance completes (faust-streaming #596): ``delivery.py``.
3. Every record in order, gaps fetched again (``continuity.py``): ``delivery.py``.
4. The commit never passes a missing offset: ``commits.py``.
5. A commit only past durable work: ``commits.py`` (the keyed tables' batched changelog
   writes included: ``changelog.py``; Faust's producer flush at a revoke waits for them too:
   ``MendedProducer.flush`` here).
6. A stopping worker drains its producer before it leaves the group: ``commits.py``.
7. The livelock check never crashes a worker: ``consumer_thread.py``.
8. A fetch answer is as old as its request: ``consumer_thread.py``.
9. A worker acts on its partitions' records only while it is sure it is still a member of
   its group (the membership lease): ``membership.py``, installed by the consumer thread.
10. A fetched record is handed to the agents without a race of two tasks when nothing can
    make the hand-over wait (a cost, not a defect): ``fetch_loop.py``.
11. A worker restarted after a crash takes its dead predecessor (the member id written on its
    data directory) out of the group before it joins: ``predecessor.py``, run by the consumer
    thread.

The test hooks these read from the environment are in ``testhooks.py``. The mends were read
against faust-streaming 0.15.3 and aiokafka 0.14.0 (the RocksDB store's against rocksdict
0.3.29): ``pyproject.toml`` pins those minors, and ``tests/kafka/test_read_versions.py`` fails
when another version is installed, so a bump is read again before it lands.
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

from faust.transport import drivers
from faust.transport.drivers.aiokafka import (
    AIOKafkaConsumerThread,
    Consumer,
    Producer,
    Transport,
)

from .changelog import batched_writers
from .commits import report_to
from .consumer_thread import MendedConsumerThread
from .delivery import DeliveringConsumer
from .fetch_loop import DirectHandover
from .testhooks import CHANGELOG_DELAY_ENV, delay_from_env, producer_batch_cap

__all__ = ["MendedConsumer", "MendedProducer", "MendedTransport", "producer_batch_cap", "report_to"]


class MendedConsumer(DirectHandover, DeliveringConsumer):
    """Faust's aiokafka consumer with the mends of this package: its commits
    (``commits.py``), what it delivers (``delivery.py``), its fetch loop (``fetch_loop.py``)
    and its thread (``consumer_thread.py``)."""

    def _new_consumer_thread(self) -> AIOKafkaConsumerThread:
        return MendedConsumerThread(self, loop=self.loop, beacon=self.beacon)


class MendedProducer(Producer):
    """Faust's aiokafka producer; with ``SCORER_TEST_CHANGELOG_DELAY_S`` set (tests only),
    each changelog write waits that long before it reaches aiokafka, as when aiokafka's own
    buffer is full."""

    _changelog_delay: float | None = None

    async def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        partition: int | None,
        timestamp: float | None,
        headers: Any,
        *,
        transactional_id: str | None = None,
    ) -> Any:
        if self._changelog_delay is None:  # read once: os.environ costs on every table write
            self._changelog_delay = delay_from_env(CHANGELOG_DELAY_ENV)
        if self._changelog_delay and topic.endswith("-changelog"):
            await asyncio.sleep(self._changelog_delay)
        return await super().send(
            topic, key, value, partition, timestamp, headers, transactional_id=transactional_id
        )

    async def flush(self) -> None:
        """Faust's flush (every message handed to aiokafka on the broker), the keyed tables'
        batched changelog writes included (``changelog.BatchedWrites``): Faust flushes its
        producer at a revoke, once the agents are done, so that the next owner of a partition
        recovers every write of this worker; the batches are handed over first and waited
        for after."""
        writers = batched_writers(self.app)
        for writer in writers:
            writer.flush()
        await super().flush()
        for writer in writers:
            await writer.drain(None)


class MendedTransport(Transport):
    """Faust's aiokafka transport with the mends of this module."""

    Consumer: ClassVar[type[Consumer]] = MendedConsumer
    Producer: ClassVar[type[Producer]] = MendedProducer


drivers.TRANSPORTS["kafka"] = f"{__name__}:MendedTransport"
