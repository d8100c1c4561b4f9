"""A sink's loop: read the scores topic as a consumer group of its own, post each batch, and
commit its offsets only once the platform has accepted (or refused for good) every score in
it. At least once: a crash, a stop or a rebalance before the commit sends the batch again,
with the same score ids, which both platforms upsert on."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from ..kafka.io import options
from ..kafka.security import KafkaSecurity
from .delivery import Delivery, Tally
from .platform import Item, Platform
from .scores import Unsent, read_score

log = logging.getLogger("stream.sinks")

POLL_S = 0.5  # how long one poll waits for the first score of a batch


class ScoreSink:
    """The scores topic into one platform, in batches of at most ``batch_size`` scores that
    wait at most ``batch_wait_s`` for company."""

    def __init__(
        self,
        platform: Platform,
        delivery: Delivery,
        *,
        bootstrap: str,
        topic: str,
        group: str,
        security: KafkaSecurity | None = None,
        batch_size: int = 100,
        batch_wait_s: float = 1.0,
        report_every_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.platform = platform
        self.delivery = delivery
        self.bootstrap = bootstrap
        self.topic = topic
        self.group = group
        self.security = security
        self.batch_size = batch_size
        self.batch_wait_s = batch_wait_s
        self.report_every_s = report_every_s
        self.tally = Tally()
        self._clock = clock

    async def run(self, stop: asyncio.Event | None = None, idle_s: float | None = None) -> Tally:
        """Until ``stop`` is set (the batch under way is finished and committed first) or no
        score came for ``idle_s`` seconds; returns what was done."""
        stop = stop or asyncio.Event()
        consumer = AIOKafkaConsumer(
            self.topic,
            bootstrap_servers=self.bootstrap,
            group_id=self.group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",  # a new group posts the topic's scores from its start
            **options(self.security),
        )
        await consumer.start()
        log.info(
            "%s sink: reading %s as consumer group %s, posting to %s",
            self.platform.name, self.topic, self.group, self.delivery.base_url,
        )  # fmt: skip
        last_score = reported = self._clock()
        try:
            async with self.delivery:
                while not stop.is_set():
                    records = await self._batch(consumer, stop)
                    now = self._clock()
                    if records:
                        last_score = now
                        await self._post(consumer, records)
                    elif idle_s is not None and now - last_score >= idle_s:
                        break
                    if now - reported >= self.report_every_s:
                        reported = now
                        log.info("%s sink: %s", self.platform.name, self.tally.summary())
        finally:
            await consumer.stop()
            log.info("%s sink stopped: %s", self.platform.name, self.tally.summary())
        return self.tally

    async def _batch(self, consumer: AIOKafkaConsumer, stop: asyncio.Event) -> list[Any]:
        records: list[Any] = []
        first: float | None = None
        while len(records) < self.batch_size and not stop.is_set():
            wait = POLL_S if first is None else self.batch_wait_s - (self._clock() - first)
            if first is not None and wait <= 0:
                break
            fetched = await consumer.getmany(
                timeout_ms=max(int(wait * 1000), 1), max_records=self.batch_size - len(records)
            )
            for part in fetched.values():
                records.extend(part)
            if not records:
                break  # nothing came: the caller looks at stop and idle
            if first is None:
                first = self._clock()
        return records

    async def _post(self, consumer: AIOKafkaConsumer, records: list[Any]) -> None:
        items: list[Item] = []
        offsets: dict[TopicPartition, int] = {}
        for record in records:
            partition = TopicPartition(record.topic, record.partition)
            offsets[partition] = max(offsets.get(partition, 0), record.offset + 1)
            try:
                score = read_score(record.value)
            except ValueError as exc:
                self.tally.invalid += 1
                log.error(
                    "%s[%d] offset %d is not a score event, skipped: %s",
                    record.topic, record.partition, record.offset, _first_line(exc),
                )  # fmt: skip
                continue
            prepared = self.platform.prepare(score)
            if isinstance(prepared, Unsent):
                self.tally.unsent[prepared.kind] += 1
                log.debug("score %s not sent: %s", score.score_id, prepared.reason)
                continue
            items.append(Item(f"{record.partition}:{record.offset}", score, prepared))
        if items:
            await self.delivery.deliver(items, self.tally)
        await self.commit(consumer, offsets)

    async def commit(self, consumer: AIOKafkaConsumer, offsets: dict[TopicPartition, int]) -> None:
        """Commit what the platform has taken; a partition lost to a rebalance meanwhile is
        not committed and its batch is posted again by its new reader (same ids)."""
        try:
            await consumer.commit(offsets)
        except KafkaError as exc:
            log.warning(
                "%s sink: offsets not committed (%s: %s); those scores will be posted again, "
                "with the same ids",
                self.platform.name, type(exc).__name__, exc,
            )  # fmt: skip


def _first_line(exc: Exception) -> str:
    return " ".join(str(exc).split())[:300]
