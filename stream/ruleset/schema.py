"""The rule file schema, as engine, judge and agent code import it: every rule kind's model
and their union (``kinds``, on the shared parts of ``base``), and the ``RuleSet`` a worker
runs (``rule_set``). The parts of a rule file are in ``specs`` and ``judge_specs``.
"""

from __future__ import annotations

from .base import PromptedRule, RuleBase
from .kinds import (
    RULE_ADAPTER,
    AnyRule,
    CheckRule,
    ComparisonRule,
    CriteriaRule,
    LLMJudgeRule,
    RubricRule,
    Rule,
)
from .rule_set import RuleSet

__all__ = [
    "RULE_ADAPTER",
    "AnyRule",
    "CheckRule",
    "ComparisonRule",
    "CriteriaRule",
    "LLMJudgeRule",
    "PromptedRule",
    "RubricRule",
    "Rule",
    "RuleBase",
    "RuleSet",
]
