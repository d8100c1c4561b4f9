"""Mend 9: a worker acts on its partitions' records only while it is sure it is still a
member of its group.

A worker paused for longer than its session (SIGSTOP, a stalled VM, a long GC pause) is
dropped from the group by the coordinator, and its partitions go to another worker. On
waking it does not know yet: aiokafka learns it from the next heartbeat's answer, and until
that answer is handled Faust goes on delivering the records it had fetched, and the agents
act on them. In a chaos run a worker woken after 9 s added a span to its trace table (a
changelog write) after the partition's new owner had assembled and published that trace. The
new owner read the stale write back at its next recovery and published the trace again,
built from one span.

Kafka fences such zombies only with transactions. Here each worker holds a *lease* on its
membership. When the coordinator answers a Heartbeat, JoinGroup or SyncGroup without error,
the member was alive when the request was sent, and the coordinator cannot expire it for
missed heartbeats before that moment plus the session timeout. (A heartbeat answered
REBALANCE_IN_PROGRESS renews nothing: a member that has not rejoined when the rebalance
timeout runs out is removed whatever its heartbeats, and aiokafka rejoins at once anyway.)
The table-writing agents apply a record only while the lease holds (``still_ours``), with
no ``await`` between the check and the write. A worker woken from a long pause finds its
lease lapsed, so the agent waits for the coordinator's next answer. If the record's
partition was revoked meanwhile, the record is left unacked to the partition's next owner.

The lease is measured on ``CLOCK_BOOTTIME`` where there is one (Linux): it goes on while
the machine is suspended, as the coordinator's clock does; ``CLOCK_MONOTONIC`` stops.

What this does not cover: table writes handed to the producer while the lease held and not
yet sent when the pause began (in Faust's buffer or aiokafka's accumulator: milliseconds on
an idle worker, longer under load) still reach the broker on waking. Only transactions
close that. Members removed at once (static membership, an administrator removing a member)
are not covered either.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from typing import Any

import faust
from faust.types import Message
from mode.utils.futures import notify

from ...observer import Observer

log = logging.getLogger(__name__)

# the share of the session timeout a lease lasts: a margin for the coordinator's own timer
LEASE_SHARE = 0.9
# Kafka API keys of the requests whose error-free answer proves membership
JOIN_GROUP, HEARTBEAT, SYNC_GROUP = 11, 12, 14
POLL_S = 0.05  # how often a waiting agent looks at the lease again
_CLOCK = getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC)


def clock() -> float:
    """The lease's clock, in seconds: one that goes on while the machine is suspended."""
    return time.clock_gettime(_CLOCK)


class MembershipLease:
    """How long this worker is certainly a member of its group (``clock()`` seconds).

    Renewed by the consumer's thread, read by the agents' loop: each side reads or writes
    one float.
    """

    def __init__(self, session_s: float, share: float = LEASE_SHARE) -> None:
        self.length_s = session_s * share
        self._since = -math.inf

    def renew(self, sent_at: float) -> None:
        """The coordinator answered a request sent at ``sent_at`` (``clock()``): a member then."""
        if sent_at > self._since:
            self._since = sent_at

    def void(self) -> None:
        """The coordinator does not know this member (or this generation) any more."""
        self._since = -math.inf

    def holds(self, now: float | None = None) -> bool:
        return (clock() if now is None else now) < self._since + self.length_s

    def lapsed_for(self, now: float | None = None) -> float:
        """Seconds since the lease ran out (0 while it holds; inf if never renewed)."""
        now = clock() if now is None else now
        return max(0.0, now - (self._since + self.length_s))


def lease_membership(coordinator: Any, lease: MembershipLease) -> None:
    """Renew ``lease`` from the answers of aiokafka's group ``coordinator`` and void it when
    the coordinator resets this member's generation (unknown member, illegal generation,
    a failed commit)."""
    send = coordinator._send_req
    reset = coordinator.reset_generation

    async def send_req(request: Any) -> Any:
        sent_at = clock()
        response = await send(request)
        api_key = getattr(request, "API_KEY", None)
        if (
            api_key in (JOIN_GROUP, HEARTBEAT, SYNC_GROUP)
            and getattr(response, "error_code", None) == 0
        ):
            lease.renew(sent_at)
        return response

    def reset_generation() -> None:
        lease.void()
        reset()

    coordinator._send_req = send_req
    coordinator.reset_generation = reset_generation


def lease_of(app: faust.App) -> MembershipLease | None:
    """The lease of ``app``'s consumer (None with a transport that keeps none)."""
    thread = getattr(app.consumer, "_thread", None)
    lease = getattr(thread, "lease", None)
    return lease if isinstance(lease, MembershipLease) else None


def of_current_assignment(app: faust.App, message: Message) -> bool:
    """``message`` belongs to the assignment this worker is working on now, as far as this
    worker knows (Faust's own test when it takes a record from an agent's queue)."""
    return message.generation_id == app.consumer_generation_id and app.flow_control.is_active()


async def still_ours(
    app: faust.App, message: Message, observer: Observer | None = None, poll_s: float = POLL_S
) -> bool:
    """Whether this worker may act on ``message``, checked right before acting (no ``await``
    in between): True at once while the membership lease holds; otherwise waits until the
    coordinator renews it, or until a rebalance takes the record's assignment away. In that
    case the record is left unacked to the partition's next owner (``leave``) and False is
    returned."""
    lease = lease_of(app)
    if lease is None or lease.holds():
        if of_current_assignment(app, message):
            return True
        leave(app, message)
        return False
    lapsed = lease.lapsed_for()
    # polled: the lease is renewed on the consumer's thread, and this wait is rare (a pause)
    while not lease.holds() and of_current_assignment(app, message):  # noqa: ASYNC110
        await asyncio.sleep(poll_s)
    ours = lease.holds() and of_current_assignment(app, message)
    outcome = "confirmed" if ours else "left"
    if observer is not None:
        observer.on_membership_unconfirmed(outcome)
    log.info(
        "membership %s before a record of %s[%d]@%d: %s",
        "voided (the coordinator dropped this member)"
        if math.isinf(lapsed)
        else f"lease lapsed {lapsed:.1f} s",
        message.topic,
        message.partition,
        message.offset,
        "the coordinator confirmed it" if ours else "left to the partition's next owner",
    )
    if not ours:
        leave(app, message)
    return ours


def leave(app: faust.App, message: Message) -> None:
    """Neither process nor ack ``message``: it is marked acked, so that Faust's stream and a
    rebalance do not wait for it, but the consumer never records its offset, so no commit
    passes it. The partition is sought back to its committed offset at the next assignment
    (Faust's seek, mend 1), and whoever owns it then reads the record again."""
    message.acked = True
    consumer = app.consumer
    consumer.unacked.discard(message)
    # a rebalance waiting for the agents (Faust's ``wait_empty``) looks again now, not at its
    # next 1 s timeout, as an ack would have it (``Consumer.ack`` notifies the same future)
    notify(getattr(consumer, "_waiting_for_ack", None))
