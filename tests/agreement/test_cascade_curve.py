"""The cascade's curve over confidence cuts in `scorer agreement`, on small audited sets whose
figures are worked by hand: at each cut, the share escalated to the judge, the agreement with
the judge of what the cascade would publish, and of the first tier's accepted verdicts alone."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson
import pytest

from stream.agreement.cascade_curve import CUTS, cascade_curves
from stream.agreement.join import Joined
from stream.agreement.measures import cohen_kappa, mean_absolute_error, wilson
from stream.agreement.report import build, report_json

NOW = datetime(2026, 11, 27, 20, 0, tzinfo=UTC)


def audited(n: int, judge: Any, first: Any, confidence: float | None, **fields: Any) -> Joined:
    """The audit's pair n: the rule's judge (the reference) against the first tier."""
    base: dict[str, Any] = {
        "agreement_id": f"a-{n}",
        "target_id": f"t-{n}",
        "rule_id": "resolved",
        "pack": "support",
        "criterion": None,
        "project_name": "support",
        "reference": "primary",
        "variant": "cascade",
        "model": "gpt-6-luna",
        "kind": "choice" if isinstance(judge, str) else "numeric",
        "reference_value": judge,
        "judged_value": first,
        "judged_confidence": confidence,
        "score_id": f"s-{n}",
        "reference_score_id": f"p-{n}",
        "scored_at": NOW,
        "joined_at": NOW,
    }
    return Joined(**{**base, **fields})


# (the judge's label, the first tier's, its confidence): 5 yes and 5 no by the judge; the
# first tier disagrees at 0.88, 0.65 and 0.55
CHOICES = [
    ("yes", "yes", 0.99),
    ("yes", "yes", 0.95),
    ("no", "no", 0.92),
    ("no", "no", 0.90),
    ("yes", "no", 0.88),
    ("no", "no", 0.75),
    ("yes", "yes", 0.70),
    ("no", "yes", 0.65),
    ("yes", "no", 0.55),
    ("no", "no", 0.40),
]


def choice_curve() -> dict[float, Any]:
    pairs = [audited(n, *row) for n, row in enumerate(CHOICES)]
    (curve,) = cascade_curves(pairs)
    assert (curve.rule, curve.model, curve.kind, curve.measure) == (
        "resolved",
        "gpt-6-luna",
        "choice",
        "kappa",
    )
    assert curve.audited == 10
    assert [p.cut for p in curve.points] == list(CUTS)
    return {p.cut: p for p in curve.points}


def test_the_escalated_share_is_the_audited_targets_under_the_cut_with_its_interval() -> None:
    points = choice_curve()
    below = {0.5: 1, 0.6: 2, 0.7: 3, 0.8: 5, 0.85: 5, 0.9: 6, 0.95: 8, 0.99: 9}
    for cut, n in below.items():
        assert points[cut].escalated == wilson(n, 10), cut
    assert points[0.85].escalated.value == 0.5  # 0.99 .. 0.88 accepted, 0.75 .. 0.40 not
    assert points[0.9].escalated.value == 0.6  # a confidence at the cut is accepted


def test_what_would_be_published_is_the_first_tier_at_or_over_the_cut_else_the_judge() -> None:
    points = choice_curve()
    # at 0.85 only the 0.88 disagreement is published: 9 of 10 agree, the judge 5 yes and
    # 5 no, the published 4 yes and 6 no: p_e = (5*4 + 5*6) / 100 = 0.5, kappa 0.8
    assert points[0.85].published.value == pytest.approx(0.8)
    published = [(judge, judge) for judge, _, _ in CHOICES]
    published[4] = ("yes", "no")
    assert points[0.85].published == cohen_kappa(published)
    # at 0.5 the three disagreements are published: p_o 0.7, p_e 0.5, kappa 0.4
    assert points[0.5].published.value == pytest.approx(0.4)
    # at 0.9 and above, every disagreement goes to the judge: kappa 1
    for cut in (0.9, 0.95, 0.99):
        assert points[cut].published.value == pytest.approx(1.0), cut
    assert points[0.5].published.count == 10


def test_the_accepted_verdicts_agreement_with_the_judge_and_their_count() -> None:
    points = choice_curve()
    # at 0.85: 5 accepted, 4 agree; the judge 3 yes 2 no, the first tier 2 yes 3 no:
    # p_e = (3*2 + 2*3) / 25 = 0.48, kappa (0.8 - 0.48) / 0.52 = 8/13
    assert points[0.85].accepted.value == pytest.approx(8 / 13)
    assert points[0.85].accepted.count == 5
    accepted = [(j, f) for j, f, c in CHOICES if c >= 0.85]
    assert points[0.85].accepted == cohen_kappa(accepted)
    # at 0.5: 9 accepted, 6 agree, p_e = (5*4 + 4*5) / 81: kappa (54 - 40) / (81 - 40)
    assert points[0.5].accepted.value == pytest.approx(14 / 41)
    assert points[0.9].accepted.value == pytest.approx(1.0)
    # at 0.99 one verdict is accepted, yes against yes: kappa undefined
    assert (points[0.99].accepted.value, points[0.99].accepted.count) == (None, 1)


def test_a_numeric_rules_curve_is_the_mean_absolute_error() -> None:
    rows = [(4.0, 4.0, 0.95), (2.0, 3.0, 0.9), (5.0, 3.0, 0.6), (1.0, 1.0, 0.3)]
    (curve,) = cascade_curves([audited(n, *row) for n, row in enumerate(rows)], cuts=(0.5, 0.85))
    assert curve.measure == "mae"
    at = {p.cut: p for p in curve.points}
    assert at[0.85].escalated.value == 0.5
    assert at[0.85].accepted.value == pytest.approx(0.5)  # errors 0 and 1
    assert at[0.85].published.value == pytest.approx(0.25)  # errors 0, 1, 0, 0
    assert at[0.85].accepted == mean_absolute_error([(4.0, 4.0), (2.0, 3.0)])
    assert at[0.5].escalated.value == 0.25
    assert at[0.5].accepted.value == pytest.approx(1.0)  # errors 0, 1, 2
    assert at[0.5].published.value == pytest.approx(0.75)  # errors 0, 1, 2, 0


def test_only_the_cascades_audited_pairs_count_one_without_a_confidence_escalated() -> None:
    pairs = [audited(n, *row) for n, row in enumerate(CHOICES)]
    unread = audited(20, "yes", "no", None)  # its first tier's tokens could not be read
    (with_unread,) = cascade_curves([*pairs, unread])
    assert with_unread.audited == 11
    for point in with_unread.points:  # escalated at every cut: the judge's verdict published
        assert point.escalated.value is not None
        assert point.escalated.value * 11 == pytest.approx(
            sum(1 for *_, c in CHOICES if c < point.cut) + 1
        )
    assert cascade_curves([unread]) == []  # no confidence ever read: no curve
    pairs += [
        audited(21, "yes", "no", 0.99, variant="nano"),  # another shadow
        audited(22, "yes", "no", 0.99, reference="human", label_id="l-22"),  # a label
        audited(23, "yes", "no", 0.99, variant=None, reference="human", label_id="l-23"),
    ]
    (curve,) = cascade_curves(pairs)
    assert curve.audited == 10
    two_models = cascade_curves([*pairs, audited(30, "yes", "yes", 0.97, model="gpt-7")])
    assert [(c.model, c.audited) for c in two_models] == [("gpt-6-luna", 10), ("gpt-7", 1)]
    assert cascade_curves(pairs[10:]) == []


def test_the_report_prints_the_curve_under_its_rule_and_in_json() -> None:
    pairs = [audited(n, *row) for n, row in enumerate(CHOICES)]
    pairs.append(audited(4, "yes", "yes", 0.88))  # a-4 joined again: the newest counts
    report = build(pairs, [])
    lines = report.lines()
    assert lines[:2] == ["resolved", lines[1]]
    assert lines[1].startswith("  primary vs shadow cascade (gpt-6-luna): n=10; kappa ")
    assert lines[2] == "  cascade by confidence cut (gpt-6-luna), over 10 audited targets:"
    assert lines[3].split() == [
        "cut",
        "escalated",
        "published",
        "kappa",
        "accepted",
        "kappa",
        "(n)",
    ]
    rows = {line.split()[0]: line for line in lines[4:]}
    assert list(rows) == ["0.50", "0.60", "0.70", "0.80", "0.85", "0.90", "0.95", "0.99"]
    # with a-4 now agreeing, at 0.85 all 5 accepted agree (3 yes, 2 no): kappa 1
    assert rows["0.85"].split() == [
        "0.85",
        "0.500",
        *_interval(wilson(5, 10)),
        "1.000",
        "[1.000,",
        "1.000]",
        "1.000",
        "[1.000,",
        "1.000]",
        "(5)",
    ]
    assert rows["0.99"].endswith("undefined (1)")
    as_json = orjson.loads(report_json(report))
    (curve,) = as_json["cascades"]
    assert (curve["rule"], curve["model"], curve["measure"], curve["audited"]) == (
        "resolved",
        "gpt-6-luna",
        "kappa",
        10,
    )
    at = {c["cut"]: c for c in curve["cuts"]}
    assert at[0.85]["escalated"] == {
        "value": 0.5,
        "low": wilson(5, 10).low,
        "high": wilson(5, 10).high,
        "count": 10,
    }
    assert at[0.85]["accepted"]["count"] == 5
    assert at[0.5]["published"]["value"] == pytest.approx(0.6)  # 0.65 and 0.55 still wrong


def test_a_report_without_cascade_pairs_has_no_curve() -> None:
    report = build([audited(1, "yes", "no", 0.9, variant="nano")], [])
    assert report.as_dict()["cascades"] == []
    assert not any("cascade by confidence cut" in line for line in report.lines())


def _interval(e: Any) -> list[str]:
    return [f"[{e.low:.3f},", f"{e.high:.3f}]"]
