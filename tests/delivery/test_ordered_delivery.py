"""Ordered delivery: offsets acked in order once the broker has everything they produced,
failed sends retried, at most ``max_in_flight`` messages in flight."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from types import SimpleNamespace
from typing import Any

from stream.delivery.ordered import Delivery, OrderedDelivery
from stream.delivery.publisher import Send
from stream.models import Scale, ScoreEvent
from stream.observer import Observer


class FakePublisher:
    """Hands out one future per message; the test decides when the broker has it."""

    def __init__(self) -> None:
        self.sent: list[Send] = []
        self.futures: dict[bytes, asyncio.Future[Any]] = {}
        self.redelivered: list[list[Send]] = []
        self.batches: list[int] = []  # messages handed in each send_batched

    async def send(self, sends: list[Send]) -> list[Awaitable[Any]]:
        loop = asyncio.get_running_loop()
        self.sent.extend(sends)
        return [self.futures.setdefault(value, loop.create_future()) for _, _, value, _ in sends]

    async def send_batched(self, sends: list[Send]) -> list[Awaitable[Any]]:
        self.batches.append(len(sends))
        return await self.send(sends)

    async def send_until_delivered(self, sends: list[Send]) -> None:
        self.redelivered.append(sends)

    def broker_has(self, value: bytes, error: Exception | None = None) -> None:
        future = self.futures[value]
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(error)


class Counting(Observer):
    def __init__(self) -> None:
        self.published: list[str] = []

    def on_score_published(self, score: ScoreEvent) -> None:
        self.published.append(score.score_id)


def event(partition: int, offset: int) -> Any:
    return SimpleNamespace(message=SimpleNamespace(tp=f"p{partition}", offset=offset))


def score(sid: str) -> ScoreEvent:
    return ScoreEvent(
        score_id=sid,
        rule_id="r",
        pack="p",
        rule_version=1,
        scope="trace",
        target_id="t",
        project_name="default",
        value=1.0,
        raw_value=1.0,
        scale=Scale(min=0, max=1),
        higher_is_better=True,
        status="ok",
    )


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def delivery_under_test(
    max_in_flight: int = 8, observer: Counting | None = None
) -> tuple[OrderedDelivery, FakePublisher, list[Any], Counting]:
    acked: list[Any] = []

    async def ack(e: Any) -> None:
        acked.append((e.message.tp, e.message.offset))

    publisher, observer = FakePublisher(), observer or Counting()
    delivery = OrderedDelivery(publisher, ack, max_in_flight, observer)  # type: ignore[arg-type]
    delivery.start()
    return delivery, publisher, acked, observer


async def test_a_later_offset_is_acked_only_after_the_earlier_one_is_delivered() -> None:
    delivery, publisher, acked, observer = await delivery_under_test()
    tp, first = await delivery.admit(event(0, 10))
    _, second = await delivery.admit(event(0, 11))
    await delivery.deliver(tp, first, [("scores", b"k", b"a", None)], [score("a")])
    await delivery.deliver(tp, second, [("scores", b"k", b"b", None)], [score("b")])

    publisher.broker_has(b"b")
    await settle()
    assert acked == []  # 11 is on the broker, 10 is not: nothing may be committed
    assert observer.published == ["b"]  # counted when the broker has it

    publisher.broker_has(b"a")
    await settle()
    assert acked == [("p0", 10), ("p0", 11)]
    assert delivery.acker.in_flight() == 0
    delivery.stop()


async def test_an_offset_waits_for_every_message_it_produced_including_early_ones() -> None:
    delivery, publisher, acked, _ = await delivery_under_test()
    tp, entry = await delivery.admit(event(1, 5))
    early_sends: list[Send] = [("thread-events", b"k", b"turn", None)]
    early = (early_sends, await publisher.send(early_sends))
    await delivery.deliver(tp, entry, [("scores", b"k", b"s", None)], [], early)
    publisher.broker_has(b"s")
    await settle()
    assert acked == []
    publisher.broker_has(b"turn")
    await settle()
    assert acked == [("p1", 5)]
    delivery.stop()


async def test_a_failed_send_is_retried_in_full_before_its_offset_is_acked() -> None:
    delivery, publisher, acked, observer = await delivery_under_test()
    tp, entry = await delivery.admit(event(0, 1))
    sends: list[Send] = [("scores", b"k", b"x", None), ("decisions", b"k", b"d", None)]
    await delivery.deliver(tp, entry, sends, [score("x")])
    publisher.broker_has(b"x", RuntimeError("broker down"))
    publisher.broker_has(b"d")
    await settle()
    assert publisher.redelivered == [sends]  # every message again, not only the failed one
    assert acked == [("p0", 1)] and observer.published == ["x"]
    delivery.stop()


async def test_the_retries_of_a_failed_send_are_told_when_they_begin_and_deliver() -> None:
    """A source's read position must not pass a message whose sends are being retried while
    later messages go on (``SourceLog.hold``): ``retrying`` is told at the failure, before
    the retry runs, and again once the retry has delivered, before the offset is acked."""
    gate = asyncio.Event()
    told: list[tuple[Any, int, bool]] = []

    class Slow(FakePublisher):
        async def send_until_delivered(self, sends: list[Send]) -> None:
            await gate.wait()
            told.append(("delivered", 0, True))
            await super().send_until_delivered(sends)

    acked: list[Any] = []

    async def ack(e: Any) -> None:
        acked.append((e.message.tp, e.message.offset))

    publisher = Slow()
    delivery = OrderedDelivery(
        publisher,  # type: ignore[arg-type]
        ack,
        8,
        Counting(),
        lambda tp, entry, started: told.append((tp, entry.offset, started)),
    )
    delivery.start()
    tp, entry = await delivery.admit(event(0, 7))
    await delivery.deliver(tp, entry, [("out", b"k", b"x", None)], [])
    publisher.broker_has(b"x", RuntimeError("broker down"))
    await settle()
    assert told == [("p0", 7, True)] and acked == []  # retrying
    gate.set()
    await settle()
    assert told == [("p0", 7, True), ("delivered", 0, True), ("p0", 7, False)]
    assert acked == [("p0", 7)]
    delivery.stop()


async def test_admission_waits_for_a_free_slot() -> None:
    delivery, publisher, acked, _ = await delivery_under_test(max_in_flight=1)
    tp, entry = await delivery.admit(event(0, 0))
    waiting = asyncio.create_task(delivery.admit(event(0, 1)))
    await settle()
    assert not waiting.done()  # one in flight: the next message is not taken in
    await delivery.deliver(tp, entry, [("scores", b"k", b"only", None)], [])
    publisher.broker_has(b"only")
    await settle()
    assert waiting.done() and acked == [("p0", 0)]
    delivery.stop()


async def test_admission_without_a_wait_takes_a_free_slot_or_none() -> None:
    """``admit_now``: ``admit`` when a slot is free (tracked in offset order, as ``admit``
    tracks it), None when none is, taking nothing."""
    delivery, publisher, acked, _ = await delivery_under_test(max_in_flight=1)
    admitted = delivery.admit_now(event(0, 4))
    assert admitted is not None
    tp, entry = admitted
    assert (tp, entry.offset) == ("p0", 4)
    assert delivery.admit_now(event(0, 5)) is None  # the one slot is taken
    waiting = asyncio.create_task(delivery.admit(event(0, 5)))
    await settle()
    assert not waiting.done()
    await delivery.deliver(tp, entry, [("scores", b"k", b"four", None)], [])
    publisher.broker_has(b"four")
    await settle()
    assert waiting.done() and acked == [("p0", 4)]
    assert delivery.admit_now(event(0, 6)) is None  # the freed slot went to the waiter
    delivery.stop()


async def test_a_batch_is_handed_over_at_once_and_acked_in_order_as_it_is_delivered() -> None:
    """``deliver_batch``: the messages of many consumed messages in one hand-over; each
    offset acked once the broker has all of the batch (and its early messages), in order."""
    delivery, publisher, acked, observer = await delivery_under_test()
    entries = [await delivery.admit(event(p, o)) for p, o in ((0, 3), (1, 8), (0, 4))]
    early_sends: list[Send] = [("thread-events", b"k", b"turn", None)]
    early = (early_sends, await publisher.send(early_sends))
    batch: list[Delivery] = [
        (tp, entry, [("scores", b"k", f"s{entry.offset}".encode(), None)], [score(f"s{n}")], None)
        for n, (tp, entry) in enumerate(entries)
    ]
    tp, last = batch[2][0], batch[2][1]
    batch[2] = (tp, last, batch[2][2], batch[2][3], early)
    await delivery.deliver_batch(batch)
    assert publisher.batches == [3]
    publisher.broker_has(b"s3")
    publisher.broker_has(b"s8")
    publisher.broker_has(b"s4")
    await settle()
    assert acked == []  # the batch waits for the turn its last trace sent ahead
    publisher.broker_has(b"turn")
    await settle()
    assert acked == [("p0", 3), ("p1", 8), ("p0", 4)]
    assert observer.published == ["s0", "s1", "s2"]
    delivery.stop()


async def test_a_failure_in_a_batch_sends_each_of_its_messages_again_before_acking() -> None:
    delivery, publisher, acked, observer = await delivery_under_test()
    (tp, first), (_, second) = [await delivery.admit(event(0, o)) for o in (1, 2)]
    batch: list[Delivery] = [
        (tp, first, [("scores", b"a", b"a", None)], [score("a")], None),
        (tp, second, [("scores", b"b", b"b", None), ("decisions", b"b", b"d", None)], [], None),
    ]
    await delivery.deliver_batch(batch)
    publisher.broker_has(b"a")
    publisher.broker_has(b"b", RuntimeError("broker down"))
    publisher.broker_has(b"d")
    await settle()
    assert publisher.redelivered == [batch[0][2], batch[1][2]]  # each entry's, in full
    assert acked == [("p0", 1), ("p0", 2)] and observer.published == ["a"]
    delivery.stop()


async def test_a_batch_the_producer_refuses_is_sent_again_entry_by_entry() -> None:
    class Refusing(FakePublisher):
        async def send_batched(self, sends: list[Send]) -> list[Awaitable[Any]]:
            raise ConnectionError("producer buffer full")

    acked: list[Any] = []

    async def ack(e: Any) -> None:
        acked.append((e.message.tp, e.message.offset))

    publisher = Refusing()
    delivery = OrderedDelivery(publisher, ack, 8, Counting())  # type: ignore[arg-type]
    delivery.start()
    (tp, first), (_, second) = [await delivery.admit(event(0, o)) for o in (5, 6)]
    batch: list[Delivery] = [
        (tp, first, [("scores", b"a", b"a", None)], [], None),
        (tp, second, [("scores", b"b", b"b", None)], [], None),
    ]
    await delivery.deliver_batch(batch)
    await settle()
    assert publisher.redelivered == [batch[0][2], batch[1][2]]
    assert acked == [("p0", 5), ("p0", 6)]
    delivery.stop()


async def test_a_metric_that_raises_holds_no_offset_back() -> None:
    """The broker has a batch: its offsets are acked and its slots freed even when counting
    its scores raises (a metric's bug must not stall the partition)."""

    class Raising(Counting):
        def on_score_published(self, score: ScoreEvent) -> None:
            raise RuntimeError("a metric's bug")

    delivery, publisher, acked, _ = await delivery_under_test(2, Raising())
    entries = [await delivery.admit(event(0, o)) for o in (1, 2)]
    batch: list[Delivery] = [
        (tp, entry, [("scores", b"k", f"s{entry.offset}".encode(), None)], [score("x")], None)
        for tp, entry in entries
    ]
    asyncio.get_running_loop().set_exception_handler(lambda loop, context: None)
    await delivery.deliver_batch(batch)
    publisher.broker_has(b"s1")
    publisher.broker_has(b"s2")
    await settle()
    assert acked == [("p0", 1), ("p0", 2)]
    await asyncio.wait_for(delivery.admit(event(0, 3)), 1)  # both slots free again
    delivery.stop()
