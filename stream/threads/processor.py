"""The thread agent's logic, apart from Faust: fold events into a table, decide closes.

``ThreadProcessor`` works on any ``MutableMapping[bytes, bytes]`` (the Faust table in the
worker, a dict in unit tests) holding one ``ThreadState`` per thread, and keeps a small index
per partition so that neither a tick nor an event scans every thread:

- ``open``: each open thread's two deadlines, wall clock (last arrival + gap) and event
  time (activity + gap), with its sources, and min-heaps of them (stale heap entries are
  skipped lazily);
- how far each source (topic:partition) has been read (``sources.py``): in event time
  (``progress``) and in Kafka time (``read``), as the events of the source and the
  ``progress`` events of the worker reading it say. Turns reach a partition from every
  source, and a replay's sources run at different speeds, so there is no single clock:

  - a thread's event time is the least progress of the sources its own events came from
    (as in Flink, over the inputs that may still hold its next event; not over every
    source, so a slow or sparse source holds back only its own threads). `scorer replay`
    keys by thread id, so a thread has one source, read in order;
  - a thread past its wall-clock deadline waits while one of its sources is read only up
    to a point before it (a backlog after a restart, a trace agent held up by the judge):
    its next turn may be in there;
  - an event whose own time (Kafka time, or its source's event time) is the gap or more
    after its thread's last activity closes the thread first, as live, and then reopens it;
  - a comparison pair's sources are every source of traces, not only its first trace's:
    its partner may come through any partition (traces are keyed by trace id);
- the threads with a pending close (scores not known to be published).

So closes depend on the times in the data, not on when the worker got to read it.

The index is rebuilt from the table after every recovery (restart or rebalance), so the
table stays the only state: a worker that takes over a partition closes its threads exactly
where the previous owner would have, and scores the closes it left pending.
"""

from __future__ import annotations

import heapq
import sys
import time
from collections.abc import Callable, Iterable, Iterator, MutableMapping
from dataclasses import dataclass, field

from ..observer import Observer
from .events import ThreadEvent
from .pairs import admit_member, ignore_member, pair_complete, pair_document
from .state import (
    CloseReason,
    IndexEntry,
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

EVERY_TRACE_SOURCE = "*"  # in a pair's sources: every source of traces (see _sources_of)
# a pair holds one trace of each variant, each within the turn cap: nothing is dropped
PAIR_LIMITS = ThreadLimits(max_turns=2, max_bytes=sys.maxsize)


@dataclass
class PartitionIndex:
    """What the processor knows of one partition without reading its threads."""

    progress: dict[str, float] = field(default_factory=dict)  # source -> event time
    read: dict[str, float] = field(default_factory=dict)  # source -> Kafka time read up to
    # thread key -> (wall-clock deadline, event-time deadline, its sources)
    open: dict[bytes, tuple[float, float, tuple[str, ...]]] = field(default_factory=dict)
    wall: list[tuple[float, bytes]] = field(default_factory=list)
    # per source: event-time deadlines of the open threads it is the slowest source of
    due: dict[str, list[tuple[float, bytes]]] = field(default_factory=dict)
    # per source: wall-clock deadlines past, of threads waiting for the source to be read
    # past them (their next turn may be in its backlog)
    waiting: dict[str, list[tuple[float, bytes]]] = field(default_factory=dict)
    closed: list[tuple[float, bytes]] = field(default_factory=list)
    pending: set[bytes] = field(default_factory=set)
    # the closes found pending at a recovery (thread key, close seq): scored again at the
    # partition's next tick unless published by then; closes made since are not among them
    resume: set[tuple[bytes, int]] = field(default_factory=set)

    def advance(self, source: str, event_time: float) -> None:
        if event_time > self.progress.get(source, 0.0):
            self.progress[source] = event_time

    def watermark(self, sources: Iterable[str]) -> float | None:
        """Event time of a thread fed by ``sources``: the least progress among them."""
        return min((self.progress.get(s, 0.0) for s in sources), default=None)

    def slowest(self, sources: Iterable[str]) -> str:
        return min(sources, key=lambda s: self.progress.get(s, 0.0))

    def unread(self, sources: Iterable[str], deadline: float) -> str | None:
        """The source of ``sources`` read least far, if it is not read up to ``deadline``
        (a source no worker has reported on counts as read)."""
        behind = [(self.read[s], s) for s in sources if self.read.get(s, deadline) < deadline]
        return min(behind)[1] if behind else None


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
        self.partitions = {p: PartitionIndex() for p in partitions}
        entries = []
        for key, raw in self.table.items():
            state = IndexEntry.from_bytes(raw)
            index = self.partitions.get(state.partition)
            if index is None:
                continue
            entries.append((index, key, state))
            for source, moment in state.sources.items():
                index.advance(source, moment)  # at least as far as the table shows
        for index, key, state in entries:
            self._index(index, key, state)
            index.resume.update((key, close_seq) for close_seq in state.pending)
        return len(entries)

    def _index(self, index: PartitionIndex, key: bytes, state: IndexEntry) -> None:
        gap = self.gaps[state.kind]
        if state.is_open:
            sources = self._sources_of(state.kind, state.sources)
            entry = (state.last_arrival + gap, state.activity + gap, sources)
            if index.open.get(key) != entry:
                index.open[key] = entry
                heapq.heappush(index.wall, (entry[0], key))
                if state.sources:  # a thread from before sources were recorded: wall clock only
                    slowest = index.slowest(self._resolve(index, sources))
                    heapq.heappush(index.due.setdefault(slowest, []), (entry[1], key))
        else:
            index.open.pop(key, None)
            if not state.pending:
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
        if event.type == "progress":
            closes = []
            for source, (event_time, read) in event.positions.items():
                index.advance(source, min(event_time, event.arrival))
                index.read[source] = read
                closes.extend(self._close_by_event_time(index, source))
                closes.extend(self._release(index, source, event.arrival))
            return closes
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
            state.opened = round(event.arrival * 1000)
        else:
            state = ThreadState.from_bytes(raw)
        moment = event.turn.event_time if event.turn else event.event_time
        assert moment is not None
        # the event's own time is evidence of how far its source has got (never ahead of
        # its arrival in Kafka: a clock running fast cannot close threads early)
        clamped = min(moment.timestamp(), event.arrival)
        index.advance(event.source, clamped)
        closes = []
        sources = self._resolve(index, self._sources_of(state.kind, {*state.sources, event.source}))
        watermark = index.watermark(sources)
        assert watermark is not None
        if raw is not None:
            # the thread went quiet for the gap before this event (in Kafka time, or in its
            # sources' event time): it closes first, as it would have live, and the event
            # reopens it. So a backlog read late closes threads where they closed live.
            gap = self.gaps[state.kind]
            reason = close_reason(
                state,
                wall_now=event.arrival,
                watermark=watermark if state.sources else None,
                gap_s=gap,
            )
            if reason in ("inactivity", "inactivity_event_time"):
                at = event.arrival if reason == "inactivity" else watermark
                closes.append(self._close(state, reason, closed_at=at))
                self._store(index, key, state)
        if event.turn is not None and event.turn.member is not None:
            admitted = admit_member(state, event.turn)
            if admitted == "ignored":
                # a pair is judged once, on the first trace of each variant: not activity
                if event.turn.key not in state.ignored:  # a redelivery is not counted again
                    self.observer.on_pair_trace("ignored")
                if ignore_member(state, event.turn):
                    self._store(index, key, state)
                closes.extend(self._close_by_event_time(index, event.source))
                return closes
            if admitted == "joins":
                self.observer.on_pair_trace("paired")
                if event.turn.member.slot == "a":
                    state.project_name = event.project_name  # a pair is filed under its A's
        # the thread's activity mark: its own event time, or its watermark if that is later
        # (a producer whose clock lags cannot make its own thread look idle)
        mark = max(watermark, clamped)
        changed = False
        if event.turn is not None:
            changed = fold_turn(
                state,
                event.turn,
                arrival=event.arrival,
                watermark=mark,
                limits=PAIR_LIMITS if state.kind == "pair" else self.limits,
            )
            if missing := [r for r in event.rules if r not in state.rules]:
                state.rules.extend(missing)
                changed = True
        if event.type == "end" or event.end:
            end_key = event.end_key or (event.turn.key if event.turn else "end")
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
        if changed and clamped > state.sources.get(event.source, 0.0):
            state.sources[event.source] = clamped
        if changed and state.kind == "pair" and state.is_open and pair_complete(state):
            state.ended = True  # both traces of the pair are here: it is judged now
        if changed and state.is_open and state.ended:
            closes.append(self._close(state, "end", closed_at=event.arrival))
        if changed:
            self._store(index, key, state)
        closes.extend(self._close_by_event_time(index, event.source))
        return closes

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

    def _tick(self, index: PartitionIndex, now: float) -> list[ThreadClose]:
        closes = self._close_idle(index, index.wall, now, now)
        self._compact(index, now)
        if index.resume:
            resume, index.resume = index.resume, set()
            for key, close_seq in sorted(resume):
                state = ThreadState.from_bytes(self.table[key])
                closes.extend(
                    self._as_close(state, p) for p in state.pending if p.close_seq == close_seq
                )
        return closes

    def _release(self, index: PartitionIndex, source: str, now: float) -> list[ThreadClose]:
        """Close the threads past their wall-clock deadline that waited for ``source`` to be
        read past it (and for no other source)."""
        heap = index.waiting.get(source)
        return self._close_idle(index, heap, index.read[source], now) if heap else []

    def _close_idle(
        self, index: PartitionIndex, heap: list[tuple[float, bytes]], bound: float, now: float
    ) -> list[ThreadClose]:
        """The threads in ``heap`` whose wall-clock deadline is past ``bound``: each closes,
        or waits for the source of its that is not read past the deadline yet."""
        closes = []
        for deadline, key, sources in self._due(index, heap, 0, bound):
            if (behind := index.unread(self._resolve(index, sources), deadline)) is not None:
                heapq.heappush(index.waiting.setdefault(behind, []), (deadline, key))
                continue
            state = ThreadState.from_bytes(self.table[key])
            reason = close_reason(
                state, wall_now=max(now, deadline), watermark=None, gap_s=self.gaps[state.kind]
            )
            if reason is not None:
                self.observer.on_thread_close_delay(max(0.0, self.clock() - deadline))
                closes.append(self._close(state, reason, closed_at=now))
                self._store(index, key, state)
        return closes

    def _close_by_event_time(self, index: PartitionIndex, source: str) -> list[ThreadClose]:
        """Close the threads whose slowest source is ``source`` and whose event-time deadline
        its progress has passed; a thread still waiting for another of its sources moves to
        that source's heap."""
        closes: list[ThreadClose] = []
        heap = index.due.get(source)
        if not heap:
            return closes
        for deadline, key, own in self._due(index, heap, 1, index.progress.get(source, 0.0)):
            sources = self._resolve(index, own)
            watermark = index.watermark(sources)
            assert watermark is not None
            if watermark < deadline:
                heapq.heappush(index.due.setdefault(index.slowest(sources), []), (deadline, key))
                continue
            state = ThreadState.from_bytes(self.table[key])
            reason = close_reason(
                state, wall_now=None, watermark=watermark, gap_s=self.gaps[state.kind]
            )
            if reason is not None:
                closes.append(self._close(state, reason, closed_at=watermark))
                self._store(index, key, state)
        return closes

    def _compact(self, index: PartitionIndex, now: float) -> None:
        """Closed threads idle for the retention period are forgotten (a tombstone in the
        changelog): nothing of them stays. A later turn starts the thread anew, and its
        closes get score ids of their own (``ThreadState.opened``)."""
        while index.closed and index.closed[0][0] <= now:
            deadline, key = heapq.heappop(index.closed)
            raw = self.table.get(key)
            if raw is None:
                continue
            state = ThreadState.from_bytes(raw)
            expected = state.last_arrival + self.gaps[state.kind] + self.retention_s
            if state.is_open or state.pending or expected != deadline:
                continue
            del self.table[key]

    # -- helpers -----------------------------------------------------------------------

    @staticmethod
    def _sources_of(kind: str, own: Iterable[str]) -> tuple[str, ...]:
        """The sources a thread waits for: its own events' (a conversation's turns come
        through the partitions they came through before). A pair waits for every source of
        traces: its partner may come through any partition (traces are keyed by trace id)."""
        ordered = tuple(sorted(own))
        return (EVERY_TRACE_SOURCE, *ordered) if kind == "pair" and ordered else ordered

    def _resolve(self, index: PartitionIndex, sources: tuple[str, ...]) -> tuple[str, ...]:
        """``sources`` with ``EVERY_TRACE_SOURCE`` replaced by every source of traces this
        partition has heard of (a coaching-session source holds no trace)."""
        if not sources or sources[0] != EVERY_TRACE_SOURCE:
            return sources
        heard = {*index.progress, *index.read, *sources[1:]}
        return tuple(sorted(s for s in heard if s.rpartition(":")[0] != self.sessions_topic))

    def _store(self, index: PartitionIndex, key: bytes, state: ThreadState) -> None:
        self.table[key] = state.to_bytes()
        self._index(index, key, IndexEntry.of(state))

    def _close(self, state: ThreadState, reason: CloseReason, *, closed_at: float) -> ThreadClose:
        document = pair_document if state.kind == "pair" else None
        pending = close_thread(state, reason, closed_at=closed_at, document=document)
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
