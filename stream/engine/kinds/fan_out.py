"""LLM-judge rules with ``fan_out``: one judge call per item of a list variable (the first
``max_items``), one score: the mean of the items' raw values (a yes/no choice: the share
judged yes), each item's verdict in ``details``, and the bound named when it left items out."""

from __future__ import annotations

import asyncio
from typing import Any

from ...errors import JudgeError
from ...models import TokenUsage, utcnow
from ...ruleset.schema import AnyRule, LLMJudgeRule
from ..context import ScoringContext
from ..outcomes import Measured, RuleOutcome
from ..plan import JudgedRule, JudgeJob, Plan
from ..prompt import FittedPrompt, fan_out_values
from ..verdicts import ParsedAnswer
from .base import Found, JudgedKind, job_details


class FanOutKind(JudgedKind):
    """An ``llm_judge`` rule with ``fan_out``."""

    def handles(self, rule: AnyRule) -> bool:
        return isinstance(rule, LLMJudgeRule) and rule.fan_out is not None

    def calls(self, rule: JudgedRule, found: Found) -> list[dict[str, Any]] | str:
        calls, _ = fan_out_values(rule, found.values)
        if not calls:  # the list is empty
            assert isinstance(rule, LLMJudgeRule) and rule.fan_out is not None
            name = rule.fan_out.variable
            path, noun = rule.variable_specs[name].path, rule.fan_out.noun
            return f"variable '{name}': path '{path}' holds no {noun}"
        return calls

    def prepare(self, job: JudgeJob, plan: Plan, found: Found, fitted: list[FittedPrompt]) -> None:
        job.items, job.total_items = fitted, fan_out_values(job.rule, found.values)[1]

    async def run(self, ctx: ScoringContext, job: JudgeJob, plan: Plan) -> RuleOutcome:
        """Every item's call concurrently; a call that fails leaves its item out (the score
        says how many were judged), all failing is an ``error``."""
        assert ctx.judge is not None
        rule = job.rule
        assert isinstance(rule, LLMJudgeRule)
        model = ctx.model_of(rule)
        answers = await asyncio.gather(
            *(ctx.judge.judge(rule, item.prompt, item.system, item.quoted) for item in job.items),
            return_exceptions=True,
        )
        usage: TokenUsage | None = None  # None: no call said what it used
        latency, judged = 0.0, []
        per_item: list[dict[str, Any]] = []
        for index, answer in enumerate(answers):
            if isinstance(answer, JudgeError):
                usage = _added(usage, answer.usage)
                per_item.append({"index": index, "error": f"judge {answer.kind}: {answer}"})
                continue
            if isinstance(answer, BaseException):
                raise answer
            parsed = answer.answer
            assert isinstance(parsed, ParsedAnswer), "a one-verdict rule is answered once"
            usage, latency = _added(usage, answer.usage), max(latency, answer.latency_ms)
            judged.append(parsed.raw_value)
            item = {
                "index": index,
                "raw_value": parsed.raw_value,
                "label": parsed.label,
                "reason": parsed.reason,
            }
            if answer.cached:
                item["cached"] = True
            per_item.append(item)
        ctx.charge(rule, usage)  # every call counts, answered or not
        assert rule.fan_out is not None
        details = {
            **(job_details(job) or {}),
            "items": per_item,
            "items_total": job.total_items,
            "items_judged": len(judged),
            "items_max": rule.fan_out.max_items,
        }
        errors = [item["error"] for item in per_item if "error" in item]
        if per_item and all(item.get("cached") for item in per_item):
            details["cached"] = True  # every item's verdict came from the cache
        if not judged:
            failed = Measured("error", errors[0], judge_model=model, usage=usage, details=details)
            return ctx.finish(rule, plan, failed, utcnow())
        answered = Measured(
            "ok",
            raw_value=sum(judged) / len(judged),
            reason=summary(rule, job, judged, errors),
            judge_model=model,
            latency_ms=latency,
            usage=usage,
            details=details,
            decision_detail=left_out(rule, job),
        )
        return ctx.finish(rule, plan, answered, utcnow())


def _added(total: TokenUsage | None, more: TokenUsage | None) -> TokenUsage | None:
    if more is None:
        return total
    return more if total is None else total + more


def summary(rule: LLMJudgeRule, job: JudgeJob, judged: list[float], errors: list[str]) -> str:
    """The score's reason: how many items were judged the top choice, and what was left out."""
    assert rule.fan_out is not None
    best, noun = rule.output.scale.max, rule.fan_out.noun
    top = sum(1 for raw in judged if raw == best)
    text = f"{top} of {len(judged)} {noun} judged {top_choice(rule)}"
    if errors:
        text += f"; {len(errors)} could not be judged ({errors[0]})"
    if (bound := left_out(rule, job)) is not None:
        text += f"; {bound}"
    return text


def left_out(rule: LLMJudgeRule, job: JudgeJob) -> str | None:
    """What the rule's bound left out, naming the bound; None when every item was judged."""
    assert rule.fan_out is not None
    if job.total_items <= len(job.items):
        return None
    spec = rule.fan_out
    return (
        f"the first {len(job.items)} of {job.total_items} {spec.noun} were judged "
        f"(fan_out.max_items: {spec.max_items})"
    )


def top_choice(rule: LLMJudgeRule) -> str:
    """The choice worth most (``yes``), or the top of a numeric scale."""
    choices = rule.output.choices
    if choices:
        return max(choices, key=lambda c: choices[c])
    return f"{rule.output.scale.max:g}"
