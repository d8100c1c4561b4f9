"""Spans of one trace gathered until the trace is whole, apart from Faust.

The Collector exports spans in batches as they end, so a trace's spans arrive over several
records (children first, the root last, a late child after it), on any partition of the
spans topic (its Kafka exporter keys records by trace id only when told to). The assembly
agent forwards them, keyed by trace id, to its own partitions; ``TraceAssembler`` folds them
into a table (any ``MutableMapping[bytes, bytes]``: the Faust table in the worker, a dict in
unit tests) and says when a trace is whole:

- its root span (no parent, or a parent in another process) has ended and no new span has arrived for
  ``grace_s`` (late children still get in);
- or, with no root, ``max_wait_s`` after its first span arrived (a root lost or never
  exported: the trace is assembled from what came, and says ``root_missing``).

Times are the Kafka times of the export records, and the clock they are compared with is
the wall clock held back by how far the spans topic has been read: every worker reports,
for each spans partition it reads, the Kafka time it has read up to (the present when it
is caught up), and the clock is the least of those. So a restart's backlog, or a replay
of the spans topic, assembles each trace from all of its spans, as live did: a late child
still unread in some partition's backlog holds its trace back.

A report is written into every assembly partition after the spans it speaks of, so it is
true of the partition it is read from, at the point it is read: the spans it covers are
before it there. Read from another partition it may not be (that partition is read further
ahead, after a recovery most of all), so each assembly partition has its own clock, from
the reports read from it. After a recovery (a worker taking assembly partitions, each read
again from its committed offset) a partition's clock waits until every partition of the
spans topic (``expect``) has been reported on in it, for ``unheard_wait_s`` at most: in a
rebalance a spans partition may have no owner yet, and its backlog may hold the rest of a
trace. Past the wait, a partition no worker reports on counts as read.

Spans are deduplicated by span id (a redelivered batch changes nothing) and bounded per
trace, in count (``max_spans``) and bytes (``max_bytes``: a span that does not fit loses
its long attribute values, then is dropped; the trace counts what it lost). A whole trace
is handed out by ``due`` and, once the caller has published it, ``done`` leaves a small
marker for ``retention_s`` so that a redelivered span of it is recognised as late, counted
and dropped, rather than starting a second, partial copy of the trace.
"""

from __future__ import annotations

import heapq
import logging
import math
import time
from collections import Counter
from collections.abc import Iterable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from ..sources.wait import ReportWait
from .spans import Span

log = logging.getLogger(__name__)

CUT_ABOVE = 1024  # attribute values longer than this go first when a span does not fit


@dataclass
class Gathered:
    """One trace being gathered (or assembled, kept as a marker): its spans (as
    ``Span.as_dict`` plus the resource), where and when they came, what was lost."""

    trace_id: str
    partition: int = 0
    spans: list[dict[str, Any]] = field(default_factory=list)
    first_arrival: float = 0.0
    last_arrival: float = 0.0
    root_ended: bool = False
    size: int = 0  # bytes of the spans as stored
    dropped_spans: int = 0
    cut_spans: int = 0
    assembled: bool = False

    def to_bytes(self) -> bytes:
        return orjson.dumps(self.__dict__)

    @classmethod
    def from_bytes(cls, raw: bytes) -> Gathered:
        return cls(**orjson.loads(raw))


@dataclass
class Whole:
    """A trace ready to be scored."""

    trace_id: str
    spans: list[Span]
    root_missing: bool
    dropped_spans: int
    cut_spans: int
    arrival: float = 0.0  # the Kafka time of its last span record

    def summary(self) -> dict[str, Any]:
        """What the trace document says of its assembly."""
        return {
            "span_count": len(self.spans),
            "root_missing": self.root_missing,
            "dropped_spans": self.dropped_spans,
            "cut_spans": self.cut_spans,
        }


class TraceAssembler:
    def __init__(
        self,
        table: MutableMapping[bytes, bytes],
        *,
        grace_s: float = 5.0,
        max_wait_s: float = 600.0,
        max_spans: int = 1000,
        max_bytes: int = 256_000,
        retention_s: float = 600.0,
        unheard_wait_s: float = 300.0,
    ) -> None:
        self.table = table
        self.unheard_wait_s = unheard_wait_s
        self.grace_s = grace_s
        self.max_wait_s = max_wait_s
        self.max_spans = max_spans
        self.max_bytes = max_bytes
        self.retention_s = retention_s
        # per partition: (when to look at the trace again, trace key); stale ones skipped
        self._due: dict[int, list[tuple[float, bytes]]] = {}
        self._handed_out: set[bytes] = set()  # whole, not yet published
        # per assembly partition, from the reports read from it since the last recovery:
        # spans source (topic:partition) -> (Kafka time read up to, when that was reported)
        self.read: dict[int, dict[str, tuple[float, float]]] = {}
        self.expected: set[str] = set()  # every spans source (topic:partition)
        # the clocks wait for reports on them after a recovery
        self.reports = ReportWait(unheard_wait_s, "span-assembly partitions")

    def expect(self, sources: Iterable[str]) -> None:
        """The spans topic's partitions are ``sources`` (topic:partition)."""
        self.expected = set(sources)

    def rebuild(self, partitions: Iterable[int], now: float | None = None) -> int:
        """Index the traces of ``partitions`` (after a recovery at wall-clock ``now``);
        returns how many. Each is read again from its committed offset, so what its reports
        said is forgotten; until ``unheard_wait_s`` after ``now`` its clock waits for a report
        on every expected source (none when no partition is owned: no trace to hold)."""
        self._due = {p: [] for p in partitions}
        self.read = {p: {} for p in partitions}
        self.reports.end(())
        if self._due:
            self.reports.begin(time.time() if now is None else now)
        self._handed_out = set()
        count = 0
        for key, raw in self.table.items():
            gathered = Gathered.from_bytes(raw)
            if gathered.partition in self._due:
                self._schedule(key, gathered)
                count += 1
        return count

    def progress(self, partition: int, positions: dict[str, float], reported: float) -> None:
        """A report read from assembly ``partition``: a worker has read each spans source in
        ``positions`` up to that Kafka time."""
        read = self.read.setdefault(partition, {})
        for source, up_to in positions.items():
            if reported >= read.get(source, (0.0, 0.0))[1]:
                read[source] = (up_to, reported)

    def unheard(self, now: float) -> list[str]:
        """The expected sources not reported on, since the last recovery, in some partition
        this assembler owns, while the clocks wait for them. The wait ends once every one is
        heard of in every partition, or when ``reports`` is over: those still silent then count
        as read (said once in the log)."""
        if not self.reports.waiting:
            return []
        missing = sorted(set().union(*(self._missing(p) for p in self._due)))
        if missing and now < self.reports.until:
            return missing
        self.reports.end(missing)
        return []

    def _missing(self, partition: int) -> set[str]:
        return self.expected - set(self.read.get(partition, {}))

    def waited_since(self) -> float:
        """When the current wait for reports began (the recovery)."""
        return self.reports.since

    def clock(self, partition: int, now: float) -> float:
        """``now``, held back by the least read spans source as reported in ``partition``;
        nothing (-inf) while a source is not reported on there since a recovery."""
        if self.unheard(now) and self._missing(partition):
            return -math.inf
        slowest = self.slowest(partition)
        return min(now, slowest[1]) if slowest else now

    def clock_lag(self, now: float) -> float:
        """Seconds the clock is behind ``now`` (0 when every source is caught up): while it
        waits for reports after a recovery, the time since the recovery; a source reported
        not read yet (a backlog of unknown age) counts from when that was reported."""
        if self.unheard(now):
            return max(0.0, now - self.waited_since())
        reads = [position for read in self.read.values() for position in read.values()]
        if not reads:
            return 0.0
        behind = min(read if read > 0 else reported for read, reported in reads)
        return max(0.0, now - behind)

    def slowest(self, partition: int | None = None) -> tuple[str, float] | None:
        """The least read spans source and the Kafka time it is read up to, as reported in
        ``partition`` (in any partition: None)."""
        reads = [
            (source, position[0])
            for p, read in self.read.items()
            if partition is None or p == partition
            for source, position in read.items()
        ]
        return min(reads, key=lambda read: read[1]) if reads else None

    def add(
        self, partition: int, trace_id: str, spans: list[dict[str, Any]], arrival: float
    ) -> Counter[str]:
        """Fold ``spans`` of ``trace_id`` (``Span.stored``, from an export record of Kafka
        time ``arrival``) into its trace; returns how many were kept, duplicate, late (the
        trace is already assembled) or dropped."""
        key = trace_id.encode()
        raw = self.table.get(key)
        gathered = (
            Gathered.from_bytes(raw)
            if raw
            else Gathered(trace_id, partition, first_arrival=arrival)
        )
        outcomes: Counter[str] = Counter()
        if gathered.assembled:
            outcomes["late"] = len(spans)
            return outcomes
        known = {s["span_id"] for s in gathered.spans}
        for span in spans:
            if span["span_id"] in known:
                outcomes["duplicate"] += 1  # a redelivered batch: not activity
                continue
            known.add(span["span_id"])
            outcomes["kept" if self._keep(gathered, span) else "dropped"] += 1
        if outcomes["duplicate"] == len(spans):
            return outcomes
        gathered.last_arrival = max(gathered.last_arrival, arrival)
        gathered.root_ended = self._root_ended(gathered)
        self.table[key] = gathered.to_bytes()
        self._schedule(key, gathered)
        return outcomes

    def due(self, partition: int, now: float) -> list[Whole]:
        """The traces of ``partition`` whole at wall-clock ``now`` (each handed out once by
        this assembler; ``done`` when published). Markers past their retention go."""
        heap = self._due.get(partition)
        if not heap:
            return []
        clock = self.clock(partition, now)
        wholes = []
        while heap and heap[0][0] <= clock:
            _, key = heapq.heappop(heap)
            raw = self.table.get(key)
            if raw is None or key in self._handed_out:
                continue  # gone, or queued more than once (each span record queues it)
            gathered = Gathered.from_bytes(raw)
            if self._ready_at(gathered) > clock:
                continue  # it moved on: a later entry is queued
            if gathered.assembled:
                del self.table[key]
                continue
            self._handed_out.add(key)
            wholes.append(
                Whole(
                    gathered.trace_id,
                    [Span.from_stored(gathered.trace_id, s) for s in gathered.spans],
                    root_missing=not gathered.root_ended,
                    dropped_spans=gathered.dropped_spans,
                    cut_spans=gathered.cut_spans,
                    arrival=gathered.last_arrival,
                )
            )
        return wholes

    def done(self, trace_id: str) -> None:
        """``trace_id`` is published: keep only a marker of it, for ``retention_s``."""
        key = trace_id.encode()
        self._handed_out.discard(key)
        raw = self.table.get(key)
        if raw is None:
            return
        gathered = Gathered.from_bytes(raw)
        marker = Gathered(
            trace_id,
            gathered.partition,
            first_arrival=gathered.first_arrival,
            last_arrival=gathered.last_arrival,
            root_ended=gathered.root_ended,
            assembled=True,
        )
        if self.retention_s <= 0:
            del self.table[key]
            return
        self.table[key] = marker.to_bytes()
        self._schedule(key, marker)

    def gathering(self) -> int:
        """Traces held (being gathered, or markers of assembled ones)."""
        return len(self.table)

    def _keep(self, gathered: Gathered, stored: dict[str, Any]) -> bool:
        if len(gathered.spans) >= self.max_spans:
            gathered.dropped_spans += 1
            return False
        size = len(orjson.dumps(stored))
        if gathered.size + size > self.max_bytes:
            stored, size = cut(stored)
            if gathered.size + size > self.max_bytes:
                gathered.dropped_spans += 1
                return False
            gathered.cut_spans += 1
        gathered.spans.append(stored)
        gathered.size += size
        return True

    def _ready_at(self, gathered: Gathered) -> float:
        if gathered.assembled:
            return gathered.last_arrival + self.grace_s + self.retention_s
        if gathered.root_ended:
            return gathered.last_arrival + self.grace_s
        return gathered.first_arrival + self.max_wait_s

    def _schedule(self, key: bytes, gathered: Gathered) -> None:
        heap = self._due.setdefault(gathered.partition, [])
        heapq.heappush(heap, (self._ready_at(gathered), key))

    @staticmethod
    def _root_ended(gathered: Gathered) -> bool:
        return any(
            (s["parent_span_id"] is None or s.get("remote_parent")) and s["end_time"]
            for s in gathered.spans
        )


def cut(stored: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """``stored`` without its long attribute values (each replaced by a marker)."""
    attributes = {
        name: value
        if len(orjson.dumps(value)) <= CUT_ABOVE
        else f"[cut: {len(orjson.dumps(value))} bytes]"
        for name, value in (stored.get("attributes") or {}).items()
    }
    cut = {**stored, "attributes": attributes}
    return cut, len(orjson.dumps(cut))
