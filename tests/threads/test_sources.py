"""What a worker says of the sources it reads: how far, in event time and in Kafka time."""

from __future__ import annotations

from datetime import UTC, datetime

from stream.sources.log import SourceLog
from stream.threads.events import ThreadEvent, progress

NOW = 1_800_000_000.0


def at(seconds: float) -> datetime:
    return datetime.fromtimestamp(NOW + seconds, UTC)


def test_a_caught_up_source_is_read_up_to_now_and_one_behind_up_to_its_last_message() -> None:
    log = SourceLog()
    log.read("traces:0", 41, NOW - 30, at(-40))
    log.read("traces:1", 9, NOW - 500, at(-600))
    positions = log.positions({"traces:0": (42, 40), "traces:1": (300, 9)}, NOW)
    assert positions == {"traces:0": (NOW - 40, NOW), "traces:1": (NOW - 600, NOW - 500)}


def test_event_time_is_never_ahead_of_arrival_nor_goes_back() -> None:
    log = SourceLog()
    log.read("s:0", 0, NOW - 10, at(3600))  # a clock an hour fast
    log.read("s:0", 1, NOW - 5, at(-900))  # an old event after it
    log.read("s:0", 2, NOW - 4, None)  # no event time (an invalid message)
    assert log.positions({"s:0": (3, 0)}, NOW) == {"s:0": (NOW - 10, NOW)}


def test_a_source_not_read_yet_is_behind_unless_there_is_nothing_to_read() -> None:
    log = SourceLog()
    positions = log.positions(
        {"backlog:0": (50, 10), "empty:0": (7, 7), "unfetched:0": (None, 3), "new:0": (5, None)},
        NOW,
    )
    assert positions == {
        "backlog:0": (0.0, 0.0),
        "empty:0": (0.0, NOW),
        "unfetched:0": (0.0, 0.0),
        "new:0": (0.0, 0.0),
    }


def test_sources_no_longer_assigned_are_forgotten() -> None:
    log = SourceLog()
    log.read("traces:0", 1, NOW, at(0))
    assert log.positions({}, NOW) == {}
    assert log.positions({"traces:0": (2, 2)}, NOW) == {"traces:0": (0.0, NOW)}


def test_positions_say_when_each_sources_last_message_arrived_and_progress_carries_it() -> None:
    """How far a source's event time runs behind its Kafka time: a caught-up source's event
    time is taken to move on with the clock at that lag (``PartitionIndex.reported``)."""
    log = SourceLog()
    log.read("traces:0", 41, NOW - 30, at(-3600))
    positions = log.positions({"traces:0": (42, 40), "traces:1": (5, 5)}, NOW)
    assert positions.arrived == {"traces:0": NOW - 30}
    event = ThreadEvent.from_bytes(progress(NOW, positions))
    assert event.positions == {"traces:0": (NOW - 3600, NOW), "traces:1": (0.0, NOW)}
    assert event.arrived == {"traces:0": NOW - 30}


def test_a_caught_up_source_is_read_only_up_to_its_last_fetch() -> None:
    """A worker that was stopped (SIGSTOP, a long pause) and resumes reports before its next
    fetch: its high watermark is from before the pause, so what arrived since is unread. The
    source is read up to when that fetch was answered, not up to now."""
    log = SourceLog()
    log.read("traces:0", 41, NOW - 30, None)
    assigned = {"traces:0": (42, 40), "traces:1": (7, 7)}  # traces:1: nothing to read
    fetched = {"traces:0": NOW - 25, "traces:1": NOW - 20}
    positions = log.positions(assigned, NOW, fetched)
    assert positions == {"traces:0": (0.0, NOW - 25), "traces:1": (0.0, NOW - 20)}
    assert log.positions(assigned, NOW) == {"traces:0": (0.0, NOW), "traces:1": (0.0, NOW)}


def test_a_message_whose_sends_are_retried_holds_its_source_back_until_delivered() -> None:
    """``OrderedDelivery`` retries a failed send in the background while later messages go
    on: until it is delivered, the source is read only up to just before it (in both clocks),
    whatever was read after it."""
    log = SourceLog()
    log.read("spans:0", 10, NOW - 20, at(-25))
    log.hold("spans:0", 10, NOW - 20, at(-25))  # its send failed: being sent again
    log.read("spans:0", 11, NOW - 10, at(-12))
    assigned = {"spans:0": (12, 9)}  # caught up
    assert log.positions(assigned, NOW) == {"spans:0": (NOW - 25.001, NOW - 20.001)}
    log.release("spans:0", 10)
    assert log.positions(assigned, NOW) == {"spans:0": (NOW - 12, NOW)}
    assert log.held == {}


def test_a_held_message_of_a_source_no_longer_assigned_is_forgotten() -> None:
    log = SourceLog()
    log.hold("spans:0", 3, NOW - 5, None)
    assert log.positions({}, NOW) == {} and log.held == {}
