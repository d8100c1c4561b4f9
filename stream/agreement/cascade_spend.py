"""What a cascade rule's tiers cost and how often the judge decided, read from its published
scores (``scorer agreement``; issue 46, item 3).

Every score of a cascade rule says which tier decided (``details.cascade``); an escalated
one also carries what the first tier used before the judge was asked
(``details.cascade.first``: its model and tokens), and the audit share's first-tier verdicts
are the shadow ``cascade``'s scores. So the scores alone price both tiers with the
deployment's price table: per 1,000 targets, the first tier's cost, the judge's, and the
judge alone's for comparison (its mean cost per paid call here, times 1,000: what the rule
would cost with every target judged by it). A verdict from the verdict cache cost nothing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from ..models import ScoreEvent, TokenUsage
from ..ruleset.judge_specs import CASCADE_VARIANT
from .events import newest_scores
from .measures import Estimate, wilson

Price = Callable[[str, TokenUsage], float | None]  # Settings.judge_cost


@dataclass
class CascadeSpend:
    """One cascade rule's targets, escalations by reason and cost by tier."""

    rule: str
    targets: int = 0  # the rule's own scores: one per target
    escalated: Counter[str] = field(default_factory=Counter)  # reason -> targets
    first_usd: float = 0.0
    judge_usd: float = 0.0
    judge_paid: int = 0  # the judge's verdicts paid for (not from the cache)
    unpriced: set[str] = field(default_factory=set)  # models the price table lacks

    @property
    def escalation(self) -> Estimate:
        """The share of targets the judge decided (the audit's included), with its interval."""
        return wilson(sum(self.escalated.values()), self.targets)

    def per_thousand(self, usd: float) -> float | None:
        return 1000.0 * usd / self.targets if self.targets else None

    @property
    def judge_alone(self) -> float | None:
        """Per 1,000 targets, were the judge asked of every one: its mean paid call's cost."""
        return 1000.0 * self.judge_usd / self.judge_paid if self.judge_paid else None

    def as_dict(self) -> dict[str, Any]:
        e = self.escalation
        return {
            "rule": self.rule,
            "targets": self.targets,
            "escalated": {"value": e.value, "low": e.low, "high": e.high, "count": e.count},
            "escalated_by_reason": dict(sorted(self.escalated.items())),
            "usd_per_1000": {
                "first": self.per_thousand(self.first_usd),
                "judge": self.per_thousand(self.judge_usd),
                "together": self.per_thousand(self.first_usd + self.judge_usd),
                "judge_alone": self.judge_alone,
            },
            "unpriced_models": sorted(self.unpriced),
        }

    def line(self) -> str:
        e = self.escalation
        reasons = ", ".join(f"{reason} {n}" for reason, n in sorted(self.escalated.items()))
        together = self.per_thousand(self.first_usd + self.judge_usd)
        first, judge = self.per_thousand(self.first_usd), self.per_thousand(self.judge_usd)
        said = (
            f"  cascade spend over {self.targets} targets: judge decided {_share(e)}"
            f"{f' ({reasons})' if reasons else ''}; per 1,000 targets: first tier "
            f"{_usd(first)}, judge {_usd(judge)}, together {_usd(together)}"
        )
        alone = self.judge_alone
        if alone and together is not None:
            said += f"; the judge alone about {_usd(alone)} ({together / alone:.2f} of it)"
        if self.unpriced:
            said += f"; no price for {', '.join(sorted(self.unpriced))} (not counted)"
        return said


def _share(e: Estimate) -> str:
    if e.value is None or e.low is None or e.high is None:
        return "nothing yet"
    return f"{e.value:.3f} [{e.low:.3f}, {e.high:.3f}]"


def _usd(value: float | None) -> str:
    return "n/a" if value is None else f"${value:.4f}"


def cascade_spend(
    records: Iterable[bytes], since: datetime | None, rule: str | None, price: Price
) -> list[CascadeSpend]:
    """Every cascade rule's spend among the scores topic's ``records`` (the newest of each
    score id; unreadable records skipped), created since ``since``, of ``rule`` if given."""
    spends: dict[str, CascadeSpend] = {}
    shadows = []
    for score in newest_scores(records, since).values():
        if rule is not None and score.rule_id != rule:
            continue
        details = score.details or {}
        cascade = details.get("cascade")
        if score.variant == CASCADE_VARIANT:
            shadows.append(score)
        elif score.variant is None and isinstance(cascade, dict):
            spend = spends.setdefault(score.rule_id, CascadeSpend(score.rule_id))
            _count(spend, score, cascade, details.get("cached") is True, price)
    for shadow in shadows:  # the audit's first tier, of rules seen with a cascade
        audited = spends.get(shadow.rule_id)
        if audited is not None:
            cached = (shadow.details or {}).get("cached") is True
            audited.first_usd += _cost(audited, shadow.judge_model, shadow.usage, cached, price)
    return sorted(spends.values(), key=lambda s: s.rule)


def _count(
    spend: CascadeSpend, score: ScoreEvent, cascade: dict[str, Any], cached: bool, price: Price
) -> None:
    """One target's score: which tier decided, and what each tier it asked cost."""
    spend.targets += 1
    cost = _cost(spend, score.judge_model, score.usage, cached, price)
    if cascade.get("tier") == "first":
        spend.first_usd += cost
        return
    spend.escalated[str(cascade.get("escalated") or "unknown")] += 1
    spend.judge_usd += cost
    spend.judge_paid += not cached and score.usage is not None
    first = cascade.get("first")
    if isinstance(first, dict) and isinstance(first.get("usage"), dict):
        try:
            usage = TokenUsage.model_validate(first["usage"])
        except ValidationError:
            return
        model = first.get("model") if isinstance(first.get("model"), str) else None
        spend.first_usd += _cost(spend, model, usage, first.get("cached") is True, price)


def _cost(
    spend: CascadeSpend, model: str | None, usage: TokenUsage | None, cached: bool, price: Price
) -> float:
    if cached or usage is None or model is None:
        return 0.0
    usd = price(model, usage)
    if usd is None:
        spend.unpriced.add(model)
        return 0.0
    return usd
