"""Commit only past finished work, while many traces are scored at once.

faust-streaming commits the first run of consecutive acked offsets of a partition. With
agent ``concurrency > 1`` a fast actor acks a later offset while a slow one still holds an
earlier one, and the commit can pass it (faust-streaming issue 606); and an exception in an
agent acks the event that raised. So the trace agent runs one actor with manual acks, scores
traces in background tasks, and acks each partition strictly in offset order: an offset is
acked only when it and every earlier offset of its partition are done.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from faust.types import TP, EventT


@dataclass
class Pending:
    """One consumed message in flight."""

    event: EventT[bytes]
    offset: int
    done: bool = False
    engine_seconds: float = 0.0  # time spent in the engine before any judge call
    taken_at: float = 0.0  # when a batched agent took it (perf_counter; 0: not batched)
    moment: datetime | None = None  # the event time of what it carries, if any


@dataclass
class InOrderAcker:
    """Acks each partition's offsets strictly in order, as they finish: one by one with
    ``ack``, or, with ``ack_all`` (given a list of events in order per partition, as
    ``ack`` in turn for each), what a set of finished entries lets be acked at once."""

    ack: Callable[[EventT[bytes]], Awaitable[Any]]
    ack_all: Callable[[list[EventT[bytes]]], int] | None = None  # called, never awaited
    _queues: dict[TP, deque[Pending]] = field(default_factory=dict)

    def track(self, event: EventT[bytes], tp: TP, offset: int) -> Pending:
        """Register an event as in flight, in arrival (= offset) order for its partition."""
        entry = Pending(event, offset)
        self._queues.setdefault(tp, deque()).append(entry)
        return entry

    async def finish(self, tp: TP, entry: Pending) -> int:
        """Mark ``entry`` done and ack every done event at the head of its partition."""
        entry.done = True
        queue = self._queues[tp]
        acked = 0
        while queue and queue[0].done:
            await self.ack(queue.popleft().event)
            acked += 1
        return acked

    def finish_all(self, finished: Iterable[tuple[TP, Pending]]) -> int:
        """``finish`` for each of ``finished``, the events it releases acked with one
        ``ack_all`` call (which needs to be given, and is synchronous: it is not awaited)."""
        queues = self._queues
        touched: dict[TP, None] = {}
        for tp, entry in finished:
            entry.done = True
            touched[tp] = None
        events: list[EventT[bytes]] = []
        for tp in touched:
            queue = queues[tp]
            while queue and queue[0].done:
                events.append(queue.popleft().event)
        if events:
            assert self.ack_all is not None
            self.ack_all(events)
        return len(events)

    def in_flight(self) -> int:
        return sum(len(q) for q in self._queues.values())
