"""The thread agent's logic, apart from Faust: fold events into a table, decide closes.

``ThreadProcessor`` works on any ``MutableMapping[bytes, bytes]`` (the Faust table in the
worker, a dict in unit tests) holding one ``ThreadState`` per thread, and keeps a small index
per partition so that neither a tick nor an event scans every thread:

- ``open``: each open thread's two deadlines, wall clock (last arrival + gap) and event
  time (activity + gap), with a min-heap of each (stale heap entries are skipped lazily);
- the partition's event-time watermark. Turns reach a thread-events partition from every
  source partition (traces are keyed by trace id, and each source is forwarded by whichever
  worker owns it), so a replay's turns interleave out of time order across sources. As in
  Flink, the watermark is the minimum over the sources seen of each one's latest event
  time (never ahead of arrival), so no thread closes by event time while a source that may
  still hold its next turn is behind. A source that stops holds it back: live, the wall
  clock closes idle threads anyway;
- the threads with a pending close (scores not known to be published).

The index is rebuilt from the table after every recovery (restart or rebalance), so the
table stays the only state: a worker that takes over a partition closes its threads exactly
where the previous owner would have, and scores the closes it left pending.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Iterable, Iterator, MutableMapping
from dataclasses import dataclass, field

from ..observer import Observer
from .events import ThreadEvent
from .state import (
    CloseReason,
    PendingClose,
    ThreadClose,
    ThreadLimits,
    ThreadState,
    close_reason,
    close_thread,
    fold_turn,
    mark_end,
    mark_published,
    new_thread,
)


@dataclass
class PartitionIndex:
    """What the processor knows of one partition without reading its threads."""

    floor: float = 0.0  # the watermark recovered from the table after a restart
    sources: dict[str, float] = field(default_factory=dict)
    open: dict[bytes, tuple[float, float]] = field(default_factory=dict)
    wall: list[tuple[float, bytes]] = field(default_factory=list)
    event_time: list[tuple[float, bytes]] = field(default_factory=list)
    closed: list[tuple[float, bytes]] = field(default_factory=list)
    pending: set[bytes] = field(default_factory=set)
    resume: bool = False  # score the pending closes at the next tick (after a recovery)

    @property
    def watermark(self) -> float:
        return max(self.floor, min(self.sources.values(), default=self.floor))

    def advance(self, source: str, event_time: float) -> None:
        if event_time > self.sources.get(source, 0.0):
            self.sources[source] = event_time


class ThreadProcessor:
    """Folds thread events into the table and says which threads close, and when."""

    def __init__(
        self,
        table: MutableMapping[bytes, bytes],
        *,
        gaps: dict[str, float],
        limits: ThreadLimits,
        retention_s: float,
        sessions_topic: str | None = None,
        clock: Callable[[], float] = time.time,
        observer: Observer | None = None,
    ) -> None:
        self.table = table
        self.gaps = gaps
        self.limits = limits
        self.retention_s = retention_s
        self.sessions_topic = sessions_topic
        self.clock = clock
        self.observer = observer or Observer()
        self.partitions: dict[int, PartitionIndex] = {}

    # -- index -------------------------------------------------------------------------

    def rebuild(self, partitions: Iterable[int]) -> int:
        """Index the threads of ``partitions`` from the table; forget every other partition.

        Returns the number of threads indexed. Pending closes are scored at the partition's
        next tick: a tick is queued behind every event already in the partition, so the
        ``published`` events of closes the previous owner finished are seen first.
        """
        self.partitions = {p: PartitionIndex(resume=True) for p in partitions}
        indexed = 0
        for key, raw in self.table.items():
            state = ThreadState.from_bytes(raw)
            index = self.partitions.get(state.partition)
            if index is None:
                continue
            indexed += 1
            index.floor = max(index.floor, state.activity)
            self._index(index, key, state)
        return indexed

    def _index(self, index: PartitionIndex, key: bytes, state: ThreadState) -> None:
        gap = self.gaps[state.kind]
        if state.is_open:
            deadlines = (state.last_arrival + gap, state.activity + gap)
            if index.open.get(key) != deadlines:
                index.open[key] = deadlines
                heapq.heappush(index.wall, (deadlines[0], key))
                heapq.heappush(index.event_time, (deadlines[1], key))
        else:
            index.open.pop(key, None)
            if state.turns and not state.pending:
                heapq.heappush(index.closed, (state.last_arrival + gap + self.retention_s, key))
        if state.pending:
            index.pending.add(key)
        else:
            index.pending.discard(key)

    def open_threads(self) -> int:
        return sum(len(i.open) for i in self.partitions.values())

    def pending_closes(self) -> int:
        return sum(len(i.pending) for i in self.partitions.values())

    # -- events ------------------------------------------------------------------------

    def apply(self, partition: int, event: ThreadEvent) -> list[ThreadClose]:
        """Apply one event of ``partition``; returns the closes to score now."""
        index = self.partitions.get(partition)
        if index is None:  # before the first recovery completed (tests drive this directly)
            index = self.partitions[partition] = PartitionIndex()
        self.observer.on_thread_event(event.type)
        if event.type == "tick":
            return self._tick(index, event.arrival)
        key = event.key
        raw = self.table.get(key)
        if event.type == "published":
            if raw is not None:
                state = ThreadState.from_bytes(raw)
                if mark_published(state, event.close_seq):
                    self._store(index, key, state)
            return []
        if raw is None:
            state = new_thread(event.thread_id, event.kind, event.project_name)
            state.partition = partition
        else:
            state = ThreadState.from_bytes(raw)
        moment = event.turn.event_time if event.turn else event.event_time
        # the thread's activity mark: its own event time, or the watermark if that is later
        # (a producer whose clock lags cannot make its own thread look idle)
        mark = index.watermark
        if moment is not None:
            clamped = min(moment.timestamp(), event.arrival)
            index.advance(event.source, clamped)
            mark = max(index.watermark, clamped)
        changed = False
        if event.turn is not None:
            changed = fold_turn(
                state,
                event.turn,
                arrival=event.arrival,
                watermark=mark,
                limits=self.limits,
            )
            if missing := [r for r in event.rules if r not in state.rules]:
                state.rules.extend(missing)
                changed = True
        if event.type == "end" or event.end:
            end_key = event.end_key or (event.turn.key if event.turn else "end")
            assert moment is not None
            changed = (
                mark_end(
                    state,
                    end_key,
                    event_time=moment,
                    arrival=event.arrival,
                    watermark=mark,
                )
                or changed
            )
        closes = []
        if changed and state.is_open and state.ended:
            closes.append(self._close(state, "end", closed_at=event.arrival))
        if changed:
            self._store(index, key, state)
        closes.extend(self._close_by_event_time(index))
        return closes

    def _due(
        self, index: PartitionIndex, heap: list[tuple[float, bytes]], slot: int, bound: float
    ) -> Iterator[tuple[float, bytes, ThreadState]]:
        """Open threads whose deadline in ``heap`` (``slot`` of their ``open`` entry) is past
        ``bound``; stale heap entries (the thread moved on or closed) are dropped."""
        while heap and heap[0][0] <= bound:
            deadline, key = heapq.heappop(heap)
            deadlines = index.open.get(key)
            if deadlines is not None and deadlines[slot] == deadline:
                yield deadline, key, ThreadState.from_bytes(self.table[key])

    def _tick(self, index: PartitionIndex, now: float) -> list[ThreadClose]:
        closes = []
        for deadline, key, state in self._due(index, index.wall, 0, now):
            reason = close_reason(
                state, wall_now=now, watermark=index.watermark, gap_s=self.gaps[state.kind]
            )
            if reason is not None:
                self.observer.on_thread_close_delay(max(0.0, self.clock() - deadline))
                closes.append(self._close(state, reason, closed_at=now))
                self._store(index, key, state)
        self._compact(index, now)
        if index.resume:
            index.resume = False
            for key in sorted(index.pending):
                state = ThreadState.from_bytes(self.table[key])
                closes.extend(self._as_close(state, p) for p in state.pending)
        return closes

    def _close_by_event_time(self, index: PartitionIndex) -> list[ThreadClose]:
        closes = []
        watermark = index.watermark
        for _, key, state in self._due(index, index.event_time, 1, watermark):
            reason = close_reason(
                state, wall_now=None, watermark=watermark, gap_s=self.gaps[state.kind]
            )
            if reason is not None:
                closes.append(self._close(state, reason, closed_at=watermark))
                self._store(index, key, state)
        return closes

    def _compact(self, index: PartitionIndex, now: float) -> None:
        """Closed threads idle for the retention period keep their counters, not their turns:
        a later turn still reopens them under the next close sequence, with only new turns."""
        while index.closed and index.closed[0][0] <= now:
            deadline, key = heapq.heappop(index.closed)
            raw = self.table.get(key)
            if raw is None:
                continue
            state = ThreadState.from_bytes(raw)
            expected = state.last_arrival + self.gaps[state.kind] + self.retention_s
            if state.is_open or state.pending or not state.turns or expected != deadline:
                continue
            state.dropped_turns += len(state.turns)
            state.turns, state.size = [], 0
            self._store(index, key, state)

    # -- helpers -----------------------------------------------------------------------

    def _store(self, index: PartitionIndex, key: bytes, state: ThreadState) -> None:
        self.table[key] = state.to_bytes()
        self._index(index, key, state)

    def _close(self, state: ThreadState, reason: CloseReason, *, closed_at: float) -> ThreadClose:
        pending = close_thread(state, reason, closed_at=closed_at)
        self.observer.on_thread_close(state.kind, reason, len(state.turns))
        return self._as_close(state, pending)

    def _as_close(self, state: ThreadState, pending: PendingClose) -> ThreadClose:
        return ThreadClose(
            thread_id=state.thread_id,
            kind=state.kind,
            project_name=state.project_name,
            pending=pending,
            topic=self.sessions_topic if state.kind == "session" else None,
        )
