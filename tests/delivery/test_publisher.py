"""Publishing: what a scored target sends, and retrying a failing producer until delivered."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, cast

import orjson
import pytest

from stream.delivery.outbox import Outbox
from stream.delivery.publisher import Publisher, Send
from stream.engine.records import scored
from stream.models import Decision, Scale, ScoreEvent, TraceDecisions


@dataclass
class Topic:
    name: str

    def get_topic_name(self) -> str:
        return self.name


@dataclass
class Producer:
    """Fails the first ``failures`` attempts (by raising, then by a failed delivery future)."""

    failures: int = 0
    calls: list[tuple[Any, ...]] = field(default_factory=list)

    async def send(self, *args: Any) -> asyncio.Future[None]:
        self.calls.append(args)
        attempt = len(self.calls)
        if attempt <= self.failures and attempt % 2:
            raise ConnectionError("broker down")
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if attempt <= self.failures:
            future.set_exception(TimeoutError("not acknowledged"))
        else:
            future.set_result(None)
        return future


@dataclass
class App:
    producer: Producer


def publisher(producer: Producer) -> Publisher:
    return Publisher(cast(Any, App(producer)))


def message(topic: str, key: bytes | None = b"k", headers: dict[str, bytes] | None = None) -> Send:
    return (cast(Any, Topic(topic)), key, b"v", headers)


def score(rule: str) -> ScoreEvent:
    return ScoreEvent(
        score_id=f"id-{rule}",
        rule_id=rule,
        pack="p",
        rule_version=1,
        scope="trace",
        target_id="t-1",
        project_name="proj",
        value=1.0,
        raw_value=1.0,
        scale=Scale(min=0, max=1),
        higher_is_better=True,
        status="ok",
    )


def test_scored_sends_scores_then_the_decision_record_all_keyed_by_target() -> None:
    scores_topic, decisions_topic = cast(Any, Topic("scores")), cast(Any, Topic("decisions"))
    decision = Decision("t-1", "a", "p", 1, "proj", "scored")
    record = TraceDecisions("t-1", "proj", [decision])
    sends = Outbox(scores_topic, decisions_topic).sends(
        scored("t-1", [score("a"), score("b")], record)
    )
    assert [(s[0], s[1], s[3]) for s in sends] == [
        (scores_topic, b"t-1", None),
        (scores_topic, b"t-1", None),
        (decisions_topic, b"t-1", None),
    ]
    assert [orjson.loads(s[2])["rule_id"] for s in sends[:2]] == ["a", "b"]
    assert orjson.loads(sends[2][2])["decisions"][0]["rule_id"] == "a"


async def test_send_hands_each_message_to_the_producer_by_topic_name() -> None:
    producer = Producer()
    futures = await publisher(producer).send(
        [message("s", headers={"h": b"1"}), message("d", None)]
    )
    assert len(futures) == 2
    assert producer.calls == [
        ("s", b"k", b"v", None, None, {"h": b"1"}),
        ("d", None, b"v", None, None, None),
    ]


async def test_send_until_delivered_retries_with_growing_capped_backoff(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    slept: list[float] = []

    async def sleep(delay: float) -> None:
        slept.append(delay)

    monkeypatch.setattr("stream.delivery.publisher.asyncio.sleep", sleep)
    producer = Producer(failures=8)
    await publisher(producer).send_until_delivered([message("s")])
    assert len(producer.calls) == 9
    assert slept == [0.5, 1, 2, 4, 8, 16, 30, 30]


async def test_cancellation_is_not_retried() -> None:
    class Cancelled(Producer):
        async def send(self, *args: Any) -> asyncio.Future[None]:
            self.calls.append(args)
            raise asyncio.CancelledError

    producer = Cancelled()
    with pytest.raises(asyncio.CancelledError):
        await publisher(producer).send_until_delivered([message("s")])
    assert len(producer.calls) == 1


class SlowAiokafka:
    """aiokafka's producer as ``send_batched`` uses it, taking a partition's batch only once
    the one before it is drained (``add_batch``): here when the test opens ``gate``."""

    def __init__(self, per_batch: int) -> None:
        self.per_batch = per_batch
        self.gate = asyncio.Event()
        self.handed: list[tuple[str, int, list[bytes]]] = []
        self.client = SimpleNamespace(
            cluster=SimpleNamespace(available_partitions_for_topic=lambda topic: {0, 1})
        )

    async def partitions_for(self, topic: str) -> set[int]:
        return {0, 1}

    def create_batch(self) -> Any:
        values: list[bytes] = []

        def append(**record: Any) -> Any:
            if len(values) >= self.per_batch:
                return None
            values.append(record["value"])
            return object()

        return SimpleNamespace(append=append, values=values)

    async def send_batch(self, builder: Any, topic: str, *, partition: int) -> Any:
        await self.gate.wait()  # a produce round trip before the partition takes another
        self.handed.append((topic, partition, builder.values))
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done


async def test_batches_are_handed_over_in_order_without_the_caller_waiting() -> None:
    aiokafka = SlowAiokafka(per_batch=2)
    faust_producer = SimpleNamespace(_ensure_producer=lambda: aiokafka)
    batched = Publisher(cast(Any, SimpleNamespace(producer=faust_producer)))
    sends = [message("s") for _ in range(5)]
    sends = [(topic, b"same-key", f"v{n}".encode(), None) for n, (topic, *_) in enumerate(sends)]
    futures = await batched.send_batched(sends)  # returns with the producer still busy
    assert not any(future.done() for future in futures)  # type: ignore[attr-defined]
    aiokafka.gate.set()
    await asyncio.gather(*futures)
    assert [values for _, _, values in aiokafka.handed] == [[b"v0", b"v1"], [b"v2", b"v3"], [b"v4"]]
    assert len({id(future) for future in futures}) == 3  # a future per batch
    batched.stop()


async def test_turns_are_in_the_producer_before_send_batched_returns_at_once() -> None:
    """A trace's turns must be in the producer before its source is read past them (the
    progress report goes by the producer directly): ``at_once`` waits for the hand-over."""
    aiokafka = SlowAiokafka(per_batch=10)
    faust_producer = SimpleNamespace(_ensure_producer=lambda: aiokafka)
    batched = Publisher(cast(Any, SimpleNamespace(producer=faust_producer)))
    turn = [(cast(Any, Topic("thread-events")), b"conversation", b"turn", None)]
    handing = asyncio.create_task(batched.send_batched(turn, at_once=True))
    await asyncio.sleep(0.01)
    assert not handing.done()  # the producer has not taken it yet: the caller waits
    aiokafka.gate.set()
    await asyncio.gather(*await handing)
    assert [(topic, values) for topic, _, values in aiokafka.handed] == [
        ("thread-events", [b"turn"])
    ]
