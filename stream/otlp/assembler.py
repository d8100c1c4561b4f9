"""Spans of one trace gathered until the trace is whole, apart from Faust.

The Collector exports spans in batches as they end, so a trace's spans arrive over several
records (children first, the root last, a late child after it). ``TraceAssembler`` folds
them into a table (any ``MutableMapping[bytes, bytes]``: the Faust table in the worker, a
dict in unit tests) keyed by trace id, and says when a trace is whole:

- its root span (no parent among its spans) has ended and no new span has arrived for
  ``grace_s`` (late children still get in);
- or, with no root, ``max_wait_s`` after its first span arrived (a root lost or never
  exported: the trace is assembled from what came, and says ``root_missing``).

Spans are deduplicated by span id (a redelivered batch changes nothing) and bounded per
trace (``max_spans``, the oldest kept, the rest counted in ``dropped_spans``). Times are
Kafka arrival times, so redelivery cannot make a trace look younger; ``tick`` is the wall
clock. A whole trace is handed out once and its entry deleted: the caller publishes it.
"""

from __future__ import annotations

import heapq
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson

from .spans import Span


@dataclass
class Gathered:
    """One trace being gathered: its spans (as ``Span.as_dict`` plus the trace id and the
    resource), and when they came."""

    trace_id: str
    spans: list[dict[str, Any]] = field(default_factory=list)
    first_arrival: float = 0.0
    last_arrival: float = 0.0
    root_ended: bool = False
    dropped_spans: int = 0

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


class TraceAssembler:
    def __init__(
        self,
        table: MutableMapping[bytes, bytes],
        *,
        grace_s: float = 5.0,
        max_wait_s: float = 600.0,
        max_spans: int = 1000,
    ) -> None:
        self.table = table
        self.grace_s = grace_s
        self.max_wait_s = max_wait_s
        self.max_spans = max_spans
        # (when to look at the trace again, trace key); stale entries are skipped
        self._due: list[tuple[float, bytes]] = []

    def rebuild(self) -> int:
        """Index the table (after a recovery); returns the traces being gathered."""
        self._due = []
        for key, raw in self.table.items():
            self._schedule(key, Gathered.from_bytes(raw))
        return len(self.table)

    def add(self, spans: list[Span], arrival: float) -> None:
        """Fold ``spans`` (from one export record, Kafka time ``arrival``) into their traces."""
        by_trace: dict[str, list[Span]] = {}
        for span in spans:
            by_trace.setdefault(span.trace_id, []).append(span)
        for trace_id, new in by_trace.items():
            key = trace_id.encode()
            raw = self.table.get(key)
            gathered = (
                Gathered.from_bytes(raw) if raw else Gathered(trace_id, first_arrival=arrival)
            )
            known = {s["span_id"] for s in gathered.spans}
            added = [s for s in new if s.span_id not in known]
            if not added:
                continue  # a redelivered batch: nothing new, not activity
            for span in added:
                if len(gathered.spans) >= self.max_spans:
                    gathered.dropped_spans += 1
                    continue
                gathered.spans.append({**span.as_dict(), "resource": span.resource})
            gathered.last_arrival = max(gathered.last_arrival, arrival)
            gathered.root_ended = self._root_ended(gathered)
            self.table[key] = gathered.to_bytes()
            self._schedule(key, gathered)

    def tick(self, now: float) -> list[Whole]:
        """The traces whole at ``now`` (each handed out once; their entries deleted)."""
        wholes = []
        while self._due and self._due[0][0] <= now:
            _, key = heapq.heappop(self._due)
            raw = self.table.get(key)
            if raw is None:
                continue
            gathered = Gathered.from_bytes(raw)
            if self._ready_at(gathered) > now:
                continue  # it moved on: a later entry is queued
            del self.table[key]
            wholes.append(
                Whole(
                    gathered.trace_id,
                    [_span(gathered.trace_id, s) for s in gathered.spans],
                    root_missing=not gathered.root_ended,
                    dropped_spans=gathered.dropped_spans,
                )
            )
        return wholes

    def gathering(self) -> int:
        return len(self.table)

    def _ready_at(self, gathered: Gathered) -> float:
        if gathered.root_ended:
            return gathered.last_arrival + self.grace_s
        return gathered.first_arrival + self.max_wait_s

    def _schedule(self, key: bytes, gathered: Gathered) -> None:
        heapq.heappush(self._due, (self._ready_at(gathered), key))

    @staticmethod
    def _root_ended(gathered: Gathered) -> bool:
        return any(s["parent_span_id"] is None and s["end_time"] for s in gathered.spans)


def _span(trace_id: str, stored: dict[str, Any]) -> Span:
    def moment(text: str | None) -> datetime | None:
        return datetime.fromisoformat(text) if text else None

    return Span(
        trace_id=trace_id,
        span_id=stored["span_id"],
        parent_span_id=stored.get("parent_span_id"),
        name=stored.get("name", ""),
        start=moment(stored.get("start_time")),
        end=moment(stored.get("end_time")),
        attributes=stored.get("attributes") or {},
        resource=stored.get("resource") or {},
        status=stored.get("status"),
    )
