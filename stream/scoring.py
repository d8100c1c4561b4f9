"""The rule engine: apply every matching rule to a trace and produce decisions and scores.

Pure with respect to Kafka: takes a validated trace, returns what to publish. A score
that could not be produced is data (status skipped or error), never an exception.

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

from . import checks as checks_registry
from . import metrics
from .errors import JudgeError, MissingVariable
from .judge import NO_JUDGE_REASON, JudgeClient
from .models import (
    Decision,
    Outcome,
    ScoreEvent,
    Status,
    ThreadInfo,
    TokenUsage,
    Trace,
    score_id,
    utcnow,
)
from .paths import format_value, lookup, lookup_nonempty, truthy
from .rubric import CriterionAnswer, CriterionInfo, RubricInput, RubricScore
from .rules import AnyRule, CheckRule, LLMJudgeRule, PromptedRule, RubricRule, RuleSet
from .templates import render
from .threads import PendingClose, ThreadKind

log = logging.getLogger(__name__)


@dataclass
class RuleOutcome:
    """What one rule decided for one target: always a decision, a score unless filtered out."""

    decision: Decision
    score: ScoreEvent | None
    extra: list[ScoreEvent] = field(default_factory=list)  # a rubric's other scores


@dataclass
class JudgeJob:
    rule: PromptedRule
    prompt: str
    system: str | None = None
    forced: dict[str, str] = field(default_factory=dict)  # rubric criterion -> why it is NA


@dataclass(slots=True)
class Target:
    """What is scored: a trace, or one close of a thread (its id hashes into score ids)."""

    id: str
    project_name: str
    score_key: str
    thread: ThreadInfo | None = None


@dataclass
class ThreadClose:
    """One close of one thread, as the thread agent hands it to the scorer."""

    thread_id: str
    kind: ThreadKind
    project_name: str
    pending: PendingClose
    topic: str | None = None

    @property
    def info(self) -> ThreadInfo:
        document = self.pending.document
        return ThreadInfo(
            kind=self.kind,
            close_seq=self.pending.close_seq,
            close_reason=self.pending.reason,
            turn_count=document["turn_count"],
            dropped_turns=document["dropped_turns"],
        )


@dataclass
class TracePlan:
    """A target after the synchronous part of scoring: finished outcomes and judge calls to make."""

    target: Target
    outcomes: list[RuleOutcome] = field(default_factory=list)
    judge_jobs: list[JudgeJob] = field(default_factory=list)
    created_at: datetime = field(default_factory=utcnow)


@dataclass
class TraceResult:
    outcomes: list[RuleOutcome]

    @property
    def scores(self) -> list[ScoreEvent]:
        return [
            score
            for o in self.outcomes
            for score in ([o.score] if o.score is not None else []) + o.extra
        ]

    @property
    def decisions(self) -> list[Decision]:
        return [o.decision for o in self.outcomes]


def resolve_variables(rule: AnyRule, document: Any) -> dict[str, Any]:
    """Mapped values of every variable; raises ``MissingVariable`` for the first missing one."""
    return {
        name: (lookup if spec.allow_empty else lookup_nonempty)(document, name, spec.path)
        for name, spec in rule.variable_specs.items()
    }


def _texts(rule: PromptedRule, values: dict[str, Any]) -> dict[str, str]:
    specs = rule.variable_specs
    texts = {
        name: format_value(value, specs[name].format, specs[name].tag)
        for name, value in values.items()
    }
    texts.update(rule.options)
    return texts


def render_prompt(rule: PromptedRule, values: dict[str, Any], document: Any = None) -> str:
    """The user prompt, with the suffixes whose condition holds on ``document``."""
    texts = _texts(rule, values)
    prompt = render(rule.prompt, texts)
    for suffix in rule.suffixes:
        if truthy(document, suffix.when):
            prompt += render(suffix.text, texts)
    return prompt


def render_system(rule: PromptedRule, values: dict[str, Any]) -> str | None:
    if rule.system_prompt is None:
        return None
    return render(rule.system_prompt, _texts(rule, values))


class Scorer:
    """Scores targets against a rule set with an optional judge."""

    def __init__(self, ruleset: RuleSet, judge: JudgeClient | None, *, default_model: str) -> None:
        self.ruleset = ruleset
        self.judge = judge
        self.default_model = default_model
        self.trace_rules = ruleset.for_scope("trace")

    async def score_trace(
        self, trace: Trace, document: Any, topic: str | None = None
    ) -> TraceResult:
        """Apply every trace-scope rule to ``trace`` (``document`` is its JSON form)."""
        return await self.finish(self.plan(trace, document, topic))

    async def score_thread(self, close: ThreadClose) -> TraceResult:
        return await self.finish(self.plan_thread(close))

    def plan(self, trace: Trace, document: Any, topic: str | None = None) -> TracePlan:
        """Everything that needs no judge: decide, look up, check, render prompts."""
        plan = TracePlan(Target(trace.id, trace.project_name, trace.id))
        for rule in self.trace_rules:
            if not rule.filter.matches(trace, topic):
                plan.outcomes.append(self._decide(rule, plan, "filtered", None, None))
                continue
            self._plan_rule(plan, rule, document)
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
            f"{close.thread_id}#{close.pending.close_seq}",
            close.info,
        )
        plan = TracePlan(target)
        as_trace = Trace(id=close.thread_id, project_name=close.project_name)
        for rule in self.ruleset.thread_rules(close.kind):
            if close.kind == "conversation":
                applies = rule.id in close.pending.rules
            else:
                applies = rule.filter.matches(as_trace, close.topic)
            if not applies:
                plan.outcomes.append(self._decide(rule, plan, "filtered", None, None))
            elif isinstance(rule, PromptedRule) and not document["turn_count"]:
                plan.outcomes.append(
                    self._finish(
                        rule, plan, status="skipped", status_reason="the thread has no turns"
                    )
                )
            else:
                self._plan_rule(plan, rule, document)
        return plan

    def _plan_rule(self, plan: TracePlan, rule: AnyRule, document: Any) -> None:
        if not rule.sampled(plan.target.id):
            detail = f"sampling rate {rule.sampling_rate:g}"
            plan.outcomes.append(self._decide(rule, plan, "sampled_out", detail, None))
            return
        try:
            values = resolve_variables(rule, document)
        except MissingVariable as exc:
            plan.outcomes.append(self._finish(rule, plan, status="skipped", status_reason=str(exc)))
            return
        if isinstance(rule, CheckRule):
            plan.outcomes.append(self._run_check(rule, plan, values))
        elif self.judge is None:
            plan.outcomes.append(
                self._finish(rule, plan, status="skipped", status_reason=NO_JUDGE_REASON)
            )
        else:
            prompt = render_prompt(rule, values, document)
            system = render_system(rule, values)
            forced = {}
            if isinstance(rule, RubricRule):
                forced = {
                    c.id: f"NA: the criterion does not apply ({c.na_when})"
                    for c in rule.criteria
                    if c.na_when is not None and truthy(document, c.na_when)
                }
            plan.judge_jobs.append(JudgeJob(rule, prompt, system, forced))

    async def finish(self, plan: TracePlan) -> TraceResult:
        """Make the plan's judge calls concurrently and add their outcomes."""
        if not plan.judge_jobs:
            return TraceResult(plan.outcomes)
        judged = await asyncio.gather(*(self._run_judge(job, plan) for job in plan.judge_jobs))
        return TraceResult(plan.outcomes + list(judged))

    def _run_check(self, rule: CheckRule, plan: TracePlan, values: dict[str, Any]) -> RuleOutcome:
        spec = checks_registry.get(rule.check)
        assert spec is not None  # checked at load time
        started = time.perf_counter()
        try:
            result = spec.func(values, rule.validated_params)
        except checks_registry.NotApplicable as exc:
            return self._finish(
                rule, plan, status="skipped", status_reason=f"check not applicable: {exc}"
            )
        except Exception as exc:  # a bug in a check must not stop the stream
            log.exception("check %s failed on %s", rule.check, plan.target.id)
            return self._finish(
                rule,
                plan,
                status="error",
                status_reason=f"check {rule.check} raised {type(exc).__name__}: {exc}",
            )
        return self._finish(
            rule,
            plan,
            status="ok",
            raw_value=result.raw_value,
            label=result.label,
            reason=result.reason,
            latency_ms=(time.perf_counter() - started) * 1000,
        )

    async def _run_judge(self, job: JudgeJob, plan: TracePlan) -> RuleOutcome:
        assert self.judge is not None
        rule = job.rule
        assert isinstance(rule, LLMJudgeRule | RubricRule)
        try:
            verdict = await self.judge.judge(rule, job.prompt, job.system)
        except JudgeError as exc:
            return self._finish(
                rule,
                plan,
                utcnow(),
                status="error",
                status_reason=f"judge {exc.kind}: {exc}",
                judge_model=rule.judge.model or self.default_model,
            )
        if isinstance(rule, RubricRule):
            return self._finish_rubric(rule, plan, job, verdict)
        return self._finish(
            rule,
            plan,
            utcnow(),
            status="ok",
            raw_value=verdict.answer.raw_value,
            label=verdict.answer.label,
            reason=verdict.answer.reason,
            judge_model=verdict.model,
            latency_ms=verdict.latency_ms,
            usage=verdict.usage,
        )

    def _decide(
        self,
        rule: AnyRule,
        plan: TracePlan,
        outcome: Outcome,
        detail: str | None,
        sid: str | None,
        now: datetime | None = None,
    ) -> RuleOutcome:
        metrics.decisions(rule.id, rule.pack, outcome).inc()
        decision = Decision(
            target_id=plan.target.id,
            rule_id=rule.id,
            pack=rule.pack,
            rule_version=rule.version,
            project_name=plan.target.project_name,
            outcome=outcome,
            detail=detail,
            score_id=sid,
            created_at=now or plan.created_at,
        )
        return RuleOutcome(decision, None)

    def _finish(
        self,
        rule: AnyRule,
        plan: TracePlan,
        now: datetime | None = None,
        *,
        status: Status,
        status_reason: str | None = None,
        raw_value: float | None = None,
        label: str | None = None,
        reason: str | None = None,
        judge_model: str | None = None,
        latency_ms: float | None = None,
        usage: TokenUsage | None = None,
    ) -> RuleOutcome:
        """``now``: when the outcome was decided (default: when the plan was made, one
        timestamp for everything decided synchronously)."""
        target = plan.target
        now = now or plan.created_at
        criterion, scale = None, rule.output.scale
        if isinstance(rule, RubricRule):
            # a rubric that could not be judged publishes one score: its primary one
            assert status != "ok", "rubric scores come from _finish_rubric"
            criterion, scale = rule.aggregator.primary, rule.primary_scale()
        sid = score_id(_score_rule_key(rule, criterion), rule.version, rule.scope, target.score_key)
        ok = status == "ok" and raw_value is not None
        score = ScoreEvent(
            score_id=sid,
            rule_id=rule.id,
            pack=rule.pack,
            rule_version=rule.version,
            scope=rule.scope,
            criterion=criterion,
            target_id=target.id,
            project_name=target.project_name,
            value=rule.output.normalise(raw_value) if ok and raw_value is not None else None,
            raw_value=raw_value if ok else None,
            scale=scale,
            label=label,
            reason=reason,
            higher_is_better=rule.output.higher_is_better,
            status=status,
            status_reason=status_reason,
            judge_model=judge_model,
            latency_ms=latency_ms,
            usage=usage,
            thread=target.thread,
            created_at=now,
        )
        outcome: Outcome = {"ok": "scored", "skipped": "skipped", "error": "error"}[status]  # type: ignore[assignment]
        decided = self._decide(rule, plan, outcome, status_reason, sid, now)
        decided.score = score
        return decided

    def _finish_rubric(
        self, rule: RubricRule, plan: TracePlan, job: JudgeJob, verdict: Any
    ) -> RuleOutcome:
        """Every score a rubric publishes from one judge answer; one decision, whose score id
        is the rubric's primary score."""
        now = utcnow()
        answers: dict[str, CriterionAnswer | None] = dict(verdict.answer)
        for cid, why in job.forced.items():
            judged = answers.get(cid)
            said = f"; the judge said {judged.label}" if judged is not None else ""
            answers[cid] = CriterionAnswer(rule.output.choices["NA"], "NA", None, why + said)  # type: ignore[index]
        ordered = {c.id: answers[c.id] for c in rule.criteria if c.id in answers}
        spec = rule.aggregator
        rubric = RubricInput(
            criteria=[CriterionInfo(c.id, c.name) for c in rule.criteria],
            answers=ordered,
            scale=rule.output.scale,
        )
        try:
            results = spec.func(rubric, rule.validated_aggregate)
        except Exception as exc:  # a bug in an aggregator must not stop the stream
            log.exception("aggregate %s failed on %s", rule.aggregate.name, plan.target.id)
            return self._finish(
                rule,
                plan,
                now,
                status="error",
                status_reason=f"aggregate {rule.aggregate.name} raised {type(exc).__name__}: {exc}",
                judge_model=verdict.model,
            )
        scores = [self._rubric_score(rule, plan, result, verdict, now) for result in results]
        primary = next((s for s in scores if s.criterion == spec.primary), scores[0])
        outcome: Outcome = "scored" if primary.status == "ok" else "error"
        decided = self._decide(rule, plan, outcome, primary.status_reason, primary.score_id, now)
        decided.score = primary
        decided.extra = [s for s in scores if s is not primary]
        return decided

    def _rubric_score(
        self, rule: RubricRule, plan: TracePlan, result: RubricScore, verdict: Any, now: datetime
    ) -> ScoreEvent:
        target = plan.target
        ok = result.error is None and result.raw_value is not None
        return ScoreEvent(
            score_id=score_id(
                _score_rule_key(rule, result.name), rule.version, rule.scope, target.score_key
            ),
            rule_id=rule.id,
            pack=rule.pack,
            rule_version=rule.version,
            scope=rule.scope,
            criterion=result.name,
            target_id=target.id,
            project_name=target.project_name,
            value=result.value if ok else None,
            raw_value=result.raw_value if ok else None,
            scale=result.scale,
            label=result.label,
            reason=result.reason,
            higher_is_better=result.higher_is_better,
            status="ok" if ok else "error",
            status_reason=result.error,
            judge_model=verdict.model,
            latency_ms=verdict.latency_ms,
            # one judge call: its usage is counted once, on the primary score
            usage=verdict.usage if result.name == rule.aggregator.primary else None,
            thread=target.thread,
            details=result.details,
            created_at=now,
        )


def _score_rule_key(rule: AnyRule, criterion: str | None) -> str:
    """What a score id hashes for the rule: its id, and the criterion for rubric scores."""
    return rule.id if criterion is None else f"{rule.id}/{criterion}"
