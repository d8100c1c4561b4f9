"""How far a judge agrees with a reference (a human's labels, or the rule's primary judge), on
the rule's own scale, each measure with its 95 % confidence interval and its count.

Pure arithmetic on (reference, judged) pairs: labels (``str``) for choice rules, raw values
(``float``, not the normalised 0..1) for numeric ones. Nothing here reads a clock, a topic or a
library beyond ``math``; the measures are checked against scipy and hand-worked examples in
``tests/agreement/test_measures.py``.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

# the two-sided 95 % normal quantile
Z95 = 1.959963984540054

MeasureKind = Literal["choice", "numeric"]
MEASURE_KINDS: tuple[MeasureKind, ...] = ("choice", "numeric")
CHOICE_MEASURES = ("kappa", "accuracy", "count")
NUMERIC_MEASURES = ("mae", "spearman", "count")

# the t distribution's 97.5 % quantile for 1..30 degrees of freedom (the usual table; the
# tests check each against scipy.stats.t.ppf)
_T975 = (
    12.706205,
    4.302653,
    3.182446,
    2.776445,
    2.570582,
    2.446912,
    2.364624,
    2.306004,
    2.262157,
    2.228139,
    2.200985,
    2.178813,
    2.160369,
    2.144787,
    2.131450,
    2.119905,
    2.109816,
    2.100922,
    2.093024,
    2.085963,
    2.079614,
    2.073873,
    2.068658,
    2.063899,
    2.059539,
    2.055529,
    2.051831,
    2.048407,
    2.045230,
    2.042272,
)


@dataclass(frozen=True)
class Estimate:
    """A measure's value with its 95 % interval [low, high] and the number of pairs (or
    comparisons) behind it; value, low and high are None where the measure is undefined
    (no pairs, a constant series), low and high alone where no interval can be given."""

    value: float | None
    low: float | None
    high: float | None
    count: int


def shown(e: Estimate, digits: int = 3, missing: str = "undefined") -> str:
    """An estimate for people: its value and interval to ``digits`` decimals, ``missing``
    when it has no value."""
    if e.value is None:
        return missing
    if e.low is None or e.high is None:
        return f"{e.value:.{digits}f}"
    return f"{e.value:.{digits}f} [{e.low:.{digits}f}, {e.high:.{digits}f}]"


def _none(count: int) -> Estimate:
    return Estimate(None, None, None, count)


def _clip(x: float, low: float = -1.0, high: float = 1.0) -> float:
    return min(high, max(low, x))


def _choice_pairs(pairs: Iterable[tuple[object, object]]) -> list[tuple[str, str]]:
    checked = []
    for i, (reference, judged) in enumerate(pairs):
        if not isinstance(reference, str) or not isinstance(judged, str):
            raise ValueError(
                f"pair {i}: a choice measure takes two labels (str), got "
                f"{type(reference).__name__} and {type(judged).__name__}"
            )
        checked.append((reference, judged))
    return checked


def _numeric_pairs(pairs: Iterable[tuple[object, object]]) -> list[tuple[float, float]]:
    checked = []
    for i, pair in enumerate(pairs):
        values = []
        for side, x in zip(("reference", "judged"), pair, strict=True):
            if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(x):
                raise ValueError(f"pair {i}: the {side} value {x!r} is not a finite number")
            values.append(float(x))
        checked.append((values[0], values[1]))
    return checked


def wilson(successes: float, n: int, z: float = Z95) -> Estimate:
    """The share ``successes / n`` with its Wilson score interval (Wilson 1927; 95 % at the
    default z): unlike the normal approximation it stays inside [0, 1] and is not empty at 0 or
    n successes. ``successes`` may be fractional (a tie counted as half a win). Undefined
    (value None) when n is 0."""
    if n < 0 or not 0 <= successes <= n:
        raise ValueError(f"wilson needs 0 <= successes <= n, got {successes} of {n}")
    if n == 0:
        return _none(0)
    p = successes / n
    z2 = z * z
    denominator = 1 + z2 / n
    centre = (p + z2 / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denominator
    # at 0 or n successes the interval's end is exactly 0 or 1; rounding would leave a hair off
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return Estimate(p, low, high, n)


def win_rate(b_wins: int, a_wins: int, ties: int) -> Estimate:
    """B's win rate over A: ``(b_wins + ties / 2) / (a_wins + b_wins + ties)``, a tie counted
    as half a win for each side, with the Wilson 95 % interval of that share over all the
    comparisons. The convention of AlpacaEval's win rate (``metrics/helpers.py``: a draw scores
    0.5) and of LMSYS Chatbot Arena's Elo updates (FastChat ``elo_analysis.py``: a tie scores
    0.5 for each model); Arena's pairwise win-fraction table drops ties instead. Undefined when
    there are no comparisons."""
    if min(b_wins, a_wins, ties) < 0:
        raise ValueError(f"win counts cannot be negative: b {b_wins}, a {a_wins}, ties {ties}")
    return wilson(b_wins + ties / 2, a_wins + b_wins + ties)


def accuracy(pairs: Iterable[tuple[str, str]]) -> Estimate:
    """The share of pairs whose two labels are the same, with its Wilson 95 % interval."""
    checked = _choice_pairs(pairs)
    return wilson(sum(1 for reference, judged in checked if reference == judged), len(checked))


def cohen_kappa(pairs: Iterable[tuple[str, str]]) -> Estimate:
    """Cohen's (1960) unweighted kappa of two raters' labels: ``(p_o - p_e) / (1 - p_e)``, the
    agreement beyond what the raters' own label frequencies give by chance.

    The 95 % interval is kappa +- 1.96 standard errors, clipped to [-1, 1], the standard error
    being the large-sample one of Fleiss, Cohen & Everitt (1969), "Large sample standard errors
    of kappa and weighted kappa" (the formula statsmodels' ``cohens_kappa`` reports as
    ``std_kappa``): ``var = (A + B - C) / ((1 - p_e)^2 n)`` with
    ``A = sum_i p_ii (1 - (p_i. + p_.i)(1 - kappa))^2``,
    ``B = (1 - kappa)^2 sum_{i != j} p_ij (p_.i + p_j.)^2`` and
    ``C = (kappa - p_e (1 - kappa))^2``. Full agreement over more than one label gives
    kappa 1 with no variance: [1, 1].

    Undefined (value None) with no pairs, and when the chance agreement p_e is 1: both raters
    gave every item the same single label, so there is no disagreement to correct for and the
    ratio is 0 / 0.
    """
    checked = _choice_pairs(pairs)
    n = len(checked)
    if n == 0:
        return _none(0)
    cells = Counter(checked)
    rows = Counter(reference for reference, _ in checked)  # p_i.: the reference's labels
    cols = Counter(judged for _, judged in checked)  # p_.j: the judged labels
    p_o = sum(cells[(label, label)] for label in rows) / n
    p_e = math.fsum(rows[label] * cols[label] for label in rows) / (n * n)
    if p_e >= 1.0:
        return _none(n)
    kappa = (p_o - p_e) / (1 - p_e)
    row = {label: count / n for label, count in rows.items()}
    col = {label: count / n for label, count in cols.items()}
    a = math.fsum(
        (cells[(label, label)] / n) * (1 - (row[label] + col.get(label, 0.0)) * (1 - kappa)) ** 2
        for label in rows
    )
    b = (1 - kappa) ** 2 * math.fsum(
        (count / n) * (col.get(i, 0.0) + row.get(j, 0.0)) ** 2
        for (i, j), count in cells.items()
        if i != j
    )
    c = (kappa - p_e * (1 - kappa)) ** 2
    # A + B - C is a variance: at full agreement it is 1 + 0 - 1, which rounding may leave a
    # hair below 0
    variance = max(0.0, (a + b - c) / ((1 - p_e) ** 2 * n))
    half = Z95 * math.sqrt(variance)
    return Estimate(kappa, _clip(kappa - half), _clip(kappa + half), n)


def t_quantile_975(df: int) -> float:
    """The t distribution's 97.5 % quantile: the table for 1..30 degrees of freedom, above
    that the Cornish-Fisher expansion in 1/df (Abramowitz & Stegun 26.7.5, to the 1/df^4
    term: within 1e-7 of the exact value from 30 on)."""
    if df < 1:
        raise ValueError(f"the t distribution needs at least 1 degree of freedom, got {df}")
    if df <= len(_T975):
        return _T975[df - 1]
    z = Z95
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    g4 = (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160
    return z + g1 / df + g2 / df**2 + g3 / df**3 + g4 / df**4


def mean_absolute_error(pairs: Iterable[tuple[float, float]]) -> Estimate:
    """The mean of ``|reference - judged|`` on the rule's own scale, with the 95 % interval of
    that mean by the t distribution (n - 1 degrees of freedom, the sample standard deviation
    of the absolute errors); the interval's low end is never below 0. One pair has a value and
    no interval; no pairs, no value."""
    checked = _numeric_pairs(pairs)
    n = len(checked)
    if n == 0:
        return _none(0)
    errors = [abs(reference - judged) for reference, judged in checked]
    mean = math.fsum(errors) / n
    if n == 1:
        return Estimate(mean, None, None, 1)
    sd = math.sqrt(math.fsum((e - mean) ** 2 for e in errors) / (n - 1))
    half = t_quantile_975(n - 1) * sd / math.sqrt(n)
    return Estimate(mean, max(0.0, mean - half), mean + half, n)


def average_ranks(values: Sequence[float]) -> list[float]:
    """Ranks 1..n of ``values``, tied values each given the mean of the ranks they span."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        rank = (start + end) / 2 + 1
        for k in range(start, end + 1):
            ranks[order[k]] = rank
        start = end + 1
    return ranks


def spearman(pairs: Iterable[tuple[float, float]]) -> Estimate:
    """Spearman's rho: the Pearson correlation of the two sides' average ranks (ties share
    their mean rank, as ``scipy.stats.spearmanr``). The 95 % interval is Fisher's z transform
    with the standard error ``sqrt(1.06 / (n - 3))`` of Fieller, Hartley & Pearson (1957),
    "Tests for rank correlation coefficients. I"; a rho of +-1 has the interval [rho, rho].

    Undefined (value None) with fewer than 2 pairs or when a side is constant (its ranks have
    no variance); no interval below 4 pairs.
    """
    checked = _numeric_pairs(pairs)
    n = len(checked)
    references = [reference for reference, _ in checked]
    judged = [value for _, value in checked]
    if n < 2 or len(set(references)) == 1 or len(set(judged)) == 1:
        return _none(n)
    x = average_ranks(references)
    y = average_ranks(judged)
    mean = (n + 1) / 2  # the mean of any average ranks of n items
    sxy = math.fsum((a - mean) * (b - mean) for a, b in zip(x, y, strict=True))
    sxx = math.fsum((a - mean) ** 2 for a in x)
    syy = math.fsum((b - mean) ** 2 for b in y)
    rho = _clip(sxy / math.sqrt(sxx * syy))
    if n < 4:
        return Estimate(rho, None, None, n)
    if abs(rho) == 1.0:
        return Estimate(rho, rho, rho, n)
    z = math.atanh(rho)
    half = Z95 * math.sqrt(1.06 / (n - 3))
    return Estimate(rho, math.tanh(z - half), math.tanh(z + half), n)


def count(n: int) -> Estimate:
    """The number of pairs as an estimate of its own (the ``count`` measure)."""
    return Estimate(float(n), None, None, n)


def measure(kind: str, pairs: Iterable[tuple[object, object]]) -> dict[str, Estimate]:
    """Every measure of one kind over ``pairs``: ``choice`` rules (labels, ``str``) give
    ``kappa``, ``accuracy`` and ``count``; ``numeric`` rules (raw values) give ``mae``,
    ``spearman`` and ``count``. Pairs are checked here, so joined values typed ``str | float``
    can be passed as they are: a pair of the wrong type for the kind, or an unknown kind, is a
    ``ValueError``."""
    if kind == "choice":
        labels = _choice_pairs(pairs)
        return {
            "kappa": cohen_kappa(labels),
            "accuracy": accuracy(labels),
            "count": count(len(labels)),
        }
    if kind == "numeric":
        values = _numeric_pairs(pairs)
        return {
            "mae": mean_absolute_error(values),
            "spearman": spearman(values),
            "count": count(len(values)),
        }
    raise ValueError(f"unknown measure kind {kind!r}: expected one of {', '.join(MEASURE_KINDS)}")
