"""bench/score_alerts.py kept from rotting: its pure parts here (the alert's ``for``, the plan of
what is backfilled and what inlined, on the real rule file), and a run on 3 days of a few
series against a real Prometheus (marked ``chaos``: about a minute; ``make test-chaos``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest import require_tool

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import score_alerts
from score_prom import RuleSet, firing, plan_for, references


def test_for_fires_after_the_duration_and_a_gap_resets_it() -> None:
    minute = 60
    # for 2m: pending at 0, firing at the third evaluation in a row (120)
    assert firing([0, 60, 120, 180], 2 * minute) == [(120, 180)]
    # a gap at 120: pending again from 180, firing at 300
    assert firing([0, 60, 180, 240, 300], 2 * minute) == [(300, 300)]
    assert firing([0, 60], 2 * minute) == []
    # for 0: every run is a page of its own
    assert firing([0, 60, 180], 0) == [(0, 60), (180, 180)]


def test_what_the_alert_reads_bare_is_inlined_and_the_rest_backfilled_in_layers() -> None:
    rules = RuleSet(
        "t",
        {
            "a:dir": "max by (rule) (dir)",
            "a:n:1h": "sum by (rule) (increase(n[1h]))",
            "a:base": "sum_over_time(a:n:1h[1d:1h] offset 6h)",
        },
        'a:base{rule!="x"} * on (rule) group_left a:dir > 1',
        120,
    )
    plan, needed = plan_for([rules])
    # after group_left a parenthesis would be its label list: an empty one goes first
    assert plan.inline(rules.alert_expr) == (
        'a:base{rule!="x"} * on (rule) group_left () (max by (rule) (dir)) > 1'
    )
    # a:base reads a:n:1h's recorded samples (a subquery): a layer below it
    assert plan.layers(needed) == [
        {"a:n:1h": "sum by (rule) (increase(n[1h]))"},
        {"a:base": "sum_over_time(a:n:1h[1d:1h] offset 6h)"},
    ]


def test_the_real_rule_files_plan_reads_only_backfilled_series() -> None:
    new = RuleSet.from_yaml("new", score_alerts.NEW_RULES.read_text(), score_alerts.ALERT)
    old = RuleSet.from_yaml("old", score_alerts.OLD_RULES, score_alerts.ALERT)
    plan, needed = plan_for([old, new])
    layers = plan.layers(needed)
    backfilled = {name for layer in layers for name in layer}
    assert needed <= backfilled
    for rule_set in (old, new):
        inlined = plan.inline(rule_set.alert_expr)
        assert {n for n, _ in references(inlined, plan.records)} <= backfilled
    assert old.for_s == 600


@pytest.mark.chaos
@pytest.mark.timeout(600)
def test_a_short_run_of_the_bench_pages_on_a_large_drop(tmp_path: Path) -> None:
    require_tool("promtool")
    require_tool("prometheus")
    args = score_alerts.parse(
        ["--days", "3", "--series", "4", "--detect", "pass80", "--keep", str(tmp_path)]
    )
    result = score_alerts.run(args)
    rows = {
        (name, r["volume"], r["step"]): r for name, det in result["detection"].items() for r in det
    }
    # a 0.2 drop of a pass rate at 1,000 scores a minute: both rules find every one
    for name in ("old", "new"):
        big = rows[name, 1000, 0.2]
        assert big["trials"] == 2 and big["found"] == 2, big
    # the new rule finds a 0.1 drop at 60 a minute within the hour; the old one never does
    assert rows["new", 60, 0.1]["found"] == 2 and rows["new", 60, 0.1]["median_delay_min"] < 60
    assert rows["old", 60, 0.1]["found"] == 0
    assert set(result["false_pages"]) == {"old", "new"}
