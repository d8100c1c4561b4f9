"""The order-balanced win rate (``stream/agreement/balanced.py``, issue 51): B's rate over the
verdicts that survive the swap, from every pair's own verdict and the audited pairs' two."""

from __future__ import annotations

import random

import pytest

from stream.agreement.balanced import order_balanced
from stream.agreement.preferences import PairPreference, Preferred
from stream.agreement.report import build


def pair(
    own: Preferred, other: Preferred | None = None, order: str = "alternate"
) -> PairPreference:
    """A published preference: its own order's side, and the other order's if it was audited
    (the published side is the own order's, as an audited pair publishes it)."""
    orders = (own, other) if other is not None else None
    return PairPreference("compare", "critique", "bank", "prod", "canary", own, orders, order)


# 10 pairs: 6 preferred A in their own order, 4 B; 4 were audited: two flipped (A, then B)
PAIRS = (
    [("a", "b"), ("a", "b"), ("b", "b"), ("a", "a"), ("a", None), ("a", None)]
    + [("b", None)] * 3
    + [("a", None)] * 1
)


def made(order: str) -> list[PairPreference]:
    return [pair(own, other, order) for own, other in PAIRS]  # type: ignore[arg-type]


def test_a_fixed_order_subtracts_the_own_verdicts_the_other_order_did_not_confirm() -> None:
    """A held: 0.6 said A, minus 2 of 4 audited pairs whose A was not confirmed = 0.1; B held:
    0.4 minus none = 0.4; B's rate 0.4 / 0.5."""
    found = order_balanced(made("fixed"))
    assert found is not None and found.value == pytest.approx(0.8)
    assert found.count == 10
    assert found.low is not None and found.high is not None and found.low < 0.8 < found.high


def test_alternate_splits_a_flipped_pair_between_the_sides_it_named() -> None:
    """With the order a fair coin, a flipped pair's unconfirmed verdict is half A's and half
    B's: A held 0.6 - 0.25, B held 0.4 - 0.25; B's rate 0.15 / 0.5."""
    found = order_balanced(made("alternate"))
    assert found is not None and found.value == pytest.approx(0.3)


def test_nothing_to_balance_with_or_nothing_left_to_balance() -> None:
    assert order_balanced([pair("a"), pair("b")]) is None  # no pair judged in both orders
    assert order_balanced([pair("a", "a"), pair("b", "a")]) is None  # every pair was (both)
    assert order_balanced([]) is None
    flipped_all = [pair("a", "b", "fixed"), pair("a", None, "fixed")]
    found = order_balanced(flipped_all)  # the audit: no verdict survives the swap
    assert found is not None and found.value is None


def judge(rng: random.Random, s: float, p: float, order: str, audit: float) -> PairPreference:
    """A judge that takes the first slot in a share ``s`` of the pairs (in both orders) and
    the better variant (B in ``p``) in the others; the own order by ``order``."""
    better: Preferred = "b" if rng.random() < p else "a"
    habit = rng.random() < s
    a_first = order == "fixed" or rng.random() < 0.5
    first: Preferred = "a" if a_first else "b"
    second: Preferred = "b" if a_first else "a"
    own = first if habit else better
    other = second if habit else better
    return pair(own, other if rng.random() < audit else None, order)


@pytest.mark.parametrize("order", ["alternate", "fixed"])
def test_it_estimates_the_rate_a_judge_with_a_position_habit_hides(order: str) -> None:
    """30 % of the pairs judged by the slot, B truly better in 70 %: the plain rate is 0.64
    (alternate) or 0.49 (fixed); the balanced one is 0.7 within its interval, which is far
    narrower with many pairs than with few."""
    rng = random.Random(51)
    many = [judge(rng, 0.3, 0.7, order, 0.1) for _ in range(20_000)]
    found = order_balanced(many)
    assert found is not None and found.value == pytest.approx(0.7, abs=0.02)
    assert found.low is not None and found.high is not None
    assert found.low <= 0.7 <= found.high
    plain = build([], many).win_rates[0].estimate
    assert plain.high is not None and plain.high < 0.66
    few = order_balanced([judge(rng, 0.3, 0.7, order, 0.1) for _ in range(200)])
    assert few is not None and few.low is not None and few.high is not None
    assert few.high - few.low > 3 * (found.high - found.low)


def test_scorer_agreement_reports_it_beside_the_plain_rate() -> None:
    report = build([], made("alternate"))
    [rate] = report.win_rates
    assert (rate.b_wins, rate.a_wins, rate.ties) == (4, 6, 0)
    assert rate.balanced is not None and rate.balanced.value == pytest.approx(0.3)
    [said] = report.as_dict()["pairs"]
    assert said["order_balanced_win_rate_b"]["value"] == pytest.approx(0.3)
    assert any(line.startswith("  order-balanced") for line in report.lines())
    assert (
        build([], [pair("a"), pair("b")]).as_dict()["pairs"][0]["order_balanced_win_rate_b"] is None
    )


def test_an_interval_only_where_the_audit_can_say_its_spread() -> None:
    """One audited pair: a rate, no interval. Shares so noisy the rate passes 1: no interval
    either (not [1, 1]). No flip among the audited pairs: the interval is wider than the plain
    rate's (no flip seen is not no flip possible)."""
    one = order_balanced(
        [pair("b", "b", "fixed")]
        + [pair("a", None, "fixed")] * 40
        + [pair("b", None, "fixed")] * 59
    )
    assert one is not None and one.value == pytest.approx(0.6) and one.low is None
    past = [pair("a", "b", "fixed")] * 20 + [pair("b", "b", "fixed")] * 80
    past += [pair("a", None, "fixed")] * 30 + [pair("b", None, "fixed")] * 870
    found = order_balanced(past)
    assert found is not None and found.value == 1.0 and found.low is None and found.high is None
    none_flipped = [pair("b", "b")] * 10 + [pair("a")] * 30 + [pair("b")] * 60
    found = order_balanced(none_flipped)
    plain = build([], none_flipped).win_rates[0].estimate
    assert found is not None and found.low is not None and found.high is not None
    assert plain.low is not None and plain.high is not None
    assert found.high - found.low > 1.15 * (plain.high - plain.low)
