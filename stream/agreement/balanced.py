"""The order-balanced win rate (issue 51, design record 52): B's win rate over the verdicts
that survive swapping the two responses, estimated from every pair's own verdict and the pairs
also judged the other way round (the audit share, ``comparison.audit``).

The quantity is the one ``comparison.order: both`` publishes: ``(BB + TT / 2) / (AA + BB +
TT)``, where ``XX`` is the share of pairs given the same side ``X`` (A, B or a tie) in both
orders. For any order of showing (``alternate`` or ``fixed``) and any judge, a pair's own
verdict is ``X`` in ``XX`` plus the share of pairs whose own verdict is ``X`` and whose other
order's is not; the second is measured on the audited pairs, a content-blind sample (a hash of
the rule and the key). So, with ``n`` pairs and ``m`` of them audited,

    XX ≈ #(own = X) / n  -  #(audited, own = X, other ≠ X) / m

(a two-phase difference estimator; no model of the judge is assumed). Its 95 % interval is the
delta method's over the pairs: for the ratio ``w = N / D``, the spread of ``N - w D``, whose
terms are one per pair over all ``n`` and one per audited pair over ``m``, with the covariance
the audited pairs share with the whole; its quantile Student's t (``t_quantile_975``, at
the whole degrees of freedom below Welch-Satterthwaite's), as the audit's term rests on few
pairs. With every pair audited (``both``) it is the rate of the consistent verdicts. It rests on the audited pairs (about a tenth at the default share),
so its interval is wider than the plain rate's: the price of one call a pair instead of two.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from .measures import Z95, Estimate, t_quantile_975
from .preferences import PairPreference, Preferred

SIDES: tuple[Preferred, ...] = ("a", "b", "tie")


def order_balanced(preferences: Sequence[PairPreference]) -> Estimate | None:
    """B's order-balanced win rate over ``preferences`` (one rule, project and variant pair),
    or None where no pair was judged in both orders (nothing to balance with) or every pair
    was (``both``: the published rate is already the consistent verdicts')."""
    own = [_own(p) for p in preferences]
    audited = [(o, p.orders[1]) for o, p in zip(own, preferences, strict=True) if p.orders]
    n, m = len(own), len(audited)
    if m == 0 or m == n:
        return None
    counted = {x: sum(o == x for o in own) / n for x in SIDES}
    # alternate: a pair's own order is a fair coin, so X's unconfirmed share is half the pairs
    # naming X in one order only: counted from both orders' verdicts, with less spread
    fair = all(p.order == "alternate" for p in preferences)
    unconfirmed = {
        x: sum(
            ((o == x) + (other == x)) / 2 if fair else o == x for o, other in audited if o != other
        )
        / m
        for x in SIDES
    }
    held = {x: counted[x] - unconfirmed[x] for x in SIDES}
    decided = sum(held.values())
    if decided <= 1e-9:  # the audit says no verdict survives the swap (0, but for rounding)
        return Estimate(None, None, None, n)
    rate = (held["b"] + held["tie"] / 2) / decided
    # N - w D, term by term: k[X] for each side
    k: dict[Preferred | None, float] = {"a": -rate, "b": 1 - rate, "tie": 0.5 - rate, None: 0.0}
    g = [k[o] for o in own]
    h = [((k[o] + k[other]) / 2 if fair else k[o]) if o != other else 0.0 for o, other in audited]
    g_audited = [k[o] for o, _ in audited]
    whole, audit = _var(g) / n, _var(h) / m
    if not any(o != other for o, other in audited):  # no flip seen: not no flip possible
        audit = max(audit, _unseen(k, fair, m))
    variance = max(whole + audit - 2 * _cov(g_audited, h) / n, 0.0)
    # the audit's term rests on m pairs (about 10 of 100 at the default share): Student's t
    # with Welch-Satterthwaite's degrees of freedom, not the normal quantile
    spread = whole**2 / max(n - 1, 1) + audit**2 / max(m - 1, 1)
    df = (whole + audit) ** 2 / spread if spread > 0 else math.inf
    # the table's whole degrees of freedom below the fractional ones: never a narrower interval
    quantile = t_quantile_975(max(1, math.floor(df))) if math.isfinite(df) else Z95
    half = quantile * math.sqrt(variance) / decided
    value = min(1.0, max(0.0, rate))
    if m < 2 or value != rate:  # one audited pair says nothing of the audit's spread;
        return Estimate(value, None, None, n)  # a rate past 0 or 1: shares too noisy to say
    return Estimate(value, _clipped(rate - half), _clipped(rate + half), n)


def _unseen(k: dict[Preferred | None, float], fair: bool, m: int) -> float:
    """The audit term's least variance when none of the ``m`` audited pairs flipped: a flip
    share of 1 / (m + 2) (the smoothed share of none in m), each flip weighing the most one
    can."""
    if fair:
        worst = max(((k[x] + k[y]) / 2) ** 2 for x in SIDES for y in SIDES if x != y)
    else:
        worst = max(k[x] ** 2 for x in SIDES)
    share = 1 / (m + 2)
    return share * (1 - share) * worst / m


def _clipped(bound: float) -> float:
    return min(1.0, max(0.0, bound))


def _own(p: PairPreference) -> Preferred | None:
    """The pair's verdict in its own order (None: an inconsistent pair without its orders)."""
    if p.orders is not None:
        return p.orders[0]
    return None if p.preferred == "inconsistent" else p.preferred


def _var(xs: Sequence[float]) -> float:
    return _cov(xs, xs)


def _cov(xs: Sequence[float], ys: Sequence[float]) -> float:
    n = len(xs)
    if n < 2:
        return 0.0
    mx, my = sum(xs) / n, sum(ys) / n
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / (n - 1)
