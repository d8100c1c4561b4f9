"""The router: which traces and session events become thread events, and what they carry."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from fixtures import RULES_DIR, as_trace, fretcoach_rules, hub_trace, live_trace

from stream.ruleset.loader import load_rules
from stream.threads.events import SessionEvent, table_key
from stream.threads.router import ThreadRouter, TurnPaths

ARRIVAL = 1_800_000_000.0


def conversation(thread_id: str = "conv-1", **changes: object) -> dict:
    document = hub_trace()
    document["thread_id"] = thread_id
    document.update(changes)
    return document


def test_a_hub_trace_with_a_thread_id_becomes_a_turn_of_its_conversation() -> None:
    router = ThreadRouter(fretcoach_rules())
    document = conversation()
    event = router.from_trace(as_trace(document), document, "llm-traces", ARRIVAL, "llm-traces:2")
    assert event is not None
    assert (event.type, event.kind, event.thread_id, event.source) == (
        "turn",
        "conversation",
        "conv-1",
        "llm-traces:2",
    )
    assert event.key == table_key("conversation", "conv-1") == b"conversation/conv-1"
    assert event.rules == ["hub_conversational_coherence", "hub_user_frustration_score"]
    assert event.turn is not None and event.turn.key == document["id"]
    assert [m["role"] for m in event.turn.messages] == ["user", "assistant"]
    assert event.turn.messages[0]["content"] == document["input"]["messages"][-1]["content"]
    assert event.turn.messages[1]["content"] == document["output"]["messages"][-1]["content"]
    assert event.end is False


def test_a_trace_marking_the_conversation_finished_ends_it() -> None:
    router = ThreadRouter(fretcoach_rules())
    document = conversation(metadata={"conversation_finished": True})
    event = router.from_trace(as_trace(document), document, "llm-traces", ARRIVAL)
    assert event is not None and event.end is True


@pytest.mark.parametrize(
    "document",
    [
        pytest.param({**hub_trace(), "thread_id": None}, id="no thread id"),
        pytest.param({**live_trace(), "thread_id": "t"}, id="no conversation rule matches"),
    ],
)
def test_traces_that_no_conversation_rule_wants_are_not_routed(document: dict) -> None:
    router = ThreadRouter(fretcoach_rules())
    assert router.from_trace(as_trace(document), document, "llm-traces", ARRIVAL) is None


def test_a_rule_set_without_conversation_rules_routes_no_trace() -> None:
    router = ThreadRouter(load_rules(RULES_DIR, ["mlflow"]))
    document = conversation()
    assert not router.wants_conversations
    assert router.from_trace(as_trace(document), document, "llm-traces", ARRIVAL) is None


def test_a_trace_without_times_takes_its_arrival_as_event_time() -> None:
    router = ThreadRouter(fretcoach_rules())
    document = conversation(start_time=None, end_time=None)
    event = router.from_trace(as_trace(document), document, "llm-traces", ARRIVAL)
    assert event is not None and event.turn is not None
    assert event.turn.event_time == datetime.fromtimestamp(ARRIVAL, UTC)


def test_session_turns_and_ends_are_keyed_by_session() -> None:
    router = ThreadRouter(fretcoach_rules())
    turn = SessionEvent(
        session_id="s-1",
        type="turn",
        seq=3,
        timestamp=datetime(2026, 11, 20, 18, 0),  # naive: taken as UTC
        metrics={"pitch_accuracy": 0.9},
        feedback="Clean pitch, but timing drifts - use a click track.",
    )
    event = router.from_session(turn, ARRIVAL, "coaching-sessions:0")
    assert (event.type, event.kind, event.key) == ("turn", "session", b"session/s-1")
    assert event.turn is not None and (event.turn.key, event.turn.seq) == ("seq-3", 3)
    assert event.turn.event_time.tzinfo is UTC
    assert event.turn.metrics == {"pitch_accuracy": 0.9} and event.turn.messages == []

    end = router.from_session(SessionEvent(session_id="s-1", type="end", seq=9), ARRIVAL)
    assert (end.type, end.end_key, end.key) == ("end", "end-9", b"session/s-1")
    assert end.event_time == datetime.fromtimestamp(ARRIVAL, UTC)


def test_a_conversational_session_turn_carries_its_message_pair() -> None:
    router = ThreadRouter(load_rules(RULES_DIR, ["coaching"]))
    turn = SessionEvent(
        session_id="c-1",
        type="turn",
        seq=0,
        timestamp=datetime(2026, 11, 20, 18, 0, tzinfo=UTC),
        user="I keep rushing the beat.",
        assistant="What tempo are you practising at?",
    )
    event = router.from_session(turn, ARRIVAL)
    assert event.turn is not None
    assert event.turn.messages == [
        {"role": "user", "content": "I keep rushing the beat."},
        {"role": "assistant", "content": "What tempo are you practising at?"},
    ]


@pytest.mark.parametrize("size", [700_000, 1_200_000, 2_000_000])
def test_a_large_turn_is_cut_on_the_way_in_with_a_marker_and_counted(size: int) -> None:
    router = ThreadRouter(fretcoach_rules(), turn_max_bytes=64_000)
    document = conversation()
    document["output"]["messages"][-1]["content"] = "A" * (size // 2) + "Z" * (size // 2)
    event = router.from_trace(as_trace(document), document, "llm-traces", ARRIVAL)
    assert event is not None and event.turn is not None
    assert event.turn.size <= 64_000 and len(event.to_bytes()) < 70_000
    answer = event.turn.messages[1]["content"]
    assert answer.startswith("AAAA") and answer.endswith("ZZZZ")  # its start and its end
    assert "bytes cut by the scorer: the turn was over SCORER_TURN_MAX_BYTES" in answer
    assert event.turn.cut_bytes > size - 64_000
    assert event.turn.messages[0]["content"] == document["input"]["messages"][-1]["content"]


def session_turn(seq: int, **fields: object) -> SessionEvent:
    return SessionEvent(
        session_id="s",
        type="turn",
        seq=seq,
        timestamp=datetime(2026, 11, 20, tzinfo=UTC),
        **fields,  # type: ignore[arg-type]
    )


def test_a_large_session_turn_is_cut_feedback_first_when_it_is_the_longest() -> None:
    router = ThreadRouter(fretcoach_rules(), turn_max_bytes=8_000)
    turn = session_turn(1, metrics={"timing_stability": 0.6}, feedback="slow down " * 70_000)
    event = router.from_session(turn, ARRIVAL)
    assert event.turn is not None and event.turn.size <= 8_000
    assert event.turn.metrics == {"timing_stability": 0.6}  # numbers are never cut
    assert "bytes cut by the scorer" in (event.turn.feedback or "")
    small = router.from_session(session_turn(2, feedback="fine"), ARRIVAL)
    assert small.turn is not None and small.turn.cut_bytes == 0 and small.turn.feedback == "fine"


def test_a_message_keyed_by_its_thread_id_is_not_spread_and_one_keyed_otherwise_is() -> None:
    """Keyed by thread id, a conversation's turns all come through one partition; keyed by
    trace id (or with a key the router is not given), through any partition of the topic."""
    router = ThreadRouter(fretcoach_rules())
    document = conversation("conv-7")
    trace = as_trace(document)

    def routed(key: bytes | None) -> bool:
        event = router.from_trace(trace, document, "llm-traces", ARRIVAL, "llm-traces:1", key)
        assert event is not None
        return event.spread

    assert (routed(b"conv-7"), routed(document["id"].encode()), routed(None)) == (
        False,
        True,
        True,
    )
    turn = SessionEvent(session_id="s-1", type="end", seq=9)
    assert router.from_session(turn, ARRIVAL, "coaching-sessions:0", b"s-1").spread is False
    assert router.from_session(turn, ARRIVAL, "coaching-sessions:0").spread is True


def test_each_group_of_conversation_rules_reads_turns_with_its_own_paths() -> None:
    """FretCoach's hub traces go to its rules, read with its paths; any other trace with a
    thread id to the conversation pack's fallback rules, read with theirs."""
    router = ThreadRouter(load_rules(RULES_DIR, ["fretcoach", "conversation"]))
    hub = conversation()
    event = router.from_trace(as_trace(hub), hub, "llm-traces", ARRIVAL)
    assert event is not None and event.turn is not None
    assert event.rules == ["hub_conversational_coherence", "hub_user_frustration_score"]
    mine = {
        "id": "run-1",
        "name": "AgentExecutor",
        "project_name": "mine",
        "thread_id": "conv-1",
        "input": {"input": [{"role": "user", "content": "What is 2 + 2?"}]},
        "output": {"output": "4"},
    }
    event = router.from_trace(as_trace(mine), mine, "llm-traces", ARRIVAL)
    assert event is not None and event.turn is not None
    assert event.rules == [
        "conversation_coherence",
        "conversation_goal_completion",
        "conversation_user_frustration",
    ]
    assert event.turn.messages == [
        {"role": "user", "content": "What is 2 + 2?"},
        {"role": "assistant", "content": "4"},
    ]
    # FretCoach's paths would read no message from it: the fallback paths are the ones used
    assert TurnPaths.of(router.conversations.spec(fallback=False)).read(mine) == ([], False)
