"""The thread agent's logic, apart from Faust: fold events into a table, decide closes.

``ThreadProcessor`` works on any ``MutableMapping[bytes, bytes]`` (the Faust table in the
worker, a dict in unit tests) holding one ``ThreadState`` per thread, and keeps a small index
per partition so that neither a tick nor an event scans every thread:

- ``open``: each open thread's two deadlines, wall clock (last arrival + gap) and event
  time (activity + gap), with its sources, and min-heaps of them (stale heap entries are
  skipped lazily);
- how far each source (topic:partition) has been read (``stream/sources/log.py``): in event time
  (``progress``) and in Kafka time (``read``), as the events of the source and the
  ``progress`` events of the worker reading it say. Turns reach a partition from every
  source, and a replay's sources run at different speeds, so there is no single clock:

  - a thread's event time is the least progress of the sources its own events came from
    (as in Flink, over the inputs that may still hold its next event; not over every
    source, so a slow or sparse source holds back only its own threads). `scorer replay`
    keys by thread id, so a thread has one source, read in order;
  - a *spread* thread, whose turns may come through any partition of their source topic
    (a message of it was not keyed by its thread id, e.g. traces keyed by trace id, or the
    router was not told its key), waits for every partition of that topic instead: its
    event time is the least progress of them all, once a worker's report has named the
    topic (a partition caught up with nothing read is idle, not waited for). Its events are
    held (in the thread's state) and folded once no earlier one can still come through
    another partition, in event-time order (each source's in the order it was read), so a
    partition read far ahead cannot close the thread before an earlier turn in another is
    read (Flink's session windows under a watermark over every partition). For folding, a
    partition read to its end is taken to move on with the clock at the lag its last
    message had, so a sparse partition does not hold turns back live. The cost: a
    partition read slowly holds back every spread thread of the topic, not only those
    with turns in it;
  - a thread past its wall-clock deadline waits while one of its sources is read only up
    to a point before it (a backlog after a restart, a trace agent held up by the judge):
    its next turn may be in there. After a recovery, a source no report has named yet is
    taken as unread (in a rebalance its new owner may not have it yet) for
    ``unheard_wait_s``, then as read (no worker of the group reads it: said in the log);
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

import sys
import time
from collections.abc import Callable, Iterable, MutableMapping

from ..observer import Observer
from ..sources.log import source_topic
from .clocks import ThreadClocks
from .close import mark_published
from .events import ThreadEvent
from .fold import fold_turn, mark_end
from .index import PartitionIndex
from .pairs import admit_member, ignore_member, pair_complete
from .spread import SpreadThreads
from .state import ThreadClose, ThreadLimits, ThreadState, new_thread
from .table import ThreadTable

# a pair holds one trace of each variant, each within the turn cap: nothing is dropped
PAIR_LIMITS = ThreadLimits(max_turns=2, max_bytes=sys.maxsize)


class ThreadProcessor:
    """Folds thread events into the table and says which threads close, and when: the
    table and its index (``ThreadTable``, the one close path), spread threads
    (``SpreadThreads``) and the clocks (``ThreadClocks``), composed."""

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
        self.threads = ThreadTable(
            table,
            gaps=gaps,
            limits=limits,
            retention_s=retention_s,
            sessions_topic=sessions_topic,
            unheard_wait_s=unheard_wait_s,
            clock=clock,
            observer=observer,
        )
        self.spread = SpreadThreads(self.threads)
        self.clocks = ThreadClocks(self.threads, self.spread)

    @property
    def table(self) -> MutableMapping[bytes, bytes]:
        return self.threads.table

    @property
    def gaps(self) -> dict[str, float]:
        """Each thread kind's inactivity gap (a live reload sets new ones)."""
        return self.threads.gaps

    @gaps.setter
    def gaps(self, gaps: dict[str, float]) -> None:
        self.threads.gaps = gaps

    @property
    def unheard_wait_s(self) -> float:
        """How long a recovered partition waits for reports on its sources."""
        return self.threads.unheard_wait_s

    @unheard_wait_s.setter
    def unheard_wait_s(self, seconds: float) -> None:
        self.threads.unheard_wait_s = seconds

    def expect(self, partitions: dict[str, int]) -> None:
        self.threads.expect(partitions)

    def rebuild(self, partitions: Iterable[int]) -> int:
        return self.threads.rebuild(partitions)

    def open_threads(self) -> int:
        return self.threads.open_threads()

    def pending_closes(self) -> int:
        return self.threads.pending_closes()

    def held_threads(self) -> int:
        return self.threads.held_threads()

    def apply(self, partition: int, event: ThreadEvent) -> list[ThreadClose]:
        """Apply one event of ``partition``; returns the closes to score now."""
        index = self.threads.partitions.get(partition)
        if index is None:  # before the first recovery completed (tests drive this directly)
            index = self.threads.partitions[partition] = self.threads.new_index()
        self.threads.observer.on_thread_event(event.type)
        if event.type == "tick":
            return self.clocks.tick(index, event.arrival)
        if event.type == "progress":
            return self._on_progress(index, event)
        if event.type == "published":
            self._on_published(index, event)
            return []
        return self._on_activity(partition, index, event)

    def _on_progress(self, index: PartitionIndex, event: ThreadEvent) -> list[ThreadClose]:
        """A worker's report of how far it has read each source: the threads it held back
        may close, and spread threads' held events may be folded."""
        closes = []
        for source, (event_time, read) in event.positions.items():
            index.learn(source)
            index.advance(source, min(event_time, event.arrival))
            index.read[source] = read
            caught_up = read >= event.arrival
            last = event.arrived.get(source)
            index.reported(source, event_time, caught_up, last, event.arrival)
            closes.extend(self.clocks.close_by_event_time(index, source))
            closes.extend(self.clocks.release(index, source, event.arrival))
        topics = sorted({source_topic(s) for s in event.positions})
        index.named.update(topics)
        for topic in topics:
            closes.extend(self.spread.settle(index, topic))
        return closes

    def _on_published(self, index: PartitionIndex, event: ThreadEvent) -> None:
        """A close's scores are on the broker: it is no longer pending."""
        raw = self.threads.table.get(event.key)
        if raw is not None:
            state = ThreadState.from_bytes(raw)
            if mark_published(state, event.close_seq):
                self.threads.store(index, event.key, state)

    def _on_activity(
        self, partition: int, index: PartitionIndex, event: ThreadEvent
    ) -> list[ThreadClose]:
        """A turn or an end of a thread: folded (a spread thread's held first), after closing
        the thread if it went quiet for its gap before it."""
        key = event.key
        raw = self.threads.table.get(key)
        if raw is None:
            opened = round(event.arrival * 1000)
            state = new_thread(
                event.thread_id, event.kind, event.project_name, partition=partition, opened=opened
            )
        else:
            state = ThreadState.from_bytes(raw)
            if state.partition != partition:
                self._adopt(state, key, partition)
        moment = event.turn.event_time if event.turn else event.event_time
        assert moment is not None
        # the event's own time is evidence of how far its source has got (never ahead of
        # its arrival in Kafka: a clock running fast cannot close threads early)
        clamped = min(moment.timestamp(), event.arrival)
        index.advance(event.source, clamped)
        index.learn(event.source)
        index.idle.discard(event.source)  # it has sent something
        if self.spread.spreads(state, event):
            state.spread = True
            closes = self.spread.take(index, key, state, event, clamped)
        else:
            closes = self._fold_event(index, key, state, event, raw is not None, clamped)
        if index.held_due or index.spread_due:  # a spread thread waits on some topic
            closes.extend(self.spread.settle(index, source_topic(event.source)))
        closes.extend(self.clocks.close_by_event_time(index, event.source))
        return closes

    def _adopt(self, state: ThreadState, key: bytes, partition: int) -> None:
        """A thread stored in another partition of this worker gets an event here: its
        events are placed here now (a coaching session is placed by its session id since
        design record 33; the memory store holds every partition's threads in one map). It
        moves: the other partition's index forgets it."""
        moved_from = self.threads.partitions.get(state.partition)
        if moved_from is not None:
            for held in (moved_from.open, moved_from.spread_at, moved_from.held_at):
                held.pop(key, None)
            moved_from.pending.discard(key)
        state.partition = partition

    def _fold_event(
        self,
        index: PartitionIndex,
        key: bytes,
        state: ThreadState,
        event: ThreadEvent,
        existed: bool,
        clamped: float,
    ) -> list[ThreadClose]:
        """Fold a turn or an end into a thread whose sources are its own (not spread)."""
        closes = []
        sources = self.threads.resolve(
            index, self.threads.sources_of(state.kind, {*state.sources, event.source})
        )
        watermark = index.watermark(sources)
        assert watermark is not None
        if existed:
            # the thread went quiet for the gap before this event (in Kafka time, or in its
            # sources' event time): it closes first, as it would have live, and the event
            # reopens it. So a backlog read late closes threads where they closed live.
            close = self.threads.close_if_due(
                state,
                wall_now=event.arrival,
                watermark=watermark if state.sources else None,
                idle_only=True,
            )
            if close is not None:
                closes.append(close)
                self.threads.store(index, key, state)
        if event.turn is not None and event.turn.member is not None:
            admitted = admit_member(state, event.turn)
            if admitted == "ignored":
                # a pair is judged once, on the first trace of each variant: not activity
                if event.turn.key not in state.ignored:  # a redelivery is not counted again
                    self.threads.observer.on_pair_trace("ignored")
                if ignore_member(state, event.turn):
                    self.threads.store(index, key, state)
                return closes
            if admitted == "joins":
                self.threads.observer.on_pair_trace("paired")
                if event.turn.member.slot == "a":
                    state.project_name = event.project_name  # a pair is filed under its A's
        # the thread's activity mark: its own event time, or its watermark if that is later
        # (a producer whose clock lags cannot make its own thread look idle)
        changed = self._fold_into(state, event, mark=max(watermark, clamped))
        if changed and clamped > state.sources.get(event.source, 0.0):
            state.sources[event.source] = clamped
        if changed and state.kind == "pair" and state.is_open and pair_complete(state):
            state.ended = True  # both traces of the pair are here: it is judged now
        if changed and state.is_open and state.ended:
            closes.append(self.threads.ended(state, event.arrival))
        if changed:
            self.threads.store(index, key, state)
        return closes

    def _fold_into(self, state: ThreadState, event: ThreadEvent, *, mark: float) -> bool:
        """The event's turn, its rules and its end, in the thread's state; whether anything
        changed (a redelivered turn changes nothing)."""
        changed = False
        if event.turn is not None:
            changed = fold_turn(
                state,
                event.turn,
                arrival=event.arrival,
                watermark=mark,
                limits=PAIR_LIMITS if state.kind == "pair" else self.threads.limits,
            )
            if missing := [r for r in event.rules if r not in state.rules]:
                state.rules.extend(missing)
                changed = True
        if event.type == "end" or event.end:
            end_key = event.end_key or (event.turn.key if event.turn else "end")
            moment = event.turn.event_time if event.turn else event.event_time
            assert moment is not None
            ended = mark_end(
                state, end_key, event_time=moment, arrival=event.arrival, watermark=mark
            )
            changed = ended or changed
        return changed
