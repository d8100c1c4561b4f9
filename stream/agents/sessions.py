"""Coaching-session events: folded where they are read when the sessions topic is
co-partitioned with the thread events, else validated and forwarded to their thread.

A session's thread events are placed on the thread-events topic by its session id
(``placement_key``). When the sessions topic has as many partitions as the thread-events
topic, a session event keyed by its session id is already in its thread's partition, and
Faust's assignor gives a worker the same partitions of both (topics with as many partitions
that every worker subscribes to are co-partitioned): the thread agent reads the sessions
topic too and folds such an event itself (``session_intake.py``), one Kafka message instead of
three; an event in another partition (keyed otherwise) is forwarded, on the broker before
its record is acked. Otherwise the session agent forwards every event as before
(design record 33). The choice is made once at start from the partition counts.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime

import faust
from aiokafka import AIOKafkaConsumer
from aiokafka.errors import KafkaError
from faust.types import AgentT, Message
from pydantic import ValidationError

from ..app import Topics
from ..delivery.dead_letter import DeadLetters
from ..delivery.publisher import Send
from ..kafka.io import options
from ..observer import Observer
from ..settings import Settings
from ..sources.log import SourceLog, source_name
from ..threads.events import parse_session
from ..threads.router import ThreadRouter
from .forward import register_forwarder

log = logging.getLogger(__name__)


def register_session_agent(
    app: faust.App,
    topics: Topics,
    router: ThreadRouter,
    *,
    max_in_flight: int,
    sources: SourceLog | None = None,
    observer: Observer | None = None,
) -> AgentT[bytes]:
    """Validate coaching-session events and forward them, keyed by session, to thread events.

    An invalid event goes to the DLQ with its bytes and error; offsets are acked in order once
    the forwarded event (or the DLQ copy) is on the broker. ``sources`` records how far
    each partition is read.
    """
    dead_letters = DeadLetters(topics.dlq, observer)

    def convert(message: Message) -> tuple[list[Send], datetime | None]:
        source = source_name(message.topic, message.partition)
        try:
            session = parse_session(message.value)
            thread_event = router.from_session(session, message.timestamp, source, message.key)
        except (ValueError, ValidationError) as exc:
            return dead_letters.invalid(message, exc, what="session event"), None
        return [topics.to_threads(thread_event)], session.timestamp

    return register_forwarder(
        app,
        topics.sessions,
        "forward-sessions",
        convert,
        declare=topics.outputs(),
        dead_letters=dead_letters,
        max_in_flight=max_in_flight,
        sources=sources,
        observer=observer,
    )


async def partition_counts(
    bootstrap: str, settings: Settings, topics: list[str]
) -> dict[str, int | None]:
    """How many partitions each of ``topics`` has (None: it does not exist)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, **options(settings.kafka))
    await consumer.start()
    try:
        existing = await consumer.topics()
        return {
            topic: len(consumer.partitions_for_topic(topic) or ()) if topic in existing else None
            for topic in topics
        }
    finally:
        await consumer.stop()


def co_partitioned_sessions(settings: Settings, bootstrap: str) -> int | None:
    """The partition count of the sessions topic when it has as many partitions as the
    thread-events topic (or, before that exists, ``SCORER_TOPIC_PARTITIONS``): session
    events in their thread's partition are then folded where they are read. None: they are
    forwarded. Asked of the cluster once, at start (no event loop running yet); the choice
    is logged."""
    names = [settings.sessions_topic, settings.thread_events_topic_name]
    try:
        counts = asyncio.run(partition_counts(bootstrap, settings, names))
    except (KafkaError, OSError) as exc:
        log.warning(
            "session events are forwarded to their thread's partition: the partition counts "
            "of %s could not be read (%s: %s)",
            ", ".join(names),
            type(exc).__name__,
            exc,
        )
        return None
    sessions = counts[settings.sessions_topic]
    threads = counts[settings.thread_events_topic_name] or settings.topic_partitions
    if sessions == threads:
        log.info(
            "session events: %s and the thread events have %d partitions each; an event keyed "
            "by its session id is folded where it is read, any other forwarded",
            settings.sessions_topic,
            threads,
        )
        return threads
    log.info(
        "session events are forwarded to their thread's partition: %s has %s partitions, "
        "the thread events %d (key them by session id on a topic of %d partitions to fold "
        "them where they are read)",
        settings.sessions_topic,
        sessions if sessions is not None else "no",
        threads,
        threads,
    )
    return None
