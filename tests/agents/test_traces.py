"""The trace agent's batches at the edges of at-least-once (design record 32): a partition
revoked while its records are taken, and a judged trace whose work fails once, ahead of
deterministic ones on its partition. Offsets are acked in order per partition and only once
what each record sent is on the broker."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from agent_tools import Worker, settled
from faust.types import TP, Message, TopicT
from fixtures import RULES_DIR, hub_trace, live_trace, scorer, studio_trace, uuid7
from scripted_judge import MockJudge

from stream.agents import forward, traces
from stream.agents.traces import register_trace_agent
from stream.delivery.publisher import Send
from stream.observer import Observer
from stream.ruleset.loader import load_rules


class Broker:
    """In place of ``Publisher`` (and so of the producer and the broker behind it).

    ``send`` and ``send_batched`` hand messages over and return one delivery future each,
    done at once as aiokafka's are once the broker answers: a key in ``fail_once`` fails
    its messages of that call (a broker hiccup; the message is not on the broker), as a
    produce request that failed. ``send_batched`` first waits for ``metadata``, as the real
    one awaits the producer's ``partitions_for`` (metadata refreshed in a rebalance).
    ``send_until_delivered`` waits for ``resend`` (the broker still away), then has them.
    """

    def __init__(self, decisions: TopicT) -> None:
        self.decisions = decisions
        self.handed: list[Send] = []
        self.on_broker: list[Send] = []
        self.fail_once: set[bytes] = set()
        self.metadata = asyncio.Event()
        self.metadata.set()
        self.resend = asyncio.Event()
        self.resend.set()
        self.batches: list[list[bytes | None]] = []  # the keys of each send_batched

    def __call__(self, app: Any) -> Broker:  # the agents build ``Publisher(app)``
        return self

    async def declare(self, topics: Any) -> None:
        pass

    def stop(self) -> None:
        pass

    async def send(self, sends: list[Send], timestamp: float | None = None) -> list[Any]:
        loop = asyncio.get_running_loop()
        futures = []
        failing = {key for _, key, _, _ in sends if key in self.fail_once}
        for send in sends:
            self.handed.append(send)
            future = loop.create_future()
            if send[1] in failing:
                future.set_exception(ConnectionError("broker hiccup"))
            else:
                self.on_broker.append(send)
                future.set_result(None)
            futures.append(future)
        self.fail_once -= failing
        return futures

    async def send_batched(
        self, sends: list[Send], timestamp: float | None = None, *, at_once: bool = False
    ) -> list[Any]:
        self.batches.append([key for _, key, _, _ in sends])
        await self.metadata.wait()
        return await self.send(sends, timestamp)

    async def send_until_delivered(self, sends: list[Send], timestamp: float | None = None) -> None:
        await self.resend.wait()
        self.handed.extend(sends)
        self.on_broker.extend(sends)

    def decided(self, key: bytes | None) -> bool:
        """Whether the decision record of trace ``key`` (sent last of a trace's messages,
        in the same delivery) is on the broker."""
        return any(t is self.decisions and k == key for t, k, _, _ in self.on_broker)


Acked = list[tuple[int, int, bool]]  # (partition, offset, its trace decided when acked)


@pytest.fixture
def broker(worker: Worker, monkeypatch: pytest.MonkeyPatch) -> Broker:
    double = Broker(worker[1].decisions)
    for module in (forward, traces):
        monkeypatch.setattr(module, "Publisher", double)
    return double


@pytest.fixture
def acked(worker: Worker, broker: Broker, monkeypatch: pytest.MonkeyPatch) -> Iterator[Acked]:
    """The acks, in order, each with whether its trace's messages were on the broker then.

    Records read from Kafka are Faust's ``ConsumerMessage``, whose final ack is the
    consumer's ``ack``, and which streams track as taken (``use_tracking``,
    faust/types/tuples.py): the test context's plain ``Message`` is given both, so Faust's own bookkeeping (acked offsets, the unacked set its
    ``wait_empty`` waits on) runs as in a worker. The trace topic is an acking topic, as the
    conductor makes every agent topic it indexes (faust/transport/conductor.py,
    ``_update_indices``)."""
    app = worker[0]
    app.topics._acking_topics.add(TRACES)
    log: Acked = []

    def on_final_ack(message: Message, consumer: Any) -> bool:
        log.append((message.partition, message.offset, broker.decided(message.key)))
        return bool(consumer.ack(message))

    monkeypatch.setattr(Message, "use_tracking", True)  # as ConsumerMessage: tracked by streams
    monkeypatch.setattr(Message, "on_final_ack", on_final_ack)
    yield log


# the topic the test context's records come from (it names them so for an agent whose topic
# has two names: the traces and the assembled OTLP traces)
TRACES = "<internal>"


def trace_bytes(document: dict[str, Any], trace_id: str) -> bytes:
    return orjson.dumps({**document, "id": trace_id})


async def put(context: Any, partition: int, offset: int, value: bytes, key: bytes) -> Any:
    """A record at ``offset`` of ``partition`` (the test context numbers offsets across
    partitions; a Kafka partition's are its own)."""
    context.sent_offset = offset
    return await context.put(value, key=key, partition=partition, wait=False)


async def test_a_partition_revoked_while_its_records_are_taken_acks_nothing_past_an_undelivered_one(
    worker: Worker, broker: Broker, acked: Acked, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Faust's revoke, run as a worker runs it: ``Consumer.on_partitions_revoked``
    (faust/transport/consumer.py) forgets the partitions' acked and committed offsets, then
    ``App._on_partitions_revoked`` (faust/app/base.py) suspends the flow, clears every agent
    queue (``flow_control.clear``: records fetched but not read by the agent are dropped,
    never acked) and waits for every record the agents took (``Consumer.wait_empty``, since
    ``stream_wait_empty``), committing meanwhile. aiokafka's rebalance is eager: every
    partition of the member is revoked, then the new assignment given. Only the broker
    calls are doubles (the commit request, the producer flush, the assignment).

    Here records of two partitions are taken in batches while the first batch waits for the
    producer's metadata; a record of partition 0 in it fails to reach the broker and is sent
    again during the revoke. At-least-once asks: no record acked before its messages are on
    the broker nor before an earlier one of its partition; the revoke waits for the taken
    records; the one left in the queue is neither scored nor acked (the next owner reads it
    from the committed offset); nothing of a revoked partition is committed; and the agent
    goes on after the rebalance."""
    app, topics, _, _ = worker
    consumer = app.consumer
    p0, p1 = TP(TRACES, 0), TP(TRACES, 1)
    assignment = {p0, p1}
    committed: list[dict[TP, int]] = []
    looked: list[set[TP]] = []  # the partitions with acks a commit looked at
    committable = consumer._filter_committable_offsets

    def look(tps: Any) -> dict[TP, int]:
        looked.append(set(tps))
        offsets: dict[TP, int] = committable(tps)
        return offsets

    async def commit_request(offsets: dict[TP, int]) -> bool:  # aiokafka's commit, to the broker
        for tp, offset in offsets.items():  # never past a record not on the broker
            done = {o for p, o, on_broker in acked if p == tp.partition and on_broker}
            assert set(range(offset)) <= done
        committed.append(dict(offsets))
        return True

    async def flushed() -> None:
        pass

    monkeypatch.setattr(consumer, "assignment", lambda: set(assignment))
    monkeypatch.setattr(consumer, "_filter_committable_offsets", look)
    monkeypatch.setattr(consumer, "_commit", commit_request)
    monkeypatch.setattr(app.producer, "flush", flushed)
    agent = register_trace_agent(app, topics, scorer(), max_in_flight=4, batch_max=64)

    ids = {(p, o): uuid7() for p in (0, 1) for o in range(4)}
    keys = {place: trace_id.encode() for place, trace_id in ids.items()}
    documents = [studio_trace(), hub_trace(), live_trace(), studio_trace(1)]

    async def put_trace(partition: int, offset: int) -> Any:
        value = trace_bytes(documents[offset], ids[partition, offset])
        return await put(context, partition, offset, value, keys[partition, offset])

    broker.metadata.clear()  # the first batch's hand-over waits for metadata
    broker.resend.clear()
    broker.fail_once.add(keys[0, 0])
    async with agent.test_context() as context:
        await put_trace(0, 0)
        await put_trace(1, 0)
        await settled(lambda: len(broker.batches) == 1)  # batch 1 taken, being handed over
        await put_trace(0, 1)
        await put_trace(1, 1)  # taken behind it: 4 in flight, every slot
        await put_trace(0, 2)  # read by the agent, waiting for a slot (tracked by Faust)
        await settled(lambda: len(consumer._unacked_messages) == 5)
        await put_trace(0, 3)  # still in the agent's queue
        queue = context.stream().channel.queue
        assert queue.qsize() == 1

        revoke = asyncio.create_task(consumer.on_partitions_revoked({p0, p1}))
        await settled(lambda: queue.qsize() == 0)  # Faust cleared it: never read
        await asyncio.sleep(0.05)
        assert not revoke.done() and acked == []  # waiting for the taken records

        broker.metadata.set()  # batch 1 goes out; partition 0's record fails and is resent
        await settled(lambda: len(broker.batches) == 3)  # batches 2 and 3 went on
        await asyncio.sleep(0.05)
        assert {key for _, key, _, _ in broker.on_broker} == {
            keys[place] for place in [(1, 0), (0, 1), (1, 1), (0, 2)]
        }
        assert not revoke.done() and acked == []  # nothing past p0@0, nor p1's batch mate

        broker.resend.set()  # the broker is back: batch 1 is resent
        await asyncio.wait_for(revoke, 5)

        assert sorted(acked) == [
            (0, 0, True),
            (0, 1, True),
            (0, 2, True),
            (1, 0, True),
            (1, 1, True),
        ]
        for partition in (0, 1):  # in offset order per partition
            offsets = [offset for p, offset, _ in acked if p == partition]
            assert offsets == sorted(offsets)
        assert not any(key == keys[0, 3] for _, key, _, _ in broker.handed)  # never scored
        # the revoke's last commit looked at the acks made while it waited: the partitions'
        # committed offsets forgotten, none is committed (mend 4, kafka/mends/commits.py)
        assert {p0, p1} <= looked[-1]
        assert all(p0 not in offsets and p1 not in offsets for offsets in committed)

        # the rebalance ends: partition 1 is this worker's again, the flow resumes
        assignment.discard(p0)
        consumer.resume_flow()
        app.flow_control.resume()
        await put_trace(1, 2)
        await settled(lambda: (1, 2, True) in acked)
    assert (0, 3) not in [(p, o) for p, o, _ in acked]


# every judged fretcoach rule but one: the live coach's feedback quality is the one judged
JUDGED_BUT_ONE = [
    "hub_actionability",
    "hub_answer_correctness",
    "hub_context_usage_quality",
    "hub_conversational_coherence",
    "hub_data_groundedness",
    "hub_response_clarity",
    "hub_user_frustration_score",
    "studio_immediate_actionability",
    "studio_live_feedback_effectiveness",
    "studio_practice_recommendation_alignment",
]


async def test_a_judged_trace_that_fails_once_holds_back_the_acks_behind_it_and_loses_nothing(
    worker: Worker, broker: Broker, acked: Acked
) -> None:
    """A judged trace at the head of partition 0, three deterministic ones behind it, one on
    partition 1. The judge is down when asked (a real local server answering 503: the judge
    client retries, design record 07), and once it answers, the send of the judged trace's
    score fails (a broker hiccup: ``OrderedDelivery`` resends it until the broker has it).
    The deterministic traces' messages go out in their batch at once, but none of partition
    0's offsets is acked before the judged trace's messages are on the broker; partition 1
    is not held back; then all are acked in order, and the judged trace's score and
    decision are on the broker, once the resend got them there."""
    app, topics, _, _ = worker
    ruleset = load_rules(RULES_DIR, ["fretcoach"], disabled=JUDGED_BUT_ONE)
    with MockJudge(answer_by_schema=True) as judge:
        agent = register_trace_agent(
            app, topics, scorer(judge.base_url, ruleset), max_in_flight=16, batch_max=64
        )
        ids = {place: uuid7() for place in [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0)]}
        keys = {place: trace_id.encode() for place, trace_id in ids.items()}
        documents = {
            (0, 0): live_trace(),  # judged
            (0, 1): studio_trace(),
            (0, 2): hub_trace(),
            (0, 3): studio_trace(1),
            (1, 0): hub_trace(0),
        }
        judge.go_down(0.5)
        broker.fail_once.add(keys[0, 0])
        broker.resend.clear()
        async with agent.test_context() as context:
            for (partition, offset), document in documents.items():
                value = trace_bytes(document, ids[partition, offset])
                await put(context, partition, offset, value, keys[partition, offset])

            await settled(lambda: 503 in judge.statuses)  # asked while down: retried
            await settled(lambda: (1, 0, True) in acked)  # partition 1 goes on
            assert all(broker.decided(keys[0, n]) for n in (1, 2, 3))  # sent, on the broker
            assert [a for a in acked if a[0] == 0] == []

            await settled(lambda: 200 in judge.statuses)  # answered: its first send fails
            await settled(lambda: any(key == keys[0, 0] for _, key, _, _ in broker.handed))
            await asyncio.sleep(0.05)
            assert not broker.decided(keys[0, 0])
            assert [a for a in acked if a[0] == 0] == []  # nothing passes the judged trace

            broker.resend.set()
            await settled(lambda: len([a for a in acked if a[0] == 0]) == 4)

        assert [a for a in acked if a[0] == 0] == [(0, n, True) for n in range(4)]
        judged = [
            orjson.loads(value)
            for topic, key, value, _ in broker.on_broker
            if topic is topics.scores and key == keys[0, 0]
        ]
        verdicts = [s for s in judged if s["rule_id"] == "studio_live_coach_feedback_quality"]
        assert [s["status"] for s in verdicts] == ["ok"]  # on the broker once: by the resend
        handed = [send for send in broker.handed if send[1] == keys[0, 0]]
        half = len(handed) // 2  # sent, failed, sent again: every message of it
        assert handed[:half] == handed[half:] == [s for s in broker.on_broker if s[1] == keys[0, 0]]
        assert all(broker.decided(key) for key in keys.values())  # every trace's decision
        assert judge.statuses[0] == 503 and judge.statuses[-1] == 200
        assert not any(topic is topics.dlq for topic, _, _, _ in broker.handed)


class Consumed(Observer):
    """Records ``on_trace_consumed``'s calls (the metrics' ``scorer_traces_consumed_total``)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    def on_trace_consumed(self, topic: str, count: int = 1) -> None:
        self.calls.append((topic, count))


async def test_every_trace_of_a_batch_is_counted_consumed_once_for_the_topic_it_came_in_on(
    worker: Worker, broker: Broker, acked: Acked, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch's traces, valid or not (a dead letter counts), counted per topic at once: a
    trace read from an internal topic (assembled from spans) for the topic it came in on."""
    app, topics, _, _ = worker
    monkeypatch.setitem(topics.seen_as, TRACES, "spans-in")  # as the assembled traces' topic
    observer = Consumed()
    ruleset = load_rules(RULES_DIR, ["fretcoach"], disabled=JUDGED_BUT_ONE)
    agent = register_trace_agent(
        app, topics, scorer(None, ruleset), max_in_flight=16, batch_max=64, observer=observer
    )
    async with agent.test_context() as context:
        await put(context, 0, 0, trace_bytes(studio_trace(), uuid7()), b"a")
        await put(context, 0, 1, b"{not json", b"b")
        await put(context, 1, 2, trace_bytes(studio_trace(1), uuid7()), b"c")
        await settled(lambda: len(acked) == 3)
    assert {topic for topic, _ in observer.calls} == {"spans-in"}
    assert sum(count for _, count in observer.calls) == 3
