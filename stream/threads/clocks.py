"""The clocks that close threads: the wall clock (a tick: threads idle for their gap, and
the wait for reports after a recovery), and each source's event time (a thread whose
slowest source has passed its deadline); closed threads forgotten after their retention."""

from __future__ import annotations

import heapq
import logging
from collections.abc import Iterator

from .index import PartitionIndex
from .spread import SpreadThreads
from .state import ThreadClose, ThreadState
from .table import ThreadTable

log = logging.getLogger(__name__)


class ThreadClocks:
    """Closing the threads of ``threads`` by the wall clock and by their sources' event
    time (a spread thread's held events folded first, by ``spread``)."""

    def __init__(self, threads: ThreadTable, spread: SpreadThreads) -> None:
        self.threads = threads
        self.spread = spread

    def _due(
        self, index: PartitionIndex, heap: list[tuple[float, bytes]], slot: int, bound: float
    ) -> Iterator[tuple[float, bytes, tuple[str, ...]]]:
        """Open threads whose deadline in ``heap`` (``slot`` of their ``open`` entry) is past
        ``bound``, with their sources; stale heap entries (the thread moved on or closed) are
        dropped."""
        while heap and heap[0][0] <= bound:
            deadline, key = heapq.heappop(heap)
            entry = index.open.get(key)
            if entry is not None and entry[slot] == deadline:
                yield deadline, key, entry[2]

    def tick(self, index: PartitionIndex, now: float) -> list[ThreadClose]:
        closes = []
        if index.reports.over(now):
            closes.extend(self._give_up_unheard(index, now))
        closes.extend(self._close_idle(index, index.wall, now, now))
        self._compact(index, now)
        if index.resume:
            resume, index.resume = index.resume, set()
            for key, close_seq in sorted(resume):
                state = ThreadState.from_bytes(self.threads.table[key])
                closes.extend(
                    self.threads.as_close(state, p)
                    for p in state.pending
                    if p.close_seq == close_seq
                )
        return closes

    def _give_up_unheard(self, index: PartitionIndex, now: float) -> list[ThreadClose]:
        """The wait for reports after a recovery is over: the threads that waited for a source
        no report has named since close (as if it were read), and it is said in the log."""
        unheard = sorted(s for s in index.waiting if s not in index.read)
        index.reports.end(unheard)
        closes = []
        for source in unheard:
            closes.extend(self._close_idle(index, index.waiting[source], now, now))
        return closes

    def release(self, index: PartitionIndex, source: str, now: float) -> list[ThreadClose]:
        """Close the threads past their wall-clock deadline that waited for ``source`` to be
        read past it (and for no other source)."""
        heap = index.waiting.get(source)
        return self._close_idle(index, heap, index.read[source], now) if heap else []

    def _close_idle(
        self, index: PartitionIndex, heap: list[tuple[float, bytes]], bound: float, now: float
    ) -> list[ThreadClose]:
        """The threads in ``heap`` whose wall-clock deadline is past ``bound``: each closes,
        or waits for the source of its that is not read past the deadline yet (queued once
        ``heap`` is done with: it may be that source's own heap)."""
        closes = []
        deferred: list[tuple[str, float, bytes]] = []
        for deadline, key, sources in self._due(index, heap, 0, bound):
            if (behind := index.unread(self.threads.resolve(index, sources), deadline)) is not None:
                deferred.append((behind, deadline, key))
                continue
            state = ThreadState.from_bytes(self.threads.table[key])
            held = bool(state.held)
            if held:  # every held event reached Kafka the gap ago: folded, in event-time order
                closes.extend(self.spread.catch_up(state, None, None))
            close = self.threads.close_if_due(state, wall_now=max(now, deadline), at=now)
            if close is not None:
                self.threads.observer.on_thread_close_delay(
                    max(0.0, self.threads.clock() - deadline)
                )
                closes.append(close)
            if held or close is not None:
                self.threads.store(index, key, state)
        for behind, deadline, key in deferred:
            heapq.heappush(index.waiting.setdefault(behind, []), (deadline, key))
        return closes

    def close_by_event_time(self, index: PartitionIndex, source: str) -> list[ThreadClose]:
        """Close the threads whose slowest source is ``source`` and whose event-time deadline
        its progress has passed; a thread still waiting for another of its sources moves to
        that source's heap."""
        closes: list[ThreadClose] = []
        heap = index.due.get(source)
        progress = index.progress.get(source, 0.0)
        if not heap or heap[0][0] > progress:
            return closes  # no deadline of it is past (asked at every event of the source)
        for deadline, key, own in self._due(index, heap, 1, progress):
            sources = self.threads.resolve(index, own)
            watermark = index.watermark(sources)
            assert watermark is not None
            if watermark < deadline:
                heapq.heappush(index.due.setdefault(index.slowest(sources), []), (deadline, key))
                continue
            state = ThreadState.from_bytes(self.threads.table[key])
            if (close := self.threads.close_if_due(state, watermark=watermark)) is not None:
                closes.append(close)
                self.threads.store(index, key, state)
        return closes

    def _compact(self, index: PartitionIndex, now: float) -> None:
        """Closed threads idle for the retention period are forgotten (a tombstone in the
        changelog): nothing of them stays. A later turn starts the thread anew, and its
        closes get score ids of their own (``ThreadState.opened``)."""
        while index.closed and index.closed[0][0] <= now:
            deadline, key = heapq.heappop(index.closed)
            raw = self.threads.table.get(key)
            if raw is None:
                continue
            state = ThreadState.from_bytes(raw)
            expected = state.last_arrival + self.threads.gaps[state.kind] + self.threads.retention_s
            if state.is_open or state.pending or state.held or expected != deadline:
                continue
            del self.threads.table[key]
