"""Thread-events topic messages and coaching-session input events: bytes, keys, validation."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest
from fixtures import fretcoach_rules
from hypothesis import example, given
from hypothesis import strategies as st
from pydantic import ValidationError
from strategies import (
    any_json,
    corrupted,
    decoded_or_refused,
    documents,
    integers,
    json_bytes,
    json_values,
    mutated,
    nested,
    numbers,
    texts,
)

from stream.threads.events import (
    SessionEvent,
    ThreadEvent,
    parse_session,
    published,
    table_key,
    tick,
)
from stream.threads.router import ThreadRouter
from stream.threads.turns import Turn

T0 = datetime(2026, 3, 1, 9, 30, tzinfo=UTC)


def turn_event() -> ThreadEvent:
    return ThreadEvent(
        type="turn",
        kind="session",
        thread_id="s-1",
        project_name="fretcoach",
        arrival=1_700_000_000.5,
        source="coaching-sessions:2",
        event_time=T0,
        turn=Turn(key="seq-3", seq=3, event_time=T0, metrics={"timing": 0.7}, feedback="slower"),
        end=True,
        end_key="end-4",
        rules=["studio_live_feedback_improvement"],
        close_seq=2,
    )


def session_turn(**changes: Any) -> dict[str, Any]:
    document: dict[str, Any] = {
        "session_id": "s-1",
        "type": "turn",
        "seq": 0,
        "timestamp": "2026-03-01T09:30:00Z",
        "metrics": {"pitch_accuracy": 0.9},
        "feedback": "keep going",
    }
    document.update(changes)
    return document


def test_thread_event_round_trips_through_bytes() -> None:
    event = turn_event()

    again = ThreadEvent.from_bytes(event.to_bytes())

    assert again == event
    assert again.turn is not None
    assert again.turn.event_time == T0
    assert again.turn.metrics == {"timing": 0.7}


def test_defaults_are_left_out_of_the_bytes() -> None:
    raw = ThreadEvent(type="published", thread_id="th-9").to_bytes()

    assert orjson.loads(raw) == {"type": "published", "thread_id": "th-9"}
    again = ThreadEvent.from_bytes(raw)
    assert (again.kind, again.project_name, again.arrival, again.rules) == (
        "conversation",
        "default",
        0.0,
        [],
    )


def test_set_fields_are_all_in_the_bytes() -> None:
    document = orjson.loads(turn_event().to_bytes())

    assert set(document) == {
        "type",
        "kind",
        "thread_id",
        "project_name",
        "arrival",
        "source",
        "event_time",
        "turn",
        "end",
        "end_key",
        "rules",
        "close_seq",
    }


def test_from_bytes_rejects_an_unknown_type() -> None:
    with pytest.raises(ValidationError):
        ThreadEvent.from_bytes(b'{"type": "restart"}')


def test_key_is_the_table_key_of_kind_and_thread() -> None:
    assert table_key("session", "s-1") == b"session/s-1"
    assert turn_event().key == b"session/s-1"
    assert ThreadEvent(type="turn", thread_id="th").key == table_key("conversation", "th")


def test_tick_carries_only_its_clock() -> None:
    raw = tick(1234.5)

    assert orjson.loads(raw) == {"type": "tick", "arrival": 1234.5}
    event = ThreadEvent.from_bytes(raw)
    assert event.type == "tick"
    assert event.arrival == 1234.5
    assert event.thread_id == ""


def test_published_names_the_close() -> None:
    event = published("session", "s-7", 3)

    assert (event.type, event.kind, event.thread_id, event.close_seq) == (
        "published",
        "session",
        "s-7",
        3,
    )
    assert event.key == b"session/s-7"
    assert ThreadEvent.from_bytes(event.to_bytes()) == event


def test_a_session_turn_with_metrics_and_feedback_is_valid() -> None:
    event = SessionEvent.model_validate(session_turn())

    assert event.type == "turn"
    assert event.seq == 0
    assert event.timestamp == datetime(2026, 3, 1, 9, 30, tzinfo=UTC)
    assert event.project_name == "default"
    assert event.metrics == {"pitch_accuracy": 0.9}


def test_a_session_turn_with_user_and_assistant_is_valid() -> None:
    event = SessionEvent.model_validate(
        session_turn(metrics=None, feedback=None, user="hi", assistant="hello")
    )

    assert (event.user, event.assistant) == ("hi", "hello")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"seq": None}, "a turn needs seq"),
        ({"timestamp": None}, "a turn needs a timestamp"),
        ({"metrics": None, "feedback": None}, "a turn needs metrics and feedback"),
    ],
)
def test_a_session_turn_needs_seq_timestamp_and_content(
    changes: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        SessionEvent.model_validate(session_turn(**changes))


@pytest.mark.parametrize(
    "changes",
    [{"session_id": ""}, {"seq": -1}, {"type": "start"}, {"timestamp": "not a time"}],
)
def test_invalid_session_fields_are_rejected(changes: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        SessionEvent.model_validate(session_turn(**changes))


def test_an_end_event_needs_only_session_and_type() -> None:
    event = SessionEvent.model_validate({"session_id": "s-1", "type": "end"})

    assert event.type == "end"
    assert event.seq is None
    assert event.timestamp is None


def test_extra_session_fields_are_kept() -> None:
    event = SessionEvent.model_validate(session_turn(device="tablet", level=3))

    assert event.model_extra == {"device": "tablet", "level": 3}
    assert event.model_dump()["device"] == "tablet"


def test_parse_session_decodes_a_valid_event() -> None:
    event = parse_session(orjson.dumps(session_turn(project_name="fretcoach")))

    assert event.session_id == "s-1"
    assert event.project_name == "fretcoach"


def test_parse_session_rejects_a_message_without_a_value() -> None:
    with pytest.raises(ValueError, match="no value"):
        parse_session(None)


@pytest.mark.parametrize(("raw", "kind"), [(b"[1, 2]", "list"), (b'"turn"', "str"), (b"7", "int")])
def test_parse_session_rejects_json_that_is_not_an_object(raw: bytes, kind: str) -> None:
    with pytest.raises(ValueError, match=f"must be a JSON object, got {kind}"):
        parse_session(raw)


def test_parse_session_rejects_invalid_json_with_a_value_error() -> None:
    with pytest.raises(orjson.JSONDecodeError) as raised:
        parse_session(b'{"session_id": ')

    assert isinstance(raised.value, ValueError)


def test_parse_session_rejects_an_invalid_event_with_a_value_error() -> None:
    with pytest.raises(ValueError, match="a turn needs seq"):
        parse_session(orjson.dumps(session_turn(seq=None)))


# -- any bytes: an event, or a ValueError (a dead letter), never another exception ----------

MOMENTS = st.one_of(
    st.datetimes(timezones=st.none() | st.just(UTC)).map(datetime.isoformat),
    st.sampled_from(["0001-01-01T00:00:00+23:59", "9999-12-31T23:59:59-23:59", "2026-02-30"]),
    numbers,
)
SESSION_EVENTS = documents(
    {
        "session_id": texts,
        "type": st.sampled_from(["turn", "end", "tick"]),
        "seq": integers,
        "timestamp": MOMENTS,
        "project_name": texts,
        "metrics": st.dictionaries(texts, json_values, max_size=3),
        "feedback": texts,
        "user": json_values,
        "assistant": json_values,
    },
    required=("session_id", "type"),
)
DEEP_TURN = '{"session_id": "s", "type": "turn", "seq": 1, "timestamp": 0, "user": @}'
SESSION_BYTES = st.one_of(
    st.binary(),
    json_bytes(SESSION_EVENTS),
    json_bytes(corrupted(SESSION_EVENTS)),
    json_bytes(any_json),
    mutated(json_bytes(SESSION_EVENTS)),
    nested(st.integers(1, 1100), "[", "1", "]", around=DEEP_TURN),
)


def nest(depth: int) -> Any:
    value: Any = "play it slower"
    for _ in range(depth):
        value = [value]
    return value


def test_a_session_turn_nested_as_deep_as_a_turn_carries_is_forwarded() -> None:
    event = parse_session(orjson.dumps(session_turn(user=nest(64), assistant=nest(64))))

    forwarded = ThreadRouter(fretcoach_rules()).from_session(event, 0.0, "sessions:0")

    assert ThreadEvent.from_bytes(forwarded.to_bytes()) == forwarded


@pytest.mark.parametrize("field", ["user", "assistant", "metrics"])
def test_a_session_turn_nested_deeper_than_a_turn_carries_is_invalid(field: str) -> None:
    # it crashed the session agent (orjson's TypeError writing the turn); 300 levels is JSON
    # orjson reads, and more than it (or pydantic) writes
    content = {"deep": nest(300)} if field == "metrics" else nest(300)
    with pytest.raises(ValueError, match=f"{field} is nested deeper than 64 levels"):
        parse_session(json.dumps(session_turn(**{field: content})).encode())


@given(SESSION_BYTES)
@example(b"null")
@example(
    b'{"session_id": "s", "type": "turn", "seq": 1, "timestamp": 0, "user": '
    + b"[" * 300
    + b"]" * 300
    + b"}"
)
@example(b'{"session_id": "s", "type": "turn", "seq": 1, "timestamp": NaN, "feedback": "x"}')
@example(b'{"session_id": "s", "type": "end", "seq": 1' + b"0" * 5000 + b"}")
def test_any_session_message_is_an_event_or_a_value_error(raw: bytes) -> None:
    event = decoded_or_refused(parse_session, raw)
    if isinstance(event, SessionEvent):
        # what the session agent does with it next: its thread event, on the topic as bytes
        ThreadRouter(fretcoach_rules()).from_session(event, 0.0, "sessions:0").to_bytes()


TURNS = documents(
    {
        "key": texts,
        "seq": integers,
        "event_time": MOMENTS,
        "messages": st.lists(st.dictionaries(texts, json_values, max_size=2), max_size=2),
        "metrics": st.dictionaries(texts, json_values, max_size=2),
        "feedback": texts,
        "cut_bytes": integers,
        "member": documents(
            {
                "slot": st.sampled_from(["a", "b", "c"]),
                "variant": texts,
                "document": st.dictionaries(texts, json_values, max_size=2),
            }
        ),
    },
    required=("key", "event_time"),
)
THREAD_EVENTS = documents(
    {
        "type": st.sampled_from(["turn", "end", "tick", "published", "progress", "other"]),
        "kind": st.sampled_from(["conversation", "session", "pair", "other"]),
        "thread_id": texts,
        "project_name": texts,
        "arrival": numbers,
        "source": texts,
        "event_time": MOMENTS,
        "turn": TURNS,
        "end": st.booleans(),
        "end_key": texts,
        "rules": st.lists(texts, max_size=2),
        "close_seq": integers,
        "positions": st.dictionaries(texts, st.tuples(numbers, numbers), max_size=2),
    },
    required=("type",),
)


@given(
    st.one_of(
        st.binary(),
        json_bytes(THREAD_EVENTS),
        json_bytes(corrupted(THREAD_EVENTS)),
        json_bytes(any_json),
        mutated(st.sampled_from([turn_event().to_bytes(), tick(1.5)])),
        nested(st.integers(1, 1100), "[", "1", "]"),
    )
)
@example(b'{"type": "tick", "arrival": 1e400}')
@example(b'{"type": "tick", "close_seq": ' + b"9" * 5000 + b"}")
def test_any_thread_event_bytes_are_an_event_or_a_value_error(raw: bytes) -> None:
    decoded_or_refused(ThreadEvent.from_bytes, raw)
