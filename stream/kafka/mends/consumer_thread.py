"""Faust's consumer thread mended: mends 1, 7 and 8 (``consumer.py`` lists them all); it
also installs mend 9's membership lease (``membership.py``) and mend 11's predecessor leave
(``predecessor.py``).

1. **The seek to committed offsets** (aio-libs/aiokafka#1003). After a rebalance Faust seeks
   every partition back to its committed offset, to fetch again what it dropped; aiokafka's
   ``seek_to_committed`` seeks only to an offset above 0, so a partition with nothing
   committed kept its fetch position past the dropped records. Here such a partition is
   sought to the start of the partition (the app's ``earliest`` reset), or to 0 when 0 is
   committed. Changelog partitions are left where table recovery put them.
7. **The livelock check never crashes a worker.** Every few seconds Faust checks that each
   partition moves, reading aiokafka's fetch position; while a partition is being reset (its
   committed offset or its start being looked up, as after mend 1's seek) aiokafka asserts
   there is no position, and the ``AssertionError`` crashed the consumer and stopped the
   worker. Here a partition without a position is skipped until it has one.
8. **A fetch answer is as old as its request.** aiokafka stamps each partition's state with
   the time a fetch response is *processed* (``last_poll_timestamp``), with the high
   watermark the broker answered with. A worker stopped for a while (SIGSTOP, a long pause)
   processes on waking an answer the broker gave before or during the pause, stamped with
   the present: the sources it reports caught up "up to now" (``stream/sources/log.py``)
   were not read past what arrived in the pause, and a thread closed or a trace was assembled
   without it. Here the stamp is the time the request was sent, which the answer cannot
   predate (a fetch is answered at most ``fetch_max_wait_ms`` later).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import IllegalStateError
from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread
from faust.types import TP

from .membership import MembershipLease, lease_membership
from .predecessor import leave_for_predecessor, remember

log = logging.getLogger(__name__)


async def seek_to_committed(
    consumer: AIOKafkaConsumer, leave: Collection[str] = (), reset: str = "earliest"
) -> dict[TopicPartition, int | None]:
    """Seek every assigned partition (but those of the ``leave`` topics) to its committed
    offset, as aiokafka's ``seek_to_committed`` does, and also those with 0 or nothing
    committed, which it leaves where the fetcher was (mend 1). Returns the committed offsets."""
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


class MendedConsumerThread(AIOKafkaConsumerThread):
    """Faust's consumer thread with ``seek_to_committed`` mended (mend 1); it also records
    where each partition was sought (``heads``), stamps fetches when sent (mend 8) and keeps
    the membership lease (mend 9)."""

    heads: dict[TP, int]
    lease: MembershipLease | None = None

    async def seek_to_committed(self) -> Mapping[TP, int]:
        committed: Mapping[TP, int] = await self.call_thread(self._seek_to_committed)
        return committed

    async def _seek_to_committed(self) -> Mapping[TP, int]:
        app = self.transport.app
        consumer = self._ensure_consumer()
        committed = await seek_to_committed(
            consumer,
            leave=app.tables.changelog_topics,
            reset=app.conf.consumer_auto_offset_reset,
        )
        heads = {}
        for tp, offset in committed.items():
            if tp.topic not in app.tables.changelog_topics:
                heads[tp] = offset if offset is not None else await consumer.position(tp)
        self.heads = heads
        # Faust reads None as "nothing committed" (its own driver returns aiokafka's mapping)
        return committed  # type: ignore[return-value]

    def verify_event_path(self, now: float, tp: TP) -> None:
        """Faust's livelock check of one partition (mend 7), skipped while the partition's
        position is being reset: Faust reads aiokafka's ``position``, which asserts there is
        one, and the assertion crashed the worker."""
        consumer = self._consumer
        if consumer is not None:
            assignment = consumer._subscription.subscription
            assignment = assignment.assignment if assignment is not None else None
            if assignment is not None:
                state = assignment.state_value(TopicPartition(tp.topic, tp.partition))
                if state is not None and not state.has_valid_position:
                    return None
        super().verify_event_path(now, tp)
        return None

    async def on_start(self) -> None:
        await super().on_start()
        if self._consumer is not None:
            stamp_fetches_when_sent(self._consumer)
            coordinator = getattr(self._consumer, "_coordinator", None)
            if coordinator is not None and hasattr(coordinator, "reset_generation"):
                # mend 11: before the consumer subscribes, so before it joins; and before
                # the lease watches the coordinator's answers, as the Heartbeat answered in
                # the predecessor's name proves nothing of this member
                await leave_for_predecessor(coordinator, Path(self.transport.app.conf.datadir))
                session_s = float(self.transport.app.conf.broker_session_timeout)
                self.lease = MembershipLease(session_s)
                lease_membership(coordinator, self.lease)

    async def on_partitions_assigned(self, assigned: set[TP], generation_id: int = 0) -> None:
        coordinator = getattr(self._consumer, "_coordinator", None)
        if coordinator is not None:  # mend 11: who to take out of the group after a crash
            remember(Path(self.transport.app.conf.datadir), coordinator)
        await super().on_partitions_assigned(assigned, generation_id)

    async def seek_now(self, tp: TP, offset: int) -> None:
        """Seek ``tp`` to ``offset`` from the consumer's own thread (a revoked partition is
        left alone)."""
        with contextlib.suppress(IllegalStateError):
            self._ensure_consumer().seek(tp, offset)


def stamp_fetches_when_sent(consumer: AIOKafkaConsumer) -> None:
    """Mend 8: the partitions a fetch answered are stamped (``last_poll_timestamp``) with the
    time the request was sent, not the time the answer was processed."""
    fetcher = consumer._fetcher
    process = fetcher._proc_fetch_request

    async def proc_fetch_request(assignment: Any, node_id: int, request: Any) -> bool:
        sent_ms = int(1000 * time.time())
        result: bool = await process(assignment, node_id, request)
        for topic, partitions in request.topics:
            for partition, *_ in partitions:
                state = assignment.state_value(TopicPartition(topic, partition))
                if state is not None and state.timestamp is not None and state.timestamp > sent_ms:
                    state.timestamp = sent_ms
        return result

    fetcher._proc_fetch_request = proc_fetch_request
