"""Mend 9 on the embedded broker: a worker paused for longer than its session (SIGSTOP) acts
on nothing it fetched before the pause until the coordinator has told it whether it is still a
member of its group.

The first case holds the membership lease against the real group coordinator: it holds from
the join on, through heartbeats; it has lapsed the moment the consumer's loop wakes from a
pause longer than the session; the coordinator's answer (an unknown member) voids it, and the
rejoin renews it. The second case is the zombie write itself, with a Faust app and its table:
a worker is stopped with an event taken and not applied, the next worker takes its partitions
and applies a newer value, then the first wakes. Checking only that the event is of its
assignment (Faust's generation and flow), it writes the stale value to the table's changelog after the newer one, and whoever recovers that partition next
reads the stale value back (the chaos run's trace assembled from one span).
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.structs import RecordMetadata

from stream.kafka.broker import EmbeddedBroker
from stream.kafka.io import ensure_topics
from stream.kafka.mends.membership import MembershipLease, lease_membership

from .harness import Names, committed, produce, read
from .test_table_recovery import log_path, start_app, wait_for

SESSION_S = 6.0


async def until(predicate, timeout: float, step: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        await asyncio.sleep(step)
    return predicate()


def member(broker: EmbeddedBroker, names: Names, topic: str) -> AIOKafkaConsumer:
    """A consumer of ``topic`` in the test's group, with the workers' session and heartbeat."""
    return AIOKafkaConsumer(
        topic,
        bootstrap_servers=broker.bootstrap,
        group_id=names.group,
        enable_auto_commit=False,
        session_timeout_ms=int(SESSION_S * 1000),
        heartbeat_interval_ms=2000,
    )


async def test_the_lease_holds_while_the_coordinator_counts_the_member_in(
    broker: EmbeddedBroker, names: Names
) -> None:
    topic = f"lease-{names.suffix}"
    await ensure_topics(broker.bootstrap, [topic], 1)
    consumer = member(broker, names, topic)
    lease = MembershipLease(SESSION_S)
    await consumer.start()
    try:
        coordinator = consumer._coordinator
        lease_membership(coordinator, lease)
        assert not lease.holds(), "no lease before the coordinator has answered"
        await consumer.getmany(timeout_ms=100)  # the subscription starts the join
        assert await until(lease.holds, 30), "the join and sync did not renew the lease"
        first_member = coordinator.member_id

        # heartbeats keep it: never lapsed over three heartbeat intervals
        deadline = time.monotonic() + 7
        while time.monotonic() < deadline:
            assert lease.holds(), "the lease lapsed while heartbeats were answered"
            await consumer.getmany(timeout_ms=200)

        # a pause longer than the session (nothing runs, as under SIGSTOP) while another
        # member joins: the coordinator drops this one and gives the other its partition
        other = threading.Thread(target=asyncio.run, args=(join_and_take(broker, names, topic),))
        other.start()
        try:
            time.sleep(SESSION_S + 3)  # noqa: ASYNC251  (the pause under test)
            assert not lease.holds(), "the lease outlived a pause longer than the session"
        finally:
            other.join(60)

        # the coordinator dropped the member: its answer voids the lease (aiokafka resets the
        # member id), and the rejoin renews it
        assert await until(lambda: coordinator.member_id != first_member, 20), (
            "the coordinator still knew the member after the pause"
        )
        assert coordinator.member_id == "" and not lease.holds(), "the lease outlived the reset"
        assert await until(lease.holds, 30), "the rejoin did not renew the lease"
        assert coordinator.member_id not in ("", first_member)
    finally:
        await consumer.stop()


async def join_and_take(broker: EmbeddedBroker, names: Names, topic: str) -> None:
    """Another member of the group, on its own thread: joins, is given the partition, leaves."""
    consumer = member(broker, names, topic)
    await consumer.start()
    try:
        deadline = time.monotonic() + 30
        while not consumer.assignment() and time.monotonic() < deadline:
            await consumer.getmany(timeout_ms=200)
    finally:
        await consumer.stop()


def said(path: Path, line: str) -> int:
    try:
        return path.read_text(errors="replace").count(line)
    except OSError:
        return 0


async def send(bootstrap: str, topic: str, key: str, event: dict) -> RecordMetadata:
    """One JSON event, keyed; where it landed."""
    landed = await produce(bootstrap, topic, [(key.encode(), json.dumps(event).encode())])
    return landed[0]


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGCONT)
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@pytest.mark.parametrize(
    "fenced",
    [
        # the defect is a race between the woken agent and aiokafka's revocation: the stale
        # write came in 4 of 5 runs (not in one suite on two processes), so it runs with the chaos
        # runs (`make test-chaos`), not in the suite; the lease-checked case never writes
        pytest.param(False, id="assignment-checked", marks=pytest.mark.chaos),
        pytest.param(True, id="lease-checked"),
    ],
)
async def test_a_worker_woken_after_its_session_writes_nothing_to_a_lost_partition(
    broker: EmbeddedBroker, names: Names, tmp_path: Path, fenced: bool
) -> None:
    await ensure_topics(broker.bootstrap, [names.traces], 2)
    extra = {"TABLE_REPARTITION": "0", "TABLE_FENCED": "1" if fenced else "0"}
    first, port = start_app(broker, names, "tansu", tmp_path, **extra)
    second = None
    try:
        ready = await asyncio.to_thread(wait_for, port, lambda t: t["recovered"], 90.0)
        assert ready.get("recovered"), "the first worker did not start"
        await send(broker.bootstrap, names.traces, "k", {"key": "k", "value": "first"})
        seen = await asyncio.to_thread(wait_for, port, lambda t: t["table"].get("k") == "first")
        assert seen["table"].get("k") == "first"

        # an event taken and held: the worker is stopped before it applies it
        held = {"key": "k", "value": "stale", "hold_s": 3}
        await send(broker.bootstrap, names.traces, "k", held)
        first_log = log_path(tmp_path, port)
        assert await until(lambda: said(first_log, "holding k") == 1, 30)
        first.send_signal(signal.SIGSTOP)

        # the next worker takes both partitions once the first one's session expires,
        # applies the held event again, then a newer value
        second, second_port = start_app(broker, names, "tansu", tmp_path, **extra)
        new = await send(broker.bootstrap, names.traces, "k", {"key": "k", "value": "new"})
        taken = await asyncio.to_thread(
            wait_for, second_port, lambda t: t["table"].get("k") == "new", 120.0
        )
        assert taken["table"].get("k") == "new", "the second worker did not take over"
        # and committed it: the rebalance the first one's return brings reads nothing again
        # (a repeat of the held event and the newer value would hide or fake a stale write)

        async def committed_new() -> bool:
            done = await committed(broker.bootstrap, names.group, names.traces, new.partition)
            return (done or 0) > new.offset

        deadline = time.monotonic() + 30
        while not await committed_new():
            assert time.monotonic() < deadline, "the second worker did not commit"
            await asyncio.sleep(0.3)

        # the first wakes: its held event is stale; it rejoins the group
        assigned = said(first_log, "Executing _on_partitions_assigned")
        first.send_signal(signal.SIGCONT)
        rejoined = lambda: said(first_log, "Executing _on_partitions_assigned") > assigned  # noqa: E731
        assert await until(rejoined, 60, 0.5), "the first worker did not rejoin"
        await asyncio.sleep(2)  # its writes of the old generation have reached the broker

        changelog = f"{names.group}-latest-changelog"
        records = await read(broker.bootstrap, changelog, until=lambda rs: False, timeout=4)
        values = [json.loads(r.value) for r in records if json.loads(r.key) == "k"]
        if fenced:
            assert values[-1] == "new", f"a stale write after the newer one: {values}"
            assert values.count("stale") == 1, values  # the second worker's own
        else:
            # the defect: the woken worker wrote its stale value after the newer one, though it
            # checked the event was of its assignment right before (nothing had told it yet);
            # unless aiokafka's revocation reached the agent first (the race)
            assert values[-1] == "stale", values
    finally:
        stop(first)
        if second is not None:
            stop(second)
