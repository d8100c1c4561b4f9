"""The thread table and its index: one ``ThreadState`` per thread in a table (the Faust
table in the worker, a dict in unit tests), and a ``PartitionIndex`` per partition rebuilt
from it after every recovery; a thread stored is indexed afresh, a thread closed becomes a
``ThreadClose`` to score."""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Iterable, MutableMapping

from ..observer import Observer
from ..sources.log import source_name, source_topic
from ..sources.wait import ReportWait
from .close import close_reason, close_thread
from .index import (
    EVERY_PARTITION,
    EVERY_TRACE_SOURCE,
    NO_DEADLINE,
    THREAD_PARTITIONS,
    PartitionIndex,
)
from .pairs import pair_document
from .state import (
    CloseReason,
    IndexEntry,
    PendingClose,
    ThreadClose,
    ThreadLimits,
    ThreadState,
)


class ThreadTable:
    """The table of threads and the index of each partition this worker owns, and the one
    path by which a thread closes (``close_if_due``): what the processor's parts share
    (``SpreadThreads``, ``ThreadClocks``, ``ThreadProcessor`` each hold it)."""

    def __init__(
        self,
        table: MutableMapping[bytes, bytes],
        *,
        gaps: dict[str, float],
        limits: ThreadLimits,
        retention_s: float,
        sessions_topic: str | None = None,
        unheard_wait_s: float = 300.0,
        clock: Callable[[], float] = time.time,
        observer: Observer | None = None,
    ) -> None:
        self.table = table
        self.unheard_wait_s = unheard_wait_s
        self.gaps = gaps
        self.limits = limits
        self.retention_s = retention_s
        self.sessions_topic = sessions_topic
        self.clock = clock
        self.observer = observer or Observer()
        self.partitions: dict[int, PartitionIndex] = {}
        # what this worker has learnt of the source topics (their partitions, whether a
        # report named them): the same for every partition, and still true after a recovery
        self.topics: dict[str, int] = {}
        self.named: set[str] = set()

    def expect(self, partitions: dict[str, int]) -> None:
        """The source topics have ``partitions`` each (the consumer's metadata): a pair or a
        spread thread waits for every one of them, not only those a report has named."""
        for topic, count in partitions.items():
            self.topics[topic] = max(self.topics.get(topic, 0), count)

    def new_index(self) -> PartitionIndex:
        return PartitionIndex(partitions=self.topics, named=self.named)

    def rebuild(self, partitions: Iterable[int]) -> int:
        """Index the threads of ``partitions`` from the table; forget every other partition.

        Returns the number of threads indexed. Pending closes are scored at the partition's
        next tick: a tick is queued behind every event already in the partition, so the
        ``published`` events of closes the previous owner finished are seen first.
        """
        self.partitions = {p: self.new_index() for p in partitions}
        now = self.clock()
        for taken in self.partitions.values():
            taken.reports = ReportWait(self.unheard_wait_s, THREAD_PARTITIONS)
            taken.reports.begin(now)
        entries = []
        for key, raw in self.table.items():
            state = IndexEntry.from_bytes(raw)
            index = self.partitions.get(state.partition)
            if index is None:
                continue
            entries.append((index, key, state))
            # every source at least as far as the table shows
            for source, moment in [*state.sources.items(), *((s, at) for s, at, _ in state.held)]:
                index.learn(source)
                index.advance(source, moment)
        for index, key, state in entries:
            self._index(index, key, state)
            index.resume.update((key, close_seq) for close_seq in state.pending)
        return len(entries)

    def _index(self, index: PartitionIndex, key: bytes, state: IndexEntry) -> None:
        gap = self.gaps[state.kind]
        if state.spread and state.waiting:
            self._index_spread(index, key, state, gap)
        elif state.is_open:
            sources = self.sources_of(state.kind, state.sources)
            entry = (state.last_arrival + gap, state.activity + gap, sources)
            if index.open.get(key) != entry:
                index.open[key] = entry
                heapq.heappush(index.wall, (entry[0], key))
                if state.sources:  # a thread from before sources were recorded: wall clock only
                    slowest = index.slowest(self.resolve(index, sources))
                    heapq.heappush(index.due.setdefault(slowest, []), (entry[1], key))
        else:
            index.open.pop(key, None)
            index.spread_at.pop(key, None)
            index.held_at.pop(key, None)
            if not state.pending:
                heapq.heappush(index.closed, (state.last_arrival + gap + self.retention_s, key))
        if state.pending:
            index.pending.add(key)
        else:
            index.pending.discard(key)

    def _index_spread(
        self, index: PartitionIndex, key: bytes, state: IndexEntry, gap: float
    ) -> None:
        """A spread thread, open or holding events: its wall-clock deadline (its last arrival,
        held events' too, + gap), and on the heaps of its slowest topic its event-time
        deadline and the event time from which a held event of it can be folded."""
        own = [*state.sources, *(source for source, _, _ in state.held)]
        sources = self.sources_of(state.kind, own, spread=True)
        wall = max(state.last_arrival, state.last_held_arrival) + gap
        entry = (wall, NO_DEADLINE, sources)
        if index.open.get(key) != entry:
            index.open[key] = entry
            heapq.heappush(index.wall, (wall, key))
        deadline = state.activity + gap if state.is_open and state.active else None
        self._push(index, key, sources, deadline, index.spread_at, index.spread_due, ahead=False)
        held = state.released_from
        self._push(index, key, sources, held, index.held_at, index.held_due, ahead=True)

    def _push(
        self,
        index: PartitionIndex,
        key: bytes,
        sources: tuple[str, ...],
        moment: float | None,
        at: dict[bytes, float],
        due: dict[str, list[tuple[float, bytes]]],
        *,
        ahead: bool,
    ) -> None:
        """Index a spread thread's next ``moment`` (in ``at``), on the heap (in ``due``) of its
        slowest topic; None: it has none."""
        if moment is None:
            at.pop(key, None)
            return
        if at.get(key) == moment:
            return  # on a heap already
        at[key] = moment
        slowest = min(self.topics_of(sources), key=lambda t: index.topic_watermark(t, ahead=ahead))
        heapq.heappush(due.setdefault(slowest, []), (moment, key))

    def open_threads(self) -> int:
        return sum(len(i.open) for i in self.partitions.values())

    def pending_closes(self) -> int:
        return sum(len(i.pending) for i in self.partitions.values())

    def held_threads(self) -> int:
        """Threads the table holds: open, and closed ones kept for their retention."""
        return sum(len(i.open) + len(i.closed) for i in self.partitions.values())

    @staticmethod
    def sources_of(kind: str, own: Iterable[str], *, spread: bool = False) -> tuple[str, ...]:
        """The sources a thread waits for: its own events' (a conversation's turns come
        through the partitions they came through before); a spread thread's, every partition
        of their topics. A pair waits for every source of traces: its partner may come
        through any partition (traces are keyed by trace id)."""
        if spread:
            return tuple(sorted({source_topic(s) + EVERY_PARTITION for s in own}))
        ordered = tuple(sorted(own))
        return (EVERY_TRACE_SOURCE, *ordered) if kind == "pair" and ordered else ordered

    @staticmethod
    def topics_of(sources: tuple[str, ...]) -> list[str]:
        """The topics of a spread thread's sources (``<topic>:*``)."""
        return [s.removesuffix(EVERY_PARTITION) for s in sources]

    def spread_watermark(
        self, index: PartitionIndex, sources: tuple[str, ...], *, ahead: bool = False
    ) -> float:
        """Event time of a spread thread: the least of its topics' (``<topic>:*``)."""
        return min(index.topic_watermark(t, ahead=ahead) for t in self.topics_of(sources))

    def resolve(self, index: PartitionIndex, sources: tuple[str, ...]) -> tuple[str, ...]:
        """``sources`` with ``EVERY_TRACE_SOURCE`` replaced by every source of traces this
        partition has heard of (a coaching-session source holds no trace), and each
        ``<topic>:*`` by every partition of the topic (numbered below the highest heard of)."""
        if not sources:
            return sources
        if sources[0] == EVERY_TRACE_SOURCE:
            known = (
                source_name(topic, number)
                for topic, count in index.partitions.items()
                for number in range(count)
            )
            heard = {*index.progress, *index.read, *known, *sources[1:]}
            return tuple(sorted(s for s in heard if source_topic(s) != self.sessions_topic))
        if not sources[0].endswith(EVERY_PARTITION):
            return sources
        return tuple(
            source_name(topic, number)
            for topic in (s.removesuffix(EVERY_PARTITION) for s in sources)
            for number in range(index.partitions.get(topic, 0))
        )

    def store(self, index: PartitionIndex, key: bytes, state: ThreadState) -> None:
        self.table[key] = state.to_bytes()
        self._index(index, key, IndexEntry.of(state))

    def close_if_due(
        self,
        state: ThreadState,
        *,
        wall_now: float | None = None,
        watermark: float | None = None,
        at: float | None = None,
        idle_only: bool = False,
    ) -> ThreadClose | None:
        """The one path by which a thread closes (``close.close_reason`` says whether it
        does): by the wall clock at ``wall_now`` (its last arrival the gap before), by its
        sources' event time at ``watermark`` (its activity the gap before), or because it
        ended; ``idle_only``: not for its end (an event about to be folded into it). It
        closes at ``at``, else at ``watermark`` when its event time closed it (or no wall
        clock was given), else at ``wall_now``. Returns the close to score, or None."""
        reason = close_reason(
            state, wall_now=wall_now, watermark=watermark, gap_s=self.gaps[state.kind]
        )
        if reason is None or (idle_only and reason == "end"):
            return None
        if at is None:
            by_event_time = reason == "inactivity_event_time" or wall_now is None
            at = watermark if by_event_time else wall_now
        assert at is not None
        return self._close(state, reason, closed_at=at)

    def ended(self, state: ThreadState, arrival: float) -> ThreadClose:
        """An open thread whose end was just folded in closes, at the end's ``arrival``."""
        close = self.close_if_due(state, wall_now=arrival)
        assert close is not None and close.pending.reason == "end"
        return close

    def _close(self, state: ThreadState, reason: CloseReason, *, closed_at: float) -> ThreadClose:
        """Close ``state`` (only through ``close_if_due``): its pending close, counted."""
        document = pair_document if state.kind == "pair" else None
        pending = close_thread(state, reason, closed_at=closed_at, document=document)
        self.observer.on_thread_close(state.kind, reason, len(state.turns))
        return self.as_close(state, pending)

    def as_close(self, state: ThreadState, pending: PendingClose) -> ThreadClose:
        return ThreadClose(
            thread_id=state.thread_id,
            kind=state.kind,
            project_name=state.project_name,
            pending=pending,
            topic=self.sessions_topic if state.kind == "session" else None,
        )
