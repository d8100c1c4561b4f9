"""What a published comparison preference says of its pair: which variant was response A,
which was B, and which one the judge preferred (``a``, ``b`` or ``tie``; ``inconsistent``: a pair
judged in both orders whose preference flipped with the order, published as a tie but no
verdict on the responses, left out of the win rate), read from the score event the comparison
kind publishes (``stream/engine/kinds/comparison.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..engine.kinds.comparison import PREFERENCE
from ..models import ScoreEvent

Preferred = Literal["a", "b", "tie", "inconsistent"]
PREFERRED_SIDES: tuple[Preferred, ...] = ("a", "b", "tie", "inconsistent")


@dataclass(frozen=True)
class PairPreference:
    """One judged pair: the rule, its project, the two variants' names (A first, as the rule's
    ``pair.variants`` lists them) and the side preferred."""

    rule: str
    pack: str
    project: str
    variant_a: str
    variant_b: str
    preferred: Preferred
    # judged in both orders (``both``, or the audit share): the side preferred in the pair's
    # own order and in the other, in the variants' terms (for the order-balanced win rate)
    orders: tuple[Preferred, Preferred] | None = None
    order: str | None = None  # the rule's ``comparison.order`` (``details.order``)


def preferred_side(raw_value: float) -> Preferred:
    """The seed's Preference Ranking read as a side: above 0 favours A, below 0 favours B,
    0 ("roughly equivalent") is a tie."""
    if raw_value > 0:
        return "a"
    if raw_value < 0:
        return "b"
    return "tie"


def pair_preference(score: ScoreEvent) -> PairPreference | None:
    """The pair preference ``score`` is, or None: not a comparison's preference (a response's
    rating, any other rule's score), not ``ok`` (no preference was given), or a shadow
    variant's (``score.variant`` set: a shadow judge's opinion is not the pair's result).

    The comparison kind writes ``details.variants`` as {variant: trace id} in slot order, A
    first; those names are the rule file's ``pair.variants`` (traffic with any other variant
    is not paired), so they are as bounded as the rule set."""
    if score.criterion != PREFERENCE or score.scope != "pair" or score.variant is not None:
        return None
    if score.status != "ok" or score.raw_value is None:
        return None
    details = score.details or {}
    variants = details.get("variants")
    if not isinstance(variants, dict) or len(variants) != 2:
        return None
    variant_a, variant_b = (str(name) for name in variants)
    audit = details.get("audit")
    held = audit if isinstance(audit, dict) else details
    return PairPreference(
        rule=score.rule_id,
        pack=score.pack,
        project=score.project_name,
        variant_a=variant_a,
        variant_b=variant_b,
        preferred=(
            "inconsistent"
            if details.get("position_inconsistent") is True
            else preferred_side(score.raw_value)
        ),
        orders=_orders(held.get("orders"), details.get("shown_first"), (variant_a, variant_b)),
        order=str(details["order"]) if "order" in details else None,
    )


def _orders(
    orders: object, shown_first: object, variants: tuple[str, str]
) -> tuple[Preferred, Preferred] | None:
    """The sides preferred in the pair's own order (``shown_first`` read as Response A) and
    in the other, from ``details.orders`` (each order's variant-stated preference by the
    variant read first), or None where the pair was judged in one order only."""
    if not isinstance(orders, dict) or shown_first not in variants:
        return None
    other = variants[1] if shown_first == variants[0] else variants[0]
    own, then = orders.get(f"{shown_first}_first"), orders.get(f"{other}_first")
    if not isinstance(own, int | float) or not isinstance(then, int | float):
        return None
    return preferred_side(own), preferred_side(then)
