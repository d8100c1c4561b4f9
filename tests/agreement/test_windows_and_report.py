"""The agreement windows (what the measuring agent exports) and the `scorer agreement`
report, on joined pairs built by hand: each pair counts in every window holding its join
time, a pair joined again replaces the first, and the report orders and measures per rule:
labels vs primary, labels vs each shadow, primary vs each shadow, and pairs' win rates."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from stream.agents.agreement_table import JoinIndex
from stream.agreement.join import AgreementJoin, Joined, state_key
from stream.agreement.labels import HumanLabel, Reference
from stream.agreement.measures import measure, win_rate
from stream.agreement.preferences import PairPreference
from stream.agreement.report import build
from stream.agreement.windows import KEPT_S, AgreementWindows, Series
from stream.kafka.mends.partitioning import key_hash

NOW = datetime(2026, 11, 27, 20, 0, tzinfo=UTC)


def pair(
    n: int, reference_value: Any, judged_value: Any, age_s: float = 0.0, **fields: Any
) -> Joined:
    base: dict[str, Any] = {
        "agreement_id": f"a-{n}",
        "target_id": f"t-{n}",
        "rule_id": "resolved",
        "pack": "labelled",
        "criterion": None,
        "project_name": "support",
        "reference": "human",
        "variant": None,
        "model": "gpt-4o-mini",
        "kind": "choice",
        "reference_value": reference_value,
        "judged_value": judged_value,
        "annotator": "ann-1",
        "label_id": f"l-{n}",
        "score_id": f"s-{n}",
        "scored_at": NOW,
        "joined_at": NOW - timedelta(seconds=age_s),
    }
    return Joined(**{**base, **fields})


def test_each_pair_counts_in_every_window_holding_its_join_time() -> None:
    windows = AgreementWindows()
    windows.add(pair(1, "yes", "yes", age_s=60))  # in 1h, 1d, 7d
    windows.add(pair(2, "no", "yes", age_s=7200))  # in 1d, 7d
    windows.add(pair(3, "no", "no", age_s=3 * 86_400))  # in 7d
    windows.add(pair(4, "yes", "no", age_s=8 * 86_400))  # in none
    found = windows.measures(NOW.timestamp())
    series = Series("resolved", "", "gpt-4o-mini", "", "human", "choice")
    assert found[(series, "1h")]["count"].count == 1
    assert found[(series, "1d")]["count"].count == 2
    assert found[(series, "7d")]["count"].count == 3
    assert found[(series, "7d")] == measure("choice", [("yes", "yes"), ("no", "yes"), ("no", "no")])
    assert windows.expired(NOW.timestamp()) == ["a-4"]


def test_a_pair_joined_again_replaces_the_first() -> None:
    windows = AgreementWindows()
    windows.add(pair(1, "no", "yes"))
    windows.add(pair(1, "yes", "yes"))  # the label corrected: the same agreement id
    ((_, estimates),) = [
        (key, value) for key, value in windows.measures(NOW.timestamp()).items() if key[1] == "1h"
    ]
    assert estimates["accuracy"].value == 1.0 and estimates["count"].count == 1
    windows.forget("a-1")
    assert len(windows) == 0 and KEPT_S == 7 * 86_400


def test_the_report_compares_labels_primary_and_shadows_per_rule() -> None:
    pairs = [pair(i, "yes", "yes" if i < 3 else "no") for i in range(4)]
    pairs += [pair(10 + i, "yes", "yes", variant="nano", model="gpt-4.1-nano") for i in range(2)]
    pairs += [
        pair(20, "yes", "no", reference="primary", variant="nano", model="gpt-4.1-nano"),
        pair(21, "no", "no", reference="primary", variant="nano", model="gpt-4.1-nano"),
    ]
    pairs.append(pair(0, "yes", "no"))  # a re-join of a-0: the newest counts
    preferences = [
        PairPreference("compare", "critique", "bank", "prod", "canary", side)
        for side in ["b"] * 6 + ["a"] * 3 + ["tie"]
    ]
    report = build(pairs, preferences)
    titles = [c.title() for c in report.agreement]
    assert sorted(titles) == sorted(
        [
            "labels vs primary (gpt-4o-mini)",
            "labels vs shadow nano (gpt-4.1-nano)",
            "primary vs shadow nano (gpt-4.1-nano)",
        ]
    )
    as_dict = report.as_dict()
    compared = as_dict["rules"]["resolved"]
    assert [(c["reference"], c["variant"]) for c in compared] == [
        ("human", None),
        ("human", "nano"),
        ("primary", "nano"),
    ]
    primary = compared[0]["measures"]
    assert primary["count"]["count"] == 4
    assert primary["accuracy"]["value"] == pytest.approx(2 / 4)  # a-0 re-joined as a miss
    (rate,) = as_dict["pairs"]
    expected = win_rate(6, 3, 1)
    assert (rate["b_wins"], rate["a_wins"], rate["ties"]) == (6, 3, 1)
    assert rate["win_rate_b"] == {
        "value": expected.value,
        "low": expected.low,
        "high": expected.high,
        "count": expected.count,
    }
    lines = report.lines()
    assert lines[0] == "resolved"
    assert lines[1].startswith("  labels vs primary (gpt-4o-mini): n=4; kappa ")
    assert lines[-1].startswith("compare [bank] canary over prod: win rate 0.650 [")
    assert lines[-1].endswith("over 10 pairs (6 won, 3 lost, 1 tied)")


def test_an_empty_report_says_so() -> None:
    assert build([], []).lines() == [
        "no label or shadow judged yet (nothing on the agreement topic)"
    ]


def test_the_join_index_expires_only_the_ticked_partitions_stale_keys() -> None:
    """The join's expiry at one partition's tick reads only that partition's keys (where the
    internal topic's key, the target id, was put) that hold something expired by then, so
    its tombstones go to that partition's changelog and a tick costs what is stale."""
    table: dict[bytes, bytes] = {}
    retention = 100.0
    index = JoinIndex(4, retention)
    targets = [f"t-{i}" for i in range(40)]
    for n, target in enumerate(targets):
        partition = key_hash(target.encode()) % 4
        join = AgreementJoin(index.writing(table, partition), retention)
        join.add_label(*label_for(target), float(n))  # held from time n
    assert set(index.due) == {0, 1, 2, 3}
    assert sum(len(keys) for keys in index.due.values()) == len(targets)
    for partition, keys in index.due.items():
        for key in keys:
            assert index.partition_of(key) == partition
    # at 130, the labels held since before 30 are past the retention; expire one partition
    stale = index.stale(table, 0, 130.0)
    expected = {
        state_key(t, "resolved", None)
        for n, t in enumerate(targets)
        if key_hash(t.encode()) % 4 == 0 and n < 30
    }
    assert set(stale) == expected
    assert AgreementJoin(stale, retention).expire(130.0) == len(expected)
    assert not expected & set(table) and len(table) == len(targets) - len(expected)
    assert not expected & set(index.due[0])
    # rebuilt from the table after a recovery: the owned partitions' keys, with when due
    rebuilt = JoinIndex(4, retention)
    assert rebuilt.rebuild(table.items(), {1, 2}) == sum(len(index.due[p]) for p in (1, 2))
    assert rebuilt.due[1] == index.due[1] and not rebuilt.due[0]
    table[b"not a join key"] = b"{}"
    assert rebuilt.partition_of(b"not a join key") is None


def label_for(target: str) -> tuple[HumanLabel, Reference]:
    label = HumanLabel.model_validate(
        {
            "trace_id": target,
            "rule_id": "resolved",
            "value": 1,
            "annotator": "ana",
            "labelled_at": "2026-11-01T11:00:00Z",
        }
    )
    return label, Reference("numeric", raw_value=1.0)


def test_a_rubrics_criteria_and_its_numeric_score_are_measured_apart() -> None:
    """A rubric's YES/NO criteria (choices) and its aggregate (a number) are two series each:
    never overwritten by one another, never pooled, and the report reads both."""
    pairs = [
        pair(1, "YES", "YES", criterion="CQ1"),
        pair(2, "NO", "YES", criterion="CQ1"),
        pair(3, 0.8, 0.75, criterion="score", kind="numeric"),
        pair(4, 0.2, 0.5, criterion="score", kind="numeric"),
    ]
    windows = AgreementWindows()
    for p in pairs:
        windows.add(p)
    found = {(s.criterion, s.kind, w): m for (s, w), m in windows.measures(NOW.timestamp()).items()}
    assert found[("CQ1", "choice", "1h")]["accuracy"].value == 0.5
    assert found[("score", "numeric", "1h")]["mae"].value == pytest.approx((0.05 + 0.3) / 2)
    report = build(pairs, [])
    assert [c.title() for c in sorted(report.agreement, key=lambda c: c.criterion)] == [
        "labels vs primary (gpt-4o-mini) on CQ1",
        "labels vs primary (gpt-4o-mini) on score",
    ]
    assert {c["criterion"] for c in report.as_dict()["rules"]["resolved"]} == {"CQ1", "score"}
