"""What every rule kind scores with: the judge, the default model, the spend ledger, the
observer, where batched judge jobs wait (a ``Deferrer``) and what the verdict cache holds, and
the two ways an outcome is recorded (a decision alone, or a score and its decision)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from ..models import Outcome, TokenUsage
from ..observer import Observer
from ..redact.policy import SHIPPED, RedactionPolicy
from ..ruleset.schema import AnyRule, ComparisonRule, PromptedRule, RubricRule
from .batch_entry import Deferrer
from .outcomes import (
    OUTCOME_OF_STATUS,
    Measured,
    RuleOutcome,
    ScoreShape,
    make_decision,
    make_score,
)
from .plan import Plan
from .spend import SpendLedger
from .verdicts import Judge


@dataclass
class ScoringContext:
    """The scorer's collaborators, as its rule kinds see them."""

    judge: Judge | None
    default_model: str
    max_prompt_tokens: int
    # the shape of the one score a rule publishes (a rubric's: its primary, when unjudged)
    shapes: dict[str, ScoreShape]
    ledger: SpendLedger | None = None
    observer: Observer = field(default_factory=Observer)
    deferrer: Deferrer | None = None  # where batched jobs wait (None: judged online)
    # whether a verdict for a call (rule, prompt, system prompt) is kept by the verdict cache:
    # a spent budget does not skip a rule whose verdicts cost nothing (None: no cache)
    holds: Callable[[PromptedRule, str, str | None], bool] | None = None
    # what is masked in the judge's copy of a prompt's variables (``judge.redact``)
    redaction: RedactionPolicy = field(default_factory=lambda: SHIPPED)

    def model_of(self, rule: PromptedRule) -> str:
        """The judge model a rule is judged by."""
        return rule.judge.model or self.default_model

    def charge(self, rule: PromptedRule, usage: TokenUsage | None) -> None:
        """A judge call for ``rule`` used ``usage`` (spend budgets count it, and the rule's
        estimated cost is counted)."""
        if self.ledger is not None and usage is not None:
            model = self.model_of(rule)
            self.ledger.record(rule.id, model, usage)
            if (usd := self.ledger.cost(model, usage)) is not None:
                self.observer.on_rule_cost(rule.id, rule.pack, model, usd)
                if (tier := getattr(rule, "cascade_tier", None)) is not None:
                    self.observer.on_cascade_cost(rule.id, rule.pack, tier, usd)

    def decide(
        self,
        rule: AnyRule,
        plan: Plan,
        outcome: Outcome,
        detail: str | None = None,
        sid: str | None = None,
        now: datetime | None = None,
    ) -> RuleOutcome:
        """A decision with no score of its own (filtered, sampled out) or for ``sid`` (a
        shadow judge's is not published nor counted: the rule's decision is its own judge's)."""
        variant = rule.variant  # read once: a private attribute, on every decision
        if variant is None:
            self.observer.on_decision(rule.id, rule.pack, outcome)
        decision = make_decision(rule, plan.target, outcome, now or plan.created_at, detail, sid)
        return RuleOutcome(decision, None, variant=variant)

    def finish(
        self, rule: AnyRule, plan: Plan, measured: Measured, now: datetime | None = None
    ) -> RuleOutcome:
        """The rule's one score and its decision. ``now``: when the outcome was decided
        (default: when the plan was made, one timestamp for everything decided synchronously)."""
        now = now or plan.created_at
        # a rubric scored here could not be judged: it publishes one score, its primary one
        assert measured.status != "ok" or not isinstance(rule, (RubricRule, ComparisonRule))
        score = make_score(rule, plan.target, self.shapes[rule.id], measured, now)
        outcome = OUTCOME_OF_STATUS[measured.status]
        detail = measured.status_reason or measured.decision_detail
        decided = self.decide(rule, plan, outcome, detail, score.score_id, now)
        decided.score = score
        return decided

    def sampled_out(self, plan: Plan, rule: AnyRule) -> bool:
        """Whether ``rule`` samples this target out (its decision then says so)."""
        target = plan.target
        # a tool call by its trace and id (a call id is unique within its trace only: by the
        # id alone, every trace's "call_0" would be in the sample or none would)
        if rule.sampled(target.score_key if target.trace is not None else target.id):
            return False
        detail = f"sampling rate {rule.sampling_rate:g}"
        plan.outcomes.append(self.decide(rule, plan, "sampled_out", detail))
        return True
