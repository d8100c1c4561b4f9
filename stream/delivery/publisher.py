"""Handing messages to the producer, and waiting until the broker has them (with retry)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Iterable
from typing import Any

import faust
from faust.types import TopicT

from ..engine import records
from ..engine.records import Records
from ..models import ScoreEvent, ThreadDecisions, TraceDecisions

log = logging.getLogger(__name__)

PUBLISH_BACKOFF_MAX_S = 30.0

# (topic, key, value, headers): one message to publish
Send = tuple[TopicT, bytes | None, bytes, dict[str, bytes] | None]


def sends_of(scores_topic: TopicT, decisions_topic: TopicT, records: Records) -> list[Send]:
    """The messages that publish ``records``: score events, then decision records."""
    sends: list[Send] = [
        (scores_topic, key, score.to_bytes(), None) for key, score in records.scores
    ]
    sends.extend(
        (decisions_topic, key, record.to_bytes(), None) for key, record in records.decisions
    )
    return sends


def scored(
    scores_topic: TopicT,
    decisions_topic: TopicT,
    key: str,
    scores: list[ScoreEvent],
    record: TraceDecisions | ThreadDecisions,
) -> list[Send]:
    """What one scored target publishes: its score events, then its decision record, all
    keyed by the target id (so they share a partition)."""
    return sends_of(scores_topic, decisions_topic, records.scored(key, scores, record))


class Publisher:
    """Publishes through the app's producer."""

    def __init__(self, app: faust.App) -> None:
        self.app = app

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
