"""In-order acking: an offset is acked only when it and all earlier ones are done."""

from __future__ import annotations

from stream.delivery.acking import InOrderAcker


async def test_a_finished_later_offset_waits_for_the_unfinished_head() -> None:
    acked: list[str] = []

    async def ack(event: str) -> None:
        acked.append(event)

    acker = InOrderAcker(ack)
    slow = acker.track("p0@10", "p0", 10)
    fast = acker.track("p0@11", "p0", 11)
    other = acker.track("p1@5", "p1", 5)

    assert await acker.finish("p0", fast) == 0
    assert acked == []  # 11 is done, but 10 is still in flight: nothing may be committed
    assert await acker.finish("p1", other) == 1  # other partitions are independent
    assert await acker.finish("p0", slow) == 2
    assert acked == ["p1@5", "p0@10", "p0@11"]
    assert acker.in_flight() == 0
