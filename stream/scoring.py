"""The rule engine: apply every matching rule to a trace and produce decisions and scores.

Pure with respect to Kafka: takes a validated trace, returns what to publish. A score
that could not be produced is data (status skipped or error), never an exception.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

from . import checks as checks_registry
from . import metrics
from .errors import JudgeError, MissingVariable
from .judge import NO_JUDGE_REASON, JudgeClient
from .models import Decision, ScoreEvent, Status, TokenUsage, Trace, score_id
from .paths import lookup, render_value
from .rules import CheckRule, LLMJudgeRule, RuleSet
from .templates import render

log = logging.getLogger(__name__)

AnyRule = LLMJudgeRule | CheckRule


@dataclass
class RuleOutcome:
    """What one rule decided for one target: always a decision, a score unless filtered out."""

    decision: Decision
    score: ScoreEvent | None
    judge_seconds: float = 0.0


@dataclass
class TraceResult:
    outcomes: list[RuleOutcome]
    judge_seconds: float  # the longest judge wait among the trace's rules (they run concurrently)

    @property
    def scores(self) -> list[ScoreEvent]:
        return [o.score for o in self.outcomes if o.score is not None]

    @property
    def decisions(self) -> list[Decision]:
        return [o.decision for o in self.outcomes]


def resolve_variables(rule: AnyRule, document: Any) -> dict[str, Any]:
    """Mapped values of every variable; raises ``MissingVariable`` for the first missing one."""
    return {name: lookup(document, name, path) for name, path in rule.variables.items()}


def render_prompt(rule: LLMJudgeRule, values: dict[str, Any]) -> str:
    return render(rule.prompt, {name: render_value(v) for name, v in values.items()})


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
        outcomes = await asyncio.gather(
            *(self.apply(rule, trace, document, topic) for rule in self.trace_rules)
        )
        return TraceResult(list(outcomes), max((o.judge_seconds for o in outcomes), default=0.0))

    async def apply(
        self, rule: AnyRule, trace: Trace, document: Any, topic: str | None
    ) -> RuleOutcome:
        if not rule.filter.matches(trace, topic):
            return self._decide(rule, trace, "filtered", None, None)
        if not rule.sampled(trace.id):
            return self._decide(
                rule, trace, "sampled_out", f"sampling rate {rule.sampling_rate:g}", None
            )
        try:
            values = resolve_variables(rule, document)
        except MissingVariable as exc:
            return self._finish(rule, trace, status="skipped", status_reason=str(exc))
        if isinstance(rule, CheckRule):
            return self._run_check(rule, trace, values)
        return await self._run_judge(rule, trace, values)

    def _run_check(self, rule: CheckRule, trace: Trace, values: dict[str, Any]) -> RuleOutcome:
        spec = checks_registry.get(rule.check)
        assert spec is not None  # checked at load time
        started = time.perf_counter()
        try:
            result = spec.run(values, rule.params)
        except checks_registry.NotApplicable as exc:
            return self._finish(
                rule, trace, status="skipped", status_reason=f"check not applicable: {exc}"
            )
        except Exception as exc:  # a bug in a check must not stop the stream
            log.exception("check %s failed on trace %s", rule.check, trace.id)
            return self._finish(
                rule,
                trace,
                status="error",
                status_reason=f"check {rule.check} raised {type(exc).__name__}: {exc}",
            )
        return self._finish(
            rule,
            trace,
            status="ok",
            raw_value=result.raw_value,
            label=result.label,
            reason=result.reason,
            latency_ms=(time.perf_counter() - started) * 1000,
        )

    async def _run_judge(
        self, rule: LLMJudgeRule, trace: Trace, values: dict[str, Any]
    ) -> RuleOutcome:
        model = rule.judge.model or self.default_model
        if self.judge is None:
            return self._finish(rule, trace, status="skipped", status_reason=NO_JUDGE_REASON)
        prompt = render_prompt(rule, values)
        started = time.perf_counter()
        try:
            verdict = await self.judge.judge(rule, prompt)
        except JudgeError as exc:
            waited = time.perf_counter() - started
            outcome = self._finish(
                rule,
                trace,
                status="error",
                status_reason=f"judge {exc.kind}: {exc}",
                judge_model=model,
            )
            outcome.judge_seconds = waited
            return outcome
        outcome = self._finish(
            rule,
            trace,
            status="ok",
            raw_value=verdict.answer.raw_value,
            label=verdict.answer.label,
            reason=verdict.answer.reason,
            judge_model=verdict.model,
            latency_ms=verdict.latency_ms,
            usage=verdict.usage,
        )
        outcome.judge_seconds = time.perf_counter() - started
        return outcome

    def _decide(
        self, rule: AnyRule, trace: Trace, outcome: Any, detail: str | None, sid: str | None
    ) -> RuleOutcome:
        metrics.DECISIONS.labels(rule=rule.id, pack=rule.pack, outcome=outcome).inc()
        decision = Decision(
            trace_id=trace.id,
            rule_id=rule.id,
            pack=rule.pack,
            rule_version=rule.version,
            project_name=trace.project_name,
            outcome=outcome,
            detail=detail,
            score_id=sid,
        )
        return RuleOutcome(decision, None)

    def _finish(
        self,
        rule: AnyRule,
        trace: Trace,
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
        sid = score_id(rule.id, rule.version, rule.scope, trace.id)
        value = (
            rule.output.normalise(raw_value) if status == "ok" and raw_value is not None else None
        )
        score = ScoreEvent(
            score_id=sid,
            rule_id=rule.id,
            pack=rule.pack,
            rule_version=rule.version,
            scope=rule.scope,
            target_id=trace.id,
            project_name=trace.project_name,
            value=value,
            raw_value=raw_value if status == "ok" else None,
            scale=rule.output.scale,
            label=label,
            reason=reason,
            higher_is_better=rule.output.higher_is_better,
            status=status,
            status_reason=status_reason,
            judge_model=judge_model,
            latency_ms=latency_ms,
            usage=usage,
        )
        outcome_name = {"ok": "scored", "skipped": "skipped", "error": "error"}[status]
        decided = self._decide(rule, trace, outcome_name, status_reason, sid)
        decided.score = score
        return decided
