"""A target after the synchronous part of scoring: outcomes already decided, and the judge
calls still to make (``JudgeJob``). A plan is made for a trace (with a plan for each of its tool
calls, its ``parts``) or for one close of a thread or pair."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..models import utcnow
from ..redact.redactor import Redaction
from ..ruleset.schema import ComparisonRule, LLMJudgeRule, RubricRule
from .outcomes import RuleOutcome, Target
from .prompt import FittedPrompt
from .spend import Admission
from .trace_tools import TraceTools

JudgedRule = LLMJudgeRule | RubricRule | ComparisonRule  # the rules a judge scores


@dataclass
class JudgeJob:
    """One judge call a plan still has to make."""

    rule: JudgedRule
    prompt: str
    system: str | None = None
    forced: dict[str, str] = field(default_factory=dict)  # rubric criterion -> why it is NA
    quoted: list[str] = field(default_factory=list)  # the trace's text, as rendered
    cut: dict[str, int] = field(default_factory=dict)  # variable -> characters cut to fit
    emptied: list[str] = field(default_factory=list)  # missing variables rendered empty
    # a fan_out rule: one prompt per item of its list variable, and how many items it held
    items: list[FittedPrompt] = field(default_factory=list)
    total_items: int = 0
    tools: TraceTools | None = None  # judge.tools: trace: the judge reads the trace by tools
    # a comparison: slot -> (its trace id, its project)
    members: dict[str, tuple[str, str]] = field(default_factory=dict)
    prompt_cut: dict[str, Any] | None = None  # what its prompts lost to fit (details.prompt_cut)
    admission: Admission | None = None  # what the spend budgets let it do (None: no ledger)
    # why it goes to a batch (``judge.mode: batch``, or a spent ``defer`` budget), or None
    batch: str | None = None
    # a cascade rule's: "first" (ask the first tier, the judge where it is unsure), "audit"
    # (the judge decides; the first tier is the shadow ``cascade``); None: no cascade
    cascade: str | None = None
    redacted: dict[str, int] = field(default_factory=dict)  # kind -> values masked
    # a comparison's order (``kinds/pair_order.py``): which variant the judge reads first
    # ("a": the first variant, as the rule lists them; "b": the second), "a+audit" or
    # "b+audit" (judged the other way round too, for the measure), or "both" (with an audit
    # or both, its two prompts are ``items``, its own order's first)
    order: str | None = None


@dataclass
class Plan:
    """A target's finished outcomes and the judge calls to make for it."""

    target: Target
    outcomes: list[RuleOutcome] = field(default_factory=list)
    judge_jobs: list[JudgeJob] = field(default_factory=list)
    created_at: datetime = field(default_factory=utcnow)
    # a close's decision-record facts, kept with a job deferred to a batch (None: a trace):
    # kind, close_seq and, for a pair, ``records.pair_facts``
    close: dict[str, Any] | None = None
    # the partition a job deferred to a batch is kept in (None: the scored record's)
    partition: int | None = None
    # the placeholders of this target's judge prompts: one value, one placeholder, in every
    # rule's prompt and every turn of a thread (issue 47); made when a prompt is first masked
    # (``redaction``), so a target that no judge reads makes none
    placeholders: Redaction | None = None
    # a trace's tool calls, each a plan of its own (``scope: tool_call``): finished with the
    # trace, their records published with the trace's
    parts: list[Plan] = field(default_factory=list)

    def each(self) -> list[Plan]:
        """This plan and its calls' plans."""
        return [self, *self.parts] if self.parts else [self]

    def decided(self) -> list[RuleOutcome]:
        """Its outcomes decided so far, and its calls'."""
        if not self.parts:
            return self.outcomes
        return [outcome for plan in self.each() for outcome in plan.outcomes]

    @property
    def redaction(self) -> Redaction:
        """The target's placeholders (its calls' plans share the trace's)."""
        if self.placeholders is None:
            self.placeholders = Redaction()
        return self.placeholders

    @property
    def waits(self) -> bool:
        """Whether it (or one of its calls) still has judge calls to make."""
        if self.judge_jobs:
            return True
        for part in self.parts:  # noqa: SIM110 - a loop: any() of a generator costs more, every trace
            if part.judge_jobs:
                return True
        return False
