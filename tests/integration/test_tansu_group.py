"""The embedded broker's consumer groups: a member that leaves while its group rebalances.

Tansu's coordinator keeps a leader that sent LeaveGroup mid-rebalance as the group's leader
for ever (``stream/kafka/mends/tansu.py``): the survivors' joins never complete. The mend: a
stopping member leaves only while a Heartbeat says the group is stable, else the broker
expires it at its session timeout (which clears the leader). Plain aiokafka consumers here,
with the mend installed on the leader's coordinator as the ``tansu://`` transport does.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer

from stream.kafka.broker import EmbeddedBroker
from stream.kafka.io import ensure_topics
from stream.kafka.mends.tansu import group_is_stable, leave_unless_rebalancing

from .harness import Names

SESSION_MS = 6000  # the group's session timeout: the first JoinGroup's, kept by the broker


def member(broker: EmbeddedBroker, names: Names) -> AIOKafkaConsumer:
    consumer = AIOKafkaConsumer(
        names.traces,
        bootstrap_servers=broker.bootstrap,
        group_id=names.group,
        session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=1000,
        rebalance_timeout_ms=SESSION_MS,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    return consumer


async def assigned(consumer: AIOKafkaConsumer, timeout: float) -> bool:
    """``consumer`` polls until it has partitions (or ``timeout``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        await consumer.getmany(timeout_ms=200)
        if consumer.assignment():
            return True
    return False


def mend(consumer: AIOKafkaConsumer) -> None:
    coordinator: Any = consumer._coordinator
    leave = coordinator._maybe_leave_group

    async def maybe_leave_group() -> None:
        await leave_unless_rebalancing(coordinator, leave)

    coordinator._maybe_leave_group = maybe_leave_group


@pytest.mark.timeout(180)
async def test_a_leader_stopped_mid_rebalance_does_not_leave_the_group_stuck(
    broker: EmbeddedBroker, names: Names, caplog: pytest.LogCaptureFixture
) -> None:
    await ensure_topics(broker.bootstrap, [names.traces], 4)
    leader, follower, joiner = (member(broker, names) for _ in range(3))
    await leader.start()
    assert await assigned(leader, 30), "the first member got no partitions"
    mend(leader)
    await follower.start()
    polling = asyncio.create_task(assigned(follower, 60))
    assert await assigned(leader, 30) and await polling, "the group of two did not form"
    assert len(leader.assignment()) + len(follower.assignment()) == 4

    starting = asyncio.create_task(joiner.start())  # its JoinGroup starts a rebalance
    deadline = time.monotonic() + 30
    while await group_is_stable(leader._coordinator):
        assert time.monotonic() < deadline, "the third member's join started no rebalance"
        await asyncio.sleep(0.05)
    with caplog.at_level(logging.WARNING, logger="stream.kafka.mends.tansu"):
        await leader.stop()  # the leader, mid-rebalance
    assert "not leaving group" in caplog.text

    # the survivors form the group once the broker has expired the leader; with aiokafka's
    # LeaveGroup they never did (every join named the departed leader)
    started = time.monotonic()
    await starting
    survivors = await asyncio.gather(assigned(follower, 90), assigned(joiner, 90))
    try:
        assert all(survivors), "the survivors never got an assignment: the group is stuck"
        assert len(follower.assignment()) + len(joiner.assignment()) == 4
        assert time.monotonic() - started < 90
    finally:
        await follower.stop()
        await joiner.stop()


async def test_a_member_of_a_stable_group_leaves_it_at_once(
    broker: EmbeddedBroker, names: Names, caplog: pytest.LogCaptureFixture
) -> None:
    await ensure_topics(broker.bootstrap, [names.traces], 2)
    first, second = member(broker, names), member(broker, names)
    await first.start()
    assert await assigned(first, 30)
    mend(first)
    await second.start()
    polling = asyncio.create_task(assigned(second, 60))
    assert await assigned(first, 30) and await polling
    deadline = time.monotonic() + 30
    while not await group_is_stable(first._coordinator):
        assert time.monotonic() < deadline, "the group of two did not settle"
        await asyncio.sleep(0.1)
    with caplog.at_level(logging.INFO):
        await first.stop()
    assert "not leaving group" not in caplog.text
    assert "LeaveGroup request succeeded" in caplog.text
    started = time.monotonic()
    try:
        while len(second.assignment()) != 2:  # a rebalance at once, not after the session
            assert time.monotonic() - started < SESSION_MS / 1000, "the member did not leave"
            await second.getmany(timeout_ms=200)
    finally:
        await second.stop()
