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

import heapq
import logging
import math
import sys
import time
from collections.abc import Callable, Iterable, Iterator, MutableMapping
from dataclasses import dataclass, field

from ..observer import Observer
from .events import ThreadEvent
from .pairs import admit_member, ignore_member, pair_complete, pair_document
from .sources import source_name, source_topic
from .state import (
    CloseReason,
    HeldEvent,
    IndexEntry,
    PendingClose,
    ThreadClose,
    ThreadLimits,
    ThreadState,
    close_reason,
    close_thread,
    fold_turn,
    hold,
    mark_end,
    mark_published,
    new_thread,
    next_held,
)

log = logging.getLogger(__name__)

EVERY_TRACE_SOURCE = "*"  # in a pair's sources: every source of traces (see _sources_of)
EVERY_PARTITION = ":*"  # a spread thread's sources: "<topic>:*", every partition of the topic
NO_DEADLINE = -math.inf  # a spread thread's event-time slot in ``open`` (it has its own heaps)
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
    # spread threads: the partitions of each source topic heard of (highest number + 1) and
    # the topics a worker's report has named (what the worker knows of the source topics,
    # shared by its partitions and kept across recoveries); how far a source caught up at its
    # last report is taken to be in event time; the sources caught up with nothing read
    # (idle: not waited for); per source topic, the event-time deadlines of the open spread
    # threads, and the event times of their first held events, whose slowest topic it is
    partitions: dict[str, int] = field(default_factory=dict)
    named: set[str] = field(default_factory=set)
    ahead: dict[str, float] = field(default_factory=dict)
    idle: set[str] = field(default_factory=set)
    spread_due: dict[str, list[tuple[float, bytes]]] = field(default_factory=dict)
    spread_at: dict[bytes, float] = field(default_factory=dict)
    held_due: dict[str, list[tuple[float, bytes]]] = field(default_factory=dict)
    held_at: dict[bytes, float] = field(default_factory=dict)
    # a partition taken over (a recovery): until this wall-clock time a source no report has
    # named since is taken as unread (its owner may not have it yet, in a rebalance, and its
    # backlog may hold a thread's next turn); after it, as read (no worker reads it)
    unheard_until: float = -math.inf

    def advance(self, source: str, event_time: float) -> None:
        if event_time > self.progress.get(source, 0.0):
            self.progress[source] = event_time

    def learn(self, source: str) -> None:
        """``source`` exists, and so do the partitions of its topic numbered below it."""
        topic, _, number = source.rpartition(":")
        if number.isdigit():
            self.partitions[topic] = max(self.partitions.get(topic, 0), int(number) + 1)

    def reported(
        self,
        source: str,
        event_time: float,
        caught_up: bool,
        last_arrival: float | None,
        now: float,
    ) -> None:
        """What a worker's report at ``now`` says of ``source`` for spread threads. Read to its
        end (``caught_up``), what reached Kafka before now is read, and its next messages are
        taken to run as far behind their Kafka time as its last one did: its event time moves
        on with the clock. Caught up with nothing read (empty, or a new owner that has read
        nothing yet), it is idle: not waited for until it sends something."""
        if not caught_up or event_time > 0.0:
            self.idle.discard(source)
        if not caught_up:
            return
        if event_time <= 0.0:
            self.idle.add(source)
            return
        moved = event_time  # a worker that does not say when its last message arrived
        if last_arrival is not None:
            moved = event_time + max(0.0, now - last_arrival)
        self.ahead[source] = max(self.ahead.get(source, 0.0), min(moved, now))

    def position(self, source: str, *, ahead: bool) -> float | None:
        """How far ``source`` is in event time, as a spread thread waits for it (None while
        idle): its progress; with ``ahead``, where it was taken to be when last caught up, if
        that is later."""
        if source in self.idle:
            return None
        read = self.progress.get(source, 0.0)
        return max(read, self.ahead.get(source, 0.0)) if ahead else read

    def topic_watermark(self, topic: str, *, ahead: bool = False) -> float:
        """Event time of a spread thread's source topic: the least position of its partitions
        (every one, numbered below the highest heard of), idle ones left out; when all are
        idle, as far as any has got (everything that reached Kafka is read). Nothing before a
        worker's report has named the topic: until then its partitions are not known.

        Threads close by their topics' progress (``ahead`` False): what was read, like any
        thread's event time, so the wall clock still closes threads live. Held events are
        folded once no earlier one can come (``ahead``): a partition read to its end counts
        as moving on with the clock, so a sparse partition does not hold them back."""
        if topic not in self.named:
            return 0.0
        sources = [f"{topic}:{number}" for number in range(self.partitions.get(topic, 0))]
        positions = [self.position(s, ahead=ahead) for s in sources]
        waited = [p for p in positions if p is not None]
        if waited:
            return min(waited)
        return max(
            (max(self.progress.get(s, 0.0), self.ahead.get(s, 0.0)) for s in sources),
            default=0.0,
        )

    def watermark(self, sources: Iterable[str]) -> float | None:
        """Event time of a thread fed by ``sources``: the least progress among them."""
        return min((self.progress.get(s, 0.0) for s in sources), default=None)

    def slowest(self, sources: Iterable[str]) -> str:
        return min(sources, key=lambda s: self.progress.get(s, 0.0))

    def unread(self, sources: Iterable[str], deadline: float) -> str | None:
        """The source of ``sources`` read least far, if it is not read up to ``deadline``.
        A source no report has named counts as unread while the partition waits for reports
        after a recovery (``unheard_until``, ended by a tick), then as read."""
        unheard = 0.0 if self.unheard_until > -math.inf else deadline
        behind = [(r, s) for s in sources if (r := self.read.get(s, unheard)) < deadline]
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

    def _new_index(self) -> PartitionIndex:
        return PartitionIndex(partitions=self.topics, named=self.named)

    # -- index -------------------------------------------------------------------------

    def rebuild(self, partitions: Iterable[int]) -> int:
        """Index the threads of ``partitions`` from the table; forget every other partition.

        Returns the number of threads indexed. Pending closes are scored at the partition's
        next tick: a tick is queued behind every event already in the partition, so the
        ``published`` events of closes the previous owner finished are seen first.
        """
        self.partitions = {p: self._new_index() for p in partitions}
        unheard_until = self.clock() + self.unheard_wait_s
        for taken in self.partitions.values():
            taken.unheard_until = unheard_until
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
        sources = self._sources_of(state.kind, own, spread=True)
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
        slowest = min(self._topics(sources), key=lambda t: index.topic_watermark(t, ahead=ahead))
        heapq.heappush(due.setdefault(slowest, []), (moment, key))

    def open_threads(self) -> int:
        return sum(len(i.open) for i in self.partitions.values())

    def pending_closes(self) -> int:
        return sum(len(i.pending) for i in self.partitions.values())

    # -- events ------------------------------------------------------------------------

    def apply(self, partition: int, event: ThreadEvent) -> list[ThreadClose]:
        """Apply one event of ``partition``; returns the closes to score now."""
        index = self.partitions.get(partition)
        if index is None:  # before the first recovery completed (tests drive this directly)
            index = self.partitions[partition] = self._new_index()
        self.observer.on_thread_event(event.type)
        if event.type == "tick":
            return self._tick(index, event.arrival)
        if event.type == "progress":
            closes = []
            for source, (event_time, read) in event.positions.items():
                index.learn(source)
                index.advance(source, min(event_time, event.arrival))
                index.read[source] = read
                caught_up = read >= event.arrival
                last = event.arrived.get(source)
                index.reported(source, event_time, caught_up, last, event.arrival)
                closes.extend(self._close_by_event_time(index, source))
                closes.extend(self._release(index, source, event.arrival))
            topics = sorted({source_topic(s) for s in event.positions})
            index.named.update(topics)
            for topic in topics:
                closes.extend(self._settle(index, topic))
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
        index.learn(event.source)
        index.idle.discard(event.source)  # it has sent something
        if self._spreads(state, event):
            state.spread = True
            closes = self._take(index, key, state, event, clamped)
            closes.extend(self._settle(index, source_topic(event.source)))
            closes.extend(self._close_by_event_time(index, event.source))
            return closes
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
                closes.extend(self._settle(index, source_topic(event.source)))
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
        closes.extend(self._settle(index, source_topic(event.source)))
        closes.extend(self._close_by_event_time(index, event.source))
        return closes

    # -- spread threads ------------------------------------------------------------------

    @staticmethod
    def _spreads(state: ThreadState, event: ThreadEvent) -> bool:
        """Whether ``state``'s turns may come through any partition of their source topic: a
        message of it was not keyed by its thread id, or its key was not known (a pair waits
        for every source of traces in its own way). A thread whose messages were all keyed by
        its id and still came through two partitions (the topic was given more partitions)
        waits for those, as any thread for its own sources."""
        return state.kind != "pair" and bool(event.source) and (state.spread or event.spread)

    def _take(
        self,
        index: PartitionIndex,
        key: bytes,
        state: ThreadState,
        event: ThreadEvent,
        clamped: float,
    ) -> list[ThreadClose]:
        """An event of a spread thread: held, then folded with every held event of the thread
        that its event time has reached, in event-time order (at once when it has reached this
        one); the thread closes if that event time is the gap past its last activity."""
        own = self._sources_of(
            state.kind, [*state.sources, *(h.source for h in state.held), event.source], spread=True
        )
        watermark = self._spread_watermark(index, own)
        moment = event.turn.event_time if event.turn else event.event_time
        assert moment is not None
        ends = event.type == "end" or event.end
        held = HeldEvent(
            source=event.source,
            at=clamped,
            arrival=event.arrival,
            floor=watermark,
            event_time=moment,
            turn=event.turn,
            end_key=(event.end_key or (event.turn.key if event.turn else "end")) if ends else None,
            rules=event.rules,
        )
        if held.turn is not None and any(t.key == held.turn.key for t in state.turns):
            closes = self._fold(state, held)  # a redelivered turn: no activity, nothing to order
        elif held.turn is None and held.end_key in state.end_keys:
            return []  # the same end again
        elif not hold(state, held):
            return []  # held already
        else:
            closes = self._catch_up(
                state, self._spread_watermark(index, own, ahead=True), watermark
            )
            # bounded: past the thread's caps its earliest held events are folded at once
            size = sum(h.size for h in state.held)
            while len(state.held) > self.limits.max_turns or size > self.limits.max_bytes:
                earliest = next_held(state, None)
                assert earliest is not None
                size -= earliest.size
                closes.extend(self._fold(state, earliest))
        self._store(index, key, state)
        return closes

    def _catch_up(
        self, state: ThreadState, horizon: float | None, watermark: float | None
    ) -> list[ThreadClose]:
        """Fold the held events of ``state`` that no earlier event can come before (up to
        ``horizon``; None: every one, the wall clock says so), in event-time order; then close
        it if its event time (``watermark``) is the gap past its last activity."""
        closes = []
        while (event := next_held(state, horizon)) is not None:
            closes.extend(self._fold(state, event))
        if watermark is not None and state.last_event_time is not None:
            reason = close_reason(
                state, wall_now=None, watermark=watermark, gap_s=self.gaps[state.kind]
            )
            if reason is not None:
                closes.append(self._close(state, reason, closed_at=watermark))
        return closes

    def _fold(self, state: ThreadState, event: HeldEvent) -> list[ThreadClose]:
        """Fold one event of a spread thread, as ``apply`` folds any thread's: at the thread's
        event time when it is folded (its own, or the thread's when it arrived if that was
        later), so a thread quiet for the gap before it closes first."""
        moment = max(event.at, event.floor)
        gap = self.gaps[state.kind]
        closes = []
        if state.last_event_time is not None:  # it has had activity
            reason = close_reason(
                state,
                wall_now=event.arrival,
                watermark=moment if state.sources else None,
                gap_s=gap,
            )
            if reason in ("inactivity", "inactivity_event_time"):
                at = event.arrival if reason == "inactivity" else moment
                closes.append(self._close(state, reason, closed_at=at))
        changed = False
        if event.turn is not None:
            changed = fold_turn(
                state, event.turn, arrival=event.arrival, watermark=moment, limits=self.limits
            )
            if missing := [r for r in event.rules if r not in state.rules]:
                state.rules.extend(missing)
                changed = True
        if event.end_key is not None:
            changed = (
                mark_end(
                    state,
                    event.end_key,
                    event_time=event.event_time,
                    arrival=event.arrival,
                    watermark=moment,
                )
                or changed
            )
        if changed and event.at > state.sources.get(event.source, 0.0):
            state.sources[event.source] = event.at
        if changed and state.is_open and state.ended:
            closes.append(self._close(state, "end", closed_at=event.arrival))
        return closes

    def _settle(self, index: PartitionIndex, topic: str) -> list[ThreadClose]:
        """The spread threads whose slowest topic is ``topic``: those whose first held events
        no earlier event can come before any more are folded, and those whose event-time
        deadline its progress has passed close; one still waiting for another of its topics
        moves to that topic's heap."""
        return [
            *self._settle_heap(index, topic, index.held_at, index.held_due, ahead=True),
            *self._settle_heap(index, topic, index.spread_at, index.spread_due, ahead=False),
        ]

    def _settle_heap(
        self,
        index: PartitionIndex,
        topic: str,
        at: dict[bytes, float],
        due: dict[str, list[tuple[float, bytes]]],
        *,
        ahead: bool,
    ) -> list[ThreadClose]:
        closes: list[ThreadClose] = []
        heap = due.get(topic)
        bound = index.topic_watermark(topic, ahead=ahead)
        while heap and heap[0][0] <= bound:
            moment, key = heapq.heappop(heap)
            entry = index.open.get(key)
            if entry is None or at.get(key) != moment:
                continue  # stale: the thread moved on
            if self._spread_watermark(index, entry[2], ahead=ahead) < moment:
                topics = self._topics(entry[2])
                slowest = min(topics, key=lambda t: index.topic_watermark(t, ahead=ahead))
                heapq.heappush(due.setdefault(slowest, []), (moment, key))
                continue
            state = ThreadState.from_bytes(self.table[key])
            del at[key]  # indexed afresh
            horizon = self._spread_watermark(index, entry[2], ahead=True)
            closes.extend(self._catch_up(state, horizon, self._spread_watermark(index, entry[2])))
            self._store(index, key, state)
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
        closes = []
        if now >= index.unheard_until > -math.inf:
            closes.extend(self._give_up_unheard(index, now))
        closes.extend(self._close_idle(index, index.wall, now, now))
        self._compact(index, now)
        if index.resume:
            resume, index.resume = index.resume, set()
            for key, close_seq in sorted(resume):
                state = ThreadState.from_bytes(self.table[key])
                closes.extend(
                    self._as_close(state, p) for p in state.pending if p.close_seq == close_seq
                )
        return closes

    def _give_up_unheard(self, index: PartitionIndex, now: float) -> list[ThreadClose]:
        """The wait for reports after a recovery is over: the threads that waited for a source
        no report has named since close (as if it were read), and it is said in the log."""
        index.unheard_until = -math.inf
        unheard = sorted(s for s in index.waiting if s not in index.read)
        if unheard:
            log.warning(
                "no worker reported on %s within %.0f s of taking over thread partitions: "
                "counted as read (is a worker of the group reading it?)",
                ", ".join(unheard),
                self.unheard_wait_s,
            )
        closes = []
        for source in unheard:
            closes.extend(self._close_idle(index, index.waiting[source], now, now))
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
        or waits for the source of its that is not read past the deadline yet (queued once
        ``heap`` is done with: it may be that source's own heap)."""
        closes = []
        deferred: list[tuple[str, float, bytes]] = []
        for deadline, key, sources in self._due(index, heap, 0, bound):
            if (behind := index.unread(self._resolve(index, sources), deadline)) is not None:
                deferred.append((behind, deadline, key))
                continue
            state = ThreadState.from_bytes(self.table[key])
            held = bool(state.held)
            if held:  # every held event reached Kafka the gap ago: folded, in event-time order
                closes.extend(self._catch_up(state, None, None))
            reason = close_reason(
                state, wall_now=max(now, deadline), watermark=None, gap_s=self.gaps[state.kind]
            )
            if reason is not None:
                self.observer.on_thread_close_delay(max(0.0, self.clock() - deadline))
                closes.append(self._close(state, reason, closed_at=now))
            if held or reason is not None:
                self._store(index, key, state)
        for behind, deadline, key in deferred:
            heapq.heappush(index.waiting.setdefault(behind, []), (deadline, key))
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
            if state.is_open or state.pending or state.held or expected != deadline:
                continue
            del self.table[key]

    # -- helpers -----------------------------------------------------------------------

    @staticmethod
    def _sources_of(kind: str, own: Iterable[str], *, spread: bool = False) -> tuple[str, ...]:
        """The sources a thread waits for: its own events' (a conversation's turns come
        through the partitions they came through before); a spread thread's, every partition
        of their topics. A pair waits for every source of traces: its partner may come
        through any partition (traces are keyed by trace id)."""
        if spread:
            return tuple(sorted({source_topic(s) + EVERY_PARTITION for s in own}))
        ordered = tuple(sorted(own))
        return (EVERY_TRACE_SOURCE, *ordered) if kind == "pair" and ordered else ordered

    @staticmethod
    def _topics(sources: tuple[str, ...]) -> list[str]:
        """The topics of a spread thread's sources (``<topic>:*``)."""
        return [s.removesuffix(EVERY_PARTITION) for s in sources]

    def _spread_watermark(
        self, index: PartitionIndex, sources: tuple[str, ...], *, ahead: bool = False
    ) -> float:
        """Event time of a spread thread: the least of its topics' (``<topic>:*``)."""
        return min(index.topic_watermark(t, ahead=ahead) for t in self._topics(sources))

    def _resolve(self, index: PartitionIndex, sources: tuple[str, ...]) -> tuple[str, ...]:
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
