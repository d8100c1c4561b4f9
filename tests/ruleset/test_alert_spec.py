"""A rule's ``alert.min_drop`` (design record 48): the smallest drop of its mean score that
pages, in the units of its output scale, exported normalised for the score-drop alert."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from pydantic import ValidationError

from stream.live_rules import rule_min_drops
from stream.metrics import ScorerMetrics
from stream.ruleset.rule_set import RuleSet
from stream.ruleset.schema import RULE_ADAPTER

NUMERIC = {
    "id": "clarity",
    "pack": "demo",
    "version": 1,
    "scope": "trace",
    "kind": "llm_judge",
    "variables": {"reply": "output.reply"},
    "output": {"min": 1, "max": 5},
    "prompt": "Clear? {{reply}}",
}
CHOICE = {**NUMERIC, "id": "resolved", "output": {"type": "choice", "choices": {"yes": 1, "no": 0}}}


def rule(base: dict[str, Any], **alert: Any) -> Any:
    return RULE_ADAPTER.validate_python({**base, "alert": alert} if alert else base)


def test_min_drop_is_in_the_scales_units_and_defaults_to_a_twentieth() -> None:
    assert rule(NUMERIC).alert.normalised(rule(NUMERIC).output) == 0.05
    on_five = rule(NUMERIC, min_drop=0.4)
    assert on_five.alert.normalised(on_five.output) == pytest.approx(0.1)  # 0.4 of 1..5
    pass_rate = rule(CHOICE, min_drop=0.2)
    assert pass_rate.alert.normalised(pass_rate.output) == pytest.approx(0.2)


@pytest.mark.parametrize(
    ("alert", "says"),
    [
        ({"min_drop": 0}, "greater than 0"),
        ({"min_drop": 5}, "more than the whole output scale (1.0..5.0)"),
        ({"min_drops": 0.1}, "Extra inputs are not permitted"),
    ],
)
def test_a_bad_min_drop_says_what_is_wrong(alert: dict[str, Any], says: str) -> None:
    with pytest.raises(
        ValidationError, match=r"(?s)alert.*" + says.replace("(", r"\(").replace(")", r"\)")
    ):
        RULE_ADAPTER.validate_python({**NUMERIC, "alert": alert})


def test_the_worker_exports_each_rules_min_drop_normalised() -> None:
    metrics = ScorerMetrics(CollectorRegistry())
    rules = RuleSet(rules=[rule(NUMERIC, min_drop=0.4), rule(CHOICE)])
    metrics.on_alert_bounds(rule_min_drops(rules))
    sample = metrics.registry.get_sample_value
    labels = {"pack": "demo", "scope": "trace"}
    assert sample("scorer_rule_alert_min_drop", {"rule": "clarity", **labels}) == pytest.approx(0.1)
    assert sample("scorer_rule_alert_min_drop", {"rule": "resolved", **labels}) == 0.05
    metrics.on_alert_bounds(rule_min_drops(RuleSet(rules=[rule(CHOICE)])))  # a reload
    assert sample("scorer_rule_alert_min_drop", {"rule": "clarity", **labels}) is None
