"""The agreement measures against hand-worked examples and library references (scipy, numpy):
Cohen's kappa and its standard error, accuracy and Wilson intervals, mean absolute error with
its t interval, Spearman's rho with ties and its Fisher interval, win rates; each edge case
(no pairs, one pair, a constant side) and bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

from stream.agreement.measures import (
    Estimate,
    accuracy,
    average_ranks,
    cohen_kappa,
    mean_absolute_error,
    measure,
    spearman,
    t_quantile_975,
    wilson,
    win_rate,
)

Z = 1.959963984540054


def grant_example() -> list[tuple[str, str]]:
    """Wikipedia's worked example ("Cohen's kappa", Simple example): 50 grant proposals read
    by A and B; both yes 20, both no 15, A yes B no 5, A no B yes 10: p_o 0.7, p_e 0.5,
    kappa 0.4."""
    return [("yes", "yes")] * 20 + [("yes", "no")] * 5 + [("no", "yes")] * 10 + [("no", "no")] * 15


def kappa_by_matrix(pairs: list[tuple[str, str]]) -> tuple[float, float]:
    """Kappa from the confusion matrix, and its large-sample standard error by the delta
    method under multinomial sampling (the derivation Fleiss, Cohen & Everitt 1969 give in
    closed form): var = g' (diag(p) - p p') g / n, g the gradient of kappa in the cells."""
    labels = sorted({label for pair in pairs for label in pair})
    index = {label: i for i, label in enumerate(labels)}
    table = np.zeros((len(labels), len(labels)))
    for reference, judged in pairs:
        table[index[reference], index[judged]] += 1
    n = table.sum()
    p = table / n
    rows, cols = p.sum(axis=1), p.sum(axis=0)
    p_o, p_e = np.trace(p), float(rows @ cols)
    kappa = (p_o - p_e) / (1 - p_e)
    d_po = np.eye(len(labels))
    d_pe = cols[:, None] + rows[None, :]  # d p_e / d p_ij = p_.i + p_j.
    gradient = ((d_po * (1 - p_e) - d_pe * (1 - p_o)) / (1 - p_e) ** 2).ravel()
    cells = p.ravel()
    variance = gradient @ (np.diag(cells) - np.outer(cells, cells)) @ gradient / n
    return float(kappa), math.sqrt(max(0.0, float(variance)))


# ---- Cohen's kappa


def test_kappa_of_the_worked_example_is_0_4() -> None:
    estimate = cohen_kappa(grant_example())
    assert estimate.count == 50
    assert estimate.value == pytest.approx(0.4)
    _, se = kappa_by_matrix(grant_example())
    assert estimate.low == pytest.approx(0.4 - Z * se)
    assert estimate.high == pytest.approx(0.4 + Z * se)
    # by hand from the Fleiss-Cohen-Everitt formula, rows A (yes 0.5, no 0.5), columns B
    # (yes 0.6, no 0.4), 1 - kappa = 0.6: A = 0.4 (1 - 1.1 * 0.6)^2 + 0.3 (1 - 0.9 * 0.6)^2 =
    # 0.10972, B = 0.36 (0.1 (0.6 + 0.5)^2 + 0.2 (0.4 + 0.5)^2) = 0.10188,
    # C = (0.4 - 0.5 * 0.6)^2 = 0.01; var = 0.2016 / (0.25 * 50) = 0.016128, se 0.126996
    assert estimate.value - estimate.low == pytest.approx(Z * math.sqrt(0.016128))
    assert (round(estimate.low, 4), round(estimate.high, 4)) == (0.1511, 0.6489)


label_pairs = st.lists(
    st.tuples(st.sampled_from("abcd"), st.sampled_from("abcde")), min_size=1, max_size=80
)


@given(label_pairs)
def test_kappa_matches_the_confusion_matrix_and_the_delta_method(
    pairs: list[tuple[str, str]],
) -> None:
    estimate = cohen_kappa(pairs)
    references = {reference for reference, _ in pairs}
    judged = {value for _, value in pairs}
    if len(references) == 1 and references == judged:
        # both raters gave every item the same single label: p_e is 1, kappa is 0 / 0
        assert estimate == Estimate(None, None, None, len(pairs))
        return
    kappa, se = kappa_by_matrix(pairs)
    assert estimate.value == pytest.approx(kappa, abs=1e-12)
    assert estimate.low == pytest.approx(max(-1.0, kappa - Z * se), abs=1e-9)
    assert estimate.high == pytest.approx(min(1.0, kappa + Z * se), abs=1e-9)


def test_full_agreement_is_kappa_1_with_no_variance() -> None:
    pairs = [("pass", "pass")] * 7 + [("fail", "fail")] * 3
    assert cohen_kappa(pairs) == Estimate(1.0, 1.0, 1.0, 10)


def test_kappa_is_undefined_when_both_raters_always_give_one_label() -> None:
    assert cohen_kappa([("yes", "yes")] * 12) == Estimate(None, None, None, 12)
    assert cohen_kappa([("yes", "yes")]) == Estimate(None, None, None, 1)


def test_kappa_with_one_constant_rater_is_0() -> None:
    # the judge says yes to everything: agreement no better than its own frequencies give
    pairs = [("yes", "yes")] * 6 + [("no", "yes")] * 4
    estimate = cohen_kappa(pairs)
    assert estimate.value == pytest.approx(0.0)
    assert estimate.count == 10


def test_kappa_counts_a_label_only_the_judge_used() -> None:
    pairs = [("yes", "yes"), ("no", "no"), ("no", "maybe"), ("yes", "yes")]
    kappa, _ = kappa_by_matrix(pairs)
    assert cohen_kappa(pairs).value == pytest.approx(kappa)
    assert kappa == pytest.approx((0.75 - 0.375) / 0.625)


def test_kappa_of_no_pairs_is_undefined() -> None:
    assert cohen_kappa([]) == Estimate(None, None, None, 0)


# ---- Wilson, accuracy, win rates


def test_wilson_of_8_in_10_by_hand() -> None:
    estimate = wilson(8, 10)
    assert estimate.value == 0.8
    assert estimate.count == 10
    assert (round(estimate.low, 3), round(estimate.high, 3)) == (0.490, 0.943)


@given(
    st.integers(min_value=1, max_value=500).flatmap(
        lambda n: st.tuples(st.integers(0, n), st.just(n))
    )
)
def test_wilson_matches_scipy(successes_and_n: tuple[int, int]) -> None:
    successes, n = successes_and_n
    reference = stats.binomtest(successes, n).proportion_ci(0.95, method="wilson")
    estimate = wilson(successes, n)
    assert estimate.low == pytest.approx(reference.low, abs=1e-9)
    assert estimate.high == pytest.approx(reference.high, abs=1e-9)


def test_wilson_at_the_ends_stays_in_0_1_and_is_not_empty() -> None:
    none = wilson(0, 10)
    assert none.value == 0.0 and none.low == 0.0
    assert none.high == pytest.approx(0.2775, abs=1e-4)
    every = wilson(10, 10)
    assert every.high == 1.0
    assert every.low == pytest.approx(0.7225, abs=1e-4)


def test_wilson_of_nothing_is_undefined_and_bad_counts_are_refused() -> None:
    assert wilson(0, 0) == Estimate(None, None, None, 0)
    with pytest.raises(ValueError, match="successes <= n"):
        wilson(11, 10)
    with pytest.raises(ValueError, match="successes <= n"):
        wilson(-1, 10)


def test_accuracy_is_the_share_of_same_labels_with_its_wilson_interval() -> None:
    estimate = accuracy(grant_example())
    assert estimate == wilson(35, 50)
    assert estimate.value == pytest.approx(0.7)
    assert accuracy([]) == Estimate(None, None, None, 0)
    assert accuracy([("yes", "no")]) == wilson(0, 1)


def test_win_rate_counts_a_tie_as_half_a_win() -> None:
    estimate = win_rate(b_wins=6, a_wins=2, ties=2)
    assert estimate == wilson(7, 10)
    assert estimate.value == pytest.approx(0.7)
    assert win_rate(0, 0, 4).value == pytest.approx(0.5)
    # B's rate and A's are complements, their intervals mirror each other
    a_side = win_rate(b_wins=2, a_wins=6, ties=2)
    assert a_side.value == pytest.approx(1 - estimate.value)
    assert a_side.low == pytest.approx(1 - estimate.high)


def test_win_rate_of_no_comparisons_is_undefined_and_negative_counts_refused() -> None:
    assert win_rate(0, 0, 0) == Estimate(None, None, None, 0)
    with pytest.raises(ValueError, match="negative"):
        win_rate(1, -1, 0)


# ---- mean absolute error


def test_t_quantiles_match_scipy() -> None:
    for df in [*range(1, 31), 31, 35, 40, 60, 120, 1000, 10**6]:
        assert t_quantile_975(df) == pytest.approx(stats.t.ppf(0.975, df), abs=2e-6), df
    with pytest.raises(ValueError):
        t_quantile_975(0)


numeric_pairs = st.lists(
    st.tuples(
        st.floats(min_value=-10, max_value=10, allow_nan=False),
        st.floats(min_value=-10, max_value=10, allow_nan=False),
    ),
    min_size=2,
    max_size=60,
)


@given(numeric_pairs)
def test_mae_interval_matches_scipy_t(pairs: list[tuple[float, float]]) -> None:
    errors = np.abs(np.array([r for r, _ in pairs]) - np.array([j for _, j in pairs]))
    estimate = mean_absolute_error(pairs)
    assert estimate.count == len(pairs)
    assert estimate.value == pytest.approx(float(errors.mean()), abs=1e-9)
    sem = float(errors.std(ddof=1)) / math.sqrt(len(pairs))
    half = float(stats.t.ppf(0.975, len(pairs) - 1)) * sem
    assert estimate.low == pytest.approx(max(0.0, float(errors.mean()) - half), abs=1e-5)
    assert estimate.high == pytest.approx(float(errors.mean()) + half, abs=1e-5)


def test_mae_on_a_1_to_5_scale_by_hand() -> None:
    pairs = [(5.0, 4.0), (3.0, 3.0), (1.0, 3.0), (4.0, 4.0)]  # errors 1, 0, 2, 0
    estimate = mean_absolute_error(pairs)
    assert estimate.value == pytest.approx(0.75)
    low, high = stats.t.interval(0.95, 3, loc=0.75, scale=stats.sem([1, 0, 2, 0]))
    assert estimate.low == pytest.approx(max(0.0, low), abs=1e-5)
    assert estimate.high == pytest.approx(high, abs=1e-5)


def test_mae_edge_cases() -> None:
    assert mean_absolute_error([]) == Estimate(None, None, None, 0)
    # one pair: a value, no spread to give an interval
    assert mean_absolute_error([(4.0, 2.5)]) == Estimate(1.5, None, None, 1)
    # every error the same: no spread, the interval is the value
    assert mean_absolute_error([(1, 2), (3, 4), (5, 6)]) == Estimate(1.0, 1.0, 1.0, 3)
    assert mean_absolute_error([(2, 2)] * 5) == Estimate(0.0, 0.0, 0.0, 5)


# ---- Spearman's rho


def test_average_ranks_share_ties() -> None:
    assert average_ranks([10, 20, 20, 5, 20]) == [2.0, 4.0, 4.0, 1.0, 4.0]
    assert average_ranks([]) == []


tied_pairs = st.lists(
    st.tuples(st.integers(1, 5).map(float), st.integers(1, 5).map(float)), min_size=2, max_size=60
)


@given(st.one_of(tied_pairs, numeric_pairs))
def test_spearman_matches_scipy_with_ties(pairs: list[tuple[float, float]]) -> None:
    references = [r for r, _ in pairs]
    judged = [j for _, j in pairs]
    estimate = spearman(pairs)
    assert estimate.count == len(pairs)
    if len(set(references)) == 1 or len(set(judged)) == 1:
        assert estimate == Estimate(None, None, None, len(pairs))
        return
    rho = float(stats.spearmanr(references, judged).statistic)
    assert estimate.value == pytest.approx(rho, abs=1e-9)
    n = len(pairs)
    if n < 4:
        assert (estimate.low, estimate.high) == (None, None)
    elif abs(rho) >= 1 - 1e-12:
        assert estimate.low == estimate.high == estimate.value
    else:
        # Fisher's z with the Fieller-Hartley-Pearson standard error sqrt(1.06 / (n - 3))
        half = Z * math.sqrt(1.06 / (n - 3))
        assert estimate.low == pytest.approx(math.tanh(math.atanh(rho) - half), abs=1e-7)
        assert estimate.high == pytest.approx(math.tanh(math.atanh(rho) + half), abs=1e-7)
        assert estimate.low <= estimate.value <= estimate.high


def test_spearman_and_its_interval_by_hand() -> None:
    # ranks 1..5 against 2, 1, 4, 3, 5: d^2 sums to 4, rho = 1 - 6 * 4 / (5 * 24) = 0.8;
    # z = atanh(0.8) = 1.098612, se = sqrt(1.06 / 2) = 0.728011, z +- 1.96 se =
    # [-0.328263, 2.525488], tanh: [-0.31696, 0.98728]
    estimate = spearman([(1.0, 2.0), (2.0, 1.0), (3.0, 4.0), (4.0, 3.0), (5.0, 5.0)])
    assert estimate.value == pytest.approx(0.8)
    assert estimate.low == pytest.approx(-0.31696, abs=1e-5)
    assert estimate.high == pytest.approx(0.98728, abs=1e-5)


def test_spearman_edge_cases() -> None:
    assert spearman([]) == Estimate(None, None, None, 0)
    assert spearman([(3.0, 4.0)]) == Estimate(None, None, None, 1)  # one pair: no correlation
    assert spearman([(1.0, 2.0), (1.0, 5.0), (1.0, 3.0)]) == Estimate(None, None, None, 3)
    assert spearman([(1.0, 2.0), (2.0, 2.0), (3.0, 2.0)]) == Estimate(None, None, None, 3)
    # two or three pairs: a value, no interval
    assert spearman([(1.0, 10.0), (2.0, 20.0)]) == Estimate(1.0, None, None, 2)
    assert spearman([(1.0, 3.0), (2.0, 2.0), (3.0, 1.0)]) == Estimate(-1.0, None, None, 3)
    # a perfect order from 4 pairs on: the interval is the value
    assert spearman([(i, i * i) for i in range(6)]) == Estimate(1.0, 1.0, 1.0, 6)


# ---- measure(kind, pairs)


def test_choice_measures() -> None:
    measures = measure("choice", grant_example())
    assert set(measures) == {"kappa", "accuracy", "count"}
    assert measures["kappa"] == cohen_kappa(grant_example())
    assert measures["accuracy"] == accuracy(grant_example())
    assert measures["count"] == Estimate(50.0, None, None, 50)


def test_numeric_measures() -> None:
    pairs = [(5.0, 4.0), (3.0, 3.0), (1.0, 2.0), (4.0, 5.0)]
    measures = measure("numeric", pairs)
    assert set(measures) == {"mae", "spearman", "count"}
    assert measures["mae"] == mean_absolute_error(pairs)
    assert measures["spearman"] == spearman(pairs)
    assert measures["count"] == Estimate(4.0, None, None, 4)


def test_measures_of_no_pairs_are_undefined_with_a_count_of_0() -> None:
    for kind in ("choice", "numeric"):
        measures = measure(kind, [])
        assert measures.pop("count") == Estimate(0.0, None, None, 0)
        assert all(estimate == Estimate(None, None, None, 0) for estimate in measures.values())


def test_pairs_of_the_wrong_type_and_unknown_kinds_are_refused() -> None:
    with pytest.raises(ValueError, match="pair 1: a choice measure takes two labels"):
        measure("choice", [("yes", "no"), ("yes", 1.0)])
    with pytest.raises(ValueError, match="pair 0: the judged value 'x' is not a finite number"):
        measure("numeric", [(1.0, "x")])
    with pytest.raises(ValueError, match="the reference value nan"):
        spearman([(math.nan, 1.0)])
    with pytest.raises(ValueError, match="not a finite number"):
        mean_absolute_error([(True, 1.0)])
    with pytest.raises(ValueError, match="unknown measure kind 'ordinal'"):
        measure("ordinal", [])
