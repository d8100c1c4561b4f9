"""A rule's ``agreement:`` bound (design record 30): the measure must fit the rule's output
(kappa or accuracy for a choice rule, mae or spearman for a numeric or fan-out one), its
threshold lie in the measure's range; the worker exports each bound for the alert."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from fixtures import RULES_DIR
from prometheus_client import CollectorRegistry
from pydantic import ValidationError

from stream.errors import RuleFileError
from stream.live_rules import agreement_thresholds
from stream.metrics import ScorerMetrics
from stream.ruleset.loader import load_rules
from stream.ruleset.schema import RULE_ADAPTER, RuleSet

CHOICE = {
    "id": "resolved",
    "pack": "demo",
    "version": 1,
    "scope": "trace",
    "kind": "llm_judge",
    "variables": {"reply": "output.reply"},
    "output": {"type": "choice", "choices": {"yes": 1.0, "no": 0.0}},
    "prompt": "Resolved? {{reply}}",
}
NUMERIC = {**CHOICE, "id": "clarity", "output": {"min": 1, "max": 5}}


def rule(base: dict[str, Any], agreement: dict[str, Any]) -> Any:
    return RULE_ADAPTER.validate_python({**base, "agreement": agreement})


def test_a_bound_fits_the_rules_output() -> None:
    assert rule(CHOICE, {"measure": "kappa", "threshold": 0.6}).agreement.direction == "min"
    spec = rule(NUMERIC, {"measure": "mae", "threshold": 0.5, "min_labels": 10}).agreement
    assert (spec.direction, spec.min_labels, spec.window) == ("max", 10, "1d")
    with pytest.raises(ValidationError, match="does not measure a choice rule: use kappa or"):
        rule(CHOICE, {"measure": "mae", "threshold": 0.5})
    with pytest.raises(ValidationError, match="does not measure a numeric rule: use mae or"):
        rule(NUMERIC, {"measure": "kappa", "threshold": 0.5})


@pytest.mark.parametrize(
    ("measure", "threshold", "said"),
    [
        ("kappa", 1.5, "between -1 and 1"),
        ("accuracy", -0.1, "between 0 and 1"),
        ("mae", -1.0, "0 or more"),
    ],
)
def test_a_threshold_lies_in_its_measures_range(measure: str, threshold: float, said: str) -> None:
    base = NUMERIC if measure == "mae" else CHOICE
    with pytest.raises(ValidationError, match=said):
        rule(base, {"measure": measure, "threshold": threshold})


def test_the_bounds_are_exported_for_the_alert() -> None:
    ruleset = RuleSet(
        [
            rule(CHOICE, {"measure": "kappa", "threshold": 0.6, "min_labels": 30}),
            rule(NUMERIC, {"measure": "mae", "threshold": 0.5, "window": "7d"}),
            RULE_ADAPTER.validate_python({**CHOICE, "id": "unbound"}),
        ]
    )
    bounds = agreement_thresholds(ruleset)
    assert bounds == [
        ("resolved", "kappa", "1d", "min", 0.6, 30),
        ("clarity", "mae", "7d", "max", 0.5, 30),
    ]
    registry = CollectorRegistry()
    metrics = ScorerMetrics(registry)
    metrics.on_agreement_thresholds(bounds)
    threshold = registry.get_sample_value(
        "scorer_judge_agreement_threshold",
        {"rule": "clarity", "measure": "mae", "window": "7d", "direction": "max"},
    )
    assert threshold == 0.5
    needed = {"rule": "resolved", "window": "1d"}
    assert registry.get_sample_value("scorer_judge_agreement_min_labels", needed) == 30
    metrics.on_agreement_thresholds([])  # a reload that dropped them: the series go
    assert registry.get_sample_value("scorer_judge_agreement_min_labels", needed) is None


def test_a_rubric_takes_no_bound(tmp_path: Path) -> None:
    """A rubric's scores are measured per criterion; the bound and its alert are for
    llm_judge rules: a rubric that names one is refused at load, saying so."""
    pack = tmp_path / "critique"
    shutil.copytree(RULES_DIR / "critique", pack, ignore=shutil.ignore_patterns("__pycache__"))
    path = pack / "response_critique.yaml"
    path.write_text(path.read_text() + "\nagreement: {measure: mae, threshold: 0.5}\n")
    with pytest.raises(RuleFileError) as refused:
        load_rules(tmp_path, ["critique"])
    assert "agreement: is for llm_judge rules" in str(refused.value.problems)
