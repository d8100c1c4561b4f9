"""Runs of a topic's partition read back by offset: what the agreement join reads when a
label comes after its scores (design record 36).

A group-less aiokafka consumer, started at the first read and stopped when it has been idle
for ``idle_s`` (``close_if_idle``, from a clock) or the worker stops; a run is read from its
first offset (or the partition's earliest, where the broker's retention has deleted that
far) until its last or the partition's end.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition

from .io import options
from .security import KafkaSecurity

RUN_TIMEOUT_S = 60.0  # a run not read by then is read no further (the broker is away)


class RunReader:
    """Reads runs of offsets of ``topic``'s partitions."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        security: KafkaSecurity | None = None,
        idle_s: float = 120.0,
    ) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.security = security
        self.idle_s = idle_s
        self.consumer: AIOKafkaConsumer | None = None
        self.used = 0.0
        self.records_read = 0

    async def _consumer(self) -> AIOKafkaConsumer:
        if self.consumer is None:
            consumer = AIOKafkaConsumer(
                bootstrap_servers=self.bootstrap,
                group_id=None,
                enable_auto_commit=False,
                auto_offset_reset="earliest",  # a run the broker deleted: what is left of it
                **options(self.security),
            )
            await consumer.start()
            self.consumer = consumer
        self.used = time.monotonic()
        return self.consumer

    async def read(self, partition: int, runs: Iterable[tuple[int, int]]) -> list[ConsumerRecord]:
        """The records of ``partition`` in ``runs`` (first and last offset, both included),
        in offset order."""
        runs = sorted(runs)
        if not runs:
            return []
        consumer = await self._consumer()
        tp = TopicPartition(self.topic, partition)
        consumer.assign([tp])
        found: list[ConsumerRecord] = []
        try:
            for first, last in runs:
                consumer.seek(tp, first)
                deadline = time.monotonic() + RUN_TIMEOUT_S
                while time.monotonic() < deadline:
                    batch = await consumer.getmany(tp, timeout_ms=500)
                    records = batch.get(tp, [])
                    found += [r for r in records if first <= r.offset <= last]
                    if records and records[-1].offset >= last:
                        break
                    position = await consumer.position(tp)
                    if position > last:
                        break
                    end = consumer.highwater(tp)
                    if not records and end is not None and position >= end:
                        break  # the partition ends before the run does
        finally:
            self.used = time.monotonic()
        self.records_read += len(found)
        return found

    async def close_if_idle(self) -> None:
        if self.consumer is not None and time.monotonic() - self.used > self.idle_s:
            await self.close()

    async def close(self) -> None:
        consumer, self.consumer = self.consumer, None
        if consumer is not None:
            await asyncio.shield(consumer.stop())
