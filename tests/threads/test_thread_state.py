"""Thread folding and closing: deterministic, bounded, live and replayed alike."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest

from stream.threads.close import close_reason, close_thread, mark_published
from stream.threads.document import thread_document
from stream.threads.fold import fold_turn, hold, mark_end, next_held
from stream.threads.state import HeldEvent, IndexEntry, ThreadLimits, ThreadState, new_thread
from stream.threads.turns import Turn

T0 = datetime(2026, 11, 20, 18, 0, tzinfo=UTC)
LIMITS = ThreadLimits()
GAP = 15 * 60.0


def session_turn(seq: int, timing: float = 0.6, feedback: str = "slow down") -> Turn:
    return Turn(
        key=f"seq-{seq}",
        seq=seq,
        event_time=T0 + timedelta(seconds=10 * seq),
        metrics={"pitch_accuracy": 0.9, "scale_conformity": 0.8, "timing_stability": timing},
        feedback=feedback,
    )


def chat_turn(n: int, user: str, assistant: str) -> Turn:
    return Turn(
        key=f"trace-{n}",
        event_time=T0 + timedelta(minutes=n),
        messages=[{"role": "user", "content": user}, {"role": "assistant", "content": assistant}],
    )


def greeting_thread(arrival: float) -> ThreadState:
    """A conversation with one exchange that arrived at ``arrival``."""
    state = new_thread("th", "conversation", "p")
    fold_turn(state, chat_turn(0, "hi", "hello"), arrival=arrival, limits=LIMITS)
    return state


def fold_all(turns: list[Turn], limits: ThreadLimits = LIMITS) -> ThreadState:
    state = new_thread("s-1", "session", "fretcoach")
    for turn in turns:
        fold_turn(state, turn, arrival=1000.0, limits=limits)
    return state


def test_any_arrival_order_and_duplicates_fold_to_the_same_state() -> None:
    turns = [session_turn(i, timing=0.5 + i / 100) for i in range(5)]
    duplicate = session_turn(2, timing=0.99, feedback="a different copy of seq 2")
    reference = fold_all([*turns, duplicate])
    for order in itertools.permutations([*turns, duplicate]):
        assert fold_all(list(order)) == reference
    assert [t.seq for t in reference.turns] == [0, 1, 2, 3, 4]


def test_a_duplicate_is_not_activity_and_does_not_reopen() -> None:
    state = greeting_thread(arrival=10.0)
    close_thread(state, "inactivity", closed_at=10.0 + GAP)
    assert not fold_turn(state, chat_turn(0, "hi", "hello"), arrival=5000.0, limits=LIMITS)
    assert (state.is_open, state.last_arrival, state.closes) == (False, 10.0, 1)


def test_state_is_bounded_by_turns_and_bytes_and_says_what_it_dropped() -> None:
    by_turns = fold_all([session_turn(i) for i in range(10)], ThreadLimits(max_turns=4))
    assert [t.seq for t in by_turns.turns] == [6, 7, 8, 9] and by_turns.dropped_turns == 6
    by_bytes = fold_all(
        [session_turn(i, feedback="x" * 400) for i in range(10)], ThreadLimits(max_bytes=2048)
    )
    assert by_bytes.size <= 2048 and by_bytes.dropped_turns > 0
    assert by_bytes.size == sum(t.size for t in by_bytes.turns)
    assert thread_document(by_bytes)["dropped_turns"] == by_bytes.dropped_turns


def test_live_close_after_the_wall_clock_gap() -> None:
    state = greeting_thread(arrival=1000.0)
    assert close_reason(state, wall_now=1000.0 + GAP - 1, watermark=None, gap_s=GAP) is None
    assert close_reason(state, wall_now=1000.0 + GAP, watermark=None, gap_s=GAP) == "inactivity"


def test_replay_closes_by_event_time_while_wall_time_barely_moves() -> None:
    state = new_thread("th", "conversation", "p")
    event_time = T0.timestamp()
    fold_turn(
        state, chat_turn(0, "hi", "hello"), arrival=1000.0, watermark=event_time, limits=LIMITS
    )
    # the replay has reached events 14 minutes later in this partition: still open
    assert close_reason(state, wall_now=1001.0, watermark=event_time + 14 * 60, gap_s=GAP) is None
    # ...and 15 minutes later: it would have closed live by now
    assert (
        close_reason(state, wall_now=1001.0, watermark=event_time + 15 * 60, gap_s=GAP)
        == "inactivity_event_time"
    )


def test_a_lagging_producer_clock_does_not_close_its_thread_at_once() -> None:
    """The thread's activity is the partition watermark at its last event, not its own
    (old) event time: a thread whose traces carry times 20 minutes behind stays open."""
    state = new_thread("th", "conversation", "p")
    watermark = T0.timestamp()  # other producers have brought the partition here
    lagging = chat_turn(0, "hi", "hello")  # event time T0, arrives at T0 + 20 min
    fold_turn(state, lagging, arrival=watermark + 1200, watermark=watermark, limits=LIMITS)
    assert close_reason(state, wall_now=watermark + 1200, watermark=watermark, gap_s=GAP) is None


def test_an_explicit_end_closes_at_once_and_an_empty_session_can_close() -> None:
    empty = new_thread("s-empty", "session", "p")
    assert mark_end(empty, "end", event_time=T0, arrival=5.0)
    assert not mark_end(empty, "end", event_time=T0, arrival=6.0)  # the same end twice
    assert close_reason(empty, wall_now=5.0, watermark=None, gap_s=GAP) == "end"
    pending = close_thread(empty, "end", closed_at=5.0)
    assert close_reason(empty, wall_now=1e9, watermark=1e9, gap_s=GAP) is None  # never twice
    assert pending.document["turns"] == [] and pending.document["close_seq"] == 1
    # an end after the thread closed has nothing new to judge: it does not reopen it
    assert mark_end(empty, "another-end", event_time=T0, arrival=7.0) and not empty.is_open


def test_a_turn_after_a_close_reopens_with_a_new_close_sequence_and_all_turns() -> None:
    state = greeting_thread(arrival=0.0)
    first = close_thread(state, "inactivity", closed_at=GAP)
    assert (state.is_open, state.closes, first.close_seq) == (False, 1, 1)
    fold_turn(state, chat_turn(30, "still there?", "yes"), arrival=2000.0, limits=LIMITS)
    assert state.is_open and close_reason(state, wall_now=2000.0, watermark=None, gap_s=GAP) is None
    second = close_thread(state, "inactivity", closed_at=2000.0 + GAP)
    assert second.document["close_seq"] == 2
    assert [m["content"] for m in second.document["messages"]] == [
        "hi",
        "hello",
        "still there?",
        "yes",
    ]
    # the first close's document is what it judged then, unchanged by the reopen
    assert [m["content"] for m in first.document["messages"]] == ["hi", "hello"]
    assert [p.close_seq for p in state.pending] == [1, 2]
    assert mark_published(state, 1) and not mark_published(state, 1)
    assert [p.close_seq for p in state.pending] == [2] and state.published == 1


def test_state_round_trips_through_table_bytes() -> None:
    state = fold_all([session_turn(i) for i in range(3)])
    mark_end(state, "end", event_time=T0, arrival=2000.0)
    close_thread(state, "end", closed_at=2000.0)
    assert ThreadState.from_bytes(state.to_bytes()) == state


@pytest.mark.parametrize("late_first", [False, True])
def test_conversation_document_is_in_order_whatever_the_arrival(late_first: bool) -> None:
    turns = [chat_turn(0, "hey coach!", "Hey!"), chat_turn(1, "weakest area?", "Timing.")]
    if late_first:
        turns.reverse()
    state = new_thread("th", "conversation", "fretcoach")
    for turn in turns:
        fold_turn(state, turn, arrival=0.0, limits=LIMITS)
    assert thread_document(state)["messages"] == [
        {"role": "user", "content": "hey coach!"},
        {"role": "assistant", "content": "Hey!"},
        {"role": "user", "content": "weakest area?"},
        {"role": "assistant", "content": "Timing."},
    ]


def test_cut_bytes_add_up_in_the_thread_and_its_document() -> None:
    big = chat_turn(0, "q", "x" * 20_000).capped(4_000)
    state = fold_all([big, chat_turn(1, "q2", "a2")])
    assert big.cut_bytes > 16_000
    assert state.truncated_bytes == big.cut_bytes
    assert thread_document(state)["truncated_bytes"] == big.cut_bytes
    again = fold_all([big, big])  # a duplicate is not counted twice
    assert again.truncated_bytes == big.cut_bytes


def test_the_index_entry_read_from_bytes_is_the_one_made_from_the_state() -> None:
    """A rebuild reads the index's fields straight from the JSON (no validation): they must
    be what the state says, with the defaults that ``to_bytes`` leaves out."""
    fresh = ThreadState(thread_id="t", kind="session")
    busy = ThreadState(thread_id="u", kind="conversation", partition=3, is_open=False)
    busy.last_arrival, busy.activity, busy.sources = 12.5, 11.0, {"traces:1": 11.0}
    fold_turn(busy, chat_turn(0, "hi", "hello"), arrival=12.5, limits=LIMITS)
    close_thread(busy, "end", closed_at=13.0)
    for state in (fresh, busy):
        assert IndexEntry.from_bytes(state.to_bytes()) == IndexEntry.of(state)
    assert IndexEntry.of(busy).pending == (1,)


def test_a_spread_threads_held_events_are_in_its_index_entry_as_read_from_bytes() -> None:
    """What a recovery needs of held events (each source's first, the last arrival) is read
    straight from the JSON, as the state says."""
    state = ThreadState(thread_id="t", kind="conversation", spread=True)
    for n, (source, at) in enumerate([("traces:0", 50.0), ("traces:1", 20.0), ("traces:0", 10.0)]):
        turn = chat_turn(n, "q", "a")
        event = HeldEvent(
            source=source, at=at, arrival=100.0 + n, floor=0.0, event_time=T0, turn=turn
        )
        assert hold(state, event)
    assert not hold(state, state.held[0])  # the same turn again
    entry = IndexEntry.from_bytes(state.to_bytes())
    assert entry == IndexEntry.of(state)
    # traces:0's 10.0 waits behind its 50.0: traces:1's 20.0 comes first
    assert (entry.spread, entry.released_from, entry.last_held_arrival) == (True, 20.0, 102.0)
    assert [e.at for e in iter(lambda: next_held(state, None), None)] == [20.0, 50.0, 10.0]
