"""Thread folding and closing: deterministic, bounded, live and replayed alike."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest

from stream.threads import (
    ThreadLimits,
    ThreadState,
    Turn,
    close,
    close_reason,
    fold_turn,
    mark_end,
    new_thread,
    thread_document,
)

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


def greeting_thread(wall_now: float) -> ThreadState:
    """A conversation with one exchange that arrived at ``wall_now``."""
    return fold_turn(
        new_thread("th", "conversation", "p"),
        chat_turn(0, "hi", "hello"),
        wall_now=wall_now,
        limits=LIMITS,
    )


def fold_all(turns: list[Turn], limits: ThreadLimits = LIMITS) -> object:
    state = new_thread("s-1", "session", "fretcoach")
    for turn in turns:
        state = fold_turn(state, turn, wall_now=1000.0, limits=limits)
    return state


def test_any_arrival_order_and_duplicates_fold_to_the_same_state() -> None:
    turns = [session_turn(i, timing=0.5 + i / 100) for i in range(5)]
    duplicate = session_turn(2, timing=0.99, feedback="a different copy of seq 2")
    reference = fold_all(turns + [duplicate])
    for order in itertools.permutations(turns + [duplicate]):
        assert fold_all(list(order)) == reference
    assert [t.seq for t in reference.turns] == [0, 1, 2, 3, 4]


def test_folding_does_not_change_the_input_state() -> None:
    state = new_thread("s-1", "session", "fretcoach")
    folded = fold_turn(state, session_turn(0), wall_now=1.0, limits=LIMITS)
    assert state.turns == [] and len(folded.turns) == 1


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
    state = greeting_thread(wall_now=1000.0)
    assert close_reason(state, wall_now=1000.0 + GAP - 1, watermark=None, gap_s=GAP) is None
    assert close_reason(state, wall_now=1000.0 + GAP, watermark=None, gap_s=GAP) == "inactivity"


def test_replay_closes_by_event_time_while_wall_time_barely_moves() -> None:
    state = greeting_thread(wall_now=1000.0)
    last = state.last_event_time
    assert last is not None
    # the replay has reached events 14 minutes later in this partition: still open
    assert (
        close_reason(state, wall_now=1001.0, watermark=last + timedelta(minutes=14), gap_s=GAP)
        is None
    )
    # ...and 15 minutes later: it would have closed live by now
    assert (
        close_reason(state, wall_now=1001.0, watermark=last + timedelta(minutes=15), gap_s=GAP)
        == "inactivity_event_time"
    )


def test_an_explicit_end_closes_at_once_and_an_empty_session_can_close() -> None:
    empty = mark_end(new_thread("s-empty", "session", "p"), event_time=T0, wall_now=5.0)
    assert close_reason(empty, wall_now=5.0, watermark=T0, gap_s=GAP) == "end"
    closed = close(empty)
    assert close_reason(closed, wall_now=1e9, watermark=None, gap_s=GAP) is None  # never twice
    assert thread_document(closed)["turns"] == [] and thread_document(closed)["close_seq"] == 1


def test_a_turn_after_a_close_reopens_with_a_new_close_sequence_and_all_turns() -> None:
    state = greeting_thread(wall_now=0.0)
    first = close(state)
    assert (first.is_open, first.closes) == (False, 1)
    reopened = fold_turn(
        first, chat_turn(30, "still there?", "yes"), wall_now=2000.0, limits=LIMITS
    )
    assert (
        reopened.is_open
        and close_reason(reopened, wall_now=2000.0, watermark=None, gap_s=GAP) is None
    )
    second = close(reopened)
    document = thread_document(second)
    assert document["close_seq"] == 2
    assert [m["content"] for m in document["messages"]] == ["hi", "hello", "still there?", "yes"]


@pytest.mark.parametrize("late_first", [False, True])
def test_conversation_document_is_in_order_whatever_the_arrival(late_first: bool) -> None:
    turns = [chat_turn(0, "hey coach!", "Hey!"), chat_turn(1, "weakest area?", "Timing.")]
    if late_first:
        turns.reverse()
    state = new_thread("th", "conversation", "fretcoach")
    for turn in turns:
        state = fold_turn(state, turn, wall_now=0.0, limits=LIMITS)
    assert thread_document(state)["messages"] == [
        {"role": "user", "content": "hey coach!"},
        {"role": "assistant", "content": "Hey!"},
        {"role": "user", "content": "weakest area?"},
        {"role": "assistant", "content": "Timing."},
    ]
