"""The thread agent's decisions, on a plain dict as the table: when threads close, once."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from stream.threads.events import ThreadEvent, published
from stream.threads.processor import ThreadProcessor
from stream.threads.state import ThreadClose, ThreadLimits, ThreadState, Turn

T0 = datetime(2026, 11, 20, 18, 0, tzinfo=UTC)
GAP = 900.0
WALL = 1_800_000_000.0  # "now" for live tests


def processor(table: dict[bytes, bytes] | None = None, **options: float) -> ThreadProcessor:
    return ThreadProcessor(
        {} if table is None else table,
        gaps={"conversation": GAP, "session": options.pop("session_gap", GAP)},
        limits=ThreadLimits(max_turns=int(options.pop("max_turns", 200))),
        retention_s=options.pop("retention_s", 3600.0),
        sessions_topic="coaching-sessions",
        clock=lambda: WALL,
    )


def chat(thread: str, n: int, *, arrival: float, at: datetime | None = None, end: bool = False):
    turn = Turn(
        key=f"{thread}-trace-{n}",
        event_time=at or datetime.fromtimestamp(arrival, UTC),
        messages=[{"role": "user", "content": f"q{n}"}, {"role": "assistant", "content": f"a{n}"}],
    )
    return ThreadEvent(
        type="turn",
        thread_id=thread,
        project_name="fretcoach",
        arrival=arrival,
        turn=turn,
        end=end,
        rules=["hub_conversational_coherence"],
    )


def tick(now: float) -> ThreadEvent:
    return ThreadEvent(type="tick", arrival=now)


def closes_of(closes: list[ThreadClose]) -> list[tuple[str, int, str]]:
    return [(c.thread_id, c.pending.close_seq, c.pending.reason) for c in closes]


def test_an_idle_thread_closes_once_at_the_first_tick_past_its_gap() -> None:
    p = processor()
    assert p.apply(0, chat("a", 0, arrival=WALL)) == []
    assert p.apply(0, chat("a", 1, arrival=WALL + 60)) == []
    assert p.open_threads() == 1
    assert p.apply(0, tick(WALL + 60 + GAP - 1)) == []
    (close,) = p.apply(0, tick(WALL + 60 + GAP))
    assert (close.thread_id, close.pending.close_seq, close.pending.reason) == (
        "a",
        1,
        "inactivity",
    )
    assert [m["content"] for m in close.pending.document["messages"]] == ["q0", "a0", "q1", "a1"]
    assert close.pending.rules == ["hub_conversational_coherence"]
    assert p.apply(0, tick(WALL + 10 * GAP)) == [] and p.open_threads() == 0
    assert p.pending_closes() == 1


def test_a_redelivered_turn_after_the_close_neither_reopens_nor_closes_again() -> None:
    p = processor()
    p.apply(0, chat("a", 0, arrival=WALL))
    assert len(p.apply(0, tick(WALL + GAP))) == 1
    assert p.apply(0, chat("a", 0, arrival=WALL)) == []  # the same turn again
    assert p.apply(0, tick(WALL + 3 * GAP)) == [] and p.open_threads() == 0


def test_an_end_closes_at_once_and_a_late_turn_reopens_under_the_next_close_seq() -> None:
    p = processor()
    p.apply(0, chat("a", 0, arrival=WALL))
    assert closes_of(p.apply(0, chat("a", 1, arrival=WALL + 5, end=True))) == [("a", 1, "end")]
    assert p.apply(0, chat("a", 2, arrival=WALL + 50)) == []
    (second,) = p.apply(0, tick(WALL + 50 + GAP))
    assert (second.pending.close_seq, second.pending.document["turn_count"]) == (2, 3)


def test_a_replay_closes_by_event_time_where_live_would_have() -> None:
    """History replayed in seconds: thread a's last event is 18:00; when the partition's events
    reach 18:15 it closes, although wall-clock arrival moved by a second only."""
    p = processor()
    p.apply(0, chat("a", 0, arrival=WALL, at=T0))
    assert p.apply(0, chat("b", 0, arrival=WALL + 0.5, at=T0 + timedelta(minutes=14))) == []
    closes = p.apply(0, chat("b", 1, arrival=WALL + 1, at=T0 + timedelta(minutes=15)))
    assert closes_of(closes) == [("a", 1, "inactivity_event_time")]
    # thread b (last event 18:15) stays open until the watermark reaches 18:30
    assert p.open_threads() == 1


def sourced(event: ThreadEvent, source: str) -> ThreadEvent:
    event.source = source
    return event


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def test_event_time_waits_for_the_slowest_of_a_threads_own_sources() -> None:
    """Turns of one thread from several source partitions, out of time order between them:
    the thread does not close by event time while a source that fed it is behind."""
    p = processor()
    p.apply(0, sourced(chat("a", 0, arrival=WALL, at=at(0)), "traces:0"))
    p.apply(0, sourced(chat("a", 1, arrival=WALL + 1, at=at(5)), "traces:1"))
    # traces:0 is at 18:30, traces:1 still at 18:05: a's next turn may come from traces:1
    assert p.apply(0, sourced(chat("b", 0, arrival=WALL + 2, at=at(30)), "traces:0")) == []
    assert p.apply(0, sourced(chat("c", 0, arrival=WALL + 3, at=at(19)), "traces:1")) == []
    # min(18:30, 18:21) passes 18:05 + 15 minutes
    closes = p.apply(0, sourced(chat("d", 0, arrival=WALL + 4, at=at(21)), "traces:1"))
    assert closes_of(closes) == [("a", 1, "inactivity_event_time")]


def test_a_source_that_runs_ahead_is_not_held_back_by_another() -> None:
    """A replay keyed by thread id, one source read far ahead of the other: each thread's
    event time is its own source's, so a pause closes the thread before the turn after it,
    as live; the other source being hours behind changes nothing."""
    p = processor()
    p.apply(0, sourced(chat("slow", 0, arrival=WALL, at=at(0)), "traces:1"))
    p.apply(0, sourced(chat("a", 0, arrival=WALL, at=at(0)), "traces:0"))
    p.apply(0, sourced(chat("a", 1, arrival=WALL, at=at(5)), "traces:0"))
    closes = p.apply(0, sourced(chat("b", 0, arrival=WALL + 1, at=at(21)), "traces:0"))
    assert closes_of(closes) == [("a", 1, "inactivity_event_time")]
    assert closes[0].pending.document["turn_count"] == 2
    # a's own turn after a 40-minute pause reopens it; b, idle for 40 minutes, closes
    closes = p.apply(0, sourced(chat("a", 2, arrival=WALL + 2, at=at(61)), "traces:0"))
    assert closes_of(closes) == [("b", 1, "inactivity_event_time")]
    p.apply(0, sourced(chat("a", 3, arrival=WALL + 2, at=at(62)), "traces:0"))
    closes = p.apply(0, sourced(chat("e", 0, arrival=WALL + 3, at=at(80)), "traces:0"))
    assert closes_of(closes) == [("a", 2, "inactivity_event_time")]
    assert closes[0].pending.document["turn_count"] == 4  # the whole conversation
    assert p.open_threads() == 2  # slow (its source is at 18:00) and e


def test_a_turn_more_than_the_gap_after_its_threads_last_closes_it_first() -> None:
    """A sparse source: the thread's own next turn is the first news that its source has moved
    past the gap. The turn is not folded into the old conversation: the thread closes, then
    the turn reopens it."""
    p = processor()
    p.apply(0, sourced(chat("a", 0, arrival=WALL, at=at(0)), "traces:0"))
    closes = p.apply(0, sourced(chat("a", 1, arrival=WALL + 1, at=at(14)), "traces:0"))
    assert closes == []  # 14 minutes: the same conversation
    closes = p.apply(0, sourced(chat("a", 2, arrival=WALL + 2, at=at(30)), "traces:0"))
    assert closes_of(closes) == [("a", 1, "inactivity_event_time")]
    assert closes[0].pending.document["turn_count"] == 2
    assert p.open_threads() == 1


def moved(now: float, **positions: tuple[float, float]) -> ThreadEvent:
    """A progress event: source (``traces_0`` for traces:0) -> (event time, read up to)."""
    named = {k.replace("_", ":"): v for k, v in positions.items()}
    return ThreadEvent(type="progress", arrival=now, positions=named)


def test_progress_events_move_a_source_that_feeds_the_partition_rarely() -> None:
    p = processor()
    p.apply(0, sourced(chat("a", 0, arrival=WALL, at=at(0)), "traces:0"))
    assert p.apply(0, moved(WALL + 1, traces_0=(at(14).timestamp(), WALL + 1))) == []
    closes = p.apply(0, moved(WALL + 2, traces_0=(at(15).timestamp(), WALL + 2)))
    assert closes_of(closes) == [("a", 1, "inactivity_event_time")]
    assert p.apply(0, moved(WALL + 3, traces_9=(at(99).timestamp(), WALL + 3))) == []
    assert p.open_threads() == 0


def test_an_idle_thread_waits_while_its_source_has_a_backlog() -> None:
    """Past its gap on the wall clock, but its source is read only up to a point before
    the deadline: its next turn may be in the backlog. It was: the thread goes on."""
    p = processor()
    p.apply(0, sourced(chat("a", 0, arrival=WALL), "traces:0"))
    p.apply(0, moved(WALL + GAP + 5, traces_0=(0.0, WALL + 100)))  # read up to WALL + 100
    assert p.apply(0, tick(WALL + GAP + 5)) == [] and p.open_threads() == 1
    p.apply(0, sourced(chat("a", 1, arrival=WALL + 600), "traces:0"))  # out of the backlog
    assert p.apply(0, moved(WALL + GAP + 8, traces_0=(0.0, WALL + GAP + 1))) == []
    # read past the new deadline (WALL + 600 + GAP): the thread closes with both turns
    closes = p.apply(0, moved(WALL + 2 * GAP, traces_0=(0.0, WALL + 600 + GAP)))
    assert closes == []  # the wall clock has not got there yet: the next tick decides
    (close,) = p.apply(0, tick(WALL + 600 + GAP))
    assert (close.pending.reason, close.pending.document["turn_count"]) == ("inactivity", 2)


def test_a_thread_that_waited_for_its_source_closes_when_the_source_is_read_past_it() -> None:
    p = processor()
    p.apply(0, sourced(chat("a", 0, arrival=WALL), "traces:0"))
    p.apply(0, sourced(chat("b", 0, arrival=WALL), "sessions:1"))
    p.apply(0, moved(WALL + GAP, traces_0=(0.0, WALL + 10), sessions_1=(0.0, WALL + GAP)))
    assert closes_of(p.apply(0, tick(WALL + GAP))) == [("b", 1, "inactivity")]
    closes = p.apply(0, moved(WALL + GAP + 30, traces_0=(0.0, WALL + GAP + 30)))  # caught up
    assert closes_of(closes) == [("a", 1, "inactivity")]


def test_a_turn_read_late_from_a_backlog_closes_its_thread_first() -> None:
    """Its Kafka time is more than the gap after the thread's last turn: live, the thread
    closed in between, so it closes before the turn is folded, and the turn reopens it."""
    p = processor()
    p.apply(0, sourced(chat("a", 0, arrival=WALL), "traces:0"))
    closes = p.apply(0, sourced(chat("a", 1, arrival=WALL + GAP + 10), "traces:0"))
    assert closes_of(closes) == [("a", 1, "inactivity")]
    assert closes[0].pending.document["turn_count"] == 1
    assert p.open_threads() == 1


def test_a_recovery_does_not_move_a_threads_event_time() -> None:
    """After a restart or rebalance each source's progress is what the table shows of it; a
    thread is not closed early because another source's threads are further on."""
    table: dict[bytes, bytes] = {}
    before = processor(table)
    before.apply(0, sourced(chat("a", 0, arrival=WALL, at=at(0)), "traces:0"))
    before.apply(0, sourced(chat("b", 0, arrival=WALL, at=at(40)), "traces:1"))
    after = processor(table)
    assert after.rebuild([0]) == 2
    assert after.apply(0, sourced(chat("c", 0, arrival=WALL, at=at(50)), "traces:1")) == []
    assert after.apply(0, sourced(chat("a", 1, arrival=WALL, at=at(10)), "traces:0")) == []
    closes = after.apply(0, sourced(chat("d", 0, arrival=WALL, at=at(26)), "traces:0"))
    assert closes_of(closes) == [("a", 1, "inactivity_event_time")]
    assert closes[0].pending.document["turn_count"] == 2


def test_event_time_never_runs_ahead_of_arrival() -> None:
    """A trace stamped a day in the future cannot push the watermark and close everything."""
    p = processor()
    p.apply(0, chat("a", 0, arrival=WALL))
    assert p.apply(0, chat("b", 0, arrival=WALL + 1, at=T0 + timedelta(days=4000))) == []
    assert p.open_threads() == 2


def test_partitions_close_independently() -> None:
    p = processor()
    p.apply(0, chat("a", 0, arrival=WALL))
    p.apply(1, chat("b", 0, arrival=WALL))
    assert closes_of(p.apply(1, tick(WALL + GAP))) == [("b", 1, "inactivity")]
    assert p.open_threads() == 1  # a waits for a tick of its own partition


def test_after_a_restart_the_index_is_rebuilt_from_the_table_and_pending_closes_resume() -> None:
    table: dict[bytes, bytes] = {}
    before = processor(table)
    before.apply(0, chat("open", 0, arrival=WALL))
    before.apply(0, chat("done", 0, arrival=WALL, end=True))  # closed; scores never published
    before.apply(1, chat("elsewhere", 0, arrival=WALL))
    after = processor(table)  # a new worker process on the same (recovered) table
    assert after.rebuild([0]) == 2
    assert after.open_threads() == 1 and after.pending_closes() == 1
    resumed = after.apply(0, tick(WALL + 1))
    assert closes_of(resumed) == [("done", 1, "end")]  # scored again, same close seq
    assert after.apply(0, tick(WALL + 2)) == []  # once per recovery
    assert closes_of(after.apply(0, tick(WALL + GAP))) == [("open", 1, "inactivity")]
    after.apply(0, published("conversation", "done", 1))
    after.apply(0, published("conversation", "open", 1))
    assert after.pending_closes() == 0
    state = ThreadState.from_bytes(table[b"conversation/done"])
    assert (state.pending, state.published, state.closes) == ([], 1, 1)


def test_a_close_made_after_a_recovery_is_not_scored_again_at_its_first_tick() -> None:
    """Only the closes left pending by the previous owner are scored again after a recovery;
    one this worker made since (its scores on their way) is not handed out twice."""
    table: dict[bytes, bytes] = {}
    before = processor(table)
    before.apply(0, chat("left", 0, arrival=WALL, end=True))  # pending when the owner died
    after = processor(table)
    after.rebuild([0])
    assert closes_of(after.apply(0, chat("new", 0, arrival=WALL + 1, end=True))) == [
        ("new", 1, "end")
    ]
    assert closes_of(after.apply(0, tick(WALL + 2))) == [("left", 1, "end")]
    assert after.apply(0, tick(WALL + 3)) == []


def test_closed_threads_are_forgotten_after_the_retention_and_start_anew_with_new_ids() -> None:
    table: dict[bytes, bytes] = {}
    p = processor(table, retention_s=100.0)
    (first,) = p.apply(0, chat("a", 0, arrival=WALL, end=True))
    empty = ThreadEvent(
        type="end", kind="session", thread_id="s", arrival=WALL, event_time=T0, end_key="end-0"
    )
    p.apply(0, empty)
    p.apply(0, published("conversation", "a", 1))
    p.apply(0, tick(WALL + GAP + 99))
    assert len(ThreadState.from_bytes(table[b"conversation/a"]).turns) == 1
    p.apply(0, tick(WALL + GAP + 100))
    assert list(table) == [b"session/s"]  # its close is not published yet: kept
    p.apply(0, published("session", "s", 1))
    p.apply(0, tick(WALL + GAP + 101))
    assert table == {}  # nothing of either stays
    # much later, the same thread id again: a new thread, whose close ids differ
    (again,) = p.apply(0, chat("a", 1, arrival=WALL + 5000, end=True))
    assert (again.pending.close_seq, again.pending.document["turn_count"]) == (1, 1)
    assert first.target == f"a@{round(WALL * 1000)}#1"
    assert again.target == f"a@{round((WALL + 5000) * 1000)}#1"


def test_a_close_of_a_thread_from_before_the_opened_mark_keeps_its_id() -> None:
    old = ThreadState(thread_id="old", kind="conversation", is_open=False, closes=1, published=1)
    table = {b"conversation/old": old.to_bytes()}
    p = processor(table)
    (close,) = p.apply(0, chat("old", 0, arrival=WALL, end=True))
    assert close.target == "old#2"


def test_a_session_with_only_an_end_closes_empty() -> None:
    p = processor()
    end = ThreadEvent(
        type="end",
        kind="session",
        thread_id="s-1",
        arrival=WALL,
        event_time=T0,
        end_key="end-0",
    )
    (close,) = p.apply(0, end)
    assert (close.kind, close.pending.reason, close.pending.document["turn_count"]) == (
        "session",
        "end",
        0,
    )
    assert close.topic == "coaching-sessions"
    assert p.apply(0, end) == []  # the same end event again
