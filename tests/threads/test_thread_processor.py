"""The thread agent's decisions, on a plain dict as the table: when threads close, once."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from stream.threads.events import ThreadEvent, published
from stream.threads.processor import ThreadProcessor
from stream.threads.state import ThreadClose, ThreadLimits, ThreadState
from stream.threads.turns import Turn

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


def test_after_a_recovery_a_source_not_reported_on_yet_holds_its_threads() -> None:
    """A new owner of the partition (a rebalance) has heard nothing of traces:0 yet: its owner
    may not have it either, and its backlog may hold the thread's next turn. The thread waits
    past its wall-clock deadline until a report says the source is read past it; a turn
    read in between joins it (the chaos run's early closes: closed 1 s after a recovery)."""
    table: dict[bytes, bytes] = {}
    before = processor(table)
    before.apply(0, sourced(chat("a", 0, arrival=WALL - GAP), "traces:0"))
    after = processor(table)
    assert after.rebuild([0]) == 1
    assert after.apply(0, tick(WALL + 1)) == [] and after.open_threads() == 1
    assert after.apply(0, moved(WALL + 2, traces_0=(0.0, WALL - GAP + 100))) == []  # a backlog
    after.apply(0, sourced(chat("a", 1, arrival=WALL - GAP + 200), "traces:0"))  # out of it
    assert after.apply(0, moved(WALL + 3, traces_0=(0.0, WALL + 3))) == []  # caught up
    assert after.apply(0, moved(WALL + 200, traces_0=(0.0, WALL + 200))) == []
    (close,) = after.apply(0, tick(WALL + 200))  # a1 came at WALL - GAP + 200
    assert (close.pending.reason, turns(close)) == ("inactivity", 2)


def test_after_a_recovery_a_source_never_reported_on_counts_as_read_after_the_wait() -> None:
    """No worker reads traces:0 any more (no report names it): its threads close once the
    wait for reports is over, not never; a source a report named before is not waited for."""
    table: dict[bytes, bytes] = {}
    before = processor(table)
    before.apply(0, sourced(chat("a", 0, arrival=WALL - GAP), "traces:0"))
    before.apply(0, sourced(chat("b", 0, arrival=WALL - GAP), "traces:1"))
    after = processor(table)
    after.unheard_wait_s = 60.0
    assert after.rebuild([0]) == 2
    assert after.apply(0, moved(WALL + 1, traces_1=(0.0, WALL + 1))) == []
    assert closes_of(after.apply(0, tick(WALL + 2))) == [("b", 1, "inactivity")]
    assert after.apply(0, tick(WALL + 59)) == [] and after.open_threads() == 1
    assert closes_of(after.apply(0, tick(WALL + 60))) == [("a", 1, "inactivity")]


def test_after_a_recovery_a_spread_thread_waits_for_partitions_the_table_does_not_name() -> None:
    """The table names traces:0 and traces:1 only; the consumer's metadata says traces has 4
    partitions. Reports on the first two do not close the spread threads while traces:2 and
    traces:3 (no owner yet) are unheard: an earlier turn may be there."""
    table: dict[bytes, bytes] = {}
    before = processor(table)
    before.apply(0, spread(chat("a", 0, arrival=WALL - GAP, at=at(0)), "traces:0"))
    before.apply(0, spread(chat("b", 0, arrival=WALL - GAP, at=at(0)), "traces:1"))
    after = processor(table)
    after.expect({"traces": 4})
    after.rebuild([0])
    assert after.apply(0, tick(WALL + 1)) == []
    read = (at(0).timestamp(), WALL + 2)
    assert after.apply(0, report(WALL + 2, None, traces_0=read, traces_1=read)) == []
    assert after.apply(0, tick(WALL + 3)) == [] and after.open_threads() == 2
    read = (at(0).timestamp(), WALL + 4)
    closes = after.apply(0, report(WALL + 4, None, traces_2=read, traces_3=read))
    closes += after.apply(0, tick(WALL + 5))
    assert sorted(closes_of(closes)) == [("a", 1, "inactivity"), ("b", 1, "inactivity")]


def test_a_processor_that_never_recovered_waits_for_no_report() -> None:
    """Without a recovery (a worker's first events on a partition it has always had) there is
    no one to hear from first: a source never reported on counts as read."""
    p = processor()
    p.apply(0, sourced(chat("a", 0, arrival=WALL), "traces:0"))
    assert closes_of(p.apply(0, tick(WALL + GAP))) == [("a", 1, "inactivity")]


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


# -- spread threads: turns through any partition of their topic (keyed by trace id) ----------


def spread(event: ThreadEvent, source: str) -> ThreadEvent:
    """``event`` through ``source``, from a message not keyed by its thread id."""
    event.source, event.spread = source, True
    return event


def report(now: float, arrived: float | None = None, **positions: tuple[float, float]):
    """A worker's progress report at ``now``: source (``traces_0``) -> (event time, read up to),
    each source's last message arrived at ``arrived`` (None: not said)."""
    named = {k.replace("_", ":"): v for k, v in positions.items()}
    last = {} if arrived is None else dict.fromkeys(named, arrived)
    return ThreadEvent(type="progress", arrival=now, positions=named, arrived=last)


def turns(close: ThreadClose) -> int:
    return close.pending.document["turn_count"]


def test_a_partition_read_far_ahead_cannot_close_a_spread_thread_before_its_earlier_turns() -> None:
    """Thread a's turns (18:00 on traces:1, 18:05 on traces:0, 18:40 on traces:2) are spread
    over the partitions; traces:0 is read to 19:00 while the others are an hour behind. Live,
    a closed at 18:20 with two turns, then reopened at 18:40: so it does here, although its
    18:05 turn was read first and traces:0 alone passed 18:20 long before."""
    p = processor()
    assert p.apply(0, spread(chat("a", 1, arrival=WALL, at=at(5)), "traces:0")) == []
    behind = (at(-60).timestamp(), WALL + 1)  # read up to 17:00, with a backlog
    p.apply(0, report(WALL + 1, WALL, traces_0=(at(5).timestamp(), WALL + 1), traces_1=behind))
    p.apply(0, report(WALL + 1, WALL, traces_2=behind))
    assert p.apply(0, spread(chat("x", 0, arrival=WALL + 2, at=at(60)), "traces:0")) == []
    assert p.apply(0, spread(chat("a", 0, arrival=WALL + 3, at=at(0)), "traces:1")) == []
    assert p.apply(0, spread(chat("y", 0, arrival=WALL + 4, at=at(30)), "traces:2")) == []
    closes = p.apply(0, spread(chat("z", 0, arrival=WALL + 5, at=at(50)), "traces:1"))
    assert closes_of(closes) == [("a", 1, "inactivity_event_time")]  # event time 18:30
    assert turns(closes[0]) == 2
    assert p.apply(0, spread(chat("a", 2, arrival=WALL + 6, at=at(40)), "traces:2")) == []
    later = (at(70).timestamp(), WALL + 7)
    closes = p.apply(0, report(WALL + 7, None, traces_0=later, traces_1=later, traces_2=later))
    assert sorted(closes_of(closes)) == [
        ("a", 2, "inactivity_event_time"),
        ("y", 1, "inactivity_event_time"),
        ("z", 1, "inactivity_event_time"),
    ]
    assert [turns(c) for c in closes if c.thread_id == "a"] == [3]  # the whole conversation
    assert p.open_threads() == 1  # x (19:00) waits for 19:15


def test_a_spread_threads_events_are_folded_in_the_order_their_source_was_read() -> None:
    """A session's end stamped before its last turn, read after it: the end waits behind the
    turn (its source's order), and both wait until every partition has reached them."""
    p = processor(session_gap=4.0)
    behind = (at(-1).timestamp(), WALL)
    p.apply(0, report(WALL, WALL, sessions_0=behind, sessions_1=behind))

    def session(seq: int, moment: datetime, end: bool = False) -> ThreadEvent:
        if end:
            event = ThreadEvent(
                type="end", kind="session", thread_id="s", arrival=WALL, event_time=moment
            )
            event.end_key = f"end-{seq}"
        else:
            turn = Turn(key=f"seq-{seq}", seq=seq, event_time=moment, feedback="slower")
            event = ThreadEvent(type="turn", kind="session", thread_id="s", arrival=WALL, turn=turn)
        return spread(event, "sessions:0")

    assert p.apply(0, session(0, at(0))) == []
    assert p.apply(0, session(1, at(1 / 60))) == []
    assert p.apply(0, session(9, at(0), end=True)) == []  # sessions:1 is behind: no close yet
    caught_up = (at(1).timestamp(), WALL + 1)
    (close,) = p.apply(0, report(WALL + 1, None, sessions_1=caught_up))
    assert (close.pending.reason, turns(close)) == ("end", 2)


def test_a_partition_read_to_its_end_moves_on_with_the_clock_at_the_lag_it_had() -> None:
    """A spread thread's end waits until no earlier turn can come through another partition.
    Live, traces:1's last trace reached Kafka an hour ago as it happened (no lag): read to its
    end, it is taken to be at the present, and the end is folded at the next report.
    Replaying history (its last message an hour behind its Kafka time), it is taken to be an
    hour behind: the end waits. traces:2 never had anything: it is not waited for."""
    for lag, closes in ((0.0, [("a", 1, "end")]), (3600.0, [])):
        p = processor()

        def read_to_the_end(now: float, last: float, lag: float = lag) -> ThreadEvent:
            positions = {
                "traces:0": (last, now),
                "traces:1": (WALL - 3600 - lag, now),
                "traces:2": (0.0, now),
            }
            arrived = {"traces:0": last, "traces:1": WALL - 3600}
            return ThreadEvent(type="progress", arrival=now, positions=positions, arrived=arrived)

        p.apply(0, read_to_the_end(WALL, WALL - 10))
        assert p.apply(0, spread(chat("a", 0, arrival=WALL + 1), "traces:0")) == []
        assert p.apply(0, spread(chat("a", 1, arrival=WALL + 2, end=True), "traces:0")) == []
        assert closes_of(p.apply(0, read_to_the_end(WALL + 3, WALL + 2))) == closes, lag


def test_a_spread_thread_waits_until_a_report_names_its_partitions() -> None:
    """Its topic's partitions are known from the workers' reports: before the first, a turn
    is not folded and nothing closes by event time, however far its own partition has got."""
    p = processor()
    p.apply(0, spread(chat("a", 0, arrival=WALL, at=at(0)), "traces:0"))
    assert p.apply(0, spread(chat("b", 0, arrival=WALL + 1, at=at(40)), "traces:0")) == []
    assert ThreadState.from_bytes(p.table[b"conversation/b"]).turns == []  # held
    ahead, behind = (at(40).timestamp(), WALL + 2), (at(-60).timestamp(), WALL + 2)
    assert p.apply(0, report(WALL + 2, WALL, traces_0=ahead, traces_1=behind)) == []
    closes = p.apply(0, report(WALL + 3, None, traces_1=(at(20).timestamp(), WALL + 3)))
    assert closes_of(closes) == [("a", 1, "inactivity_event_time")]


def test_the_wall_clock_folds_a_spread_threads_held_turns_then_closes_it() -> None:
    """Live, a partition whose event time is stuck (a worker that does not say when its last
    message arrived) holds a spread thread's turns; past the gap on the wall clock, with every
    partition read past its deadline, the thread closes with all its turns, as live."""
    p = processor()
    stuck = (at(-60).timestamp(), WALL + 1)
    p.apply(0, report(WALL + 1, None, traces_0=(0.0, WALL + 1), traces_1=stuck))
    p.apply(0, spread(chat("a", 0, arrival=WALL + 2), "traces:0"))
    p.apply(0, spread(chat("a", 1, arrival=WALL + 60), "traces:0"))
    assert len(ThreadState.from_bytes(p.table[b"conversation/a"]).held) == 2
    read = (at(-60).timestamp(), WALL + 60 + GAP)
    p.apply(0, report(WALL + 60 + GAP, None, traces_0=read, traces_1=read))
    assert p.apply(0, tick(WALL + 59 + GAP)) == []
    (close,) = p.apply(0, tick(WALL + 60 + GAP))
    assert (close.pending.reason, turns(close)) == ("inactivity", 2)


def test_held_turns_survive_a_recovery_and_are_folded_in_order_after_it() -> None:
    table: dict[bytes, bytes] = {}
    before = processor(table)
    behind = (at(-60).timestamp(), WALL + 1)
    before.apply(0, report(WALL + 1, WALL, traces_0=behind, traces_1=behind))
    before.apply(0, spread(chat("a", 1, arrival=WALL + 2, at=at(30)), "traces:0"))
    after = processor(table)  # a new owner, from the table
    assert after.rebuild([0]) == 1
    ahead = (at(30).timestamp(), WALL + 3)
    assert after.apply(0, report(WALL + 3, WALL, traces_0=ahead, traces_1=behind)) == []
    after.apply(0, spread(chat("a", 0, arrival=WALL + 4, at=at(0)), "traces:1"))
    # live: a closed at 18:15 with its first turn, and again at 18:45 with both
    moved = (at(40).timestamp(), WALL + 5)
    (close,) = after.apply(0, report(WALL + 5, None, traces_0=moved, traces_1=moved))
    assert (close.pending.close_seq, turns(close)) == (1, 1)
    moved = (at(45).timestamp(), WALL + 6)
    (close,) = after.apply(0, report(WALL + 6, None, traces_0=moved, traces_1=moved))
    assert (close.pending.close_seq, turns(close)) == (2, 2)


def test_a_spread_thread_holds_no_more_than_its_caps() -> None:
    """Held turns count against the thread's caps: past them the earliest are folded at once."""
    p = processor(max_turns=3)
    stuck = (at(-60).timestamp(), WALL + 1)
    p.apply(0, report(WALL + 1, None, traces_0=stuck, traces_1=stuck))
    for n in range(5):
        p.apply(0, spread(chat("a", n, arrival=WALL + 2 + n, at=at(n)), "traces:0"))
    state = ThreadState.from_bytes(p.table[b"conversation/a"])
    assert [h.name for h in state.held] == ["a-trace-2", "a-trace-3", "a-trace-4"]
    assert [t.key for t in state.turns] == ["a-trace-0", "a-trace-1"]


def test_a_redelivered_spread_turn_is_neither_held_nor_activity() -> None:
    p = processor()
    caught = (at(0).timestamp(), WALL + 1)
    p.apply(0, report(WALL + 1, WALL, traces_0=caught, traces_1=caught))
    p.apply(0, spread(chat("a", 0, arrival=WALL, at=at(0)), "traces:0"))
    assert p.apply(0, spread(chat("a", 0, arrival=WALL, at=at(0)), "traces:0")) == []
    state = ThreadState.from_bytes(p.table[b"conversation/a"])
    assert (len(state.turns), state.held, state.last_arrival) == (1, [], WALL)
