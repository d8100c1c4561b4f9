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
from typing import Any

from ..engine.context import ScoringContext
from ..engine.kinds import Found, kind_of, primary_shape
from ..engine.outcomes import RuleOutcome, Target
from ..engine.plan import JudgedRule, Plan
from ..engine.prompt import resolve_variables
from ..engine.verdicts import Judge
from ..errors import MissingVariable
from ..observer import Observer
from ..redact.policy import SHIPPED, RedactionPolicy
from ..ruleset.canary import CanaryItem, RecordedVerdict
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
    inputs = [(item.id or "", item.input, item.recorded) for item in items]
    return await judge_inputs(
        rule,
        inputs,
        judge,
        default_model=default_model,
        max_prompt_tokens=max_prompt_tokens,
        redaction=redaction,
    )


async def judge_inputs(
    rule: JudgedRule,
    inputs: Sequence[tuple[str, dict[str, Any], RecordedVerdict | None]],
    judge: Judge | None,
    *,
    default_model: str,
    max_prompt_tokens: int,
    redaction: RedactionPolicy = SHIPPED,
) -> list[Rejudged]:
    """Each input (its id, the document the rule reads, the verdict recorded for it or None)
    judged by ``rule`` as a canary judges it, in their order."""
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

    async def one(
        item_id: str, document: dict[str, Any], recorded: RecordedVerdict | None
    ) -> Rejudged:
        async with bound:
            outcome = await judge_document(context, asked, item_id, document)
            return rejudged(item_id, recorded, outcome)

    return list(await asyncio.gather(*(one(*each) for each in inputs)))


async def judge_document(
    context: ScoringContext, rule: JudgedRule, item_id: str, document: dict[str, Any]
) -> RuleOutcome | str:
    """``rule`` (already a ``canary_rule``) on one document: its outcome, or why it could not
    be judged (a variable missing)."""
    project = document.get("project_name")
    target_id = f"canary:{rule.id}:{item_id}"
    plan = Plan(Target(target_id, project if isinstance(project, str) else "", target_id))
    emptied: list[str] = []
    try:
        values = resolve_variables(rule, document, emptied)
    except MissingVariable as exc:
        return str(exc)
    kind = kind_of(rule)
    kind.plan(context, plan, rule, Found(document, values, emptied))
    primary: RuleOutcome | None = next((o for o in plan.outcomes if o.variant is None), None)
    for job in plan.judge_jobs:
        if job.rule.variant is not None:
            continue  # a cascade's audit tier: the rule's own verdict is the one compared
        outcome = await kind.run(context, job, plan)
        kind.settle(context, job, outcome)
        primary = outcome
    return primary if primary is not None else "not judged"


def rejudged(
    item_id: str, recorded: RecordedVerdict | None, outcome: RuleOutcome | str
) -> Rejudged:
    """What an item's outcome says of its new verdict."""
    if isinstance(outcome, str):
        return Rejudged(item_id, recorded, "skipped", reason=outcome)
    if outcome.score is None:
        return Rejudged(item_id, recorded, "skipped", reason=outcome.decision.detail)
    score = outcome.score
    usage = next((s.usage for s in [score, *outcome.extra] if s.usage is not None), None)
    if score.status != "ok":
        return Rejudged(item_id, recorded, score.status, reason=score.status_reason, usage=usage)
    return Rejudged(
        item_id,
        recorded,
        "ok",
        value=score.value,
        raw_value=score.raw_value,
        label=score.label,
        answered_by=score.judge_model,
        usage=usage,
    )
