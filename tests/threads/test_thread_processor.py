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


def test_event_time_waits_for_the_slowest_source() -> None:
    """Turns reach a partition from several source partitions, out of time order between
    them: a thread does not close by event time while a source that may still hold its next
    turn is behind (the watermark is the minimum over the sources)."""
    p = processor()
    first = chat("a", 0, arrival=WALL, at=T0)
    first.source = "traces:0"
    p.apply(0, first)
    ahead = chat("b", 0, arrival=WALL + 1, at=T0 + timedelta(minutes=20))
    ahead.source = "traces:1"
    assert p.apply(0, ahead) == []  # traces:0 is still at 18:00: a's next turn may come
    late = chat("a", 1, arrival=WALL + 2, at=T0 + timedelta(minutes=10))
    late.source = "traces:0"
    assert p.apply(0, late) == []  # it did: a is 10 minutes further on
    catching_up = chat("c", 0, arrival=WALL + 3, at=T0 + timedelta(minutes=26))
    catching_up.source = "traces:0"
    # the watermark is min(18:26, 18:20) = 18:20: a (18:10) is not 15 minutes idle yet
    assert p.apply(0, catching_up) == []
    on = chat("d", 0, arrival=WALL + 4, at=T0 + timedelta(minutes=40))
    on.source = "traces:1"
    # min(18:26, 18:40): a closes; b (last event 18:20, ahead of the watermark then) does not
    assert closes_of(p.apply(0, on)) == [("a", 1, "inactivity_event_time")]


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


def test_closed_threads_drop_their_turns_after_the_retention_but_keep_their_count() -> None:
    table: dict[bytes, bytes] = {}
    p = processor(table, retention_s=100.0)
    p.apply(0, chat("a", 0, arrival=WALL, end=True))
    p.apply(0, published("conversation", "a", 1))
    p.apply(0, tick(WALL + GAP + 99))
    assert len(ThreadState.from_bytes(table[b"conversation/a"]).turns) == 1
    p.apply(0, tick(WALL + GAP + 100))
    state = ThreadState.from_bytes(table[b"conversation/a"])
    assert (state.turns, state.closes, state.dropped_turns) == ([], 1, 1)
    p.apply(0, chat("a", 1, arrival=WALL + 5000, end=True))  # much later: close 2, new turns
    assert ThreadState.from_bytes(table[b"conversation/a"]).closes == 2


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
