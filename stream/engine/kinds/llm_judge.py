"""LLM-judge rules: one prompt, one verdict, one score (with ``judge.tools: trace`` the judge
reads the trace through tools instead of the prompt quoting it).

A rule with ``judge.cascade`` asks a decision model first and publishes its verdict where its
confidence is at least ``accept.min_confidence``; elsewhere the rule's own judge decides.
On a hashed ``audit_rate`` share of targets the judge decides whatever the first tier would
say, and the first tier's verdict is published as the shadow ``cascade`` beside it, so the
agreement join measures the first tier against the judge (kappa or MAE, with intervals) on
an unbiased sample, each pair with the first tier's confidence. Every score of the rule says
which tier decided, and why, in ``details.cascade``."""

from __future__ import annotations

from typing import Any

from ...errors import JudgeError
from ...models import TokenUsage, utcnow
from ...ruleset.filters import sampled
from ...ruleset.judge_specs import CASCADE_VARIANT
from ...ruleset.schema import AnyRule, LLMJudgeRule
from ..context import ScoringContext
from ..outcomes import Measured, RuleOutcome
from ..plan import JudgeJob, Plan
from ..prompt import FittedPrompt
from ..verdicts import ParsedAnswer, Verdict
from .base import Found, JudgedKind, job_details, mark_cached


def said(
    ctx: ScoringContext, rule: LLMJudgeRule, outcome: RuleOutcome, cascade: dict[str, Any]
) -> None:
    """``details.cascade`` on the outcome's score: which tier decided, and why."""
    if outcome.score is not None:
        outcome.score.details = {**(outcome.score.details or {}), "cascade": cascade}


def spent(model: str, usage: TokenUsage | None, cached: bool) -> dict[str, Any] | None:
    """``details.cascade.first`` of an escalated score: the first tier's model and tokens (a
    cached verdict cost none), so its cost is read from the score as the judge's is."""
    if usage is None:
        return None
    return {"model": model, "usage": usage.model_dump(exclude_defaults=True), "cached": cached}


def decision_details(details: dict[str, Any] | None, answer: ParsedAnswer) -> dict[str, Any] | None:
    """The score's details, with a decision model's probabilities where it answered."""
    if answer.decision is None:
        return details
    return {**(details or {}), "decision": answer.decision}


class LLMJudgeKind(JudgedKind):
    """An ``llm_judge`` rule without ``fan_out``."""

    def handles(self, rule: AnyRule) -> bool:
        return isinstance(rule, LLMJudgeRule) and rule.fan_out is None

    def plan_tiers(
        self,
        plan: Plan,
        job: JudgeJob,
        found: Found,
        fitted: list[FittedPrompt],
        setting: str,
    ) -> None:
        rule = job.rule
        assert isinstance(rule, LLMJudgeRule)
        cascade = rule.judge.cascade
        if cascade is None or rule.variant is not None or job.batch is not None:
            return
        if not sampled(f"{rule.id}@cascade", cascade.audit_rate, plan.target.id):
            job.cascade = "first"
            return
        job.cascade = "audit"
        audit = self._job(plan, rule.cascade_first(CASCADE_VARIANT), found, fitted, setting)
        plan.judge_jobs.append(audit)

    async def run(self, ctx: ScoringContext, job: JudgeJob, plan: Plan) -> RuleOutcome:
        if job.cascade is None:
            return await super().run(ctx, job, plan)
        rule = job.rule
        assert isinstance(rule, LLMJudgeRule) and rule.judge.cascade is not None
        confidence: float | None = None
        reason = "audit"
        first: dict[str, Any] | None = None  # what the first tier used, where it escalated
        if job.cascade == "first":
            assert ctx.judge is not None
            tier = rule.cascade_first()
            try:
                verdict = await ctx.judge.judge(tier, job.prompt, job.system, job.quoted)
            except JudgeError as exc:
                ctx.charge(tier, exc.usage)
                first = spent(ctx.model_of(tier), exc.usage, cached=False)
                reason = "first_failed"
            else:
                ctx.charge(tier, verdict.usage)
                first = spent(verdict.model, verdict.usage, verdict.cached)
                answer = verdict.answer
                decision = answer.decision if isinstance(answer, ParsedAnswer) else None
                confidence = decision["confidence"] if decision else None
                if (
                    confidence is not None
                    and confidence >= rule.judge.cascade.accept.min_confidence
                ):
                    outcome = self.conclude(ctx, job, plan, verdict)
                    if verdict.cached:
                        mark_cached(outcome)
                    said(ctx, rule, outcome, {"tier": "first", "confidence": confidence})
                    ctx.observer.on_cascade(rule.id, rule.pack, "first", "accepted")
                    return outcome
                reason = "low_confidence" if confidence is not None else "no_confidence"
        outcome = await super().run(ctx, job, plan)
        details: dict[str, Any] = {"tier": "judge", "escalated": reason}
        if confidence is not None:
            details["first_confidence"] = confidence
        if first is not None:
            details["first"] = first
        said(ctx, rule, outcome, details)
        ctx.observer.on_cascade(rule.id, rule.pack, "judge", reason)
        return outcome

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
