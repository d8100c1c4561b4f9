"""What a rule pack's own code may use: the one module pack authors import.

A pack folder's Python registers deterministic checks (``@check``) and rubric aggregators
(``@aggregate``) by name; its YAML rules refer to them. Everything here is pure (no Kafka,
no judge SDK), so a pack loads anywhere the rules are checked::

    from stream.pack import CheckParams, CheckResult, NotApplicable, check, words

    @check("reply_length")
    def reply_length(values, params): ...
"""

from __future__ import annotations

from .models import Scale
from .ruleset.aggregators import (
    AggregateParams,
    CriterionAnswer,
    CriterionInfo,
    RubricInput,
    RubricScore,
    aggregate,
    unknown_criteria,
)
from .ruleset.checks import CheckParams, CheckResult, NotApplicable, check
from .text.measures import mentions, sentences, words
from .text.values import render_value
from .tools import (
    CallVerdict,
    ToolCall,
    TrajectoryError,
    TrajectoryMode,
    arguments_valid,
    call_succeeded,
    calls_per_turn,
    expected_trajectory,
    match_trajectory,
    not_repeated,
    tool_calls,
    tool_declared,
)
from .tools.view import call_of, calls_of

__all__ = [
    "AggregateParams",
    "CallVerdict",
    "CheckParams",
    "CheckResult",
    "CriterionAnswer",
    "CriterionInfo",
    "NotApplicable",
    "RubricInput",
    "RubricScore",
    "Scale",
    "ToolCall",
    "TrajectoryError",
    "TrajectoryMode",
    "aggregate",
    "arguments_valid",
    "call_of",
    "call_succeeded",
    "calls_of",
    "calls_per_turn",
    "check",
    "expected_trajectory",
    "match_trajectory",
    "mentions",
    "not_repeated",
    "render_value",
    "sentences",
    "tool_calls",
    "tool_declared",
    "unknown_criteria",
    "words",
]
