"""Judge jobs deferred to a batch (``judge.mode: batch``, or a spent ``defer`` budget): a
plan's judge job made an entry (``defer``: ``batch_entry.Deferred``, keyed by the score's
identity, one ``custom_id`` per judge call), and an entry finished from its batch's answers
(``finish_deferred``): the rule's kind concludes and settles it as it would a live call's,
so a batched score is the score a live call would have published. Design record 25.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, replace

from ..errors import JudgeError
from ..models import utcnow
from .batch_entry import Deferred
from .context import ScoringContext
from .kinds import kind_of, primary_shape
from .kinds.base import judge_failed
from .outcomes import Measured, RuleOutcome
from .plan import JudgedRule, JudgeJob, Plan
from .verdicts import Judge

# ``Deferred`` is named here too: the batch queue finishes entries through this module
__all__ = [
    "Deferred",
    "call_id",
    "defer",
    "deferred_key",
    "deferred_says",
    "finish_deferred",
    "gone_shadow",
]


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
            **({"trace": target.trace, "tool": target.tool} if target.trace else {}),
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
            "redacted": job.redacted,
            "order": job.order,
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
