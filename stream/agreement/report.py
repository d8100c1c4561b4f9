"""What ``scorer agreement`` prints: per rule, how its judge agrees with human labels, how each
shadow variant agrees with the labels and with the primary judge, and per comparison rule the
win rate of B over A per variant pair and project, each with its count and 95 % interval
(design record 26); per cascade rule, its curve over confidence cuts (``cascade_curve``). Pure: the command reads the topics (``kafka.io.read_all``) and feeds it."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson
from pydantic import ValidationError

from .balanced import order_balanced
from .cascade_curve import CascadeCurve, cascade_curves
from .cascade_spend import CascadeSpend
from .events import newest_scores
from .join import Joined
from .measures import Estimate, measure, shown, win_rate
from .preferences import PairPreference, Preferred, pair_preference

# a WinRate's counts, in its fields' order
COUNTED: tuple[Preferred, ...] = ("b", "a", "tie", "inconsistent")


@dataclass(frozen=True, slots=True)
class Compared:
    """One comparison of a rule's score (a rubric's criterion, or "" for its one score): a
    judged side (its model, and a shadow's name or "" for the primary) against a reference
    ("human" labels, or the "primary" judge), compared as a choice or a number."""

    rule: str
    criterion: str
    reference: str
    variant: str
    model: str
    kind: str

    def title(self) -> str:
        judged = f"shadow {self.variant}" if self.variant else "primary"
        reference = "labels" if self.reference == "human" else "primary"
        of = f" on {self.criterion}" if self.criterion else ""
        return f"{reference} vs {judged} ({self.model}){of}"


@dataclass(frozen=True, slots=True)
class WinRate:
    """B's wins over A for one comparison rule, variant pair and project."""

    rule: str
    project: str
    variant_a: str
    variant_b: str
    b_wins: int
    a_wins: int
    ties: int
    inconsistent: int = 0  # judged in both orders, flipped with the order: not in the rate
    # over the verdicts that survive the swap, from the audited pairs (``balanced.py``);
    # None when no pair, or every pair, was judged in both orders
    balanced: Estimate | None = None

    @property
    def estimate(self) -> Estimate:
        return win_rate(self.b_wins, self.a_wins, self.ties)


@dataclass
class Report:
    """Every rule's comparisons (with their measures), every pair's win rate and every
    cascade rule's curve over confidence cuts."""

    agreement: dict[Compared, dict[str, Estimate]] = field(default_factory=dict)
    win_rates: list[WinRate] = field(default_factory=list)
    cascades: list[CascadeCurve] = field(default_factory=list)
    spend: list[CascadeSpend] = field(default_factory=list)  # cascade rules' tiers' cost

    def as_dict(self) -> dict[str, Any]:
        """The report for machines (``--json``)."""
        rules: defaultdict[str, list[dict[str, Any]]] = defaultdict(list)
        for compared in sorted(self.agreement, key=_order):
            rules[compared.rule].append(
                {
                    "criterion": compared.criterion or None,
                    "reference": compared.reference,
                    "variant": compared.variant or None,
                    "model": compared.model,
                    "kind": compared.kind,
                    "measures": {
                        name: _estimate(e) for name, e in self.agreement[compared].items()
                    },
                }
            )
        pairs = [
            {
                "rule": w.rule,
                "project": w.project,
                "variant_a": w.variant_a,
                "variant_b": w.variant_b,
                "b_wins": w.b_wins,
                "a_wins": w.a_wins,
                "ties": w.ties,
                "position_inconsistent": w.inconsistent,
                "win_rate_b": _estimate(w.estimate),
                "order_balanced_win_rate_b": _estimate(w.balanced) if w.balanced else None,
            }
            for w in self.win_rates
        ]
        cascades = [_curve(curve) for curve in self.cascades]
        spend = [s.as_dict() for s in self.spend]
        return {"rules": dict(rules), "pairs": pairs, "cascades": cascades, "spend": spend}

    def lines(self) -> list[str]:
        """The report for people."""
        out: list[str] = []
        by_rule: defaultdict[str, list[Compared]] = defaultdict(list)
        for compared in sorted(self.agreement, key=_order):
            by_rule[compared.rule].append(compared)
        for rule, comparisons in by_rule.items():
            out.append(f"{rule}")
            for compared in comparisons:
                measures = self.agreement[compared]
                said = ", ".join(
                    f"{name} {shown(e)}" for name, e in measures.items() if name != "count"
                )
                out.append(f"  {compared.title()}: n={measures['count'].count}; {said}")
            for curve in self.cascades:
                if curve.rule == rule:
                    out.extend(_curve_lines(curve))
            out.extend(s.line() for s in self.spend if s.rule == rule)
        for spend in self.spend:  # a cascade with no audited pair yet
            if spend.rule not in by_rule:
                out.extend((spend.rule, spend.line()))
        if not self.agreement:
            out.append("no label or shadow judged yet (nothing on the agreement topic)")
        for w in self.win_rates:
            e = w.estimate
            out.append(
                f"{w.rule} [{w.project}] {w.variant_b} over {w.variant_a}: win rate "
                f"{shown(e)} over {e.count} pairs ({w.b_wins} won, {w.a_wins} lost, "
                f"{w.ties} tied"
                + (f"; {w.inconsistent} flipped with the order, left out" if w.inconsistent else "")
                + ")"
            )
            if w.balanced is not None:
                out.append(
                    f"  order-balanced (the verdicts that survive the swap, from the pairs "
                    f"also judged the other way round): {shown(w.balanced)}"
                )
        return out


def pairs_of(records: Iterable[bytes], since: datetime | None, rule: str | None) -> list[Joined]:
    """The joined pairs of the agreement topic's ``records`` (unreadable ones are skipped:
    the topic is written by the workers), joined since ``since``, of ``rule`` if given."""
    pairs = []
    for raw in records:
        try:
            pair = Joined.model_validate_json(raw)
        except (ValueError, ValidationError):
            continue
        if since is not None and pair.joined_at < since:
            continue
        if rule is None or pair.rule_id == rule:
            pairs.append(pair)
    return pairs


def preferences_of(
    records: Iterable[bytes], since: datetime | None, rule: str | None
) -> list[PairPreference]:
    """The comparison rules' preferences among the scores topic's ``records`` (newest per
    score id)."""
    preferences = (pair_preference(s) for s in newest_scores(records, since).values())
    return [p for p in preferences if p is not None and (rule is None or p.rule == rule)]


def report_json(report: Report) -> str:
    return orjson.dumps(report.as_dict(), option=orjson.OPT_INDENT_2).decode()


def build(
    pairs: Iterable[Joined],
    preferences: Iterable[PairPreference],
    spend: Iterable[CascadeSpend] = (),
) -> Report:
    """The report of ``pairs`` (the newest of each agreement id counts), ``preferences`` and
    the cascade rules' ``spend``."""
    newest: dict[str, Joined] = {}
    for pair in pairs:
        newest[pair.agreement_id] = pair
    grouped: defaultdict[Compared, list[tuple[Any, Any]]] = defaultdict(list)
    report = Report()
    for pair in newest.values():
        compared = Compared(
            pair.rule_id,
            pair.criterion or "",
            pair.reference,
            pair.variant or "",
            pair.model or "",
            pair.kind,
        )
        grouped[compared].append((pair.reference_value, pair.judged_value))
    for compared, found in grouped.items():
        report.agreement[compared] = measure(compared.kind, found)
    report.cascades = cascade_curves(newest.values())
    report.spend = list(spend)
    by_pair: defaultdict[tuple[str, str, str, str], list[PairPreference]] = defaultdict(list)
    for p in preferences:
        by_pair[(p.rule, p.project, p.variant_a, p.variant_b)].append(p)
    report.win_rates = [
        WinRate(rule, project, a, b, *_counted(found), balanced=order_balanced(found))
        for (rule, project, a, b), found in sorted(by_pair.items())
    ]
    return report


def _counted(found: list[PairPreference]) -> tuple[int, int, int, int]:
    b, a, tie, inconsistent = (sum(p.preferred == side for p in found) for side in COUNTED)
    return b, a, tie, inconsistent


def _order(compared: Compared) -> tuple[str, str, int, str, str]:
    # per rule and score: labels vs primary, labels vs each shadow, primary vs each shadow
    rank = 0 if compared.reference == "human" and not compared.variant else 1
    rank = rank if compared.reference == "human" else 2
    return (compared.rule, compared.criterion, rank, compared.variant, compared.model)


def _estimate(e: Estimate) -> dict[str, Any]:
    return {"value": e.value, "low": e.low, "high": e.high, "count": e.count}


def _curve(curve: CascadeCurve) -> dict[str, Any]:
    return {
        "rule": curve.rule,
        "criterion": curve.criterion or None,
        "model": curve.model,
        "kind": curve.kind,
        "measure": curve.measure,
        "audited": curve.audited,
        "cuts": [
            {
                "cut": point.cut,
                "escalated": _estimate(point.escalated),
                "published": _estimate(point.published),
                "accepted": _estimate(point.accepted),
            }
            for point in curve.points
        ],
    }


def _curve_lines(curve: CascadeCurve) -> list[str]:
    """A cascade's curve as a table: at each cut, the share of the audited targets escalated
    to the judge, the agreement with the judge of what would be published, and of the first
    tier's accepted verdicts alone (how many)."""
    m = curve.measure
    of = f" on {curve.criterion}" if curve.criterion else ""
    out = [
        f"  cascade by confidence cut ({curve.model}){of}, over {curve.audited} audited targets:",
        f"    {'cut':>4}  {'escalated':<22}  {'published ' + m:<22}  accepted {m} (n)",
    ]
    for p in curve.points:
        out.append(
            f"    {p.cut:>4.2f}  {shown(p.escalated):<22}  {shown(p.published):<22}  "
            f"{shown(p.accepted)} ({p.accepted.count})"
        )
    return out
