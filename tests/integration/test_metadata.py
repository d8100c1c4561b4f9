"""What a worker knows of its source topics' partitions, on every member of the group: the
unheard-source wait (``stream/threads``, ``stream/otlp``) expects every partition of them."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from aiokafka import AIOKafkaConsumer

from stream.kafka.broker import EmbeddedBroker
from stream.kafka.io import ensure_topics
from stream.kafka.mends.faust_state import partition_count

from .harness import Names


async def test_every_member_knows_a_source_topics_partitions_not_only_the_leader(
    broker: EmbeddedBroker, names: Names
) -> None:
    """Faust's ``topic_partitions`` reads aiokafka's snapshot of the group's subscription,
    which only the leader takes: on the other members it knew no topic, so their partitions
    taken over waited for no source. ``partition_count`` reads the cluster metadata."""
    topic = f"sources-{names.suffix}"
    await ensure_topics(broker.bootstrap, [topic], 3)
    members = [
        AIOKafkaConsumer(
            topic,
            bootstrap_servers=broker.bootstrap,
            group_id=names.group,
            session_timeout_ms=6000,
            heartbeat_interval_ms=500,
        )
        for _ in range(2)
    ]
    for member in members:
        await member.start()
    try:
        for _ in range(300):  # both have an assignment (the group has formed)
            await asyncio.gather(*(m.getmany(timeout_ms=100) for m in members))
            if all(m.assignment() for m in members):
                break
        else:
            raise AssertionError("the group did not form")
        snapshots = [m._coordinator._metadata_snapshot.get(topic) for m in members]
        assert sorted(snapshots, key=str) == [3, None]  # Faust's answer: only the leader's
        assert [
            partition_count(SimpleNamespace(_thread=SimpleNamespace(_consumer=m)), topic)
            for m in members
        ] == [3, 3]
    finally:
        for member in members:
            await member.stop()
