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


def order_of(rule: ComparisonRule, pair_id: str) -> str:
    """How ``rule`` shows the pair ``pair_id``: ``a`` (its first variant first), ``b`` or
    ``both``."""
    mode = rule.comparison.order
    if mode == "fixed":
        return FIRST
    if mode == "both":
        return BOTH
    return SECOND if stable_fraction(rule.id, "order", pair_id) < 0.5 else FIRST


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
