"""Faust's aiokafka transport with the at-least-once defects of Faust and aiokafka mended.

Every worker uses it: Faust's ``kafka://`` transport is this one, and the embedded broker's
(``tansu.py``) builds on it. Each mend is named here; the tests that show the defect and the
mend are in ``tests/integration/test_at_least_once.py`` and ``test_consumer_seek.py``.

1. **The seek to committed offsets** (aio-libs/aiokafka#1003). After a rebalance Faust seeks
   every partition back to its committed offset, to fetch again what it dropped; aiokafka's
   ``seek_to_committed`` seeks only to an offset above 0, so a partition with nothing
   committed kept its fetch position past the dropped records. Here such a partition is
   sought to the start of the partition (the app's ``earliest`` reset), or to 0 when 0 is
   committed. Changelog partitions are left where table recovery put them.
2. **Records queued while a rebalance completes** (faust-streaming #596). At the end of
   recovery Faust resumes the stream partitions, awaits the seek to committed offsets (one
   round trip per partition), then clears every agent queue: what was fetched and queued
   during the seek was dropped, and the fetcher had moved past it. Here the stream partitions
   are held from the start of that seek until the queues are cleared (nothing of them is
   delivered), then each is sought back to its committed offset.
3. **Every record in order, gaps fetched again** (``continuity.py``). Faust took any jump in
   the offsets a fetch returned as done, and its read offsets meant "the last delivered" in one
   place and "the next to read" in another, so a record skipped after a seek was never
   noticed. Here one guard decides what is delivered: the partition's next offset, nothing
   else; a record past a gap is skipped and the gap fetched again (the embedded broker can
   serve a later batch before an earlier one is written), and only a gap that persists is
   delivered past (logged with its offsets, recorded so the commit can pass it). Faust's own
   read offsets are switched off. Counted in ``scorer_offset_gaps_total``.
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
7. **The livelock check never crashes a worker.** Every few seconds Faust checks that each
   partition moves, reading aiokafka's fetch position; while a partition is being reset (its
   committed offset or its start being looked up, as after mend 1's seek) aiokafka asserts
   there is no position, and the ``AssertionError`` crashed the consumer and stopped the
   worker. Here a partition without a position is skipped until it has one.
8. **A fetch answer is as old as its request.** aiokafka stamps each partition's state with
   the time a fetch response is *processed* (``last_poll_timestamp``), with the high
   watermark the broker answered with. A worker stopped for a while (SIGSTOP, a long pause)
   processes on waking an answer the broker gave before or during the pause, stamped with
   the present: the sources it reports caught up "up to now" (``stream/threads/sources.py``)
   were not read past what arrived in the pause, and a thread closed or a trace was assembled
   without it. Here the stamp is the time the request was sent, which the answer cannot
   predate (a fetch is answered at most ``fetch_max_wait_ms`` later).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
import weakref
from collections.abc import AsyncIterator, Collection, Mapping
from typing import Any, ClassVar, cast

import faust
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import IllegalStateError
from faust.sensors import Sensor
from faust.transport import drivers
from faust.transport.drivers.aiokafka import (
    AIOKafkaConsumerThread,
    Consumer,
    Producer,
    Transport,
)
from faust.types import TP, Message

from ..observer import Observer
from .continuity import Action, Admit, ContinuityGuard, GapEvent
from .membership import MembershipLease, lease_membership

log = logging.getLogger(__name__)

# test hooks: widen the window between the seek to committed offsets and the end of a
# rebalance (mend 2); make each changelog write wait before it reaches the producer (mend 5);
# cap the producer's batches (1: a record per batch, so that the embedded broker's defective
# end offsets are right, and table recovery works on ``kafka://`` against it)
SEEK_DELAY_ENV = "SCORER_TEST_SEEK_DELAY_S"
CHANGELOG_DELAY_ENV = "SCORER_TEST_CHANGELOG_DELAY_S"
PRODUCER_BATCH_ENV = "SCORER_TEST_PRODUCER_BATCH_BYTES"
# give ``kafka://`` the embedded broker's gap patience (mend 3): that broker serves a later
# batch before an earlier one, which can still be unwritten when one quick refetch reads it
GAP_PATIENCE_ENV = "SCORER_TEST_GAP_PATIENCE_S"

DRAIN_TIMEOUT_S = 10.0  # longest a commit waits for the producer (at most a third of the session)

_observers: weakref.WeakKeyDictionary[Any, Observer] = weakref.WeakKeyDictionary()


def report_to(app: faust.App, observer: Observer) -> None:
    """Where ``app``'s consumer reports offset gaps and held commits."""
    _observers[app] = observer


def _test_delay(name: str) -> float:
    return float(os.environ.get(name) or 0)


def producer_batch_cap() -> int | None:
    """The producer's largest batch in bytes, when a test caps it."""
    value = os.environ.get(PRODUCER_BATCH_ENV)
    return int(value) if value else None


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


async def drain_producer(producer: Any, timeout: float) -> bool:
    """Wait until Faust's producer buffer is empty and the broker has acknowledged every
    message handed to the producer so far; False if that takes longer than ``timeout``."""
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
    return True


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
                session_s = float(self.transport.app.conf.broker_session_timeout)
                self.lease = MembershipLease(session_s)
                lease_membership(coordinator, self.lease)

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


class _NoReadOffsets(dict[TP, int | None]):
    """Faust's read offsets, switched off (mend 3): its fetch loop reads None for every
    partition, so it delivers what the continuity guard lets through and adds no gaps."""

    def __getitem__(self, tp: TP) -> None:
        return None

    def __setitem__(self, tp: TP, offset: int | None) -> None:
        pass

    def update(self, *args: Any, **kwargs: Any) -> None:
        pass


class MendedConsumer(Consumer):
    """Faust's aiokafka consumer with the mends of this module."""

    # how long a gap in the offsets of a fetch is fetched again before it is accepted as real
    # (a real Kafka cluster never serves records past unwritten ones: one refetch confirms it)
    gap_patience_s: ClassVar[float] = 0.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._read_offset = _NoReadOffsets()
        patience = os.environ.get(GAP_PATIENCE_ENV)
        self._continuity = ContinuityGuard(float(patience) if patience else self.gap_patience_s)
        self._heads: dict[TP, int] = {}  # the next offset each partition must process
        self._taken: dict[TP, range] = {}  # acked offsets the commit being made covers
        self._strict: dict[str, bool] = {}
        self._seeking_back: set[asyncio.Future[None]] = set()
        self._changelog_failures = ChangelogFailures(self.app.tables.changelog_topics)
        self.app.sensors.add(self._changelog_failures)

    def _new_consumer_thread(self) -> AIOKafkaConsumerThread:
        return MendedConsumerThread(self, loop=self.loop, beacon=self.beacon)

    @property
    def observer(self) -> Observer:
        return _observers.get(self.app) or Observer()

    # -- mends 2 and 3: what is delivered ----------------------------------------------

    async def perform_seek(self) -> None:
        """Seek every partition to its committed offset (as Faust does), telling the guard
        where each one now starts. When the fetch loop is running (the end of a recovery),
        the stream partitions are held until the agent queues are cleared (mend 2)."""
        if self.flow_active:
            self._continuity.hold(tp for tp in self.assignment() if not self._is_changelog_tp(tp))
        # None: nothing committed (Faust's own driver returns aiokafka's mapping as it is)
        committed = cast(Mapping[TP, int | None], await self.seek_to_committed())
        self._committed_offset.update(
            {TP(tp.topic, tp.partition): o or None for tp, o in committed.items() if o is not None}
        )
        heads: dict[TP, int] = getattr(self._thread, "heads", {})
        for tp, head in heads.items():
            self._continuity.sought(tp, head)
        self._heads.update(heads)
        if delay := _test_delay(SEEK_DELAY_ENV):
            await asyncio.sleep(delay)

    def resume_flow(self) -> None:
        """Faust calls this right after clearing the agent queues: the held partitions go back
        to their committed offsets (records skipped while held may have moved the fetcher)."""
        super().resume_flow()
        released = self._continuity.release()
        if released:
            task = asyncio.ensure_future(self._seek_back(released))
            self._seeking_back.add(task)
            task.add_done_callback(self._seeking_back.discard)

    async def _seek_back(self, offsets: Mapping[Any, int]) -> None:
        thread: MendedConsumerThread = self._thread  # type: ignore[assignment]
        for tp, offset in offsets.items():
            await thread.call_thread(thread.seek_now, tp, offset)

    async def seek_wait(self, partitions: Mapping[TP, int]) -> None:
        await super().seek_wait(partitions)
        for tp, offset in partitions.items():
            self._continuity.sought(tp, offset)

    async def seek(self, partition: TP, offset: int) -> None:
        await super().seek(partition, offset)
        self._continuity.sought(partition, offset)

    async def on_partitions_revoked(self, revoked: set[TP]) -> None:
        self._continuity.forget(revoked)
        for tp in revoked:
            self._heads.pop(tp, None)
            self._taken.pop(tp, None)
        await super().on_partitions_revoked(revoked)

    async def getmany(self, timeout: float) -> AsyncIterator[tuple[TP, Message]]:
        """Faust's fetch, each record through the continuity guard (mend 3)."""
        guard = self._continuity
        guard.new_batch()
        now = time.monotonic()
        async for tp, message in super().getmany(timeout):
            admit = guard.admit(tp, message.offset, now, self._is_strict(tp.topic))
            if admit.event is not None:
                await self._on_gap_event(tp, admit)
            if admit.action is Action.DELIVER:
                yield tp, message
            elif admit.action is Action.REFETCH:
                assert admit.offset is not None
                await self._seek_back({tp: admit.offset})

    def _is_strict(self, topic: str) -> bool:
        """Gaps are fetched again on topics whose offsets are acked (not changelogs)."""
        try:
            return self._strict[topic]
        except KeyError:
            strict = self._strict[topic] = self.app.topics.acks_enabled_for(topic) and (
                topic not in self.app.tables.changelog_topics
            )
            return strict

    async def _on_gap_event(self, tp: TP, admit: Admit) -> None:
        gap, event = admit.gap, admit.event
        assert gap is not None and event is not None
        self.observer.on_offset_gap(tp.topic, event.value)
        if event is GapEvent.DETECTED:
            log.info(
                "%s[%d]: offsets %d-%d missing from a fetch (next there: %d); fetching them again",
                tp.topic, tp.partition, gap.expected, gap.found - 1, gap.found,
            )  # fmt: skip
        elif event is GapEvent.FILLED:
            log.info(
                "%s[%d]: offsets from %d fetched again after %d refetches",
                tp.topic, tp.partition, gap.expected, gap.refetches,
            )  # fmt: skip
        else:
            log.warning(
                "%s[%d]: offsets %d-%d still missing after %d refetches over %.1f s; going on "
                "from %d (a compacted topic, transaction markers or deleted records)",
                tp.topic, tp.partition, gap.expected, gap.found - 1, gap.refetches,
                time.monotonic() - gap.since, gap.found,
            )  # fmt: skip
            await self._add_gap(tp, gap.expected, gap.found - 1)

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
        if self._changelog_failures.failed:
            topic, exc = self._changelog_failures.failed[0]
            log.error("a write to %s failed (%r): stopping before committing past it", topic, exc)
            self.observer.on_commit_held("changelog_write_failed")
            await self.crash(exc if isinstance(exc, Exception) else RuntimeError(repr(exc)))
            return False
        if not await drain_producer(self.app.producer, self._drain_timeout()):
            log.warning(
                "the producer did not drain in %.1f s: commit put off", self._drain_timeout()
            )
            self.observer.on_commit_held("producer_not_drained")
            self._give_back(offsets)
            return False
        did_commit: bool = await super()._commit_offsets(offsets, start_new_transaction)
        return did_commit

    def _drain_timeout(self) -> float:
        return min(DRAIN_TIMEOUT_S, float(self.app.conf.broker_session_timeout) / 3)

    async def on_stop(self) -> None:
        await super().on_stop()  # waits for the agents' in-flight events, then commits
        if not await drain_producer(self.app.producer, DRAIN_TIMEOUT_S):
            log.warning("the producer did not drain before the worker left its group")


class MendedProducer(Producer):
    """Faust's aiokafka producer; with ``SCORER_TEST_CHANGELOG_DELAY_S`` set (tests only),
    each changelog write waits that long before it reaches aiokafka, as when aiokafka's own
    buffer is full."""

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
        if topic.endswith("-changelog") and (delay := _test_delay(CHANGELOG_DELAY_ENV)):
            await asyncio.sleep(delay)
        return await super().send(
            topic, key, value, partition, timestamp, headers, transactional_id=transactional_id
        )


class MendedTransport(Transport):
    """Faust's aiokafka transport with the mends of this module."""

    Consumer: ClassVar[type[Consumer]] = MendedConsumer
    Producer: ClassVar[type[Producer]] = MendedProducer


drivers.TRANSPORTS["kafka"] = f"{__name__}:MendedTransport"
