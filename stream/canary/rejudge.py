"""A canary round's judge calls: each reference item judged again by the rule as it scores
(its kind plans the prompt, redacts what leaves, fits the prompt to its cap, reads the
answer), through the judge the rule uses (the worker's client: its pacing, retries and
health), with the verdict cache bypassed and out of the score metrics.

The rule is judged as ``canary_rule`` makes it: the cache off (a kept verdict would say
nothing of the judge today), online (a round waits for its answers, not for a batch), no
shadows, every item taken (its sampling and spend budgets are not applied: a canary's calls
are its own spend, counted apart, ``scorer_canary_tokens_total``)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from ..engine.context import ScoringContext
from ..engine.kinds import Found, kind_of, primary_shape
from ..engine.outcomes import RuleOutcome, Target
from ..engine.plan import JudgedRule, Plan
from ..engine.prompt import resolve_variables
from ..engine.verdicts import Judge
from ..errors import MissingVariable
from ..observer import Observer
from ..redact.policy import SHIPPED, RedactionPolicy
from ..ruleset.canary import CanaryItem
from .compare import Rejudged

# items of one rule judged at once: a round queues behind live traffic, never floods it
CONCURRENCY = 2


def canary_rule(rule: JudgedRule) -> JudgedRule:
    """``rule`` as a canary round judges it: cache off, online, no shadows, every item."""
    judge = rule.judge.model_copy(update={"cache": False, "mode": "online"})
    return rule.model_copy(update={"judge": judge, "shadow": [], "sampling_rate": 1.0})


async def judge_items(
    rule: JudgedRule,
    items: Sequence[CanaryItem],
    judge: Judge | None,
    *,
    default_model: str,
    max_prompt_tokens: int,
    redaction: RedactionPolicy = SHIPPED,
) -> list[Rejudged]:
    """Every item of ``items`` judged again by ``rule`` (in their order); an item that
    cannot be judged (no judge, a variable missing, a judge error) says why."""
    asked = canary_rule(rule)
    # a no-op observer: a canary's verdicts are not scores (no decision or score metric)
    context = ScoringContext(
        judge,
        default_model,
        max_prompt_tokens,
        {asked.id: primary_shape(asked)},
        observer=Observer(),
        redaction=redaction,
    )
    bound = asyncio.Semaphore(CONCURRENCY)

    async def one(item: CanaryItem) -> Rejudged:
        async with bound:
            return await judge_item(context, asked, item)

    return list(await asyncio.gather(*(one(item) for item in items)))


async def judge_item(context: ScoringContext, rule: JudgedRule, item: CanaryItem) -> Rejudged:
    """One item judged by ``rule`` (already a ``canary_rule``)."""
    item_id = item.id or ""
    document = item.input
    project = document.get("project_name")
    target_id = f"canary:{rule.id}:{item_id}"
    plan = Plan(Target(target_id, project if isinstance(project, str) else "", target_id))
    emptied: list[str] = []
    try:
        values = resolve_variables(rule, document, emptied)
    except MissingVariable as exc:
        return Rejudged(item_id, item.recorded, "skipped", reason=str(exc))
    kind = kind_of(rule)
    kind.plan(context, plan, rule, Found(document, values, emptied))
    primary: RuleOutcome | None = next((o for o in plan.outcomes if o.variant is None), None)
    for job in plan.judge_jobs:
        if job.rule.variant is not None:
            continue  # a cascade's audit tier: the rule's own verdict is the one compared
        outcome = await kind.run(context, job, plan)
        kind.settle(context, job, outcome)
        primary = outcome
    return _rejudged(item, primary)


def _rejudged(item: CanaryItem, outcome: RuleOutcome | None) -> Rejudged:
    """What an item's outcome says of its new verdict."""
    item_id = item.id or ""
    if outcome is None or outcome.score is None:
        detail = outcome.decision.detail if outcome is not None else None
        return Rejudged(item_id, item.recorded, "skipped", reason=detail or "not judged")
    score = outcome.score
    usage = next((s.usage for s in [score, *outcome.extra] if s.usage is not None), None)
    if score.status != "ok":
        return Rejudged(
            item_id, item.recorded, score.status, reason=score.status_reason, usage=usage
        )
    return Rejudged(
        item_id,
        item.recorded,
        "ok",
        value=score.value,
        raw_value=score.raw_value,
        label=score.label,
        answered_by=score.judge_model,
        usage=usage,
    )
