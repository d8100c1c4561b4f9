"""The bytes a thread's events and its table entry are written as, pinned: the table is read
by workers of other versions and by recovery, and thread events cross between workers, so a
change that makes folding cheaper must not change a byte of them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import orjson
from fixtures import fretcoach_rules

from stream.threads.events import ThreadEvent, parse_session, published
from stream.threads.processor import ThreadProcessor
from stream.threads.router import ThreadRouter
from stream.threads.state import ThreadLimits, ThreadState
from stream.threads.turns import Turn

T0 = datetime(2026, 11, 20, 18, 0, tzinfo=UTC)
ARRIVAL = T0.timestamp() + 4.0
SOURCE = "coaching-sessions:2"


def session_turn(seq: int) -> bytes:
    return orjson.dumps(
        {
            "session_id": "s-1",
            "type": "turn",
            "seq": seq,
            "timestamp": (T0 + timedelta(seconds=8 * seq)).isoformat(),
            "project_name": "fretcoach",
            "metrics": {"pitch_accuracy": 0.9, "timing_stability": 0.55 + seq / 50},
            "feedback": "Timing is your weakest metric; play with the metronome.",
        }
    )


SESSION = [
    session_turn(1),
    session_turn(0),  # out of order: folded before seq 1
    orjson.dumps(
        {"session_id": "s-1", "type": "end", "seq": 2, "timestamp": "2026-11-20T18:00:20Z"}
    ),
    orjson.dumps(  # after the close: reopens it
        {
            "session_id": "s-1",
            "type": "turn",
            "seq": 3,
            "timestamp": "2026-11-20T18:00:30+00:00",
            "user": "How do I hold the pick?",
            "assistant": {"text": "Loosely", "tips": ["angle", 2]},
        }
    ),
]

THREAD_EVENTS = [
    (
        b'{"type":"turn","kind":"session","thread_id":"s-1","project_name":"fretcoach","arriva'
        b'l":1795197604.0,"source":"coaching-sessions:2","turn":{"key":"seq-1","seq":1,"event_'
        b'time":"2026-11-20T18:00:08Z","metrics":{"pitch_accuracy":0.9,"timing_stability":0.57'
        b'00000000000001},"feedback":"Timing is your weakest metric; play with the metronome."'
        b"}}"
    ),
    (
        b'{"type":"turn","kind":"session","thread_id":"s-1","project_name":"fretcoach","arriva'
        b'l":1795197604.0,"source":"coaching-sessions:2","turn":{"key":"seq-0","seq":0,"event_'
        b'time":"2026-11-20T18:00:00Z","metrics":{"pitch_accuracy":0.9,"timing_stability":0.55'
        b'},"feedback":"Timing is your weakest metric; play with the metronome."}}'
    ),
    (
        b'{"type":"end","kind":"session","thread_id":"s-1","arrival":1795197604.0,"source":"co'
        b'aching-sessions:2","event_time":"2026-11-20T18:00:20Z","end_key":"end-2"}'
    ),
    (
        b'{"type":"turn","kind":"session","thread_id":"s-1","arrival":1795197604.0,"source":"c'
        b'oaching-sessions:2","turn":{"key":"seq-3","seq":3,"event_time":"2026-11-20T18:00:30Z'
        b'","messages":[{"role":"user","content":"How do I hold the pick?"},{"role":"assistant'
        b'","content":{"text":"Loosely","tips":["angle",2]}}]}}'
    ),
]

CLOSED = (
    b'{"thread_id":"s-1","kind":"session","project_name":"fretcoach","partition":2,"turns"'
    b':[{"key":"seq-0","seq":0,"event_time":"2026-11-20T18:00:00Z","metrics":{"pitch_accur'
    b'acy":0.9,"timing_stability":0.55},"feedback":"Timing is your weakest metric; play wi'
    b'th the metronome."},{"key":"seq-1","seq":1,"event_time":"2026-11-20T18:00:08Z","metr'
    b'ics":{"pitch_accuracy":0.9,"timing_stability":0.5700000000000001},"feedback":"Timing'
    b' is your weakest metric; play with the metronome."},{"key":"seq-3","seq":3,"event_ti'
    b'me":"2026-11-20T18:00:30Z","messages":[{"role":"user","content":"How do I hold the p'
    b'ick?"},{"role":"assistant","content":{"text":"Loosely","tips":["angle",2]}}]}],"size'
    b'":720,"closes":1,"end_keys":["end-2"],"last_event_time":"2026-11-20T18:00:30Z","last'
    b'_arrival":1795197604.0,"activity":1795197604.0,"sources":{"coaching-sessions:2":1795'
    b'197604.0},"pending":[{"close_seq":1,"reason":"end","closed_at":1795197604.0,"documen'
    b't":{"thread_id":"s-1","kind":"session","project_name":"fretcoach","close_seq":1,"mes'
    b'sages":[],"turns":[{"seq":0,"timestamp":"2026-11-20T18:00:00+00:00","metrics":{"pitc'
    b'h_accuracy":0.9,"timing_stability":0.55},"feedback":"Timing is your weakest metric; '
    b'play with the metronome."},{"seq":1,"timestamp":"2026-11-20T18:00:08+00:00","metrics'
    b'":{"pitch_accuracy":0.9,"timing_stability":0.5700000000000001},"feedback":"Timing is'
    b' your weakest metric; play with the metronome."}],"turn_count":2,"exchange_count":0,'
    b'"dropped_turns":0,"truncated_bytes":0},"opened":1795197604000}],"opened":17951976040'
    b"00}"
)

PUBLISHED = (
    b'{"thread_id":"s-1","kind":"session","project_name":"fretcoach","partition":2,"turns"'
    b':[{"key":"seq-0","seq":0,"event_time":"2026-11-20T18:00:00Z","metrics":{"pitch_accur'
    b'acy":0.9,"timing_stability":0.55},"feedback":"Timing is your weakest metric; play wi'
    b'th the metronome."},{"key":"seq-1","seq":1,"event_time":"2026-11-20T18:00:08Z","metr'
    b'ics":{"pitch_accuracy":0.9,"timing_stability":0.5700000000000001},"feedback":"Timing'
    b' is your weakest metric; play with the metronome."},{"key":"seq-3","seq":3,"event_ti'
    b'me":"2026-11-20T18:00:30Z","messages":[{"role":"user","content":"How do I hold the p'
    b'ick?"},{"role":"assistant","content":{"text":"Loosely","tips":["angle",2]}}]}],"size'
    b'":720,"closes":1,"published":1,"end_keys":["end-2"],"last_event_time":"2026-11-20T18'
    b':00:30Z","last_arrival":1795197604.0,"activity":1795197604.0,"sources":{"coaching-se'
    b'ssions:2":1795197604.0},"opened":1795197604000}'
)

HELD = (
    b'{"thread_id":"c-1","kind":"conversation","partition":1,"spread":true,"held":[{"sourc'
    b'e":"traces:0","at":1795197600.0,"arrival":1795197603.0,"floor":0.0,"event_time":"202'
    b'6-11-20T18:00:00Z","turn":{"key":"tr-1","event_time":"2026-11-20T18:00:00Z","message'
    b's":[{"role":"user","content":"hi"}]},"rules":["r1"]}],"opened":1795197603000}'
)


def processor(table: dict[bytes, bytes]) -> ThreadProcessor:
    return ThreadProcessor(
        table,
        gaps={"conversation": 900.0, "session": 900.0, "pair": 60.0},
        limits=ThreadLimits(),
        retention_s=3600.0,
        sessions_topic="coaching-sessions",
        clock=lambda: ARRIVAL,
    )


def test_session_events_become_the_same_thread_event_bytes() -> None:
    router = ThreadRouter(fretcoach_rules())
    events = [router.from_session(parse_session(raw), ARRIVAL, SOURCE, b"s-1") for raw in SESSION]
    assert [event.to_bytes() for event in events] == THREAD_EVENTS
    assert [ThreadEvent.from_bytes(raw).to_bytes() for raw in THREAD_EVENTS] == THREAD_EVENTS


def test_folded_threads_are_stored_as_the_same_bytes() -> None:
    table: dict[bytes, bytes] = {}
    p = processor(table)
    closes = [c for raw in THREAD_EVENTS for c in p.apply(2, ThreadEvent.from_bytes(raw))]
    assert [(c.pending.close_seq, c.pending.reason) for c in closes] == [(1, "end")]
    assert table == {b"session/s-1": CLOSED}
    assert ThreadState.from_bytes(CLOSED).to_bytes() == CLOSED
    p.apply(2, published("session", "s-1", 1))
    assert table == {b"session/s-1": PUBLISHED}
    assert ThreadState.from_bytes(PUBLISHED).to_bytes() == PUBLISHED


def test_a_spread_threads_held_events_are_stored_as_the_same_bytes() -> None:
    table: dict[bytes, bytes] = {}
    turn = Turn(key="tr-1", event_time=T0, messages=[{"role": "user", "content": "hi"}])
    event = ThreadEvent(
        type="turn",
        thread_id="c-1",
        arrival=T0.timestamp() + 3.0,
        source="traces:0",
        spread=True,
        turn=turn,
        rules=["r1"],
    )
    assert processor(table).apply(1, event) == []
    assert table == {b"conversation/c-1": HELD}
    assert ThreadState.from_bytes(HELD).to_bytes() == HELD
