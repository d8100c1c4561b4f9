"""What the thread processor knows of one partition without reading its threads: how far
each source is read (in event time and in Kafka time), each open thread's deadlines on
min-heaps, the pending closes, and what spread threads wait for (see ``processor.py``)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import repeat

from ..sources.wait import ReportWait

EVERY_TRACE_SOURCE = "*"  # in a pair's sources: every source of traces (see sources_of)
EVERY_PARTITION = ":*"  # a spread thread's sources: "<topic>:*", every partition of the topic
NO_DEADLINE = -math.inf  # a spread thread's event-time slot in ``open`` (it has its own heaps)
THREAD_PARTITIONS = "thread partitions"  # what a recovery takes over, as the log says it


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
    # a partition taken over (a recovery): while this waits a source no report has named
    # since is taken as unread (its owner may not have it yet, in a rebalance, and its
    # backlog may hold a thread's next turn); after it, as read (no worker reads it)
    reports: ReportWait = field(default_factory=lambda: ReportWait(0.0, THREAD_PARTITIONS))
    learnt: set[str] = field(default_factory=set)  # the sources ``learn`` was told of

    def advance(self, source: str, event_time: float) -> None:
        if event_time > self.progress.get(source, 0.0):
            self.progress[source] = event_time

    def learn(self, source: str) -> None:
        """``source`` exists, and so do the partitions of its topic numbered below it."""
        if source in self.learnt:
            return  # the counts only grow: learning it again changes nothing
        self.learnt.add(source)
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
        return min(map(self.progress.get, sources, repeat(0.0)), default=None)

    def slowest(self, sources: Iterable[str]) -> str:
        return min(sources, key=lambda s: self.progress.get(s, 0.0))

    def unread(self, sources: Iterable[str], deadline: float) -> str | None:
        """The source of ``sources`` read least far, if it is not read up to ``deadline``.
        A source no report has named counts as unread while the partition waits for reports
        after a recovery (``reports``, ended by a tick), then as read."""
        unheard = 0.0 if self.reports.waiting else deadline
        behind = [(r, s) for s in sources if (r := self.read.get(s, unheard)) < deadline]
        return min(behind)[1] if behind else None
