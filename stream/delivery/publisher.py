"""Handing messages to the producer, and waiting until the broker has them (with retry)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Iterable
from typing import Any

import faust
from faust.types import TopicT

from ..kafka.mends.faust_state import aiokafka_producer
from ..kafka.mends.handover import Handover
from ..kafka.mends.partitioning import BatchPartitioner

log = logging.getLogger(__name__)

PUBLISH_BACKOFF_MAX_S = 30.0

# (topic, key, value, headers): one message to publish
Send = tuple[TopicT, bytes | None, bytes, dict[str, bytes] | None]


class Publisher:
    """Publishes through the app's producer."""

    def __init__(self, app: faust.App) -> None:
        self.app = app
        self._handover = Handover(app)  # batches in order, the caller not waiting

    async def declare(self, topics: Iterable[TopicT]) -> None:
        """Create topics up front: we publish through the producer directly (and the
        thread-events topic must exist with its partition count before anything is keyed to it)."""
        for topic in topics:
            await topic.maybe_declare()

    async def send(self, sends: list[Send], timestamp: float | None = None) -> list[Awaitable[Any]]:
        """Hand messages to the producer; return their delivery futures. ``timestamp``
        (epoch seconds) is their Kafka time; None: now.

        The producer itself, not ``Topic.send``: the same aiokafka producer with a fraction
        of the per-message bookkeeping (the Faust topic path dominated CPU per trace).
        """
        producer = self.app.producer
        return [
            await producer.send(topic.get_topic_name(), key, value, None, timestamp, headers)
            for topic, key, value, headers in sends
        ]

    async def send_batched(
        self, sends: list[Send], timestamp: float | None = None, *, at_once: bool = False
    ) -> list[Awaitable[Any]]:
        """Hand messages to the producer as whole record batches, one per topic partition
        (more when one fills; a message larger than a batch gets one of its own); return a
        delivery future for each message, in order (the messages of one batch share its
        future). Each message goes to the partition a single send would give it (Kafka's
        default: murmur2 of the key, the batch's keys hashed together; a keyless one, a random
        available partition).

        A message per send costs aiokafka a future, a partitioner call and a lookup of
        the open batch each: for the many messages of a batch of traces, building the
        batches here costs a fraction of that (design record 32). The batches are handed
        to the producer in order by one task of this publisher (``Handover``): aiokafka
        takes a partition's batch only once the one before it is on its way to the broker
        (a produce round trip), which the caller does not wait for. ``at_once``: handed over
        before this returns (the caller waits), for messages that must be in the producer
        before what the caller sends next by other paths (a trace's turn before the progress
        report that says its source is read past it).
        """
        if not sends:
            return []
        producer = aiokafka_producer(self.app)
        timestamp_ms = int(timestamp * 1000) if timestamp else None
        # per topic object (a batch's messages go to a few): its name, its partitions
        topics: dict[int, tuple[str, list[int], list[int]]] = {}
        placed: dict[tuple[str, int], list[int]] = {}
        partition = BatchPartitioner(key for _, key, _, _ in sends)  # the producer's own
        for index, (topic, key, _, _) in enumerate(sends):
            if (known := topics.get(id(topic))) is None:
                name = topic.get_topic_name()
                every = sorted(await producer.partitions_for(name))
                up = sorted(producer.client.cluster.available_partitions_for_topic(name) or ())
                known = topics[id(topic)] = (name, every, up)
            name, every, up = known
            number = partition(key, every, up)
            if (group := placed.get((name, number))) is None:
                group = placed[(name, number)] = []
            group.append(index)
        batches: list[tuple[Any, str, int, list[int]]] = []
        for (name, number), indexes in placed.items():
            builder, held = producer.create_batch(), list[int]()
            for index in indexes:
                _, key, value, headers = sends[index]
                extra = list(headers.items()) if headers else []
                if not builder.append(timestamp=timestamp_ms, key=key, value=value, headers=extra):
                    batches.append((builder, name, number, held))  # full: the next batch
                    builder, held = producer.create_batch(), []
                    # an empty batch takes its first message whatever its size (aiokafka)
                    if not builder.append(
                        timestamp=timestamp_ms, key=key, value=value, headers=extra
                    ):
                        raise ValueError(f"a batch refused a message of {len(value)} bytes")
                held.append(index)
            batches.append((builder, name, number, held))
        futures: list[Awaitable[Any]] = [asyncio.get_running_loop().create_future()] * len(sends)
        for builder, name, number, held in batches:
            if at_once:
                delivery = await producer.send_batch(builder, name, partition=number)
            else:
                delivery = self._hand(builder, name, number)
            for index in held:
                futures[index] = delivery
        return futures

    def _hand(self, builder: Any, topic: str, partition: int) -> asyncio.Future[Any]:
        """Queue ``builder`` for the producer; return its delivery future."""
        return self._handover.hand(builder, topic, partition)

    def stop(self) -> None:
        """Stop handing batches over (what is still queued is never delivered: its
        records, never acked, are read again)."""
        self._handover.stop()

    async def to_partitions(self, topic: str, value: bytes, partitions: Iterable[int]) -> None:
        """Hand ``value`` to the producer once for each of ``partitions`` of ``topic`` (no key)."""
        producer = self.app.producer
        for partition in partitions:
            await producer.send(topic, None, value, partition, None, None)

    async def send_until_delivered(self, sends: list[Send], timestamp: float | None = None) -> None:
        """Send and wait until the broker has every message; retry until it does.

        A broker outage stalls the partition (its offset is not acked) instead of losing scores.
        """
        delay = 0.5
        while True:
            try:
                await asyncio.gather(*await self.send(sends, timestamp))
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("publish failed (%s), retrying in %.1fs", exc, delay)
                await asyncio.sleep(delay)
                delay = min(PUBLISH_BACKOFF_MAX_S, delay * 2)
