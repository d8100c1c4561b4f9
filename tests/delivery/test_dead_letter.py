"""Dead letters: what is published for messages that cannot be used or scored."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from stream.delivery.dead_letter import DeadLetters
from stream.models import parse_trace

MESSAGE = SimpleNamespace(topic="llm-traces", partition=3, offset=41, key=b"k", value=b'{"id": 1}')


def dead_letters() -> DeadLetters:
    return DeadLetters("dlq")


def test_schema_invalid_message_is_dead_lettered_with_its_bytes_and_error() -> None:
    with pytest.raises(ValueError) as info:
        parse_trace(MESSAGE.value)
    ((topic, key, value, headers),) = dead_letters().invalid(MESSAGE, info.value)
    assert (topic, key, value) == ("dlq", b"k", b'{"id": 1}')
    assert headers["scorer.error.reason"] == b"invalid_event"
    assert b"id: Input should be a valid string" in headers["scorer.error"]
    assert headers["scorer.source.partition"] == b"3" and headers["scorer.source.offset"] == b"41"


def test_an_engine_bug_dead_letters_the_trace_instead_of_stalling_its_partition() -> None:
    ((topic, _, value, headers),) = dead_letters().engine_failure(MESSAGE, KeyError("boom"))
    assert topic == "dlq" and value == MESSAGE.value
    assert headers["scorer.error.reason"] == b"engine_error"
    assert headers["scorer.error"] == b"scoring failed: KeyError: 'boom'"
