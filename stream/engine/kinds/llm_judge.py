"""LLM-judge rules: one prompt, one verdict, one score (with ``judge.tools: trace`` the judge
reads the trace through tools instead of the prompt quoting it)."""

from __future__ import annotations

from ...models import utcnow
from ...ruleset.schema import AnyRule, LLMJudgeRule
from ..context import ScoringContext
from ..outcomes import Measured, RuleOutcome
from ..plan import JudgeJob, Plan
from ..verdicts import ParsedAnswer, Verdict
from .base import JudgedKind, job_details


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
            details=job_details(job),
        )
        return ctx.finish(job.rule, plan, answered, utcnow())
