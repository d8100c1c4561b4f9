"""Faust's consumer commits mended: mends 4, 5 and 6 (``consumer.py`` lists them all).

4. **The commit never passes a missing offset.** Faust's head-gap check
   (``min(acked) - committed > 1``) is off by one: with the committed offset the next one to
   read, one record missing at the head was committed past once later ones were acked. Here
   the commit waits while the first acked offset (or recorded gap) is past the head. And at
   a revocation Faust forgets a partition's committed offset and acks, then commits the acks
   made while it waits for the agents: a record Faust skipped and acked (its flow suspended)
   while an earlier one was still being processed was committed past. Here a partition
   whose head is not known is not committed.
5. **A commit only past durable work.** Faust flushed its producer before a commit but gave up
   after 0.1 s without progress (``ProducerBuffer.flush``), so a source offset could be
   committed before the changelog records of what it produced were written; a changelog write
   that failed was only a warning. Here the commit waits until the producer's buffer is empty
   and the broker has acknowledged everything sent (bounded: otherwise the commit waits for
   the next round), and a failed changelog write stops the worker before anything past it is
   committed. ``scorer_commits_held_total`` counts commits put off. Faust takes the offsets it
   commits off its list of acked ones when it picks them: a commit put off gives them back
   (dropped, no later commit could pass them, and the partition was never committed again).
6. **A stopping worker drains its producer before it leaves the group**, so the next owner
   of its partitions recovers tables with every write of this one.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Collection, Mapping
from typing import Any

import faust
from faust.sensors import Sensor
from faust.transport.drivers.aiokafka import Consumer
from faust.types import TP

from ...observer import Observer
from .changelog import batched_writers

log = logging.getLogger(__name__)

DRAIN_TIMEOUT_S = 10.0  # longest a commit waits for the producer (at most a third of the session)

_observers: weakref.WeakKeyDictionary[Any, Observer] = weakref.WeakKeyDictionary()


def report_to(app: faust.App, observer: Observer) -> None:
    """Where ``app``'s consumer reports offset gaps and held commits."""
    _observers[app] = observer


async def drain_producer(producer: Any, timeout: float) -> bool:
    """Wait until Faust's producer buffer is empty and the broker has acknowledged every
    message handed to the producer so far, the batched tables' changelog writes included
    (``changelog.BatchedWrites``: the mended producer's ``flush`` hands their open batches
    over and waits for them); False if that takes longer than ``timeout``, or if one of
    those batches failed or was never handed over."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    buffer = producer.buffer
    while buffer.size:
        if loop.time() >= deadline:
            return False
        await buffer.flush_atmost(buffer.size)  # gives up after 0.1 s without progress
    try:
        await asyncio.wait_for(producer.flush(), max(0.0, deadline - loop.time()))
    except TimeoutError:
        return False
    for writer in batched_writers(producer.app):  # answered by now: each one's outcome
        if not await writer.drain(max(0.0, deadline - loop.time())):
            return False
    return True


def changelog_failure(app: Any, failures: ChangelogFailures) -> tuple[str, BaseException] | None:
    """The first changelog write of ``app`` that failed (Faust's or a batched table's)."""
    if failures.failed:
        return failures.failed[0]
    for writer in batched_writers(app):
        if writer.failed:
            return writer.topic, writer.failed[0]
    return None


class ChangelogFailures(Sensor):
    """Remembers changelog writes the producer failed to deliver (Faust only logs them)."""

    def __init__(self, changelog_topics: Collection[str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.changelog_topics = changelog_topics
        self.failed: list[tuple[str, BaseException]] = []

    def on_send_initiated(
        self, producer: Any, topic: str, message: Any, keysize: int, valsize: int
    ) -> Any:
        return topic

    def on_send_error(self, producer: Any, exc: BaseException, state: Any) -> None:
        if state in self.changelog_topics:
            self.failed.append((state, exc))


class CommittingConsumer(Consumer):
    """Faust's aiokafka consumer with its commits mended (mends 4, 5 and 6)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._heads: dict[TP, int] = {}  # the next offset each partition must process
        self._taken: dict[TP, range] = {}  # acked offsets the commit being made covers
        self._changelog_failures = ChangelogFailures(self.app.tables.changelog_topics)
        self.app.sensors.add(self._changelog_failures)

    @property
    def observer(self) -> Observer:
        return _observers.get(self.app) or Observer()

    async def on_partitions_revoked(self, revoked: set[TP]) -> None:
        for tp in revoked:
            self._heads.pop(tp, None)
            self._taken.pop(tp, None)
        await super().on_partitions_revoked(revoked)

    # -- mend 4: never commit past a missing offset ------------------------------------

    async def _add_gap(self, tp: TP, offset_from: int, offset_to: int) -> None:
        """Record offsets the commit may pass (Faust's own clamps the start one past the
        committed offset, which is the next one to read)."""
        committed = self._committed_offset[tp]
        if committed is not None:
            offset_from = max(offset_from, committed)
        if offset_from <= offset_to:
            gaps = self._gap[tp]
            gaps.addi(offset_from, offset_to + 1)
            gaps.merge_overlaps()

    def _filter_committable_offsets(self, tps: Any) -> dict[TP, int]:
        self._taken.clear()
        offsets: dict[TP, int] = super()._filter_committable_offsets(tps)
        return offsets

    def _new_offset(self, tp: TP) -> int | None:
        """The offset to commit ``tp`` to, or None (Faust's, but never past the head);
        remembers which acked offsets Faust took for it (mend 5 gives them back)."""
        acked = self._acked[tp]
        if not acked:
            return None
        first = min(acked)
        gaps = self._gap.get(tp)
        if gaps:
            first = min(first, gaps.begin())  # Faust counts recorded gaps as acked
        head = self._committed_offset[tp]
        if head is None:
            head = self._heads.get(tp)
        if head is None:
            # revoked (Faust forgot the partition's offsets before its last commit): acks
            # made since say nothing of the offsets below them, which may still be in flight
            return None
        if first > head:
            return None  # the record at the head is not done yet
        offset: int | None = super()._new_offset(tp)
        if offset is not None:
            self._taken[tp] = range(first, offset)  # Faust's first run of consecutive offsets
        return offset

    def _give_back(self, offsets: Mapping[TP, int]) -> None:
        """A commit of ``offsets`` put off: the acked offsets it covered are acked again, for
        the next commit to cover (mend 5)."""
        for tp in offsets:
            taken = self._taken.pop(tp, None)
            if taken:
                index = self._acked_index[tp]
                back = [o for o in taken if o not in index]
                acked = self._acked[tp]
                acked.extend(back)
                acked.sort()
                index.update(back)

    # -- mends 5 and 6: commit only past durable work; drain before leaving ------------

    async def _commit_offsets(
        self, offsets: Mapping[TP, int], start_new_transaction: bool = True
    ) -> bool:
        """Commit ``offsets`` only past durable work, in four steps. The offsets were
        picked by ``_new_offset``: never past a partition's head, nor past a gap (mend 4).

        1. A changelog write that failed stops the worker: nothing past it is committed.
        2. Everything handed to the producer (scores, decisions, the tables' changelog
           writes, the batched ones included) is on the broker, acknowledged; if that takes
           longer than the drain timeout the commit is put off and its offsets given back.
        3. Step 1 again: a write may have failed while the producer drained.
        4. Faust commits the offsets (aiokafka's OffsetCommit for the group).
        """
        if await self._stopped_by_a_failed_write():  # 1
            return False
        if not await drain_producer(self.app.producer, self._drain_timeout()):  # 2
            log.warning(
                "the producer did not drain in %.1f s: commit put off", self._drain_timeout()
            )
            self.observer.on_commit_held("producer_not_drained")
            self._give_back(offsets)
            return False
        if await self._stopped_by_a_failed_write():  # 3
            return False
        did_commit: bool = await super()._commit_offsets(offsets, start_new_transaction)  # 4
        return did_commit

    async def _stopped_by_a_failed_write(self) -> bool:
        """A changelog write failed: the worker stops (crashes) before committing past it."""
        failed = changelog_failure(self.app, self._changelog_failures)
        if failed is None:
            return False
        topic, exc = failed
        log.error("a write to %s failed (%r): stopping before committing past it", topic, exc)
        self.observer.on_commit_held("changelog_write_failed")
        await self.crash(exc if isinstance(exc, Exception) else RuntimeError(repr(exc)))
        return True

    def _drain_timeout(self) -> float:
        return min(DRAIN_TIMEOUT_S, float(self.app.conf.broker_session_timeout) / 3)

    async def on_stop(self) -> None:
        await super().on_stop()  # waits for the agents' in-flight events, then commits
        if not await drain_producer(self.app.producer, DRAIN_TIMEOUT_S):
            log.warning("the producer did not drain before the worker left its group")
        for writer in batched_writers(self.app):
            writer.stop()
