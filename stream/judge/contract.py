"""The answer contract: for each rule, what the engine asks of the judge (a JSON schema, or
a text answer) and how it reads the answer back."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from ..engine.verdicts import ComparisonAnswers, ParsedAnswer, RubricAnswers
from ..ruleset.schema import ComparisonRule, PromptedRule, RubricRule
from .answers import Quoted, parse_answer, response_schema
from .criteria import comparison_schema, parse_comparison, parse_rubric, rubric_schema

AnswerParser = Callable[[str, Quoted], ParsedAnswer | RubricAnswers | ComparisonAnswers]


def answer_contract(rule: PromptedRule) -> tuple[dict[str, Any] | None, AnswerParser]:
    """What the engine asks of the judge for ``rule`` (a JSON schema, or None for a text
    answer) and how it reads the answer back (given what of the trace it was shown)."""
    if isinstance(rule, ComparisonRule):
        return comparison_schema(rule), partial(parse_comparison, rule)
    if isinstance(rule, RubricRule):
        return rubric_schema(rule), partial(parse_rubric, rule)
    return response_schema(rule.output), partial(parse_answer, rule.output)
