"""Scoring a target against the rule set: every matching rule yields a decision and a score.

Pure with respect to Kafka: takes a validated trace (or a thread close), returns what to
publish. A score that could not be produced is data (status skipped or error), never an
exception.

Scoring is split in two so the worker spends no event-loop task on work that never waits:
``plan`` does everything synchronous (filters, sampling, variable lookup, deterministic
checks, prompt rendering); ``finish`` runs only the judge calls, concurrently. What a rule
of each kind does in either half is its kind's (``kinds/``): the scorer only orchestrates.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from ..errors import MissingVariable
from ..models import Trace
from ..observer import Observer
from ..ruleset.conversations import ConversationRules
from ..ruleset.schema import AnyRule, ComparisonRule, PromptedRule, RuleSet
from ..threads.state import ThreadClose
from ..tools.calls import tool_calls
from ..tools.view import brief, call_document, definition_document
from .context import ScoringContext
from .deferred import defer, deferred_says
from .kinds import Found, kind_of, missing_partner, primary_shape
from .outcomes import Measured, RuleOutcome, Target, TraceResult, call_score_key
from .plan import JudgeJob, Plan
from .prompt import DEFAULT_MAX_PROMPT_TOKENS, resolve_variables
from .records import pair_facts
from .silence import SilenceWatch
from .spend import JUDGED_IN_A_BATCH, SpendLedger
from .verdicts import Judge

__all__ = ["JudgeJob", "Plan", "Scorer", "primary_shape"]

# the tool calls of a trace the tool-call rules score: a long agent run's decision record
# (about 1.2 kB a call with the tools pack) stays far under a broker's 1 MB record limit
DEFAULT_MAX_TOOL_CALLS = 200


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
        holds: Callable[[PromptedRule, str, str | None], bool] | None = None,
        max_tool_calls: int = DEFAULT_MAX_TOOL_CALLS,
    ) -> None:
        """``holds``: whether the verdict cache holds a rule's verdict for a prompt (a spent
        budget still publishes kept verdicts); ``max_tool_calls``: the calls of a trace the
        tool-call rules score (the first ones)."""
        self.silence = silence
        self.max_tool_calls = max_tool_calls
        self.context = ScoringContext(
            judge, default_model, max_prompt_tokens, {}, ledger, observer or Observer()
        )
        self.context.holds = holds
        self.use(ruleset, silence)

    def use(self, ruleset: RuleSet, silence: SilenceWatch | None = None) -> None:
        """Score with ``ruleset`` from now on (a live reload); what is being scored keeps the
        rules it was planned with. ``silence``: the watch over the new rule set's traffic."""
        self.ruleset = ruleset
        self.silence = silence
        self.context.shapes = {rule.id: primary_shape(rule) for rule in ruleset.rules}
        self.trace_rules = ruleset.for_scope("trace")
        self.call_rules = ruleset.for_scope("tool_call")
        self.conversations = ConversationRules.of(ruleset)

    @property
    def judge(self) -> Judge | None:
        return self.context.judge

    @property
    def ledger(self) -> SpendLedger | None:
        return self.context.ledger

    @ledger.setter
    def ledger(self, ledger: SpendLedger | None) -> None:
        self.context.ledger = ledger

    async def score_trace(
        self, trace: Trace, document: Any, topic: str | None = None
    ) -> TraceResult:
        """Apply every trace-scope rule to ``trace`` (``document`` is its JSON form)."""
        return await self.finish(self.plan(trace, document, topic))

    async def score_thread(self, close: ThreadClose, partition: int | None = None) -> TraceResult:
        """Apply the thread rules of ``close``'s kind to the thread document of that close
        (``partition``: where its thread state is, and so where a job it defers is kept)."""
        plan = self.plan_thread(close)
        plan.partition = partition
        return await self.finish(plan)

    def plan(self, trace: Trace, document: Any, topic: str | None = None) -> Plan:
        """Everything that needs no judge: decide, look up, check, render prompts."""
        span = document.get("root_span_id") if isinstance(document, dict) else None
        span_id = span if isinstance(span, str) and span else None
        plan = Plan(Target(trace.id, trace.project_name, trace.id, span_id=span_id))
        matched = []
        for rule in self.trace_rules:
            if (why := rule.filter.mismatch(trace, topic)) is not None:
                plan.outcomes.append(self.context.decide(rule, plan, "filtered", why))
                continue
            matched.append(rule.id)
            self._plan_rule(plan, rule, document)
        if self.call_rules:
            plan.parts = self._plan_calls(plan, trace, document, topic, matched)
        if self.silence is not None:
            self.silence.saw(trace, matched, topic)
        return plan

    def _plan_calls(
        self, plan: Plan, trace: Trace, document: Any, topic: str | None, matched: list[str]
    ) -> list[Plan]:
        """A plan for each tool call of the trace, with the tool-call rules (a trace without
        calls has none: no decision is made for a call that is not there). Each call's target
        is its id; its records are keyed by the trace, and its prompts share the trace's
        placeholders (``redaction``)."""
        calls = tool_calls(document)
        if not calls:
            return []
        if len(calls) > self.max_tool_calls:  # the trace's records stay bounded
            bounded = (
                f"the trace made {len(calls)} tool calls: the first {self.max_tool_calls} are "
                "scored (SCORER_TOOL_CALLS_MAX)"
            )
            for rule in self.call_rules:
                plan.outcomes.append(self.context.decide(rule, plan, "skipped", bounded))
            calls = calls[: self.max_tool_calls]
        briefs = [brief(call) for call in calls]
        tools = [definition_document(d) for d in calls[0].declared]  # the trace's, one list
        view = trace.view
        parts = []
        for call in calls:
            target = Target(
                call.call_id,
                trace.project_name,
                call_score_key(trace.id, call.call_id),
                span_id=_span_id(call.extra.get("span_id")),
                trace=trace.id,
                tool=call.name,
            )
            part = Plan(target, created_at=plan.created_at, placeholders=plan.redaction)
            called = call_document(call, briefs, view, tools)
            for rule in self.call_rules:
                if (why := rule.filter.mismatch(trace, topic, called)) is not None:
                    part.outcomes.append(self.context.decide(rule, part, "filtered", why))
                    continue
                if rule.id not in matched:
                    matched.append(rule.id)
                self._plan_rule(part, rule, called)
            parts.append(part)
        return parts

    def plan_thread(self, close: ThreadClose) -> Plan:
        """The thread rules of ``close``'s kind on the thread document of that close.

        Conversation rules apply when their filter matched a trace of the thread (the trace
        agent records that), fallback ones only if no other did; session rules filter on the session's project and topic. An
        empty thread is not sent to a judge (``skipped``); checks decide for themselves.
        """
        document = close.pending.document
        plan = Plan(Target(close.thread_id, close.project_name, close.target, close.info))
        plan.close = {"kind": close.kind, "close_seq": close.pending.close_seq}
        if close.kind == "pair":
            plan.close["pair"] = pair_facts(document)
            for pair_rule in self.ruleset.pair_rules():
                self._plan_pair(plan, pair_rule, close)
            return plan
        as_trace = Trace(id=close.thread_id, project_name=close.project_name)
        ctx = self.context
        judging = self.conversations.judging(close.pending.rules)
        for rule in self.ruleset.thread_rules(close.kind):
            if close.kind == "conversation":
                why = None if rule.id in judging else self._not_judging(rule, judging)
            else:
                why = rule.filter.mismatch(as_trace, close.topic)
            if why is not None:
                plan.outcomes.append(ctx.decide(rule, plan, "filtered", why))
            elif kind_of(rule).judged and not document["turn_count"]:
                unjudged = Measured("skipped", "the thread has no turns")
                plan.outcomes.append(ctx.finish(rule, plan, unjudged))
            else:
                self._plan_rule(plan, rule, document)
        return plan

    def _not_judging(self, rule: AnyRule, judging: set[str]) -> str:
        """Why a conversation rule does not judge a thread: a fallback rule stands back where
        a claiming rule judges it (whether or not the thread's traces reached the fallback
        rule: a trace a claiming rule matches goes to the claiming rules only)."""
        fallback = rule.thread is not None and rule.thread.fallback
        if fallback and any(r.id in judging for r in self.conversations.claiming):
            return "a fallback rule: other conversation rules judge this thread"
        return "no trace of the thread matched"

    def _plan_pair(self, plan: Plan, rule: ComparisonRule, close: ThreadClose) -> None:
        """A comparison rule on a pair: judged when both of its traces came (and one of them
        matched the rule's filter), else ``skipped`` with the partner that did not come."""
        ctx = self.context
        if rule.id not in close.pending.rules:
            unmatched = "no trace of the pair matched"
            plan.outcomes.append(ctx.decide(rule, plan, "filtered", unmatched))
            return
        if ctx.sampled_out(plan, rule):  # decided so whether or not the partner came
            return
        document = close.pending.document
        if (why := missing_partner(rule, close.thread_id, document)) is not None:
            plan.outcomes.append(ctx.finish(rule, plan, Measured("skipped", why)))
            return
        self._plan_rule(plan, rule, document)

    def _plan_rule(self, plan: Plan, rule: AnyRule, document: Any) -> None:
        """Sampling and variables, the same for every kind; then the rule's kind plans it."""
        ctx = self.context
        if ctx.sampled_out(plan, rule):
            return
        emptied: list[str] = []
        try:
            values = resolve_variables(rule, document, emptied)
        except MissingVariable as exc:
            why = str(exc)
            if isinstance(document, dict) and isinstance(document.get("content_missing"), str):
                why = f"{why}: {document['content_missing']}"  # e.g. message capture was off
            plan.outcomes.append(ctx.finish(rule, plan, Measured("skipped", why)))
            return
        kind_of(rule).plan(ctx, plan, rule, Found(document, values, emptied))

    async def finish(self, plan: Plan) -> TraceResult:
        """Make the plan's judge calls (its calls' too) concurrently and add their outcomes;
        a job that goes to a batch is kept pending instead (its decision says ``deferred``)."""
        plans = plan.each()
        if not plan.waits:
            return TraceResult(plan.decided())
        jobs = [(job, each) for each in plans for job in each.judge_jobs]
        jobs = [(job, each) for job, each in jobs if not self._deferred(job, each)]
        judged = await asyncio.gather(*(self._judge(job, each) for job, each in jobs))
        return TraceResult(plan.decided() + list(judged))

    def _deferred(self, job: JudgeJob, plan: Plan) -> bool:
        """Whether ``job`` waits for a batch now (its ``deferred`` decision, or a spent defer
        budget's ``skipped`` score when it cannot, added to ``plan``); False: judge it now.

        A job whose every call has a kept verdict is judged now (from the verdict cache);
        a ``judge.mode: batch`` rule that cannot be kept pending (no batch queue, a topic
        the queue's table is not co-partitioned with) is judged online, saying why."""
        if job.batch is None:
            return False
        ctx, rule = self.context, job.rule
        deferrer = ctx.deferrer
        cannot = "this worker has no batch queue" if deferrer is None else None
        if rule.judge.api == "decisions":  # the Decisions API has no batch mode
            deferrer, cannot = None, "a decision model is asked online only"
        if deferrer is not None:
            if deferrer.holds(job):
                return False
            model = ctx.model_of(rule)
            cannot = deferrer.defer(defer(job, plan, model, job.batch, time.time()))
            if cannot is None:
                plan.outcomes.append(ctx.decide(rule, plan, "deferred", deferred_says(job)))
                return True
        if rule.judge.mode == "batch":
            return False  # the same verdict, at the online price (the queue logs why)
        spent = job.batch.removesuffix(JUDGED_IN_A_BATCH)  # the defer budget's words
        why = f"budget exhausted: {spent}; batch judging is unavailable: {cannot}"
        plan.outcomes.append(ctx.finish(rule, plan, Measured("skipped", why)))
        return True

    async def _judge(self, job: JudgeJob, plan: Plan) -> RuleOutcome:
        kind = kind_of(job.rule)
        outcome = await kind.run(self.context, job, plan)
        kind.settle(self.context, job, outcome)
        return outcome


def _span_id(value: Any) -> str | None:
    """A call's span id (an ``execute_tool`` span's), for its scores' ``details.otel_span_id``."""
    return value if isinstance(value, str) and value else None
