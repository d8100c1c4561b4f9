"""What the trace agent publishes for messages it cannot score (no broker needed)."""

from __future__ import annotations

from types import SimpleNamespace

import orjson
import pytest
from fixtures import scorer

from stream.agents import TracePipeline, parse_trace
from stream.app import Topics

MESSAGE = SimpleNamespace(topic="llm-traces", partition=3, offset=41, key=b"k", value=b'{"id": 1}')


def pipeline() -> TracePipeline:
    topics = Topics(traces="t", scores="s", decisions="d", dlq="dlq")
    return TracePipeline(app=None, topics=topics, scorer=scorer(None))  # type: ignore[arg-type]


def test_schema_invalid_message_is_dead_lettered_with_its_bytes_and_error() -> None:
    with pytest.raises(ValueError) as info:
        parse_trace(MESSAGE.value)
    ((topic, key, value, headers),) = pipeline().dead_letter(MESSAGE, info.value)
    assert (topic, key, value) == ("dlq", b"k", b'{"id": 1}')
    assert headers["scorer.error.reason"] == b"invalid_event"
    assert b"id: Input should be a valid string" in headers["scorer.error"]
    assert headers["scorer.source.partition"] == b"3" and headers["scorer.source.offset"] == b"41"


def test_an_engine_bug_dead_letters_the_trace_instead_of_stalling_its_partition() -> None:
    ((topic, _, value, headers),) = pipeline().engine_failure(MESSAGE, KeyError("boom"))
    assert topic == "dlq" and value == MESSAGE.value
    assert headers["scorer.error.reason"] == b"engine_error"
    assert headers["scorer.error"] == b"scoring failed: KeyError: 'boom'"


def test_non_object_json_is_rejected() -> None:
    with pytest.raises(ValueError, match="must be a JSON object, got list"):
        parse_trace(orjson.dumps([1, 2]))
