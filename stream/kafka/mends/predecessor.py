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
generation, with its host's name and the data directory's path, to
``<data dir>/group-member.json`` whenever the group assigns it partitions. At the next start,
before the consumer subscribes, a worker on the same host and path (a copied or restored
directory names another, or a live worker: it is left alone) asks the coordinator:

1. DescribeGroups: the group is ``Stable`` and the member is still in it. A group that is
   forming is never left in another's name: Tansu keeps a leader that leaves mid-rebalance as
   the leader for ever (``tansu.py``'s ``leave_unless_rebalancing``), and a Heartbeat is
   answered without error in a forming group of the same generation. DescribeGroups has no
   effect on any member's session.
2. A Heartbeat in the member's name at its generation: answered without error, it is that
   member, at that generation (a member that rejoined since is alive).
3. A LeaveGroup in its name: removed at once, as a graceful stop would have.

Any other answer, an error or no answer within ``ASK_TIMEOUT_S`` changes nothing but the
member's last contact if step 2 was reached: it expires as before. The mend is best-effort:
whatever fails, the worker starts.

A static member (``SCORER_INSTANCE_ID``) writes and reads nothing: the coordinator gives its
successor the same member and assignment. Reads aiokafka 0.14's ``GroupCoordinator``
(``ensure_coordinator_known``, ``_send_req``, ``group_id``, ``member_id``, ``generation``,
``_group_instance_id``), the v1 Heartbeat and LeaveGroup requests it sends itself and its
DescribeGroups (v0-v3: a member's id first).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from pathlib import Path
from typing import Any

import orjson
from aiokafka.protocol.admin import DescribeGroupsRequest
from aiokafka.protocol.group import HeartbeatRequest, LeaveGroupRequest

MEMBER_FILE = "group-member.json"
ASK_TIMEOUT_S = 10.0  # no answer this long: the predecessor is left to expire

log = logging.getLogger(__name__)


def remember(datadir: Path, coordinator: Any) -> None:
    """Write this member's id and generation (a static member's: nothing to write)."""
    if coordinator._group_instance_id is not None or not coordinator.member_id:
        return
    said = {
        "group": coordinator.group_id,
        "member_id": coordinator.member_id,
        "generation": coordinator.generation,
        "host": socket.gethostname(),
        "datadir": str(datadir.resolve()),
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
    if said.get("host") != socket.gethostname() or said.get("datadir") != str(datadir.resolve()):
        return None  # copied or restored from elsewhere: its member may be alive
    member, generation = said.get("member_id"), said.get("generation")
    if not isinstance(member, str) or not member or not isinstance(generation, int):
        return None
    if not -(2**31) <= generation < 2**31:  # not a generation the protocol can carry
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
        return await asyncio.wait_for(_leave(coordinator, member, generation), ASK_TIMEOUT_S + 5)
    except Exception as exc:  # best-effort: the worker starts whatever happens here
        log.info("predecessor %s left to expire: %r", member, exc)
        return False


async def _leave(coordinator: Any, member: str, generation: int) -> bool:
    """Steps 1-3 of the module's docstring."""
    group = coordinator.group_id
    await asyncio.wait_for(coordinator.ensure_coordinator_known(), ASK_TIMEOUT_S)
    described = await coordinator._send_req(DescribeGroupsRequest([group]))
    found = described.groups[0]  # error, group, state, protocol type, protocol, members, ...
    error, state, members = found[0], found[2], found[5]
    if error != 0 or state != "Stable" or member not in {m[0] for m in members}:
        return False
    answer = await coordinator._send_req(HeartbeatRequest(group, generation, member))
    if answer.error_code != 0:  # another generation: not the member that died
        return False
    left = await coordinator._send_req(LeaveGroupRequest(group, member))
    if left.error_code != 0:
        return False
    log.info(
        "took the previous worker on this data directory (member %s, generation %d) out of "
        "group %s: it stopped without leaving",
        member,
        generation,
        group,
    )
    return True
