"""In-order acking of many finished entries at once (``InOrderAcker.finish_all``): the same
acks, in the same order per partition, as ``finish`` for each, in one ``ack_all`` call."""

from __future__ import annotations

from typing import Any

from stream.delivery.acking import InOrderAcker


async def never(event: Any) -> None:
    raise AssertionError("acked one by one")


def test_a_batch_acks_what_finish_would_and_holds_back_the_rest() -> None:
    calls: list[list[str]] = []
    acker = InOrderAcker(never, calls.append)  # type: ignore[arg-type]
    p0 = [acker.track(f"p0@{o}", "p0", o) for o in range(10, 14)]  # type: ignore[arg-type]
    p1 = [acker.track(f"p1@{o}", "p1", o) for o in range(5, 7)]  # type: ignore[arg-type]

    # 10 is still in flight: nothing of p0 may be acked; p1 is independent
    assert acker.finish_all([("p0", p0[1]), ("p1", p1[1]), ("p1", p1[0]), ("p0", p0[3])]) == 2
    assert calls == [["p1@5", "p1@6"]]
    assert acker.finish_all([("p0", p0[0])]) == 2  # 10 and 11; 12 is still in flight
    assert acker.finish_all([("p0", p0[2])]) == 2  # 12 and 13
    assert calls == [["p1@5", "p1@6"], ["p0@10", "p0@11"], ["p0@12", "p0@13"]]
    assert acker.finish_all([]) == 0
    assert len(calls) == 3  # nothing released: no call
    assert acker.in_flight() == 0
