"""The judge's position preference, measured on the pairs judged in both orders (issue 51,
design record 52): ``comparison.order: both``, and every order's audit share
(``comparison.audit``). Per rule and judge model: how many pairs' preference flipped with the
order, and each call's verdict by the slot it favoured. Recording rules give the flip rate
and the first slot's share with their Wilson intervals."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

from .pacing import PREFIX

SLOTS = ("first", "second", "neither")
OUTCOMES = ("consistent", "flipped")


class PairOrderMetrics:
    """The two families on ``registry``; ``judged`` counts one pair judged in both orders."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.audits = Counter(
            f"{PREFIX}_pair_order_audits",
            "Comparison pairs judged in both orders (order: both, or the audit share), by "
            "outcome: consistent (the same variant preferred, or equivalent, in both) or "
            "flipped (the preference followed the position)",
            ("rule", "pack", "model", "outcome"),
            registry=registry,
        )
        self.slots = Counter(
            f"{PREFIX}_pair_slot_verdicts",
            "The verdicts of pairs judged in both orders, by the slot they favoured: first "
            "(Response A), second, or neither (equivalent); a judge without a position "
            "preference favours each slot alike",
            ("rule", "pack", "model", "slot"),
            registry=registry,
        )

    def judged(self, rule: str, pack: str, model: str, slots: list[str], flipped: bool) -> None:
        """One pair's two verdicts (``slots``) and whether its preference flipped; every
        outcome and slot of the rule and model exists from the first pair (a rate reads 0,
        not nothing)."""
        for outcome in OUTCOMES:
            counted = self.audits.labels(rule, pack, model, outcome)
            if outcome == ("flipped" if flipped else "consistent"):
                counted.inc()
        for slot in SLOTS:
            self.slots.labels(rule, pack, model, slot).inc(slots.count(slot))
