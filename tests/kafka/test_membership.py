"""Mend 9's pieces alone: the membership lease, what renews and voids it, and what an agent
does with a record that comes while it has lapsed (the real coordinator and a woken worker
are in ``tests/integration/test_membership.py``)."""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from typing import Any

import faust
import pytest
from faust.types.tuples import ConsumerMessage

import stream.kafka.mends.consumer  # noqa: F401  (kafka:// is the mended transport)
from stream.kafka.mends.membership import (
    HEARTBEAT,
    JOIN_GROUP,
    SYNC_GROUP,
    MembershipLease,
    clock,
    lease_membership,
    lease_of,
    still_ours,
)
from stream.observer import Observer

OFFSET_COMMIT = 8


def test_a_lease_lasts_its_share_of_the_session_from_the_request_that_proved_it() -> None:
    lease = MembershipLease(session_s=10.0, share=0.9)
    assert not lease.holds(100.0) and lease.lapsed_for(100.0) == math.inf
    lease.renew(100.0)
    assert lease.holds(108.9) and not lease.holds(109.0)
    assert lease.lapsed_for(112.0) == pytest.approx(3.0)
    lease.renew(95.0)  # an older answer arriving late does not shorten it
    assert lease.holds(108.9)
    lease.void()
    assert not lease.holds(100.5)


@dataclass
class Answer:
    error_code: int


@dataclass
class Request:
    API_KEY: int


class Coordinator:
    """aiokafka's GroupCoordinator as mend 9 uses it (aiokafka/consumer/group_coordinator.py):
    ``_send_req`` sends a request to the coordinator and returns its answer;
    ``reset_generation`` forgets the member id and generation when the coordinator did not
    recognise them."""

    def __init__(self, answer: int) -> None:
        self.answer = answer
        self.resets = 0

    async def _send_req(self, request: Any) -> Answer:
        await asyncio.sleep(0.01)
        return Answer(self.answer)

    def reset_generation(self) -> None:
        self.resets += 1


@pytest.mark.parametrize(
    ("api_key", "error_code", "renews"),
    [
        (HEARTBEAT, 0, True),
        # REBALANCE_IN_PROGRESS: a member that has not rejoined by the rebalance timeout is
        # removed whatever its heartbeats (and aiokafka rejoins at once)
        (HEARTBEAT, 27, False),
        (HEARTBEAT, 25, False),  # UNKNOWN_MEMBER_ID
        (HEARTBEAT, 22, False),  # ILLEGAL_GENERATION
        (JOIN_GROUP, 0, True),
        (SYNC_GROUP, 0, True),
        (OFFSET_COMMIT, 0, False),
    ],
)
async def test_answers_that_count_the_member_in_renew_the_lease_from_the_send(
    api_key: int, error_code: int, renews: bool
) -> None:
    coordinator = Coordinator(error_code)
    lease = MembershipLease(session_s=6.0)
    lease_membership(coordinator, lease)
    before = clock()
    await coordinator._send_req(Request(api_key))
    assert lease.holds() is renews
    if renews:  # from the moment the request was sent, not from the answer
        assert lease._since <= before + 0.01


async def test_a_reset_generation_voids_the_lease_and_still_resets() -> None:
    coordinator = Coordinator(0)
    lease = MembershipLease(session_s=6.0)
    lease_membership(coordinator, lease)
    await coordinator._send_req(Request(HEARTBEAT))
    assert lease.holds()
    coordinator.reset_generation()
    assert not lease.holds() and coordinator.resets == 1


class Outcomes(Observer):
    def __init__(self) -> None:
        self.seen: list[str] = []

    def on_membership_unconfirmed(self, outcome: str) -> None:
        self.seen.append(outcome)


def worker(lease: MembershipLease) -> faust.App:
    """A Faust app on the mended transport, not started: the consumer thread's lease set as
    ``on_start`` sets it, its flow running as after a recovery, generation 3."""
    app = faust.App("membership-test", broker="kafka://localhost:1")
    app.consumer._thread.lease = lease
    # "events" acked as for a subscribed topic (the conductor adds it when it subscribes)
    app.topics._acking_topics.add("events")
    app.consumer_generation_id = 3
    app.flow_control.resume()
    return app


def record(app: faust.App, generation: int = 3) -> ConsumerMessage:
    """A record as the consumer hands it to a stream: tracked, its final ack recorded by the
    consumer (``ConsumerMessage.on_final_ack``)."""
    message = ConsumerMessage(
        "events", 0, 41, 0.0, 0, [], b"k", b"v", None, generation_id=generation
    )
    app.consumer.unacked.add(message)
    return message


def recorded_acks(app: faust.App) -> list[int]:
    return [offset for offsets in app.consumer._acked.values() for offset in offsets]


async def test_a_record_is_acted_on_at_once_while_the_lease_holds() -> None:
    lease = MembershipLease(session_s=6.0)
    lease.renew(clock())
    app = worker(lease)
    assert lease_of(app) is lease
    outcomes = Outcomes()
    message = record(app)
    assert await still_ours(app, message, outcomes)
    assert outcomes.seen == []  # nothing to say
    assert message.ack(app.consumer) and recorded_acks(app) == [41]  # acked as usual


async def test_a_record_waits_for_the_coordinator_when_the_lease_lapsed() -> None:
    lease = MembershipLease(session_s=6.0)
    app = worker(lease)
    outcomes = Outcomes()
    waiting = asyncio.ensure_future(still_ours(app, record(app), outcomes, poll_s=0.01))
    await asyncio.sleep(0.1)
    assert not waiting.done(), "acted on a record with the membership unconfirmed"
    lease.renew(clock())  # a heartbeat answered
    assert await asyncio.wait_for(waiting, 1)
    assert outcomes.seen == ["confirmed"]


@pytest.mark.parametrize("rebalance", ["revoked", "reassigned"])
async def test_a_record_of_a_lost_assignment_is_left_unacked(rebalance: str) -> None:
    lease = MembershipLease(session_s=6.0)
    app = worker(lease)
    message = record(app)
    outcomes = Outcomes()
    waiting = asyncio.ensure_future(still_ours(app, message, outcomes, poll_s=0.01))
    # a rebalance waiting for the agents' acks (Faust's Consumer.wait_empty arms this future)
    app.consumer._waiting_for_ack = asyncio.get_running_loop().create_future()
    await asyncio.sleep(0.05)
    if rebalance == "revoked":  # the coordinator dropped the member: Faust suspends the flow
        app.flow_control.suspend()
    else:  # ... and the rejoin renewed the lease for a new generation
        app.consumer_generation_id = 4
        lease.renew(clock())
    assert not await asyncio.wait_for(waiting, 1)
    assert outcomes.seen == ["left"]
    # nothing waits for it (a rebalance waits for unacked records), and no commit passes it
    assert message not in app.consumer.unacked
    assert app.consumer._waiting_for_ack.done(), "a waiting rebalance was not told"
    assert not message.ack(app.consumer)
    assert recorded_acks(app) == []
