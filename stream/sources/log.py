"""How far this worker has read each source partition it forwards turns from.

Turns reach a thread-events partition from every source partition (the traces and session
topics), forwarded by whichever worker reads that source. A thread can only be judged idle
once the sources that feed it have been read past its deadline: otherwise its next turn may
be sitting unread in a backlog (a restart, a slow judge holding the trace agent back). So
each worker tells every thread-events partition, on its timer, how far each source it owns
has been read, in the two clocks threads close by:

- event time: the latest event time read from the source (never ahead of its arrival);
- arrival: the Kafka time up to which the source has been read: the present when the
  source is caught up (its last message read is the last one there), else the Kafka time
  of the last message read.

A message whose sends failed is sent again in the background while later ones go on
(``OrderedDelivery``): until it is delivered (``hold``, ``release``), its source is read
only up to just before it, in both clocks.

With them goes the Kafka time of the last message read of each source (``Positions.arrived``):
how far behind its arrival a source's event time runs, so that a source that is caught up
can be taken to move on with the clock (``PartitionIndex.reported``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

# a source's position: (event time, read up to), both epoch seconds
Position = tuple[float, float]


@dataclass
class SourceRead:
    offset: int
    arrival: float
    event_time: float = 0.0


class Positions(dict[str, Position]):
    """The position of each source, and (``arrived``) the Kafka time of the last message read
    of each source that has one."""

    def __init__(
        self,
        positions: Mapping[str, Position] | None = None,
        arrived: Mapping[str, float] | None = None,
    ) -> None:
        super().__init__(positions or {})
        self.arrived = dict(arrived or {})


def source_name(topic: str, partition: int) -> str:
    return f"{topic}:{partition}"


def source_topic(source: str) -> str:
    return source.rpartition(":")[0]


class SourceLog:
    """The last message this worker read of each source, and what that says of its position."""

    def __init__(self) -> None:
        self.last: dict[str, SourceRead] = {}
        self.held: dict[str, dict[int, SourceRead]] = {}  # sends being retried, by offset

    def read(self, source: str, offset: int, arrival: float, moment: datetime | None) -> None:
        """The message at ``offset`` of ``source`` (Kafka time ``arrival``) is read and what
        it sends is handed to the producer."""
        event_time = _event_time(moment, arrival)
        before = self.last.get(source)
        if before is None:
            self.last[source] = SourceRead(offset, arrival, event_time)
            return
        # updated in place (one per message read: no new object); no one else holds it
        before.offset = offset
        before.arrival = arrival
        if event_time > before.event_time:
            before.event_time = event_time

    def hold(self, source: str, offset: int, arrival: float, moment: datetime | None) -> None:
        """What the message at ``offset`` of ``source`` sends failed and is being sent again:
        until ``release``, the source is read only up to just before it."""
        self.held.setdefault(source, {})[offset] = SourceRead(
            offset, arrival, _event_time(moment, arrival)
        )

    def release(self, source: str, offset: int) -> None:
        """The message at ``offset`` of ``source`` is delivered after all."""
        held = self.held.get(source, {})
        held.pop(offset, None)
        if not held:
            self.held.pop(source, None)

    def positions(
        self,
        assigned: Mapping[str, tuple[int | None, int | None]],
        now: float,
        fetched: Mapping[str, float] | None = None,
    ) -> Positions:
        """The position of each source in ``assigned`` (source -> (high watermark of the
        last fetch, committed offset), either unknown as None); sources no longer assigned
        are forgotten (their new owner speaks for them). A source caught up is read up to
        when the fetch that gave its high watermark was answered (``fetched``, if known),
        not up to now: a worker stopped for a while (a pause, a long GC) has not fetched
        what arrived meanwhile."""
        fetched = fetched or {}
        for source in set(self.last) - set(assigned):
            del self.last[source]
        for source in set(self.held) - set(assigned):
            del self.held[source]  # its new owner reads it again from the last commit
        positions = Positions(arrived={s: self.last[s].arrival for s in assigned if s in self.last})
        for source, (highwater, committed) in assigned.items():
            last = self.last.get(source)
            event_time = last.event_time if last else 0.0
            up_to = min(now, fetched.get(source, now))
            if highwater is not None and last is not None and last.offset + 1 >= highwater:
                read = max(up_to, last.arrival)  # caught up
            elif last is not None:
                read = last.arrival
            elif highwater is not None and (committed or 0) >= highwater:
                read = up_to  # nothing to read (an empty partition has nothing committed)
            else:
                read = 0.0  # not read yet: a backlog of unknown age
            if held := self.held.get(source):
                event_time, read = _before(held.values(), read, event_time)
            positions[source] = (event_time, read)
        return positions


def _event_time(moment: datetime | None, arrival: float) -> float:
    """A message's event time (epoch s), never ahead of its Kafka time; 0.0: none."""
    if moment is None:
        return 0.0
    aware = moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
    return min(aware.timestamp(), arrival)


def _before(held: Iterable[SourceRead], read: float, event_time: float) -> Position:
    """``read`` and ``event_time`` held back to just before the earliest message held (in
    each clock; Kafka times are in milliseconds)."""
    messages = list(held)
    read = min(read, min(m.arrival for m in messages) - 0.001) if read > 0 else read
    if times := [m.event_time for m in messages if m.event_time > 0]:
        event_time = min(event_time, min(times) - 0.001)
    return max(event_time, 0.0), max(read, 0.0)
