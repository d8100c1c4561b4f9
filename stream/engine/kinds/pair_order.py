"""Which response of a pair the judge reads first (issue 51, design record 52).

LLM judges prefer one position (mostly the first) more often than the responses deserve. A
comparison rule's ``comparison.order`` says how a pair is shown:

- ``fixed``: the first variant of ``pair.variants`` fills the prompt's Response A slot;
- ``alternate`` (the default): a hash of the rule and the comparison key puts either variant
  first, half of the pairs each way, the same way on every delivery of a pair;
- ``both``: the pair is judged twice, once in each order.

The prompt is the rule's own (the seed's, unchanged): only which trace fills which slot
changes. Swapping the pair document's ``a`` and ``b`` before the variables are read does it
for any rule, whatever its variables are named. The judge's answer is about slots; the
published preference is about variants (positive favours the first variant): a judge that
read the second variant as Response A has its preference turned round (``variant_preference``).
"""

from __future__ import annotations

from typing import Any

from ...models import stable_fraction
from ...ruleset.schema import ComparisonRule

FIRST, SECOND, BOTH = "a", "b", "both"  # the first variant first, the second first, both orders
AUDITED = "+audit"  # an order judged in the other order too, for the measure only


def order_of(rule: ComparisonRule, pair_id: str) -> str:
    """How ``rule`` shows the pair ``pair_id``: ``a`` (its first variant first), ``b`` or
    ``both``; ``a+audit`` or ``b+audit`` for a pair of the audit share (``comparison.audit``,
    by a hash of its own), judged in the other order too."""
    spec = rule.comparison
    if spec.order == "both":
        return BOTH
    first = FIRST
    if spec.order == "alternate" and stable_fraction(rule.id, "order", pair_id) < 0.5:
        first = SECOND
    audited = spec.audit >= 1.0 or stable_fraction(rule.id, "audit", pair_id) < spec.audit
    return first + AUDITED if audited else first


def shown_first(order: str | None) -> str:
    """The variant slot read first in an order's published call (``a`` or ``b``)."""
    return SECOND if order in (SECOND, SECOND + AUDITED) else FIRST  # "both": its first call


def in_both_orders(order: str | None) -> bool:
    """Whether a job with ``order`` is judged in both orders (``both``, or audited)."""
    return order == BOTH or (order is not None and order.endswith(AUDITED))


def swapped(document: dict[str, Any]) -> dict[str, Any]:
    """The pair document with its two traces in each other's slots (the second variant's in
    ``a``, read as Response A)."""
    turned = dict(document)
    turned["a"], turned["b"] = document.get("b"), document.get("a")
    for slot in ("a", "b"):
        if turned[slot] is None:
            del turned[slot]
    return turned


def slot_variants(rule: ComparisonRule, first: str) -> dict[str, str]:
    """Each prompt slot's variant when ``first`` (``a`` or ``b``) was shown first."""
    one, two = rule.pair.variants
    return {"a": one, "b": two} if first == FIRST else {"a": two, "b": one}


def variant_preference(raw: float, first: str) -> float:
    """A slot-stated preference (positive: Response A) as a variant-stated one (positive: the
    first variant)."""
    return raw if first == FIRST else -raw
