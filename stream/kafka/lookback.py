"""Runs of a topic's partition read back by offset: what the agreement join reads when a
label (or a shadow's score) comes after the scores it pairs with (design record 36).

A group-less aiokafka consumer, started at the first read and stopped when it has been idle
for ``idle_s`` (``close_if_idle``, from a clock) or the worker stops. A run is read from its
first offset (or the partition's earliest, where the broker's retention has deleted that
far) through its last; one that cannot be read to its last within ``run_timeout_s`` (the
broker away, the partition shorter than the run) raises ``IncompleteReadError``, never a part of
it taken for the whole. The runs read last are kept (``cache_records`` records at most), so
labels for targets of one bucket read it once.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from collections.abc import Iterable

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.errors import KafkaError

from .io import groupless_consumer
from .security import KafkaSecurity

RUN_TIMEOUT_S = 30.0  # a run not read to its last by then is an ``IncompleteReadError``
STOP_TIMEOUT_S = 5.0  # a consumer that cannot say goodbye to the broker by then is dropped


class IncompleteReadError(Exception):
    """A run of offsets could not be read through its last (read it again later)."""


class RunReader:
    """Reads runs of offsets of ``topic``'s partitions."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        security: KafkaSecurity | None = None,
        idle_s: float = 120.0,
        cache_records: int = 8000,
        run_timeout_s: float = RUN_TIMEOUT_S,
    ) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.security = security
        self.idle_s = idle_s
        self.cache_records = cache_records
        self.run_timeout_s = run_timeout_s
        self.consumer: AIOKafkaConsumer | None = None
        self.used = 0.0
        self.records_read = 0
        self.cached: OrderedDict[tuple[int, int, int], list[ConsumerRecord]] = OrderedDict()

    async def _consumer(self) -> AIOKafkaConsumer:
        if self.consumer is None:
            consumer = groupless_consumer(
                self.bootstrap,
                self.security,
                auto_offset_reset="earliest",  # a run the broker deleted: what is left of it
            )
            await consumer.start()
            self.consumer = consumer
        self.used = time.monotonic()
        return self.consumer

    async def read(self, partition: int, runs: Iterable[tuple[int, int]]) -> list[ConsumerRecord]:
        """The records of ``partition`` in ``runs`` (first and last offset, both included),
        in offset order; ``IncompleteReadError`` if a run could not be read through."""
        found: list[ConsumerRecord] = []
        for first, last in sorted(runs):
            cached = self._from_cache(partition, first, last)
            found += cached if cached is not None else await self._read_run(partition, first, last)
        self.used = time.monotonic()
        return found

    def _from_cache(self, partition: int, first: int, last: int) -> list[ConsumerRecord] | None:
        for key, records in self.cached.items():
            if key[0] == partition and key[1] <= first and last <= key[2]:
                self.cached.move_to_end(key)
                return [r for r in records if first <= r.offset <= last]
        return None

    async def _read_run(self, partition: int, first: int, last: int) -> list[ConsumerRecord]:
        try:
            consumer = await self._consumer()
        except (KafkaError, OSError) as exc:
            await self.close()
            raise IncompleteReadError(f"cannot reach the broker: {exc}") from exc
        tp = TopicPartition(self.topic, partition)
        consumer.assign([tp])
        consumer.seek(tp, first)
        records: list[ConsumerRecord] = []
        deadline = time.monotonic() + self.run_timeout_s
        while True:
            if time.monotonic() > deadline:
                raise IncompleteReadError(
                    f"{self.topic} partition {partition}: offsets {first}-{last} not read "
                    f"through in {self.run_timeout_s:g} s ({len(records)} records)"
                )
            try:
                batch = await consumer.getmany(tp, timeout_ms=500)
            except KafkaError as exc:
                raise IncompleteReadError(f"{self.topic} partition {partition}: {exc}") from exc
            got = batch.get(tp, [])
            records += [r for r in got if first <= r.offset <= last]
            if got and got[-1].offset >= last:
                break  # through the run (or past it: the broker deleted all of it)
        self.records_read += len(records)
        self._keep(partition, first, last, records)
        return records

    def _keep(self, partition: int, first: int, last: int, records: list[ConsumerRecord]) -> None:
        if len(records) > self.cache_records:
            return
        self.cached[(partition, first, last)] = records
        while self.cached_records() > self.cache_records:
            self.cached.popitem(last=False)

    def cached_records(self) -> int:
        """The records kept of the runs read last."""
        return sum(len(records) for records in self.cached.values())

    async def close_if_idle(self) -> None:
        if self.consumer is not None and time.monotonic() - self.used > self.idle_s:
            await self.close()

    async def close(self) -> None:
        consumer, self.consumer = self.consumer, None
        self.cached.clear()
        if consumer is not None:
            with contextlib.suppress(TimeoutError, KafkaError, OSError):
                await asyncio.wait_for(asyncio.shield(consumer.stop()), STOP_TIMEOUT_S)
