"""LLM-judge rules: one prompt, one verdict, one score (with ``judge.tools: trace`` the judge
reads the trace through tools instead of the prompt quoting it)."""

from __future__ import annotations

from typing import Any

from ...models import utcnow
from ...ruleset.schema import AnyRule, LLMJudgeRule
from ..context import ScoringContext
from ..outcomes import Measured, RuleOutcome
from ..plan import JudgeJob, Plan
from ..verdicts import ParsedAnswer, Verdict
from .base import JudgedKind, job_details


def decision_details(details: dict[str, Any] | None, answer: ParsedAnswer) -> dict[str, Any] | None:
    """The score's details, with a decision model's probabilities where it answered."""
    if answer.decision is None:
        return details
    return {**(details or {}), "decision": answer.decision}


class LLMJudgeKind(JudgedKind):
    """An ``llm_judge`` rule without ``fan_out``."""

    def handles(self, rule: AnyRule) -> bool:
        return isinstance(rule, LLMJudgeRule) and rule.fan_out is None

    def conclude(
        self, ctx: ScoringContext, job: JudgeJob, plan: Plan, verdict: Verdict
    ) -> RuleOutcome:
        answer = verdict.answer
        assert isinstance(answer, ParsedAnswer), "a one-verdict rule is answered once"
        answered = Measured(
            "ok",
            raw_value=answer.raw_value,
            label=answer.label,
            reason=answer.reason,
            judge_model=verdict.model,
            latency_ms=verdict.latency_ms,
            usage=verdict.usage,
            details=decision_details(job_details(job), answer),
        )
        return ctx.finish(job.rule, plan, answered, utcnow())
