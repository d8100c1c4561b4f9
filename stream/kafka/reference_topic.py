"""The reader of the reference topic (``SCORER_REFERENCES_TOPIC``, design record 50): each
worker reads every partition of it, from the beginning, on a consumer of its own (no group:
every worker holds every reference), into its ``ReferenceStore``. Once each partition is read
to the end it had when the reader started (``ReferenceCatchUp``), the store is ``loaded`` and
the trace agent scores; then the reader follows the topic, each record applied as it comes.

The topic is created where it does not exist (compacted, one partition). A record that is no
reference is logged by partition and offset (never its key or value) and counted. A broker
that cannot be read is said once; the reader tries again every ``RETRY_S`` from where it
stopped: before the first read is done the traces wait for it, after it they are scored with
the references held.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import mode
from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.errors import KafkaError

from ..references import ReferenceCatchUp, ReferenceStore
from .io import ensure_one_partition_topic, groupless_consumer
from .security import KafkaSecurity

log = logging.getLogger(__name__)

RETRY_S = 5.0  # the topic unreadable: tried again this often
PROGRESS_S = 30.0  # how often a reader still catching up says where it is
SAY_DROPPED_S = 60.0  # references dropped by the bound: said at most this often
METADATA_WAIT_S = 10.0  # a topic just created: how long its partitions may take to show


class ReferenceTopic(mode.Service):
    """Reads ``topic`` into ``store``, to its end and then as it grows."""

    def __init__(
        self,
        store: ReferenceStore,
        topic: str,
        bootstrap: str,
        security: KafkaSecurity | None = None,
        **kwargs: Any,
    ) -> None:
        self.store = store
        self.topic = topic
        self.bootstrap = bootstrap
        self.security = security
        self.next: dict[int, int] = {}  # partition -> the next offset to read
        self._trouble_said = False
        self._dropped_said = (0, 0.0)  # dropped count and when it was last said
        self._started_at = time.monotonic()
        super().__init__(**kwargs)

    @mode.Service.task
    async def _read(self) -> None:
        """The topic into the store, for as long as the worker runs; on trouble, again from
        where it stopped."""
        log.info("references: reading %s to its end before any trace is scored", self.topic)
        while not self.should_stop:
            consumer = None
            try:
                await self._ensure_topic()
                consumer = groupless_consumer(
                    self.bootstrap,
                    self.security,
                    auto_offset_reset="earliest",  # an offset retention deleted: what is left
                )
                await consumer.start()
                await self._follow(consumer)
            except (KafkaError, OSError) as exc:
                self._trouble(exc)
            finally:
                if consumer is not None:
                    with contextlib.suppress(KafkaError, OSError):
                        await consumer.stop()
            if not self.should_stop:
                await self.sleep(RETRY_S)

    async def _follow(self, consumer: AIOKafkaConsumer) -> None:
        """Every partition from where it was left (the beginning, at first): applied, and the
        store marked loaded once each is read to its end."""
        tps = [TopicPartition(self.topic, p) for p in await self._partitions(consumer)]
        consumer.assign(tps)
        for tp in tps:
            if tp.partition in self.next:
                consumer.seek(tp, self.next[tp.partition])
        if fresh := [tp for tp in tps if tp.partition not in self.next]:
            await consumer.seek_to_beginning(*fresh)
        catch_up = None
        if not self.store.loaded:
            starts = await consumer.beginning_offsets(tps)
            ends = await consumer.end_offsets(tps)
            catch_up = ReferenceCatchUp(
                {tp.partition: starts[tp] for tp in tps}, {tp.partition: ends[tp] for tp in tps}
            )
        said = time.monotonic()
        while not self.should_stop:
            if catch_up is not None and catch_up.done:
                self._loaded()
                catch_up = None
            elif catch_up is not None and time.monotonic() - said > PROGRESS_S:
                said = time.monotonic()  # traces wait meanwhile: say why, now and then
                log.info(
                    "references: still reading %s to its end before any trace is scored: "
                    "partitions %s at %s of %s",
                    self.topic,
                    catch_up.waiting(),
                    {p: self.next.get(p) for p in catch_up.waiting()},
                    {p: catch_up.ends[p] for p in catch_up.waiting()},
                )
            batches = await consumer.getmany(timeout_ms=500)
            self._readable()
            for records in batches.values():
                for record in records:
                    self._apply(record)
            for tp in tps:
                position = await consumer.position(tp)
                self.next[tp.partition] = position
                if catch_up is not None:
                    catch_up.fetched(tp.partition, consumer.highwater(tp))
                    catch_up.read(tp.partition, position)
            self._say_dropped()

    async def _partitions(self, consumer: AIOKafkaConsumer) -> list[int]:
        """The topic's partitions (a topic just created may take a moment to show)."""
        deadline = time.monotonic() + METADATA_WAIT_S
        while True:
            await consumer.topics()  # fresh metadata
            found = consumer.partitions_for_topic(self.topic)
            if found:
                return sorted(found)
            if time.monotonic() > deadline:
                raise KafkaError(f"{self.topic} shows no partitions")
            await asyncio.sleep(0.2)

    def _apply(self, record: ConsumerRecord) -> None:
        problem = self.store.apply(record.key, record.value)
        if problem is not None:
            log.warning(
                "references: %s partition %d offset %d is not taken as a reference: %s",
                self.topic,
                record.partition,
                record.offset,
                problem,
            )

    def _loaded(self) -> None:
        self.store.mark_loaded()
        log.info(
            "references: %d read from %s (%d bytes held) in %.1f s: scoring traces",
            len(self.store),
            self.topic,
            self.store.bytes,
            time.monotonic() - self._started_at,
        )

    def _say_dropped(self) -> None:
        said, at = self._dropped_said
        dropped = self.store.dropped
        if dropped == said or (said and time.monotonic() - at < SAY_DROPPED_S):
            return
        self._dropped_said = (dropped, time.monotonic())
        log.warning(
            "references: %d dropped so far to stay within SCORER_REFERENCES_MAX_BYTES (%d "
            "bytes; %d references held, the least recently written dropped first): traces "
            "naming them are scored without their reference; raise the bound",
            dropped,
            self.store.max_bytes,
            len(self.store),
        )

    async def _ensure_topic(self) -> None:
        compacted = {"cleanup.policy": "compact"}
        if await ensure_one_partition_topic(self.bootstrap, self.topic, compacted, self.security):
            log.info("references: created %s (compacted, one partition)", self.topic)

    def _readable(self) -> None:
        if self._trouble_said:
            self._trouble_said = False
            log.info("references: reading %s again", self.topic)

    def _trouble(self, exc: BaseException) -> None:
        if self._trouble_said:
            return
        self._trouble_said = True
        then = (
            f"scoring goes on with the {len(self.store)} references held"
            if self.store.loaded
            else "traces wait until it is read to its end"
        )
        log.warning(
            "references: cannot read %s (%s): %s; trying again every %g s",
            self.topic,
            exc,
            then,
            RETRY_S,
        )
