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


def test_a_message_too_large_for_a_dead_letter_keeps_its_first_bytes_and_says_so() -> None:
    big = SimpleNamespace(
        topic="llm-traces", partition=0, offset=7, key=b"k", value=b"{" * 2_000_000
    )
    with pytest.raises(ValueError) as info:
        parse_trace(big.value)
    ((_, _, value, headers),) = dead_letters().invalid(big, info.value)
    assert value == big.value[:900_000]
    assert headers["scorer.value.bytes"] == b"2000000" and headers["scorer.value.cut"] == b"true"
    assert b"the message is 2000000 bytes" in headers["scorer.error"]
    small = dead_letters().invalid(MESSAGE, ValueError("x"))[0][3]
    assert "scorer.value.cut" not in small
