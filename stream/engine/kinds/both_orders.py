"""A comparison judged in both orders (``comparison.order: both``, or a pair of the audit
share, ``comparison.audit``; issue 51, design record 52).

The pair is judged twice, concurrently: in its own order, and the other way round. Each
preference is turned into the variants' terms (``pair_order``); the two agree when they
favour the same variant, or both call the responses equivalent. Every such pair is reported
to the observer (each call's verdict by slot, and whether the preference flipped): the
measure of the judge's position preference. An audited pair publishes its own order's
preference, the other order's in ``details.audit``. With ``both``, published:

- agreeing, the milder of the two (the one nearer 0: the judge said at least that much in
  both orders), with its reason;
- flipping with the order, a tie (0), ``details.position_inconsistent: true``: the judge's
  verdict was the position's, not the responses' (MT-Bench and AlpacaEval count only the
  verdicts that survive the swap for that reason).

``details.orders`` holds both preferences by the variant read first. The responses' ratings
are the first order's (a judge's ratings of one response do not depend on its slot the way
its preference does; the second call's are not published). Both calls are charged; a call that
fails makes the pair's score an ``error``, as one failed call does in the other orders.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ...errors import JudgeError
from ...models import TokenUsage, utcnow
from ...ruleset.schema import ComparisonRule
from ..context import ScoringContext
from ..outcomes import RuleOutcome
from ..plan import JudgeJob, Plan
from ..verdicts import ComparisonAnswers, ParsedAnswer, Verdict
from .base import judge_failed, mark_cached
from .pair_order import BOTH, FIRST, SECOND, shown_first, slot_variants, variant_preference

if TYPE_CHECKING:
    from .comparison import ComparisonKind


async def judge_both_orders(
    kind: ComparisonKind, ctx: ScoringContext, job: JudgeJob, plan: Plan
) -> RuleOutcome:
    """The pair's two calls (``job.items``: its own order's, then the other's) made one
    outcome (see the module's docstring)."""
    assert ctx.judge is not None
    rule = job.rule
    assert isinstance(rule, ComparisonRule)
    asked = [
        ctx.judge.judge(rule, item.prompt, item.system, item.quoted, job.tools)
        for item in job.items
    ]
    answers = await asyncio.gather(*asked, return_exceptions=True)
    verdicts = [a for a in answers if isinstance(a, Verdict)]
    usage = _sum([v.usage for v in verdicts] + [_usage_of(a) for a in answers])
    ctx.charge(rule, usage)  # both calls count, answered or not
    for answer in answers:
        if isinstance(answer, JudgeError):
            failed = judge_failed(ctx, replace(job, order=FIRST), _uncharged(answer))
            failed.usage = usage
            return ctx.finish(rule, plan, failed, utcnow())
        if isinstance(answer, BaseException):
            raise answer
    own, other = verdicts
    first = shown_first(job.order)
    combined, orders, consistent = _combined(rule, own, other, first)
    given = [v.answer for v in verdicts if isinstance(v.answer, ComparisonAnswers)]
    slots = [_slot(a.preference.raw_value) for a in given if a.preference is not None]
    if len(slots) == 2 and not own.cached:  # a verdict from the cache was counted when made
        ctx.observer.on_pair_order(rule.id, rule.pack, own.model, slots, not consistent)
    audited = job.order != BOTH
    verdict = Verdict(
        own.answer if audited else combined,
        own.model,
        max(own.latency_ms, other.latency_ms),
        usage,
        own.attempts + other.attempts,
        cached=own.cached and other.cached,
    )
    outcome = kind.conclude(ctx, job, plan, verdict)
    if outcome.score is not None and outcome.score.status == "ok":
        said: dict[str, Any] = {"orders": orders, "position_inconsistent": not consistent}
        extra = {"audit": said} if audited else said
        outcome.score.details = {**(outcome.score.details or {}), **extra}
    if verdict.cached:
        mark_cached(outcome)
    return outcome


def _slot(raw: float) -> str:
    """Which slot a slot-stated preference favours: ``first``, ``second`` or ``neither``."""
    return "first" if raw > 0 else "second" if raw < 0 else "neither"


def _combined(
    rule: ComparisonRule, own: Verdict, other: Verdict, first: str
) -> tuple[ComparisonAnswers, dict[str, float | None], bool]:
    """The own order's answer (``first``: the slot its call read first) with the preference
    both orders support, the two preferences by the variant read first, and whether they
    agree."""
    one, two = own.answer, other.answer
    assert isinstance(one, ComparisonAnswers) and isinstance(two, ComparisonAnswers)
    then = SECOND if first == FIRST else FIRST
    names = (slot_variants(rule, first)["a"], slot_variants(rule, then)["a"])
    p1, p2 = one.preference, two.preference
    r1 = variant_preference(p1.raw_value, first) if p1 is not None else None
    r2 = variant_preference(p2.raw_value, then) if p2 is not None else None
    orders = {f"{names[0]}_first": r1, f"{names[1]}_first": r2}
    orders = {f"{name}_first": orders[f"{name}_first"] for name in rule.pair.variants}
    if p1 is None or p2 is None or r1 is None or r2 is None:
        missing = names[0] if p1 is None else names[1]
        error = (one.preference_error if p1 is None else two.preference_error) or "none given"
        why = f"with {missing} read first, no preference: {error}"
        return replace(one, preference=None, preference_error=why), orders, False
    consistent = (r1 > 0) - (r1 < 0) == (r2 > 0) - (r2 < 0)
    if consistent:
        raw, reason = (r1, p1.reason) if abs(r1) <= abs(r2) else (r2, p2.reason)
        if raw != r1:
            reason = f"(with {names[1]} read first, as Response A) {reason or ''}".strip()
    else:
        raw = 0.0
        reason = (
            f"the preference flipped with the order: {r1:+g} with {names[0]} read first, "
            f"{r2:+g} with {names[1]} read first; published as equivalent"
        )
    preference = ParsedAnswer(raw, rule.preference.label_for(raw), reason)
    return replace(one, preference=preference), orders, consistent


def _usage_of(answer: object) -> TokenUsage | None:
    """A failed call's tokens (an unusable answer cost them too)."""
    return answer.usage if isinstance(answer, JudgeError) else None


def _uncharged(exc: JudgeError) -> JudgeError:
    """``exc`` with its tokens taken off: both calls' were charged together already."""
    exc.usage = None
    return exc


def _sum(usages: list[TokenUsage | None]) -> TokenUsage | None:
    total: TokenUsage | None = None
    for usage in usages:
        if usage is not None:
            total = usage if total is None else total + usage
    return total
