"""What a rule kind is: how its rules are planned (synchronously) and, for judged kinds,
how their judge calls become outcomes."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar

from ...errors import JudgeError
from ...models import utcnow
from ...redact.redactor import redacted_document
from ...ruleset.filters import sampled
from ...ruleset.schema import AnyRule
from ..context import ScoringContext
from ..outcomes import Measured, RuleOutcome, ScoreShape
from ..plan import JudgedRule, JudgeJob, Plan
from ..prompt import FittedPrompt, PromptTooLarge, describe_cut, fit_prompt, prompt_cut
from ..spend import JUDGED_IN_A_BATCH, Admission
from ..trace_tools import TraceTools
from ..verdicts import NO_JUDGE_REASON, Verdict

# where a rule's prompt cap comes from, as a score and its decision name it
CAP_OF_RULE = "judge.max_prompt_tokens"
CAP_OF_WORKER = "SCORER_JUDGE_MAX_PROMPT_TOKENS"


@dataclass(frozen=True, slots=True)
class Found:
    """What the scorer found for a rule on a target: the document and the rule's variable
    values (``emptied``: the missing ones rendered empty)."""

    document: Any
    values: dict[str, Any]
    emptied: list[str]


class RuleKind:
    """One kind of rule. ``handles`` picks the kind of a rule (the first registered kind that
    handles it); ``plan`` decides what needs no judge, or queues a judge call; ``run`` makes
    a queued call and turns the verdict into the rule's outcome."""

    judged: ClassVar[bool] = False  # whether its rules are sent to the judge

    def handles(self, rule: AnyRule) -> bool:
        raise NotImplementedError

    def shape(self, rule: AnyRule) -> ScoreShape:
        """The shape of the score that stands for the rule's decision."""
        return ScoreShape.of_rule(rule)

    def plan(self, ctx: ScoringContext, plan: Plan, rule: AnyRule, found: Found) -> None:
        """Add the rule's outcome to ``plan``, or a judge job for it."""
        raise NotImplementedError

    async def run(self, ctx: ScoringContext, job: JudgeJob, plan: Plan) -> RuleOutcome:
        """The outcome of a judge job this kind planned."""
        raise NotImplementedError

    def criteria(self, rule: AnyRule) -> list[str | None]:
        """The ``criterion`` of every score the rule publishes for a target it judged."""
        return [self.shape(rule).criterion]

    def settle(self, ctx: ScoringContext, job: JudgeJob, outcome: RuleOutcome) -> None:
        """What every judged outcome says besides its verdict: a prompt cut to fit its cap
        (``details.prompt_cut`` on the rule's score, said in its decision, counted), and how
        an ``error`` score counts in aggregates when the rule's ``output.errors_count_as``
        says (``details.counted_as``: the value, and the criteria it stands for)."""
        rule, score = job.rule, outcome.score
        if job.prompt_cut is not None:
            ctx.observer.on_prompt_cut(rule.id, rule.pack)
            if score is not None:
                score.details = {**(score.details or {}), "prompt_cut": job.prompt_cut}
            said, decision = describe_cut(job.prompt_cut), outcome.decision
            decision.detail = f"{decision.detail}; {said}" if decision.detail else said
        counted = rule.output.errors_count_as
        if counted is not None and score is not None and score.status == "error":
            count = {"value": counted, "criteria": self.criteria(rule)}
            score.details = {**(score.details or {}), "counted_as": count}
        if job.admission is not None:
            said_by_budget(job.admission, outcome)


def said_by_budget(admission: Admission, outcome: RuleOutcome) -> None:
    """What the budgets did to a judged outcome, on each of its scores and in its decision:
    the sampling rate used under a sample budget (``details.sampled_at``), and how a budget
    degraded it (``details.budget``: lowered the rate, or a spent one's fallback model)."""
    added: dict[str, Any] = {}
    if admission.sampled_at is not None:
        added["sampled_at"] = round(admission.sampled_at, 6)
    if admission.budget is not None:
        added["budget"] = admission.budget
    for score in [outcome.score, *outcome.extra]:
        if score is not None and added:
            score.details = {**(score.details or {}), **added}
    said = "; ".join(why for why in (admission.fell_back, admission.lowered) if why)
    if said:
        decision = outcome.decision
        decision.detail = f"{decision.detail}; {said}" if decision.detail else said


class JudgedKind(RuleKind):
    """A kind whose rules the judge scores from a rendered prompt: with no judge, or a spent
    budget, or a prompt that cannot fit, the rule is ``skipped`` with the reason; else one
    judge job (a kind may fill in more of it: ``prepare``)."""

    judged = True

    def calls(self, rule: JudgedRule, found: Found) -> list[dict[str, Any]] | str:
        """The values of each judge call the rule makes, or why it makes none."""
        return [found.values]

    def prepare(self, job: JudgeJob, plan: Plan, found: Found, fitted: list[FittedPrompt]) -> None:
        """Fill in what this kind's judge job needs beyond the prompt."""

    def plan(self, ctx: ScoringContext, plan: Plan, rule: AnyRule, found: Found) -> None:
        assert isinstance(rule, JudgedRule)
        calls = self.calls(rule, found)
        if isinstance(calls, str):
            plan.outcomes.append(ctx.finish(rule, plan, Measured("skipped", calls)))
            return
        if ctx.judge is None:
            plan.outcomes.append(ctx.finish(rule, plan, Measured("skipped", NO_JUDGE_REASON)))
            return
        admission, spent = None, None
        shadowed = rule  # its shadows judge as the rule itself, whatever a budget does to it
        if ctx.ledger is not None:
            admission = ctx.ledger.admit(rule.id, ctx.model_of(rule), rule.sampling_rate)
            spent = admission.skipped  # skipped, unless its verdicts are kept (they are free)
            lowered = spent is None and admission.lowered
            if lowered and not sampled(rule.id, admission.rate, plan.target.id):
                plan.outcomes.append(ctx.decide(rule, plan, "sampled_out", admission.lowered))
                return
            if spent is None and admission.model != ctx.model_of(rule):  # a cheaper model
                rule = rule.model_copy(
                    update={"judge": rule.judge.model_copy(update={"model": admission.model})}
                )
        fitted, setting = fit_calls(ctx, rule, calls, found, plan)
        if isinstance(fitted, str):
            plan.outcomes.append(ctx.finish(rule, plan, Measured("skipped", spent or fitted)))
            return
        if spent is not None and not (
            ctx.holds is not None and all(ctx.holds(rule, f.prompt, f.system) for f in fitted)
        ):
            plan.outcomes.append(ctx.finish(rule, plan, Measured("skipped", spent)))
            return
        job = self._job(plan, rule, found, fitted, setting)
        job.admission = admission
        if rule.judge.mode == "batch":
            job.batch = "judge.mode: batch"
        elif admission is not None and admission.deferred is not None:
            if rule.judge.tools is not None:  # a batch answers once: no tool loop in it
                why = f"budget exhausted: {admission.deferred.removesuffix(JUDGED_IN_A_BATCH)}"
                why += "; a rule that reads the trace through tools cannot be judged in a batch"
                plan.outcomes.append(ctx.finish(rule, plan, Measured("skipped", why)))
                return
            job.batch = admission.deferred
        if rule.judge.tools == "trace" and isinstance(found.document, dict):
            document = found.document  # a tool call's rule reads the call's whole trace
            if rule.scope == "tool_call" and isinstance(document.get("trace"), dict):
                document = document["trace"]
            job.tools = trace_tools(ctx, rule, document, plan, job)
        if job.redacted:
            ctx.observer.on_redacted(rule.id, rule.pack, job.redacted)
        plan.judge_jobs.append(job)
        self.plan_tiers(plan, job, found, fitted, setting)
        if spent is None:  # a spent budget's rule judged from kept verdicts runs no shadow
            self._plan_shadows(ctx, plan, shadowed, calls, found, job.batch)

    def plan_tiers(
        self,
        plan: Plan,
        job: JudgeJob,
        found: Found,
        fitted: list[FittedPrompt],
        setting: str,
    ) -> None:
        """A kind whose rules can have a cascade plans its tiers here (none by default)."""

    def _job(
        self, plan: Plan, rule: JudgedRule, found: Found, fitted: list[FittedPrompt], setting: str
    ) -> JudgeJob:
        """The judge job of ``rule`` from its fitted prompts (its kind fills in the rest)."""
        first = fitted[0]
        job = JudgeJob(rule, first.prompt, first.system, {}, first.quoted, first.cut, found.emptied)
        job.prompt_cut = prompt_cut(fitted, setting)
        job.redacted = dict(sum((Counter(f.redacted) for f in fitted), Counter()))
        self.prepare(job, plan, found, fitted)
        return job

    def _plan_shadows(
        self,
        ctx: ScoringContext,
        plan: Plan,
        rule: JudgedRule,
        calls: list[dict[str, Any]],
        found: Found,
        batch: str | None,
    ) -> None:
        """A judge job for each shadow of ``rule`` whose hashed sample (keyed apart from the
        rule's own: ``<rule>@<shadow>``) takes the target: the rule with the shadow's model
        and prompt, the same variables and cap; sent to a batch when the rule's job is. A
        shadow's prompt that cannot fit is a ``skipped`` score of the shadow."""
        for spec in rule.shadow:
            if not sampled(f"{rule.id}@{spec.name}", spec.sampling_rate, plan.target.id):
                continue
            shadow = rule.as_shadow(spec.name)
            fitted, setting = fit_calls(ctx, shadow, calls, found, plan)
            if isinstance(fitted, str):
                plan.outcomes.append(ctx.finish(shadow, plan, Measured("skipped", fitted)))
                continue
            job = self._job(plan, shadow, found, fitted, setting)
            job.batch = batch
            plan.judge_jobs.append(job)

    async def run(self, ctx: ScoringContext, job: JudgeJob, plan: Plan) -> RuleOutcome:
        """One judge call; its verdict concluded by the kind, or an ``error`` score."""
        assert ctx.judge is not None
        rule = job.rule
        try:
            verdict = await ctx.judge.judge(rule, job.prompt, job.system, job.quoted, job.tools)
        except JudgeError as exc:
            return ctx.finish(rule, plan, judge_failed(ctx, job, exc), utcnow())
        ctx.charge(rule, verdict.usage)  # a cached verdict's is None: nothing charged
        outcome = self.conclude(ctx, job, plan, verdict)
        if verdict.cached:
            mark_cached(outcome)
        return outcome

    def conclude(
        self, ctx: ScoringContext, job: JudgeJob, plan: Plan, verdict: Verdict
    ) -> RuleOutcome:
        """The rule's outcome from the judge's verdict."""
        raise NotImplementedError


def fit_calls(
    ctx: ScoringContext, rule: JudgedRule, calls: list[dict[str, Any]], found: Found, plan: Plan
) -> tuple[list[FittedPrompt] | str, str]:
    """Each call's prompt fitted to the rule's cap (or why it cannot be), its variables
    masked as the rule's ``judge.redact`` says, with the target's placeholders; and which
    setting the cap came from."""
    cap = rule.judge.max_prompt_tokens or ctx.max_prompt_tokens
    setting = CAP_OF_RULE if rule.judge.max_prompt_tokens else CAP_OF_WORKER
    detectors = ctx.redaction.masking(rule.judge.redact)
    redact = partial(plan.redaction.redacted, detectors=detectors) if detectors else None
    try:
        fitted = [fit_prompt(rule, call, found.document, cap, redact) for call in calls]
        return fitted, setting
    except PromptTooLarge as exc:
        return f"prompt too large: {exc} ({setting}, judge.oversize)", setting


def trace_tools(
    ctx: ScoringContext, rule: JudgedRule, document: dict[str, Any], plan: Plan, job: JudgeJob
) -> TraceTools:
    """The tools a judge reads the trace through, over the trace as ``judge.redact`` masks it
    (the target's placeholders: a value is the same in the prompt and in a tool's answer)."""
    detectors = ctx.redaction.masking(rule.judge.redact)
    if not detectors:
        return TraceTools(document)
    masked, counts = redacted_document(
        document, partial(plan.redaction.redacted, detectors=detectors)
    )
    job.redacted = dict(Counter(job.redacted) + counts)
    return TraceTools(masked)


def judge_failed(ctx: ScoringContext, job: JudgeJob, exc: JudgeError) -> Measured:
    """A judge call that failed: an ``error`` score saying why (an unusable answer is
    charged: it cost tokens too)."""
    ctx.charge(job.rule, exc.usage)
    return Measured(
        "error", f"judge {exc.kind}: {exc}", judge_model=ctx.model_of(job.rule), usage=exc.usage
    )


def mark_cached(outcome: RuleOutcome) -> None:
    """Say on every score of ``outcome`` that its verdict came from the verdict cache
    (``details.cached``): the same score a live call published, no tokens charged."""
    for score in [outcome.score, *outcome.extra]:
        if score is not None:
            score.details = {**(score.details or {}), "cached": True}


def job_details(job: JudgeJob) -> dict[str, Any] | None:
    """What a judged score says of its prompt: variables cut to fit (``settle`` adds them to
    every outcome, ok or not), missing ones rendered empty (``missing: empty``), how many
    values of each kind were masked in the judge's copy (``redacted``; never the values)."""
    details: dict[str, Any] = {}
    if job.prompt_cut is not None:
        details["prompt_cut"] = job.prompt_cut
    if job.emptied:
        details["empty_variables"] = job.emptied
    if job.redacted:
        details["redacted"] = job.redacted
    return details or None
