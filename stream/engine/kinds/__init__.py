"""One strategy per rule kind, behind one interface (``RuleKind``). The scorer asks
``kind_of(rule)`` and never looks at a rule's class; adding a kind is a module here and a
line in ``KINDS``."""

from __future__ import annotations

from ...ruleset.schema import AnyRule
from ..outcomes import ScoreShape
from .base import Found, JudgedKind, RuleKind, job_details
from .check import CheckKind
from .comparison import PAIR_SLOTS, PREFERENCE, ComparisonKind, missing_partner
from .fan_out import FanOutKind
from .llm_judge import LLMJudgeKind
from .rubric import RubricKind

# the first kind that handles a rule is its kind
KINDS: list[RuleKind] = [CheckKind(), FanOutKind(), LLMJudgeKind(), RubricKind(), ComparisonKind()]


def kind_of(rule: AnyRule) -> RuleKind:
    """The strategy that plans and judges ``rule``."""
    for kind in KINDS:
        if kind.handles(rule):
            return kind
    raise TypeError(f"no rule kind handles {type(rule).__name__} ({rule.id})")


def primary_shape(rule: AnyRule) -> ScoreShape:
    """The shape of the score that stands for a rule's decision: its one score, a rubric's
    aggregate (or the score it publishes when unjudged), a comparison's preference."""
    return kind_of(rule).shape(rule)


__all__ = [
    "KINDS",
    "PAIR_SLOTS",
    "PREFERENCE",
    "Found",
    "JudgedKind",
    "RuleKind",
    "job_details",
    "kind_of",
    "missing_partner",
    "primary_shape",
]
