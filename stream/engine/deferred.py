"""Judge jobs deferred to a batch (``judge.mode: batch``, or a spent ``defer`` budget).

A deferred job is everything a judged rule's outcome needs once its answers come back from
the provider's Batch API, minutes or hours later, in another process perhaps: the rule's
identity (and the model it is judged by), the prompts as rendered (one per judge call, each
named by a ``custom_id``), the plan's target and timestamp, and what the target's decision
record names (a trace, or a close of a thread or pair). It is kept as JSON in the worker's
``batch-jobs`` table (``agents/batch_jobs.py``); ``finish`` turns it back into the
``JudgeJob`` and ``Plan`` the rule's kind concludes, so a batched score is the score a live
call would have published (same id, same shape). Design record 25.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from typing import Any, Literal

import orjson

from ..errors import JudgeError
from ..models import ScoreEvent, ThreadDecisions, ThreadInfo, TraceDecisions, utcnow
from .context import ScoringContext
from .kinds import kind_of, primary_shape
from .kinds.base import judge_failed
from .outcomes import Measured, RuleOutcome, Target
from .plan import JudgedRule, JudgeJob, Plan
from .prompt import FittedPrompt
from .records import Records, pair_records_of, scored
from .spend import Admission
from .verdicts import Judge

FORMAT = 1  # the entry's layout; an entry of another is reported, not read

State = Literal["waiting", "submitting", "submitted"]


def deferred_key(plan: Plan, rule: JudgedRule) -> str:
    """The entry's key: the score's identity (the rule, its version, a shadow's variant, the
    target's score key), so the same target deferred twice (a redelivered trace) is one entry,
    and a rule's own job and each shadow's are entries apart."""
    text = f"{rule.pack}\x00{rule.id}\x00{rule.version}\x00{plan.target.score_key}"
    if rule.variant is not None:
        text += f"\x00{rule.variant}"
    return hashlib.sha256(text.encode()).hexdigest()[:40]


def call_id(key: str, index: int) -> str:
    """The ``custom_id`` of a deferred job's ``index``-th judge call."""
    return f"judge-{hashlib.sha256(f'{key}#{index}'.encode()).hexdigest()[:40]}"


@dataclass
class Deferred:
    """A judged rule's job waiting for its batch, and where it stands.

    ``state``: ``waiting`` (gathered, not submitted), ``submitting`` (written before the batch
    is created: a worker that dies before recording its id finds it by ``batch_key``) or
    ``submitted`` (``batch_id`` is polled)."""

    key: str
    rule_id: str
    pack: str
    version: int
    model: str  # the model it is judged by (a fallback budget's, if one sent it there)
    why: str  # why it was deferred, as its first decision says
    target: dict[str, Any]
    created_at: str
    job: dict[str, Any]
    calls: list[str]  # one custom_id per judge call, in the job's order
    close: dict[str, Any] | None = None  # a close's record facts (None: a trace)
    partition: int = -1  # the table partition it is kept in
    since: float = 0.0  # when it was deferred (seconds since the epoch)
    state: State = "waiting"
    batch_key: str | None = None
    batch_id: str | None = None
    format: int = FORMAT
    extra: dict[str, Any] = field(default_factory=dict)  # room for later fields
    variant: str | None = None  # a shadow judge's job: the rule's shadow it judges as

    def encode(self) -> bytes:
        return orjson.dumps(asdict(self))

    @classmethod
    def decode(cls, value: bytes) -> Deferred:
        """An entry ``encode`` wrote (``ValueError`` otherwise)."""
        try:
            data = orjson.loads(value)
            if data.get("format") != FORMAT:
                raise ValueError(f"format {data.get('format')!r}, this worker reads {FORMAT}")
            return cls(**data)
        except (orjson.JSONDecodeError, TypeError, AttributeError) as exc:
            raise ValueError(f"an unreadable deferred job: {exc}") from exc

    def prompts(self) -> list[tuple[str, str | None, list[str]]]:
        """Each judge call's prompt, system prompt and quoted text, in ``calls`` order."""
        items = self.job["items"]
        if items:
            return [(item["prompt"], item["system"], item["quoted"]) for item in items]
        return [(self.job["prompt"], self.job["system"], self.job["quoted"])]

    def plan(self) -> Plan:
        """The plan it was deferred from (its target and timestamp; nothing else to do)."""
        target = self.target
        thread = ThreadInfo.model_validate(target["thread"]) if target["thread"] else None
        found = Target(
            target["id"],
            target["project_name"],
            target["score_key"],
            thread,
            span_id=target.get("span_id"),
        )
        return Plan(found, created_at=datetime.fromisoformat(self.created_at))

    def judge_job(self, rule: JudgedRule) -> JudgeJob:
        """The judge job it was deferred as, for ``rule`` (the rule it was planned with)."""
        job = self.job
        admission = job["admission"]
        return JudgeJob(
            rule,
            job["prompt"],
            job["system"],
            dict(job["forced"]),
            list(job["quoted"]),
            dict(job["cut"]),
            list(job["emptied"]),
            [FittedPrompt(**item) for item in job["items"]],
            job["total_items"],
            None,
            {slot: (m[0], m[1]) for slot, m in job["members"].items()},
            job["prompt_cut"],
            Admission(**admission) if admission is not None else None,
        )

    def records(self, outcome: RuleOutcome) -> Records:
        """What the rule's outcome publishes: its scores, and a decision record holding its
        decision for the target (a trace, a close, or each trace of a pair)."""
        scores = [s for s in [outcome.score, *outcome.extra] if s is not None]
        if self.variant is not None:  # a shadow's scores; the rule's decision is its own judge's
            return replace(self.records_of(outcome, scores), decisions=[])
        return self.records_of(outcome, scores)

    def records_of(self, outcome: RuleOutcome, scores: list[ScoreEvent]) -> Records:
        target, close = self.target, self.close
        if close is None:
            record: TraceDecisions | ThreadDecisions = TraceDecisions(
                trace_id=target["id"],
                project_name=target["project_name"],
                decisions=[outcome.decision],
            )
            return scored(target["id"], scores, record)
        if close["kind"] == "pair":
            return pair_records_of(
                scores, [outcome.decision], target["id"], target["project_name"], close["pair"]
            )
        record = ThreadDecisions(
            thread_id=target["id"],
            kind=close["kind"],
            close_seq=close["close_seq"],
            project_name=target["project_name"],
            decisions=[outcome.decision],
        )
        return scored(target["id"], scores, record)


def deferred_says(job: JudgeJob) -> str:
    """The ``deferred`` decision's detail: why, and when the batch goes."""
    spec = job.rule.judge.batch
    return (
        f"{job.batch}: judged in a batch, submitted at {spec.max_jobs} requests or after "
        f"{spec.max_wait_s:g} s (judge.batch); the score follows when the batch completes"
    )


def defer(job: JudgeJob, plan: Plan, model: str, why: str, now: float) -> Deferred:
    """``job`` of ``plan`` as a deferred job (judged by ``model``), deferred at ``now``."""
    rule, target = job.rule, plan.target
    key = deferred_key(plan, rule)
    calls = max(1, len(job.items))
    return Deferred(
        key=key,
        rule_id=rule.id,
        pack=rule.pack,
        version=rule.version,
        variant=rule.variant,
        model=model,
        why=why,
        target={
            "id": target.id,
            "project_name": target.project_name,
            "score_key": target.score_key,
            "thread": target.thread.model_dump(mode="json") if target.thread else None,
            **({"span_id": target.span_id} if target.span_id else {}),
        },
        created_at=plan.created_at.isoformat(),
        job={
            "prompt": job.prompt,
            "system": job.system,
            "forced": job.forced,
            "quoted": job.quoted,
            "cut": job.cut,
            "emptied": job.emptied,
            "items": [asdict(item) for item in job.items],
            "total_items": job.total_items,
            "members": {slot: list(member) for slot, member in job.members.items()},
            "prompt_cut": job.prompt_cut,
            "admission": asdict(job.admission) if job.admission is not None else None,
        },
        calls=[call_id(key, index) for index in range(calls)],
        close=plan.close,
        partition=-1 if plan.partition is None else plan.partition,
        since=now,
    )


async def finish_deferred(
    ctx: ScoringContext, deferred: Deferred, rule: JudgedRule, judge: Judge
) -> RuleOutcome:
    """The outcome of ``deferred`` for ``rule`` (the rule it was planned with, judged by the
    deferred job's model), its judge calls answered by ``judge`` (a batch's answers): the
    rule's kind concludes and settles it as it would a live call's. A shadow's job is judged
    as that shadow of ``rule`` (one the rule no longer names: an ``error`` score saying so)."""
    if deferred.variant is not None:
        try:
            rule = rule.as_shadow(deferred.variant)
        except KeyError as exc:
            return gone_shadow(ctx, deferred, rule, str(exc))
    if ctx.model_of(rule) != deferred.model:
        judged = rule.judge.model_copy(update={"model": deferred.model})
        rule = rule.model_copy(update={"judge": judged})  # a fallback budget's model
    shapes = {**ctx.shapes, rule.id: primary_shape(rule)}  # a rule a reload has replaced
    ctx = replace(ctx, judge=judge, shapes=shapes, deferrer=None)
    job, plan, kind = deferred.judge_job(rule), deferred.plan(), kind_of(rule)
    try:
        outcome = await kind.run(ctx, job, plan)
    except JudgeError as exc:  # a kind that lets a judge error through
        outcome = ctx.finish(rule, plan, judge_failed(ctx, job, exc), utcnow())
    kind.settle(ctx, job, outcome)
    return outcome


def gone_shadow(ctx: ScoringContext, deferred: Deferred, rule: JudgedRule, why: str) -> RuleOutcome:
    """A shadow's job whose rule (same version) names that shadow no more: an ``error``
    score of the variant saying so."""
    judged = rule.model_copy(update={"shadow": []})
    judged._variant = deferred.variant
    ctx = replace(ctx, shapes={**ctx.shapes, rule.id: primary_shape(rule)}, deferrer=None)
    said = f"{why}: its batch answer has no shadow to be read as"
    return ctx.finish(judged, deferred.plan(), Measured("error", said), utcnow())
