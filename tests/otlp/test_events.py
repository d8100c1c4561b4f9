"""Assembly-topic events: bytes there and back, and what is not one refused."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from strategies import (
    any_json,
    corrupted,
    decoded_or_refused,
    documents,
    json_bytes,
    json_values,
    mutated,
    nested,
    numbers,
    texts,
)

from stream.otlp.events import AssemblyEvent, progress, spans_events, tick

SPAN = {"span_id": "00f067aa0ba902b7", "parent_span_id": None, "name": "chat", "attributes": {}}


def test_each_event_round_trips_through_bytes() -> None:
    (spans,) = spans_events("4bf92f35", [SPAN], 1_700_000_000.5)
    for raw in (spans, progress(5.0, {"otlp_spans:0": 4.5}), tick(6.0)):
        event = AssemblyEvent.from_bytes(raw)
        assert AssemblyEvent.from_bytes(event.to_bytes()) == event
    assert AssemblyEvent.from_bytes(spans) == AssemblyEvent(
        "spans", 1_700_000_000.5, "4bf92f35", [SPAN]
    )


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        # the first three raised a TypeError out of decoding; the others were taken, to fail
        # later in the assembler, or (an unknown type) to be read as a tick
        (b"[]", "an assembly event is a JSON object, not list"),
        (b'{"type": "tick", "when": 1}', None),  # an unknown field is ignored
        (b'{"arrival": 1}', "type\n  Field required"),
        (b'{"type": "spans", "spans": [1]}', "spans.0\n  Input should be a valid dictionary"),
        (b'{"type": "progress", "positions": {"a": "soon"}}', "positions.a\n  Input should be"),
        (b'{"type": "later"}', "type\n  Input should be 'spans', 'progress' or 'tick'"),
    ],
)
def test_what_is_not_an_assembly_event_is_a_value_error(raw: bytes, says: str | None) -> None:
    if says is None:
        assert AssemblyEvent.from_bytes(raw) == AssemblyEvent("tick")
        return
    with pytest.raises(ValueError) as raised:
        AssemblyEvent.from_bytes(raw)
    assert says in str(raised.value)


EVENTS = documents(
    {
        "type": st.sampled_from(["spans", "progress", "tick", "other"]),
        "arrival": numbers,
        "trace_id": texts,
        "spans": st.lists(st.dictionaries(texts, json_values, max_size=3), max_size=3),
        "positions": st.dictionaries(texts, numbers, max_size=3),
    },
    required=("type",),
)


@given(
    st.one_of(
        st.binary(),
        json_bytes(EVENTS),
        json_bytes(corrupted(EVENTS)),
        json_bytes(any_json),
        mutated(st.sampled_from([*spans_events("t", [SPAN], 1.0), tick(2.0)])),
        nested(st.integers(1, 1100), "[", "1", "]", around='{"type": "spans", "spans": [@]}'),
    )
)
@example(b"[]")
@example(b'{"type": "tick", "arrival": 1e400}')
def test_any_assembly_event_bytes_are_an_event_or_a_value_error(raw: bytes) -> None:
    event = decoded_or_refused(AssemblyEvent.from_bytes, raw)
    if isinstance(event, AssemblyEvent):
        assert isinstance(event.arrival, float)
        assert all(isinstance(span, dict) for span in event.spans)
        orjson.dumps(event.positions)
