"""The lag meter's arithmetic: end offset (or the worker's own fetch high watermark, when the
embedded broker under-reports) minus the committed offset, summed per input topic."""

from __future__ import annotations

from typing import Any

from aiokafka import TopicPartition

from stream.kafka.mends.lag import LagMeter
from stream.observer import Observer

TRACES, SESSIONS = "llm-traces", "coaching-sessions"


class FakeFaustConsumer:
    def __init__(self, committed: dict[TopicPartition, int | None], highwater: dict) -> None:
        self._committed_offset = committed
        self._highwater = highwater

    def assignment(self) -> set[TopicPartition]:
        return set(self._committed_offset) | {TopicPartition("scores", 0)}

    def highwater(self, tp: TopicPartition) -> int | None:
        return self._highwater.get(tp)


class FakeOffsets:
    def __init__(self, ends: dict[TopicPartition, int], beginnings: dict) -> None:
        self.ends, self.beginnings = ends, beginnings

    async def end_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self.ends[tp] for tp in tps}

    async def beginning_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self.beginnings[tp] for tp in tps}


def meter(consumer: FakeFaustConsumer, offsets: FakeOffsets) -> LagMeter:
    app: Any = type("App", (), {"consumer": consumer})()
    lag = LagMeter(app, [TRACES, SESSIONS], "127.0.0.1:1", 15.0, observer=Observer())
    lag._offsets = offsets  # type: ignore[assignment]
    return lag


async def test_lag_is_end_minus_committed_summed_over_the_worker_partitions() -> None:
    t0, t1, s0 = TopicPartition(TRACES, 0), TopicPartition(TRACES, 1), TopicPartition(SESSIONS, 0)
    consumer = FakeFaustConsumer({t0: 90, t1: 10, s0: None}, {t1: 25})
    offsets = FakeOffsets({t0: 100, t1: 20, s0: 7, TopicPartition("scores", 0): 999}, {s0: 2})
    assert await meter(consumer, offsets).measure() == {
        # t0: 100 - 90; t1: the fetch saw 25 although ListOffsets said 20, so 25 - 10;
        # s0: never committed, a restart reads from the earliest offset: 7 - 2
        TRACES: 10 + 15,
        SESSIONS: 5,
    }


async def test_a_worker_without_partitions_reports_zero_lag() -> None:
    assert await meter(FakeFaustConsumer({}, {}), FakeOffsets({}, {})).measure() == {
        TRACES: 0,
        SESSIONS: 0,
    }
