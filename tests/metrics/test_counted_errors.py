"""Error scores counted in the means as their rule says (``details.counted_as``, set by the
engine for rules with ``output.errors_count_as``): one observation per criterion on
scorer_errors_counted_value, the ok series opened at 0; anything else left out."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from stream.metrics import ScorerMetrics
from stream.models import Scale, ScoreEvent


@pytest.fixture
def metrics() -> ScorerMetrics:
    return ScorerMetrics(CollectorRegistry())


def error_score(details: dict[str, Any] | None) -> ScoreEvent:
    return ScoreEvent(
        score_id="s",
        rule_id="rubric",
        pack="p",
        rule_version=1,
        scope="thread",
        criterion="score",
        target_id="t",
        project_name="proj",
        value=None,
        raw_value=None,
        scale=Scale(min=0, max=1),
        higher_is_better=True,
        status="error",
        status_reason="judge client_error: refused",
        details=details,
    )


def sample(metrics: ScorerMetrics, name: str, criterion: str) -> float | None:
    labels = {"rule": "rubric", "pack": "p", "criterion": criterion, "project": "proj"}
    return metrics.registry.get_sample_value(name, labels)


def test_an_error_counted_as_zero_is_observed_for_each_criterion(metrics: ScorerMetrics) -> None:
    metrics.on_score_published(
        error_score({"counted_as": {"value": 0.0, "criteria": ["score", "passed", "CQ1"]}})
    )
    for criterion in ("score", "passed", "CQ1"):
        assert sample(metrics, "scorer_errors_counted_value_count", criterion) == 1
        assert sample(metrics, "scorer_errors_counted_value_sum", criterion) == 0.0
        assert sample(metrics, "scorer_score_value_count", criterion) == 0.0  # opened, empty
    assert sample(metrics, "scorer_errors_counted_value_count", "gate") is None


@pytest.mark.parametrize(
    "details",
    [
        None,
        {},
        {"counted_as": 0.0},
        {"counted_as": {"value": 0.0}},
        {"counted_as": {"value": "zero", "criteria": ["score"]}},
        {"counted_as": {"value": True, "criteria": ["score"]}},
        {"counted_as": {"value": 0.0, "criteria": "score"}},
    ],
)
def test_an_error_score_without_the_engines_counted_as_is_not_counted(
    metrics: ScorerMetrics, details: dict[str, Any] | None
) -> None:
    metrics.on_score_published(error_score(details))
    assert sample(metrics, "scorer_errors_counted_value_count", "score") is None
    labels = {"rule": "rubric", "pack": "p", "criterion": "score", "project": "proj"}
    assert (
        metrics.registry.get_sample_value("scorer_scores_total", {**labels, "status": "error"}) == 1
    )
