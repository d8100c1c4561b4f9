"""Mend 11 (``stream/kafka/mends/predecessor.py``) against the embedded broker's real group
coordinator: a member killed without leaving is taken out of its group by its successor on the
same data directory, and no one else is: not a member that left, not a live member of another
generation, not a static member's."""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import orjson
from aiokafka import AIOKafkaConsumer

from stream.kafka.broker import EmbeddedBroker
from stream.kafka.io import ensure_topics
from stream.kafka.mends.predecessor import MEMBER_FILE, leave_for_predecessor, recalled, remember

SESSION = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 2000}
UNKNOWN_MEMBER_ID = 25

# a member that joins, writes what mend 11 writes at each assignment, and waits to be killed
MEMBER = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from aiokafka import AIOKafkaConsumer
    from stream.kafka.mends.predecessor import remember

    async def main(bootstrap, group, topic, datadir):
        consumer = AIOKafkaConsumer(
            topic, bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
            session_timeout_ms=6000, heartbeat_interval_ms=2000)
        await consumer.start()
        while not consumer.assignment():
            await consumer.getmany(timeout_ms=200)
        remember(Path(datadir), consumer._coordinator)
        print("assigned", flush=True)
        while True:
            await consumer.getmany(timeout_ms=200)

    asyncio.run(main(*sys.argv[1:]))
    """
)


def written(datadir: Path, group: str, member: str, generation: int, host: str = "") -> None:
    """A member file as mend 11 writes it (on this host and directory unless ``host``)."""
    said = {
        "group": group,
        "member_id": member,
        "generation": generation,
        "host": host or socket.gethostname(),
        "datadir": str(datadir.resolve()),
    }
    (datadir / MEMBER_FILE).write_bytes(orjson.dumps(said))


def consumer(broker: EmbeddedBroker, group: str, **more: object) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        group_id=group,
        enable_auto_commit=False,
        **SESSION,
        **more,  # type: ignore[arg-type]
    )


async def heartbeat_as(successor: AIOKafkaConsumer, member: str, generation: int) -> int:
    """The error code of a Heartbeat in ``member``'s name (0: a member of a stable group)."""
    from aiokafka.protocol.group import HeartbeatRequest

    coordinator = successor._coordinator
    await coordinator.ensure_coordinator_known()
    answer = await coordinator._send_req(HeartbeatRequest(coordinator.group_id, generation, member))
    return int(answer.error_code)


def test_a_killed_members_successor_takes_it_out_of_the_group(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    group, topic = f"pred-{uuid.uuid4().hex[:8]}", f"pred-{uuid.uuid4().hex[:8]}"
    asyncio.run(ensure_topics(broker.bootstrap, [topic], 2))
    member = subprocess.Popen(
        [sys.executable, "-c", MEMBER, broker.bootstrap, group, topic, str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert member.stdout is not None and member.stdout.readline().strip() == "assigned"
    finally:
        member.send_signal(signal.SIGKILL)  # no LeaveGroup: the coordinator still counts it
        member.wait(10)
    found = recalled(tmp_path, group)
    assert found is not None
    dead, generation = found

    async def succeed() -> tuple[int, bool, int, bool]:
        successor = consumer(broker, group)
        await successor.start()
        try:
            before = await heartbeat_as(successor, dead, generation)
            left = await leave_for_predecessor(successor._coordinator, tmp_path)
            after = await heartbeat_as(successor, dead, generation)
            again = await leave_for_predecessor(successor._coordinator, tmp_path)
            return before, left, after, again
        finally:
            await successor.stop()

    before, left, after, again = asyncio.run(succeed())
    assert before == 0  # killed, and still a member of a stable group
    assert left is True
    assert after == UNKNOWN_MEMBER_ID  # gone at once, not a session later
    assert again is False  # the member is no longer there to take out


def test_no_one_else_is_taken_out(broker: EmbeddedBroker, tmp_path: Path) -> None:
    """A live member named with another generation, or from a directory copied from another
    host, a member id the group never had, a file of another group, a corrupt file, a static
    successor: the group is left as it is."""
    group, topic = f"pred-{uuid.uuid4().hex[:8]}", f"pred-{uuid.uuid4().hex[:8]}"
    asyncio.run(ensure_topics(broker.bootstrap, [topic], 2))

    async def run() -> None:
        live = consumer(broker, group)
        await live.start()
        live.subscribe([topic])
        while not live.assignment():
            await live.getmany(timeout_ms=200)
        coordinator = live._coordinator
        member, generation = coordinator.member_id, coordinator.generation
        successor = consumer(broker, group)
        await successor.start()
        try:
            datadir = tmp_path / "stale"
            datadir.mkdir()
            written(datadir, group, member, generation + 5)
            assert await leave_for_predecessor(successor._coordinator, datadir) is False
            written(datadir, group, member, generation, host="another-host")  # a copy
            assert await leave_for_predecessor(successor._coordinator, datadir) is False
            written(datadir, group, "never-a-member", generation)
            assert await leave_for_predecessor(successor._coordinator, datadir) is False
            written(datadir, "another", member, generation)
            assert await leave_for_predecessor(successor._coordinator, datadir) is False
            written(datadir, group, member, 2**40)  # not a generation: no request at all
            assert await leave_for_predecessor(successor._coordinator, datadir) is False
            (datadir / MEMBER_FILE).write_bytes(b"{not json")
            assert await leave_for_predecessor(successor._coordinator, datadir) is False
            assert await heartbeat_as(successor, member, generation) == 0  # still a member
        finally:
            await successor.stop()
            await live.stop()
        static = consumer(broker, f"{group}-static", group_instance_id="scorer-0")
        await static.start()
        static.subscribe([topic])
        try:
            while not static.assignment():  # joined: it has a member id
                await static.getmany(timeout_ms=200)
            assert static._coordinator.member_id
            nothing = tmp_path / "static"
            remember(nothing, static._coordinator)
            assert not (nothing / MEMBER_FILE).exists()  # a static member writes nothing
        finally:
            await static.stop()

    asyncio.run(run())
