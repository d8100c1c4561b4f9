"""Which fetched record may go to the agents next: each partition's offsets in order, with
nothing missing, unless a gap has proved real.

Faust's own bookkeeping lets records go missing in three ways (see ``consumer.py``): records
queued while a rebalance completes are dropped (faust-streaming #596); a jump in the offsets
a fetch returns is taken as done (the embedded broker can return a later batch before an
earlier one is written); and one record missing at the head of a partition is committed past
(an off-by-one). The consumer asks this guard about every record it fetches, and the guard
holds one invariant: **a record is delivered only if it is the partition's next offset**;
every record skipped at or past that offset is followed by a seek back to it.

A gap (the next record is further on) is fetched again. On a real Kafka cluster a gap that
a second fetch confirms is real: a compacted topic, transaction markers, deleted records. On
a broker that can serve a later batch before an earlier one, the earlier one appears within
moments. So a gap is accepted (delivered past, recorded, logged) once it has been fetched
again ``min_refetches`` times and ``patience_s`` has passed since it was first seen; only a
later fetch answers a refetch, never the rest of the fetch that showed the gap.

Pure logic, no Kafka: the consumer does what each ``Admit`` says.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from enum import Enum


class Action(Enum):
    DELIVER = "deliver"  # the next offset (or a gap accepted before it): hand it on
    SKIP = "skip"  # already delivered, below where the partition was sought, or held
    REFETCH = "refetch"  # past a gap: skip it and seek back to ``Admit.offset``


class GapEvent(Enum):
    DETECTED = "detected"  # a gap seen for the first time (its records fetched again)
    FILLED = "filled"  # a fetch again returned the records that were missing
    PERSISTENT = "persistent"  # still missing after the patience: accepted and delivered past


@dataclass
class Gap:
    """Offsets ``expected`` .. ``found - 1`` missing before the record at ``found``."""

    expected: int
    found: int
    since: float
    refetches: int = 0
    batch: int = -1  # the last batch that asked for a refetch (one seek per batch)


@dataclass(frozen=True)
class Admit:
    action: Action
    offset: int | None = None  # REFETCH: where to seek back to
    event: GapEvent | None = None
    gap: Gap | None = None  # the gap the event is about


DELIVER = Admit(Action.DELIVER)
SKIP = Admit(Action.SKIP)


class ContinuityGuard:
    """Per partition, the next offset to deliver, the gap being fetched again, and whether the
    partition is held (nothing delivered) while the consumer repositions it."""

    def __init__(self, patience_s: float = 0.0, min_refetches: int = 1) -> None:
        self.patience_s = patience_s
        self.min_refetches = min_refetches
        self.expected: dict[Hashable, int] = {}
        self.gaps: dict[Hashable, Gap] = {}
        self.held: set[Hashable] = set()
        self.resync: set[Hashable] = set()  # released: sought back, no gap to count
        self.batch = 0
        self._resync_batch: dict[Hashable, int] = {}

    def sought(self, tp: Hashable, offset: int) -> None:
        """The partition was sought to ``offset``: that is the next offset to deliver."""
        self.expected[tp] = offset
        self.gaps.pop(tp, None)

    def forget(self, tps: Iterable[Hashable]) -> None:
        """The partitions are no longer assigned."""
        for tp in tps:
            self.expected.pop(tp, None)
            self.gaps.pop(tp, None)
            self.held.discard(tp)
            self.resync.discard(tp)

    def hold(self, tps: Iterable[Hashable]) -> None:
        """Deliver nothing of these partitions until ``release``."""
        self.held.update(tps)

    def release(self) -> dict[Hashable, int]:
        """End every hold; returns where each held partition must be sought back to (records
        skipped while it was held may have moved the fetcher past its next offset)."""
        released = {tp: self.expected[tp] for tp in self.held if tp in self.expected}
        self.held.clear()
        self.resync.update(released)
        return released

    def new_batch(self) -> None:
        """The next records come from a new fetch (one seek back per gap per fetch)."""
        self.batch += 1

    def admit(self, tp: Hashable, offset: int, now: float, strict: bool = True) -> Admit:
        """What to do with the record at ``offset`` of ``tp``. ``strict``: gaps are fetched
        again (otherwise, as on a compacted changelog, any later offset is delivered)."""
        if tp in self.held:
            return SKIP
        expected = self.expected.get(tp)
        if expected is None or offset == expected:
            self.expected[tp] = offset + 1
            self.resync.discard(tp)
            gap = self.gaps.pop(tp, None)
            if gap is not None and expected is not None:
                return Admit(Action.DELIVER, event=GapEvent.FILLED, gap=gap)
            return DELIVER
        if offset < expected:
            return SKIP
        if not strict:
            self.expected[tp] = offset + 1
            return DELIVER
        if tp in self.resync:  # fetched while held: the seek back is on its way
            if self._resync_batch.get(tp) == self.batch:
                return SKIP
            self._resync_batch[tp] = self.batch
            return Admit(Action.REFETCH, offset=expected)
        return self._past_gap(tp, expected, offset, now)

    def _past_gap(self, tp: Hashable, expected: int, offset: int, now: float) -> Admit:
        gap = self.gaps.get(tp)
        event = None
        if gap is None or gap.expected != expected:
            gap = self.gaps[tp] = Gap(expected, offset, now)
            event = GapEvent.DETECTED
        if gap.batch == self.batch:
            # this fetch already asked for the seek back: the rest of it is no answer to it
            # (taken as one, a gap was accepted with no refetch at all when no patience)
            return SKIP
        gap.found = offset
        if gap.refetches >= self.min_refetches and now - gap.since >= self.patience_s:
            del self.gaps[tp]
            self.expected[tp] = offset + 1
            return Admit(Action.DELIVER, event=GapEvent.PERSISTENT, gap=gap)
        gap.batch = self.batch
        gap.refetches += 1
        return Admit(Action.REFETCH, offset=expected, event=event, gap=gap)
