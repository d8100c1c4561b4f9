"""Scoring a target against the rule set: every matching rule yields a decision and a score.

Pure with respect to Kafka: takes a validated trace (or a thread close), returns what to
publish. A score that could not be produced is data (status skipped or error), never an
exception.

Scoring is split in two so the worker spends no event-loop task on work that never waits:
``plan`` does everything synchronous (filters, sampling, variable lookup, deterministic
checks, prompt rendering); ``finish`` runs only the judge calls, concurrently.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..errors import JudgeError, MissingVariable
from ..models import Outcome, ScoreEvent, TokenUsage, Trace, utcnow
from ..observer import Observer
from ..ruleset.checks import NotApplicable
from ..ruleset.paths import truthy
from ..ruleset.schema import (
    AnyRule,
    CheckRule,
    ComparisonRule,
    LLMJudgeRule,
    PromptedRule,
    RubricRule,
    RuleSet,
)
from ..threads.state import ThreadClose
from .judge import NO_JUDGE_REASON, ComparisonAnswers, Judge, ParsedAnswer, Verdict
from .outcomes import (
    OUTCOME_OF_STATUS,
    Measured,
    RuleOutcome,
    ScoreShape,
    Target,
    TraceResult,
    make_decision,
    make_score,
)
from .prompt import (
    DEFAULT_MAX_PROMPT_TOKENS,
    FittedPrompt,
    PromptTooLarge,
    fan_out_values,
    fit_prompt,
    resolve_variables,
)
from .rubric import criteria_input, measured_scores, rubric_input
from .silence import SilenceWatch
from .spend import SpendLedger
from .trace_tools import TraceTools

log = logging.getLogger(__name__)

PAIR_SLOTS = ("a", "b")  # a pair document's two traces: response A and response B
PREFERENCE = "preference"  # the criterion of a comparison's preference score


@dataclass
class JudgeJob:
    """One judge call a plan still has to make."""

    rule: PromptedRule
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


@dataclass
class TracePlan:
    """A target after the synchronous part of scoring: finished outcomes and judge calls to make."""

    target: Target
    outcomes: list[RuleOutcome] = field(default_factory=list)
    judge_jobs: list[JudgeJob] = field(default_factory=list)
    created_at: datetime = field(default_factory=utcnow)


class Scorer:
    """Scores targets against a rule set with an optional judge."""

    def __init__(
        self,
        ruleset: RuleSet,
        judge: Judge | None,
        *,
        default_model: str,
        observer: Observer | None = None,
        max_prompt_tokens: int = DEFAULT_MAX_PROMPT_TOKENS,
        ledger: SpendLedger | None = None,
        silence: SilenceWatch | None = None,
    ) -> None:
        self.ruleset = ruleset
        self.silence = silence
        self.judge = judge
        self.default_model = default_model
        self.max_prompt_tokens = max_prompt_tokens
        self.ledger = ledger
        self.observer = observer or Observer()
        self.trace_rules = ruleset.for_scope("trace")
        # the shape of the one score a rule publishes (a rubric's: its primary, when unjudged)
        self.shapes = {rule.id: primary_shape(rule) for rule in ruleset.rules}

    async def score_trace(
        self, trace: Trace, document: Any, topic: str | None = None
    ) -> TraceResult:
        """Apply every trace-scope rule to ``trace`` (``document`` is its JSON form)."""
        return await self.finish(self.plan(trace, document, topic))

    async def score_thread(self, close: ThreadClose) -> TraceResult:
        """Apply the thread rules of ``close``'s kind to the thread document of that close."""
        return await self.finish(self.plan_thread(close))

    def plan(self, trace: Trace, document: Any, topic: str | None = None) -> TracePlan:
        """Everything that needs no judge: decide, look up, check, render prompts."""
        plan = TracePlan(Target(trace.id, trace.project_name, trace.id))
        matched = []
        for rule in self.trace_rules:
            if (why := rule.filter.mismatch(trace, topic)) is not None:
                plan.outcomes.append(self._decide(rule, plan, "filtered", why))
                continue
            matched.append(rule.id)
            self._plan_rule(plan, rule, document)
        if self.silence is not None:
            self.silence.saw(trace, matched)
        return plan

    def plan_thread(self, close: ThreadClose) -> TracePlan:
        """The thread rules of ``close``'s kind on the thread document of that close.

        Conversation rules apply when their filter matched a trace of the thread (the trace
        agent records that); session rules filter on the session's project and topic. An
        empty thread is not sent to a judge (``skipped``); checks decide for themselves.
        """
        document = close.pending.document
        target = Target(
            close.thread_id,
            close.project_name,
            close.target,
            close.info,
        )
        plan = TracePlan(target)
        if close.kind == "pair":
            for pair_rule in self.ruleset.pair_rules():
                self._plan_pair(plan, pair_rule, close)
            return plan
        as_trace = Trace(id=close.thread_id, project_name=close.project_name)
        for rule in self.ruleset.thread_rules(close.kind):
            if close.kind == "conversation":
                why = None if rule.id in close.pending.rules else "no trace of the thread matched"
            else:
                why = rule.filter.mismatch(as_trace, close.topic)
            if why is not None:
                plan.outcomes.append(self._decide(rule, plan, "filtered", why))
            elif isinstance(rule, PromptedRule) and not document["turn_count"]:
                unjudged = Measured("skipped", "the thread has no turns")
                plan.outcomes.append(self._finish(rule, plan, unjudged))
            else:
                self._plan_rule(plan, rule, document)
        return plan

    def _plan_pair(self, plan: TracePlan, rule: ComparisonRule, close: ThreadClose) -> None:
        """A comparison rule on a pair: judged when both of its traces came (and one of them
        matched the rule's filter), else ``skipped`` with the partner that did not come."""
        document = close.pending.document
        if rule.id not in close.pending.rules:
            plan.outcomes.append(
                self._decide(rule, plan, "filtered", "no trace of the pair matched")
            )
            return
        if self._sampled_out(plan, rule):  # decided so whether or not the partner came
            return
        labels = dict(zip(PAIR_SLOTS, rule.pair.variants, strict=True))
        traces = document.get("variants", {})
        if missing := [slot for slot in PAIR_SLOTS if labels[slot] not in traces]:
            (absent,) = missing  # a pair closes with at least one trace
            (there,) = set(PAIR_SLOTS) - {absent}
            why = (
                f"partner missing: comparison {close.thread_id!r} has variant "
                f"{labels[there]} (trace {traces[labels[there]]}) but no variant "
                f"{labels[absent]} within {rule.pair.window_s:g} s"
            )
            plan.outcomes.append(self._finish(rule, plan, Measured("skipped", why)))
            return
        before = len(plan.judge_jobs)
        self._plan_rule(plan, rule, document)
        if len(plan.judge_jobs) > before:
            # each response's trace, and its project (a canary may report to its own)
            plan.judge_jobs[-1].members = {
                slot: (
                    traces[labels[slot]],
                    document[slot].get("project_name") or plan.target.project_name,
                )
                for slot in PAIR_SLOTS
            }

    def _sampled_out(self, plan: TracePlan, rule: AnyRule) -> bool:
        """Whether ``rule`` samples this target out (its decision then says so)."""
        if rule.sampled(plan.target.id):
            return False
        detail = f"sampling rate {rule.sampling_rate:g}"
        plan.outcomes.append(self._decide(rule, plan, "sampled_out", detail))
        return True

    def _plan_rule(self, plan: TracePlan, rule: AnyRule, document: Any) -> None:
        if self._sampled_out(plan, rule):
            return
        emptied: list[str] = []
        try:
            values = resolve_variables(rule, document, emptied)
        except MissingVariable as exc:
            why = str(exc)
            if isinstance(document, dict) and isinstance(document.get("content_missing"), str):
                why = f"{why}: {document['content_missing']}"  # e.g. message capture was off
            plan.outcomes.append(self._finish(rule, plan, Measured("skipped", why)))
            return
        calls, total_items = fan_out_values(rule, values)
        if not calls:  # a fan_out rule's list is empty
            assert isinstance(rule, LLMJudgeRule) and rule.fan_out is not None
            name = rule.fan_out.variable
            why = f"variable '{name}': path '{rule.variable_specs[name].path}' holds no items"
            plan.outcomes.append(self._finish(rule, plan, Measured("skipped", why)))
            return
        if isinstance(rule, CheckRule):
            plan.outcomes.append(self._run_check(rule, plan, values))
        elif self.judge is None:
            plan.outcomes.append(self._finish(rule, plan, Measured("skipped", NO_JUDGE_REASON)))
        else:
            model = rule.judge.model or self.default_model
            if self.ledger is not None and (spent := self.ledger.exhausted(rule.id, model)):
                plan.outcomes.append(self._finish(rule, plan, Measured("skipped", spent)))
                return
            cap = rule.judge.max_prompt_tokens or self.max_prompt_tokens
            try:
                items = [fit_prompt(rule, call, document, cap) for call in calls]
            except PromptTooLarge as exc:
                why = f"prompt too large: {exc} (SCORER_JUDGE_MAX_PROMPT_TOKENS, judge.oversize)"
                plan.outcomes.append(self._finish(rule, plan, Measured("skipped", why)))
                return
            fitted = items[0]
            fanned = items if isinstance(rule, LLMJudgeRule) and rule.fan_out else []
            forced = {}
            if isinstance(rule, RubricRule):
                forced = {
                    c.id: f"NA: the criterion does not apply ({c.na_when})"
                    for c in rule.criteria
                    if c.na_when is not None and truthy(document, c.na_when)
                }
            job = JudgeJob(
                rule, fitted.prompt, fitted.system, forced, fitted.quoted, fitted.cut, emptied
            )
            job.items, job.total_items = fanned, total_items
            if rule.judge.tools == "trace" and isinstance(document, dict):
                job.tools = TraceTools(document)
            plan.judge_jobs.append(job)

    async def finish(self, plan: TracePlan) -> TraceResult:
        """Make the plan's judge calls concurrently and add their outcomes."""
        if not plan.judge_jobs:
            return TraceResult(plan.outcomes)
        judged = await asyncio.gather(*(self._run_judge(job, plan) for job in plan.judge_jobs))
        return TraceResult(plan.outcomes + list(judged))

    def _run_check(self, rule: CheckRule, plan: TracePlan, values: dict[str, Any]) -> RuleOutcome:
        started = time.perf_counter()
        try:
            result = rule.check_spec.func(values, rule.validated_params)
        except NotApplicable as exc:
            return self._finish(rule, plan, Measured("skipped", f"check not applicable: {exc}"))
        except Exception as exc:  # a bug in a check must not stop the stream
            log.exception("check %s failed on %s", rule.check, plan.target.id)
            why = f"check {rule.check} raised {type(exc).__name__}: {exc}"
            return self._finish(rule, plan, Measured("error", why))
        measured = Measured(
            "ok",
            raw_value=result.raw_value,
            label=result.label,
            reason=result.reason,
            latency_ms=(time.perf_counter() - started) * 1000,
        )
        return self._finish(rule, plan, measured)

    async def _run_judge(self, job: JudgeJob, plan: TracePlan) -> RuleOutcome:
        assert self.judge is not None
        rule = job.rule
        assert isinstance(rule, LLMJudgeRule | RubricRule | ComparisonRule)
        if job.items:
            assert isinstance(rule, LLMJudgeRule)
            return await self._run_fan_out(rule, job, plan)
        try:
            verdict = await self.judge.judge(rule, job.prompt, job.system, job.quoted, job.tools)
        except JudgeError as exc:
            model = rule.judge.model or self.default_model
            if self.ledger is not None and exc.usage is not None:
                self.ledger.record(rule.id, model, exc.usage)  # unusable answers cost too
            failed = Measured(
                "error", f"judge {exc.kind}: {exc}", judge_model=model, usage=exc.usage
            )
            return self._finish(rule, plan, failed, utcnow())
        if self.ledger is not None:
            self.ledger.record(rule.id, rule.judge.model or self.default_model, verdict.usage)
        if isinstance(rule, RubricRule):
            return self._finish_rubric(rule, plan, job, verdict)
        if isinstance(rule, ComparisonRule):
            return self._finish_comparison(rule, plan, job, verdict)
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
            details=_job_details(job),
        )
        return self._finish(rule, plan, answered, utcnow())

    async def _run_fan_out(self, rule: LLMJudgeRule, job: JudgeJob, plan: TracePlan) -> RuleOutcome:
        """One judge call per item, concurrently; one score: the mean of the items' raw
        values (a yes/no choice: the share judged yes), each item's verdict in ``details``."""
        assert self.judge is not None
        model = rule.judge.model or self.default_model
        answers = await asyncio.gather(
            *(self.judge.judge(rule, item.prompt, item.system, item.quoted) for item in job.items),
            return_exceptions=True,
        )
        usage, latency, judged = TokenUsage(), 0.0, []
        per_item: list[dict[str, Any]] = []
        for index, answer in enumerate(answers):
            if isinstance(answer, JudgeError):
                if answer.usage is not None:
                    usage = usage + answer.usage
                per_item.append({"index": index, "error": f"judge {answer.kind}: {answer}"})
                continue
            if isinstance(answer, BaseException):
                raise answer
            parsed = answer.answer
            assert isinstance(parsed, ParsedAnswer), "a one-verdict rule is answered once"
            usage, latency = usage + answer.usage, max(latency, answer.latency_ms)
            judged.append(parsed.raw_value)
            per_item.append(
                {
                    "index": index,
                    "raw_value": parsed.raw_value,
                    "label": parsed.label,
                    "reason": parsed.reason,
                }
            )
        if self.ledger is not None:
            self.ledger.record(rule.id, model, usage)  # every call counts, answered or not
        details = {
            **(_job_details(job) or {}),
            "items": per_item,
            "items_total": job.total_items,
            "items_judged": len(judged),
        }
        errors = [item["error"] for item in per_item if "error" in item]
        if not judged:
            failed = Measured("error", errors[0], judge_model=model, usage=usage, details=details)
            return self._finish(rule, plan, failed, utcnow())
        best = rule.output.scale.max
        summary = (
            f"{sum(1 for raw in judged if raw == best)} of {len(judged)} items judged "
            f"{_top_choice(rule)}"
        )
        if errors:
            summary += f"; {len(errors)} could not be judged ({errors[0]})"
        if job.total_items > len(job.items):
            summary += f"; the first {len(job.items)} of {job.total_items} items were judged"
        answered = Measured(
            "ok",
            raw_value=sum(judged) / len(judged),
            reason=summary,
            judge_model=model,
            latency_ms=latency,
            usage=usage,
            details=details,
        )
        return self._finish(rule, plan, answered, utcnow())

    def _decide(
        self,
        rule: AnyRule,
        plan: TracePlan,
        outcome: Outcome,
        detail: str | None = None,
        sid: str | None = None,
        now: datetime | None = None,
    ) -> RuleOutcome:
        self.observer.on_decision(rule.id, rule.pack, outcome)
        decision = make_decision(rule, plan.target, outcome, now or plan.created_at, detail, sid)
        return RuleOutcome(decision, None)

    def _finish(
        self, rule: AnyRule, plan: TracePlan, measured: Measured, now: datetime | None = None
    ) -> RuleOutcome:
        """The rule's one score and its decision. ``now``: when the outcome was decided
        (default: when the plan was made, one timestamp for everything decided synchronously)."""
        now = now or plan.created_at
        # a rubric scored here could not be judged: it publishes one score, its primary one
        assert measured.status != "ok" or not isinstance(rule, RubricRule | ComparisonRule)
        score = make_score(rule, plan.target, self.shapes[rule.id], measured, now)
        outcome = OUTCOME_OF_STATUS[measured.status]
        decided = self._decide(rule, plan, outcome, measured.status_reason, score.score_id, now)
        decided.score = score
        return decided

    def _finish_rubric(
        self, rule: RubricRule, plan: TracePlan, job: JudgeJob, verdict: Verdict
    ) -> RuleOutcome:
        """Every score a rubric publishes from one judge answer; one decision, whose score id
        is the rubric's primary score."""
        now = utcnow()
        spec = rule.aggregator
        try:
            results = spec.func(rubric_input(rule, verdict, job.forced), rule.validated_aggregate)
        except Exception as exc:  # a bug in an aggregator must not stop the stream
            log.exception("aggregate %s failed on %s", rule.aggregate.name, plan.target.id)
            why = f"aggregate {rule.aggregate.name} raised {type(exc).__name__}: {exc}"
            return self._finish(rule, plan, Measured("error", why, judge_model=verdict.model), now)
        scores = [
            make_score(rule, plan.target, shape, measured, now)
            for shape, measured in measured_scores(rule, verdict, results, _job_details(job))
        ]
        primary = next((s for s in scores if s.criterion == spec.primary), scores[0])
        outcome: Outcome = "scored" if primary.status == "ok" else "error"
        decided = self._decide(rule, plan, outcome, primary.status_reason, primary.score_id, now)
        decided.score = primary
        decided.extra = [s for s in scores if s is not primary]
        return decided

    def _finish_comparison(
        self, rule: ComparisonRule, plan: TracePlan, job: JudgeJob, verdict: Verdict
    ) -> RuleOutcome:
        """Every score a comparison publishes from one judge answer: the preference (the
        pair's, its decision's score) and each response's ratings and aggregate as its rubric
        would publish them (each response's trace is their target)."""
        now = utcnow()
        answer = verdict.answer
        assert isinstance(answer, ComparisonAnswers), "a comparison is answered as a pair"
        variants = dict(zip(PAIR_SLOTS, rule.pair.variants, strict=True))
        pair = {
            "comparison_id": plan.target.id,
            "variants": {variants[slot]: job.members[slot][0] for slot in PAIR_SLOTS},
        }
        extra: list[ScoreEvent] = []
        for slot in PAIR_SLOTS:
            responses = criteria_input(rule, answer.responses[slot])
            try:
                results = rule.aggregator.func(responses, rule.validated_aggregate)
            except Exception as exc:  # a bug in an aggregator must not stop the stream
                log.exception("aggregate %s failed on %s", rule.aggregate.name, plan.target.id)
                why = f"aggregate {rule.aggregate.name} raised {type(exc).__name__}: {exc}"
                failed = Measured("error", why, judge_model=verdict.model, usage=verdict.usage)
                return self._finish(rule, plan, failed, now)
            trace_id, project = job.members[slot]
            target = Target(trace_id, project, f"{plan.target.score_key}/{slot}")
            about = {"comparison_id": plan.target.id, "variant": variants[slot]}
            for shape, measured in measured_scores(rule, verdict, results, primary=""):
                measured.details = {**(measured.details or {}), **about}
                extra.append(make_score(rule, target, shape, measured, now))
        preferred = answer.preference
        details = {**answer.notes, **pair, **(_job_details(job) or {})}
        if preferred is None:
            why = answer.preference_error or "the judge gave no preference"
            measured = Measured("error", why)
        else:
            measured = Measured(
                "ok", raw_value=preferred.raw_value, label=preferred.label, reason=preferred.reason
            )
        measured.judge_model, measured.latency_ms = verdict.model, verdict.latency_ms
        measured.usage = verdict.usage  # one judge call: counted once, on the preference
        measured.details = details
        score = make_score(rule, plan.target, self.shapes[rule.id], measured, now)
        outcome: Outcome = "scored" if score.status == "ok" else "error"
        decided = self._decide(rule, plan, outcome, score.status_reason, score.score_id, now)
        decided.score = score
        decided.extra = extra
        return decided


def primary_shape(rule: AnyRule) -> ScoreShape:
    """The shape of the score that stands for a rule's decision: its one score, a rubric's
    aggregate (or the score it publishes when unjudged), a comparison's preference."""
    if isinstance(rule, ComparisonRule):
        spec = rule.preference
        return ScoreShape(PREFERENCE, spec.scale, spec.higher_is_better)
    if isinstance(rule, RubricRule):
        return ScoreShape(
            rule.aggregator.primary, rule.primary_scale(), rule.output.higher_is_better
        )
    return ScoreShape.of_rule(rule)


def _top_choice(rule: LLMJudgeRule) -> str:
    """The choice worth most (``yes``), or the top of a numeric scale."""
    choices = rule.output.choices
    if choices:
        return max(choices, key=lambda c: choices[c])
    return f"{rule.output.scale.max:g}"


def _job_details(job: JudgeJob) -> dict[str, Any] | None:
    """What a judged score says of its prompt: variables cut to fit, missing ones rendered
    empty (``missing: empty``)."""
    details: dict[str, Any] = {}
    if job.cut:
        details["prompt_cut"] = job.cut
    if job.emptied:
        details["empty_variables"] = job.emptied
    return details or None
