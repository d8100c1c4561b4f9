"""The topic the workers of one app share their judge pace through (``APP-judge-pace``,
design record 46): each publishes its ``PaceRecord`` per model every ``PUBLISH_S`` and reads
every worker's, from the beginning, on a consumer of its own (no group: every worker reads
all). One partition, compacted (and deleted after ``RETENTION_MS``, for a broker that does
not compact), keyed by account, model and worker; a worker stopping cleanly writes a
tombstone under each of its keys.

A worker that cannot read the topic paces alone (``PaceBoard.reading`` false) and says so
once; it keeps trying, and says when it reads the fleet again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import Any

import mode
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError

from ..judge.fleet import PUBLISH_S, Fleet, PaceBoard
from .io import ensure_one_partition_topic, groupless_consumer, options
from .security import KafkaSecurity

log = logging.getLogger(__name__)

RETENTION_MS = 600_000  # records older than this go (a broker that does not compact)
RETRY_S = 5.0  # the topic unreadable: tried again this often


class PaceTopic(mode.Service):
    """Publishes ``fleets``' records and feeds every worker's into ``board``."""

    def __init__(
        self,
        fleets: Sequence[Fleet],
        board: PaceBoard,
        topic: str,
        bootstrap: str,
        security: KafkaSecurity | None = None,
        **kwargs: Any,
    ) -> None:
        self.fleets = list(fleets)
        self.board = board
        self.topic = topic
        self.bootstrap = bootstrap
        self.security = security
        self._producer: AIOKafkaProducer | None = None
        self._alone_said = False
        self._closing = False  # tombstones written: no record may follow them
        self._sending = asyncio.Lock()
        super().__init__(**kwargs)

    async def on_stop(self) -> None:
        async with self._sending:
            self._closing = True
        if self._producer is not None:
            with contextlib.suppress(KafkaError, OSError):
                for fleet in self.fleets:  # gone at once, not after STALE_S
                    for key in fleet.own_keys():
                        await self._producer.send(self.topic, key=key, value=None)
                await self._producer.flush()
            await self._producer.stop()

    @mode.Service.task
    async def _read(self) -> None:
        """Every record of the topic, from the beginning, into the board; on trouble, pace
        alone until it can be read again."""
        while not self.should_stop:
            consumer = None
            try:
                await self._ensure_topic()
                consumer = groupless_consumer(self.bootstrap, self.security)
                await consumer.start()
                partition = TopicPartition(self.topic, 0)
                consumer.assign([partition])
                await consumer.seek_to_beginning(partition)
                while not self.should_stop:
                    batches = await consumer.getmany(timeout_ms=500)
                    self._reading()
                    for records in batches.values():
                        for record in records:
                            if record.key is not None:
                                self.board.heard(record.key, record.value)
            except (KafkaError, OSError) as exc:
                self._alone(exc)
            finally:
                if consumer is not None:
                    with contextlib.suppress(KafkaError, OSError):
                        await consumer.stop()
            if not self.should_stop:
                await self.sleep(RETRY_S)

    @mode.Service.task
    async def _publish(self) -> None:
        """Each limiter paced at its share, and its record sent, every ``PUBLISH_S``."""
        while not self.should_stop:
            await self.sleep(PUBLISH_S)
            try:
                records = [r for fleet in self.fleets for r in fleet.tick()]
            except Exception:  # pacing at a share must never stop the worker
                log.exception("judge pace: the fleet's shares not worked out")
                continue
            async with self._sending:
                if not records or self._closing:
                    continue
                try:
                    producer = await self._started_producer()
                    for record in records:
                        await producer.send(self.topic, key=record.key, value=record.to_bytes())
                except (KafkaError, OSError) as exc:
                    log.debug("judge pace not published: %s", exc)

    async def _started_producer(self) -> AIOKafkaProducer:
        if self._producer is None:
            producer = AIOKafkaProducer(
                bootstrap_servers=self.bootstrap, linger_ms=0, **options(self.security)
            )
            try:
                await producer.start()
            except BaseException:
                await producer.stop()
                raise
            self._producer = producer
        return self._producer

    async def _ensure_topic(self) -> None:
        configs = {
            "cleanup.policy": "compact,delete",
            "retention.ms": str(RETENTION_MS),
            "segment.ms": str(RETENTION_MS // 10),  # the active segment rolls: both apply
        }
        await ensure_one_partition_topic(self.bootstrap, self.topic, configs, self.security)

    def _reading(self) -> None:
        if not self.board.reading:
            self.board.reading = True
            if self._alone_said:
                log.info("judge pace: reading the fleet's again from %s", self.topic)
                self._alone_said = False

    def _alone(self, exc: BaseException) -> None:
        self.board.reading = False
        if not self._alone_said:
            self._alone_said = True
            log.warning(
                "judge pace: cannot read %s (%s): this worker paces the judge alone, as if no "
                "other worker shared its account, until it can",
                self.topic,
                exc,
            )
