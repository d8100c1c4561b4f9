"""``scorer explain``: what every rule would decide for a trace, and why, offline.

The same scorer the worker plans with (filters, sampling, variable lookups, checks, prompt
rendering), with no broker and no judge call: a rule that would be judged shows the prompt
it would send instead of a score.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .engine.scorer import Scorer
from .engine.verdicts import ToolBox, Verdict
from .models import Trace, parse_trace
from .ruleset.schema import PromptedRule, RuleSet
from .threads.router import NotPaired, ThreadRouter

WOULD_JUDGE = "judge"  # the outcome shown for a rule that would call the judge
PAIRS = "pair"  # the outcome shown for a comparison rule the trace would be one side of
DISABLED = "disabled"  # the outcome shown for a rule switched off: the worker does not run it


@dataclass
class Explained:
    """One rule's decision on one trace."""

    rule_id: str
    pack: str
    outcome: str  # a decision outcome, "judge": it would call the judge, or "disabled"
    detail: str | None = None
    value: float | None = None
    prompt: str | None = None
    system: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


def explain_trace(
    ruleset: RuleSet, raw: bytes, topic: str | None, default_model: str
) -> tuple[str, list[Explained]]:
    """The trace's id and every trace rule's decision (raises ``ValueError`` for a message
    the worker would dead-letter, with the same message)."""
    trace, document = parse_trace(raw)
    # a judge that is never called: the scorer plans judge calls as the worker's does
    scorer = Scorer(ruleset, _NoCall(), default_model=default_model)
    plan = scorer.plan(trace, document, topic)
    explained = []
    for outcome in plan.outcomes:
        decision, score = outcome.decision, outcome.score
        explained.append(
            Explained(
                decision.rule_id,
                decision.pack,
                decision.outcome,
                (score.reason or score.status_reason) if score is not None else decision.detail,
                score.value if score is not None else None,
            )
        )
    for job in plan.judge_jobs:
        why = "would be judged" + (f"; cut to fit: {job.cut}" if job.cut else "")
        if job.emptied:
            why += f"; missing, rendered empty: {job.emptied}"
        if job.items:
            why += (
                f"; {len(job.items)} calls, one per item ({job.total_items} items), "
                "the first one's prompt shown"
            )
        explained.append(
            Explained(job.rule.id, job.rule.pack, WOULD_JUDGE, why, None, job.prompt, job.system)
        )
    explained.extend(_pairs(ruleset, trace, document, topic))
    explained.extend(
        Explained(off.rule.id, off.rule.pack, DISABLED, f"switched off by {off.by}")
        for off in ruleset.disabled
        if off.rule.scope != "thread"  # as the rules that run: thread rules are not explained
    )
    order = {rule.id: i for i, rule in enumerate(ruleset.rules)}
    explained.sort(key=lambda e: order.get(e.rule_id, len(order)))
    return trace.id, explained


def _pairs(ruleset: RuleSet, trace: Trace, document: Any, topic: str | None) -> list[Explained]:
    """What each comparison rule would do with the trace: which side of which pair it is,
    or why it is no side of one."""
    spec = ruleset.pair_spec()
    if spec is None:
        return []
    pairing = ThreadRouter(ruleset).pairing(trace, document, topic)
    if isinstance(pairing, NotPaired):
        why = f"not paired: {pairing.why}"
        return [Explained(rule.id, rule.pack, "filtered", why) for rule in ruleset.pair_rules()]
    key, variant, rules = pairing
    partner = spec.variants[1] if variant == spec.variants[0] else spec.variants[0]
    why = (
        f"pairs as variant {variant} of comparison {key!r}: judged once variant {partner} "
        f"comes, within {spec.window_s:g} s"
    )
    return [
        Explained(rule.id, rule.pack, PAIRS, why)
        if rule.id in rules
        else Explained(rule.id, rule.pack, "filtered", "not paired: its filter does not match")
        for rule in ruleset.pair_rules()
    ]


class _NoCall:
    """Stands in for a judge so that the scorer plans judge calls; never called."""

    async def judge(
        self,
        rule: PromptedRule,
        prompt: str,
        system: str | None = None,
        quoted: Sequence[str] = (),
        tools: ToolBox | None = None,
    ) -> Verdict:  # pragma: no cover - plans only
        raise AssertionError("scorer explain never calls the judge")
