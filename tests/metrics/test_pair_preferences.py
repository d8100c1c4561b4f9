"""A/B win rates' counts: every comparison preference published ok is counted by the side the
judge preferred (a, b, tie) under its rule, project and variant pair; the responses' ratings,
an error preference and a shadow judge's preference are not."""

from __future__ import annotations

import asyncio
import functools
from typing import Any

import orjson
import pytest
from fixtures import critique_rules, pair_closes, scorer
from prometheus_client import CollectorRegistry
from scripted_judge import MockJudge

from stream.agreement.preferences import pair_preference, preferred_side
from stream.metrics import ProjectLabels, ScorerMetrics
from stream.models import ScoreEvent
from stream.ruleset.schema import ComparisonRule, RuleSet
from stream.threads.state import ThreadClose


@functools.cache
def critique() -> RuleSet:
    return critique_rules("fixed")  # the judge's answers are scripted by slot


def comparison() -> ComparisonRule:
    (rule,) = [r for r in critique().rules if isinstance(r, ComparisonRule)]
    return rule


def pair_close(key: str, project: str = "code-assistant") -> ThreadClose:
    """The close of pair ``key`` (its A trace in ``project``), as the thread agent hands it."""
    [close] = pair_closes(critique(), [key], project=project)
    return close


def answer(preference: Any) -> str:
    rated = {c.id: {"reason": "fine", "rating": 3} for c in comparison().criteria}
    return orjson.dumps(
        {
            "prompt_summary": "reverse a string",
            "response_a": {**rated, "overall_quality": "Excellent"},
            "response_b": {**rated, "overall_quality": "Excellent"},
            "preference": preference,
            "justification": "as scripted",
            "key_differentiators": ["none"],
        }
    ).decode()


def scored_pair(preference: Any, key: str, project: str = "code-assistant") -> list[ScoreEvent]:
    """Every score a comparison publishes for pair ``key`` judged with ``preference``."""
    with MockJudge() as judge:
        judge.script("", answer(preference))
        result = asyncio.run(
            scorer(judge.base_url, critique()).score_thread(pair_close(key, project))
        )
    return result.scores


def preference_of(scores: list[ScoreEvent]) -> ScoreEvent:
    (preference,) = [s for s in scores if s.criterion == "preference"]
    return preference


@pytest.fixture
def metrics() -> ScorerMetrics:
    return ScorerMetrics(CollectorRegistry())


def counted(metrics: ScorerMetrics, preferred: str, project: str = "code-assistant") -> float:
    labels = {
        "rule": "response_comparison",
        "pack": "critique",
        "project": project,
        "variant_a": "A",
        "variant_b": "B",
        "preferred": preferred,
    }
    return metrics.registry.get_sample_value("scorer_pair_preferences_total", labels) or 0.0


def test_published_preferences_are_counted_by_the_side_preferred(metrics: ScorerMetrics) -> None:
    # +2, +1: A; 0: a tie; -1, -2, -1: B. Every score of each pair is published (the six
    # ratings and overall of both responses too: they are not preferences)
    for n, preference in enumerate([2, 1, 0, -1, -2, -1]):
        scores = scored_pair(preference, f"cmp-{n}")
        assert len(scores) > 1
        for score in scores:
            metrics.on_score_published(score)
    assert (counted(metrics, "a"), counted(metrics, "b"), counted(metrics, "tie")) == (2, 3, 1)


def test_a_shadow_judges_preference_and_an_error_preference_are_not_counted(
    metrics: ScorerMetrics,
) -> None:
    primary = preference_of(scored_pair(-1, "cmp-1"))
    shadow = primary.model_copy(update={"variant": "canary-judge", "raw_value": 2.0})
    failed = preference_of(scored_pair(7, "cmp-2"))  # outside -2..+2: an error preference
    assert (failed.status, primary.status) == ("error", "ok")
    for score in (shadow, failed, primary):
        metrics.on_score_published(score)
    assert (counted(metrics, "a"), counted(metrics, "b"), counted(metrics, "tie")) == (0, 1, 0)


def test_the_pairs_project_is_bounded_like_the_score_metrics(metrics: ScorerMetrics) -> None:
    metrics.label_projects(ProjectLabels(["code-assistant"]))
    for n, project in enumerate(["code-assistant", "someone-elses-project"]):
        metrics.on_score_published(preference_of(scored_pair(0, f"cmp-{n}", project)))
    assert counted(metrics, "tie") == 1
    assert counted(metrics, "tie", project="other") == 1


def test_a_preference_reads_as_its_variant_pair_and_side() -> None:
    preference = pair_preference(preference_of(scored_pair(-2, "cmp-9")))
    assert preference is not None
    assert (preference.variant_a, preference.variant_b, preference.preferred) == ("A", "B", "b")
    assert [preferred_side(v) for v in (2.0, 0.5, 0.0, -0.5, -2.0)] == ["a", "a", "tie", "b", "b"]
    ratings = [s for s in scored_pair(1, "cmp-8") if s.criterion != "preference"]
    assert ratings and all(pair_preference(s) is None for s in ratings)
