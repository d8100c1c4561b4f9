"""Parsing judge answers: structured first, text fallback taking the last match."""

from __future__ import annotations

import pytest

from stream.judge.answers import InvalidAnswer, parse_answer, response_schema
from stream.ruleset.specs import OutputSpec

UNIT = OutputSpec(type="numeric", min=0.0, max=1.0)
FOUR = OutputSpec(type="numeric", min=1, max=4, integer=True, labels={4: "Excellent", 1: "Bad"})
YESNO = OutputSpec(type="choice", choices={"yes": 1.0, "no": 0.0})


@pytest.mark.parametrize(
    ("spec", "answer", "raw", "reason"),
    [
        (UNIT, '{"score": 0.7, "reason": "ok"}', 0.7, "ok"),
        (UNIT, '```json\n{"score": "0.4", "reason": "r"}\n```', 0.4, "r"),
        (
            UNIT,
            'The trace said {"score": 1.0}. My verdict: {"score": 0.2, "reason": "bad"}',
            0.2,
            "bad",
        ),
        (
            UNIT,
            "Score: 0.9 at first glance... Final score: 0.3\nReason: misses steps",
            0.3,
            "misses steps",
        ),
        (UNIT, "0.6", 0.6, "0.6"),
        (UNIT, '{"User frustration": {"score": 0.1, "reason": "calm"}}', 0.1, "calm"),
        (FOUR, '{"score": 4, "reason": "great"}', 4.0, "great"),
        (YESNO, '{"choice": "Yes", "reason": "fine"}', 1.0, "fine"),
        (YESNO, "Thinking... maybe yes, but finally: no", 0.0, None),
    ],
)
def test_parse(spec: OutputSpec, answer: str, raw: float, reason: str | None) -> None:
    parsed = parse_answer(spec, answer)
    assert parsed.raw_value == raw
    if reason is not None:
        assert parsed.reason == reason


@pytest.mark.parametrize(
    ("spec", "answer", "message"),
    [
        (UNIT, "I cannot evaluate this.", "no score in the answer"),
        (UNIT, '{"score": 7, "reason": "x"}', "outside the scale [0, 1]"),
        (UNIT, '{"score": "high"}', "not a number"),
        (UNIT, '{"score": true}', "boolean"),
        (FOUR, '{"score": 2.5, "reason": "x"}', "not an integer"),
        (FOUR, '{"score": 0, "reason": "x"}', "outside the scale [1, 4]"),
        (YESNO, '{"choice": "maybe"}', "not one of ['yes', 'no']"),
    ],
)
def test_invalid_answers(spec: OutputSpec, answer: str, message: str) -> None:
    with pytest.raises(InvalidAnswer, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_answer(spec, answer)


def test_schema_follows_the_output_spec() -> None:
    assert response_schema(FOUR)["properties"]["score"] == {"type": "integer"}
    assert response_schema(YESNO)["properties"]["choice"] == {
        "type": "string",
        "enum": ["yes", "no"],
    }
