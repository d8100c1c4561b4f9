"""Mend 11: a worker restarted after a crash takes its dead predecessor out of the group
before it joins (design record 53).

A worker killed (kill -9, OOM, a lost node) sends no LeaveGroup: the coordinator keeps it as
a member until its session times out. Its successor's JoinGroup then waits for it: on Kafka,
the rebalance waits for every known member to rejoin, so until the dead one expires (a
session timeout); on the embedded broker (Tansu 0.6, ``administrator.rs`` at 510f3e2) the
successor's JoinGroup waits half a session, its SyncGroup waits 0.8 of one for the dead
leader and fails, and a second JoinGroup waits half a session more: 1.8 session timeouts
(54 s at 30 s, 18 s at 10 s), where a graceful restart waits 0.5.

A worker knows its predecessor: the one before it on its data directory, which it has locked
(``worker.lock``), so that process has exited. Each worker writes its member id and
generation to ``<data dir>/group-member.json`` whenever the group assigns it partitions. At
the next start, before the consumer subscribes, it asks the coordinator a Heartbeat in that
member's name: answered without error, the dead member is still in a stable group, and a
LeaveGroup in its name removes it at once, as a graceful stop would have. Any other answer
(an unknown member: it left, or expired; a rebalance in progress; no coordinator) changes
nothing: the member expires as before. A rebalancing group is never left in another's name:
Tansu keeps a leader that leaves mid-rebalance as the leader for ever
(``tansu.py``'s ``leave_unless_rebalancing``, the same guard).

A static member (``SCORER_INSTANCE_ID``) writes and reads nothing: the coordinator gives its
successor the same member and assignment. Reads aiokafka 0.14's ``GroupCoordinator``
(``ensure_coordinator_known``, ``_send_req``, ``group_id``, ``member_id``, ``generation``,
``_group_instance_id``) and the v1 Heartbeat and LeaveGroup requests it sends itself.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import Any

import orjson
from aiokafka.errors import KafkaError
from aiokafka.protocol.group import HeartbeatRequest, LeaveGroupRequest

MEMBER_FILE = "group-member.json"
ASK_TIMEOUT_S = 10.0  # the coordinator unknown this long: the predecessor is left to expire

log = logging.getLogger(__name__)


def remember(datadir: Path, coordinator: Any) -> None:
    """Write this member's id and generation (a static member's: nothing to write)."""
    if coordinator._group_instance_id is not None or not coordinator.member_id:
        return
    said = {
        "group": coordinator.group_id,
        "member_id": coordinator.member_id,
        "generation": coordinator.generation,
    }
    path = datadir / MEMBER_FILE
    partial = path.with_suffix(".partial")
    try:
        datadir.mkdir(parents=True, exist_ok=True)
        partial.write_bytes(orjson.dumps(said))
        os.replace(partial, path)
    except OSError as exc:  # a full disk: a crash restart waits as it did before
        log.warning("could not write %s: %s", path, exc)


def recalled(datadir: Path, group: str) -> tuple[str, int] | None:
    """The predecessor's member id and generation in ``group``, or None."""
    try:
        said = orjson.loads((datadir / MEMBER_FILE).read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    if not isinstance(said, dict) or said.get("group") != group:
        return None
    member, generation = said.get("member_id"), said.get("generation")
    if not isinstance(member, str) or not member or not isinstance(generation, int):
        return None
    return member, generation


async def leave_for_predecessor(coordinator: Any, datadir: Path) -> bool:
    """Take the predecessor out of the group if it is still a member of a stable one (the
    module's docstring); True when it was."""
    if coordinator._group_instance_id is not None:
        return False
    found = recalled(datadir, coordinator.group_id)
    if found is None:
        return False
    member, generation = found
    try:
        await asyncio.wait_for(coordinator.ensure_coordinator_known(), ASK_TIMEOUT_S)
        answer = await coordinator._send_req(
            HeartbeatRequest(coordinator.group_id, generation, member)
        )
        if answer.error_code != 0:  # gone, expired, or the group is rebalancing
            return False
        left = await coordinator._send_req(LeaveGroupRequest(coordinator.group_id, member))
    except (KafkaError, TimeoutError) as exc:
        log.info("predecessor %s left to expire: %s", member, exc or type(exc).__name__)
        return False
    if left.error_code != 0:
        return False
    log.info(
        "took the previous worker on this data directory (member %s, generation %d) out of "
        "group %s: it stopped without leaving",
        member,
        generation,
        coordinator.group_id,
    )
    return True
