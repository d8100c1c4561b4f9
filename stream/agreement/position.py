"""The judge's position preference as ``scorer agreement`` reports it (issue 51, design record
52): from the comparison preferences on the scores topic that were judged in both orders
(``comparison.order: both``: ``details.orders``; the audit share: ``details.audit.orders``),
per rule and judge model, the share of pairs whose preference flipped with the order and the
first slot's share of the verdicts, each with its Wilson 95 % interval (the same figures as
the recording rules ``scorer:pair_order_flip_rate:1d`` and ``scorer:pair_first_slot_share:1d``
give from ``/metrics``)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..engine.kinds.comparison import PREFERENCE
from ..models import ScoreEvent
from .events import newest_scores
from .measures import Estimate, shown, wilson


@dataclass(frozen=True, slots=True)
class PositionAudit:
    """One rule and judge model's pairs judged in both orders."""

    rule: str
    model: str
    pairs: int
    flipped: int
    first: int  # verdicts favouring the slot read first (Response A)
    second: int
    neither: int

    @property
    def flip_rate(self) -> Estimate:
        return wilson(self.flipped, self.pairs)

    @property
    def first_slot(self) -> Estimate:
        return wilson(self.first, self.first + self.second + self.neither)

    def as_dict(self) -> dict[str, Any]:
        def said(e: Estimate) -> dict[str, Any]:
            return {"value": e.value, "low": e.low, "high": e.high, "count": e.count}

        return {
            "rule": self.rule,
            "model": self.model,
            "pairs": self.pairs,
            "flipped": self.flipped,
            "flip_rate": said(self.flip_rate),
            "first_slot_share": said(self.first_slot),
        }

    def line(self) -> str:
        flip, first = self.flip_rate, self.first_slot
        return (
            f"{self.rule} ({self.model}) judged in both orders: {self.pairs} pairs, "
            f"{self.flipped} flipped with the order ({_share(flip)}); the first slot preferred "
            f"in {self.first} of {first.count} verdicts ({_share(first)}; 0.5: no preference "
            "for a position)"
        )


def _share(e: Estimate) -> str:
    return shown(e, digits=2, missing="n/a")


def slot_verdicts(orders: dict[str, Any], variants: list[str]) -> list[str] | None:
    """Each call's verdict by slot from a preference's ``orders`` (variant-stated, by the
    variant read first: ``{"A_first": 2, "B_first": -2}``), or None where one is missing. A
    call with the first variant read first favoured its first slot when positive; with the
    second read first, when negative."""
    if len(variants) != 2:
        return None
    one, two = (orders.get(f"{name}_first") for name in variants)
    if not isinstance(one, int | float) or not isinstance(two, int | float):
        return None
    return [_slot(one), _slot(-two)]


def _slot(raw: float) -> str:
    return "first" if raw > 0 else "second" if raw < 0 else "neither"


def position_audits(scores: Iterable[ScoreEvent]) -> list[PositionAudit]:
    """The pairs judged in both orders among ``scores``, per rule and judge model."""
    counts: defaultdict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0, 0, 0])
    for score in scores:
        if score.criterion != PREFERENCE or score.scope != "pair" or score.variant is not None:
            continue
        details = score.details or {}
        audit = details.get("audit")
        found: dict[str, Any] = audit if isinstance(audit, dict) else details
        orders, flipped = found.get("orders"), found.get("position_inconsistent")
        variants = list(details.get("variants") or {})
        slots = slot_verdicts(orders, variants) if isinstance(orders, dict) else None
        if slots is None or not isinstance(flipped, bool):
            continue
        tally = counts[(score.rule_id, score.judge_model or "")]
        tally[0] += 1
        tally[1] += flipped
        for slot in slots:
            tally[2 + ("first", "second", "neither").index(slot)] += 1
    return [PositionAudit(rule, model, *tally) for (rule, model), tally in sorted(counts.items())]


def audits_of(
    records: Iterable[bytes], since: datetime | None, rule: str | None
) -> list[PositionAudit]:
    """The position audits of the scores topic's ``records`` (newest per score id)."""
    audits = position_audits(newest_scores(records, since).values())
    return [a for a in audits if rule is None or a.rule == rule]
