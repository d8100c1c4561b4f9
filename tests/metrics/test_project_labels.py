"""The score metrics' ``project`` label: configured projects kept, the rest folded into
``other``, a bounded default when nothing is configured, and thread, session and pair scores
labelled with the project they carry."""

from __future__ import annotations

import logging

import pytest
from fixtures import RULES_DIR, as_trace, fretcoach_rules, hub_trace, scorer, settings
from prometheus_client import CollectorRegistry

from stream.metrics import OTHER, ProjectLabels, ScorerMetrics
from stream.metrics.projects import DEFAULT_PROJECT_LIMIT
from stream.models import Scale, ScoreEvent
from stream.ruleset.filters import PackFilter
from stream.ruleset.loader import load_rules
from stream.threads.events import SessionEvent
from stream.threads.processor import ThreadProcessor
from stream.threads.router import ThreadRouter
from stream.threads.state import ThreadClose, ThreadLimits

ARRIVAL = 1_800_000_000.0


def score(project: str, value: float = 0.9, rule: str = "r") -> ScoreEvent:
    return ScoreEvent(
        score_id=f"{rule}-{project}-{value}",
        rule_id=rule,
        pack="p",
        rule_version=1,
        scope="trace",
        target_id="t",
        project_name=project,
        value=value,
        raw_value=value,
        scale=Scale(min=0, max=1),
        higher_is_better=True,
        status="ok",
    )


def projects_on(metrics: ScorerMetrics, name: str = "scorer_scores_total") -> set[str]:
    """The project label values of ``name``'s series."""
    return {
        sample.labels["project"]
        for family in metrics.registry.collect()
        for sample in family.samples
        if sample.name == name
    }


def counted(metrics: ScorerMetrics, name: str, **labels: str) -> float:
    return sum(
        sample.value
        for family in metrics.registry.collect()
        for sample in family.samples
        if sample.name == name and labels.items() <= sample.labels.items()
    )


# -- the label --------------------------------------------------------------------------


def test_configured_projects_are_kept_and_every_other_is_folded_into_other() -> None:
    labels = ProjectLabels(["shop", "bank"])
    assert [labels.label(p) for p in ("shop", "bank", "blog", "default", "shop")] == [
        "shop",
        "bank",
        OTHER,
        OTHER,
        "shop",
    ]
    assert labels.kept == {"shop", "bank"}


def test_a_configured_list_ignores_the_limit_and_the_rules_projects() -> None:
    labels = ProjectLabels([], named=["named-by-a-rule"], limit=50)
    labels.name(["named-on-reload"])
    assert labels.label("named-by-a-rule") == OTHER
    assert labels.label("named-on-reload") == OTHER
    assert labels.label("anything") == OTHER
    assert labels.kept == set()


def test_unset_the_first_projects_up_to_the_limit_are_kept_by_name() -> None:
    labels = ProjectLabels(limit=2)
    assert [labels.label(p) for p in ("a", "b", "a", "c", "b", "d")] == [
        "a",
        "b",
        "a",
        OTHER,
        "b",
        OTHER,
    ]


def test_unset_the_projects_the_rules_name_are_kept_beyond_the_limit() -> None:
    labels = ProjectLabels(named=["prod"], limit=1)
    assert labels.label("staging") == "staging"  # the one first-come place
    assert labels.label("dev") == OTHER
    assert labels.label("prod") == "prod"  # named by a rule: not counted in the limit
    labels.name(["canary"])  # a reloaded rule set names another
    assert labels.label("canary") == "canary"


def test_the_default_is_automatic_with_ten_projects() -> None:
    labels = ProjectLabels()
    assert not labels.configured
    kept = [labels.label(f"project-{i}") for i in range(DEFAULT_PROJECT_LIMIT + 1)]
    assert DEFAULT_PROJECT_LIMIT == 10
    assert kept[:-1] == [f"project-{i}" for i in range(10)] and kept[-1] == OTHER


def test_a_negative_limit_is_refused() -> None:
    with pytest.raises(ValueError, match="0 or more"):
        ProjectLabels(limit=-1)


def test_folding_is_said_once_naming_the_setting(caplog: pytest.LogCaptureFixture) -> None:
    labels = ProjectLabels(limit=1)
    with caplog.at_level(logging.INFO, logger="stream.metrics.projects"):
        for project in ("a", "b", "c", "d"):
            labels.label(project)
    (warning,) = caplog.records
    assert warning.levelno == logging.WARNING
    assert "'b'" in warning.getMessage() and "SCORER_METRIC_PROJECTS" in warning.getMessage()


def test_many_distinct_projects_keep_the_series_and_the_memory_bounded() -> None:
    metrics = ScorerMetrics(CollectorRegistry())
    metrics.label_projects(ProjectLabels(named=["prod"], limit=3))
    for i in range(5000):
        metrics.on_score_published(score(f"tenant-{i}", value=0.1 if i % 2 else 0.9))
    metrics.on_score_published(score("prod"))
    expected = {"tenant-0", "tenant-1", "tenant-2", "prod", OTHER}
    assert projects_on(metrics) == expected
    assert projects_on(metrics, "scorer_score_value_count") == expected
    assert projects_on(metrics, "scorer_low_scores_total") == expected
    assert metrics.projects.kept == {"tenant-0", "tenant-1", "tenant-2", "prod"}
    # nothing is lost: the folded scores are counted under other
    assert counted(metrics, "scorer_scores_total", project=OTHER) == 4997
    assert counted(metrics, "scorer_scores_total") == 5001


def test_two_workers_with_the_same_configuration_label_alike_whatever_order_they_see() -> None:
    """Series from several workers line up: a configured list does not depend on arrival."""
    one, two = ProjectLabels(["shop", "bank"]), ProjectLabels(["shop", "bank"])
    seen = [f"p{i}" for i in range(30)] + ["shop", "bank"]
    first = {p: one.label(p) for p in seen}
    second = {p: two.label(p) for p in reversed(seen)}
    assert first == second


# -- the worker's settings ----------------------------------------------------------------


def test_the_settings_default_to_automatic_and_read_a_json_list(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert settings().metric_projects is None
    assert settings().metric_project_limit == DEFAULT_PROJECT_LIMIT
    monkeypatch.setenv("SCORER_METRIC_PROJECTS", '["shop", "bank"]')
    monkeypatch.setenv("SCORER_METRIC_PROJECT_LIMIT", "0")
    configured = settings()
    assert configured.metric_projects == ["shop", "bank"]
    assert configured.metric_project_limit == 0


def test_the_rule_sets_projects_are_those_its_filters_name_after_pack_filters() -> None:
    rules = fretcoach_rules()
    assert rules.projects == []  # the shipped packs name no project
    filtered = rules.with_pack_filters({"fretcoach": PackFilter(projects=["prod", "canary"])})
    assert filtered.projects == ["canary", "prod"]


# -- thread, session and pair scores carry a project ----------------------------------------


def thread_processor() -> ThreadProcessor:
    return ThreadProcessor(
        {},
        gaps={"conversation": 900.0, "session": 900.0, "pair": 600.0},
        limits=ThreadLimits(),
        retention_s=3600.0,
        sessions_topic="coaching-sessions",
        clock=lambda: ARRIVAL,
    )


def conversation_turn(n: int, project: str, end: bool = False) -> dict:
    document = hub_trace()
    document.update(id=f"trace-{n}", thread_id="conv-shop", project_name=project)
    if end:
        document["metadata"] = {**document.get("metadata", {}), "conversation_finished": True}
    return document


async def test_a_thread_score_carries_its_traces_project_onto_the_metrics() -> None:
    rules = fretcoach_rules()
    router, processor = ThreadRouter(rules), thread_processor()
    closes: list[ThreadClose] = []
    for n, end in ((1, False), (2, True)):
        document = conversation_turn(n, "shop", end)
        event = router.from_trace(as_trace(document), document, "llm-traces", ARRIVAL + n)
        assert event is not None and event.project_name == "shop"
        closes += processor.apply(0, event)
    (close,) = closes
    assert close.project_name == "shop"

    result = await scorer(ruleset=rules).score_thread(close)  # no judge: skipped scores
    scores = [s for s in result.scores if s.scope == "thread"]
    assert {s.rule_id for s in scores} == {
        "hub_conversational_coherence",
        "hub_user_frustration_score",
    }
    assert {s.project_name for s in scores} == {"shop"}

    metrics = ScorerMetrics(CollectorRegistry())
    metrics.label_projects(ProjectLabels(["shop"]))
    for published in scores:
        metrics.on_score_published(published)
    assert projects_on(metrics) == {"shop"}
    assert (
        counted(metrics, "scorer_scores_total", rule="hub_conversational_coherence", project="shop")
        == 1
    )


def test_a_session_score_is_labelled_with_the_sessions_project() -> None:
    router = ThreadRouter(fretcoach_rules())
    event = SessionEvent.model_validate(
        {"session_id": "s-1", "type": "end", "project_name": "studio-eu"}
    )
    routed = router.from_session(event, ARRIVAL)
    assert routed.project_name == "studio-eu"
    (close,) = thread_processor().apply(0, routed)
    assert close.project_name == "studio-eu"


def pair_trace(trace_id: str, variant: str) -> dict:
    return {
        "id": trace_id,
        # the canary reports to its own project
        "project_name": "assistant-canary" if variant == "B" else "assistant",
        "name": "chat",
        "input": {"messages": [{"role": "user", "content": "Reverse a string in Python."}]},
        "output": {"messages": [{"role": "assistant", "content": f"answer {variant}"}]},
        "metadata": {"comparison_id": "cmp-1", "variant": variant},
    }


async def test_a_pairs_preference_is_labelled_with_the_project_of_response_a() -> None:
    """B (a canary in its own project) comes first; the pair is filed under A's project."""
    rules = load_rules(RULES_DIR, ["critique"])
    router, processor = ThreadRouter(rules), thread_processor()
    closes: list[ThreadClose] = []
    for trace_id, variant in (("t-b", "B"), ("t-a", "A")):
        document = pair_trace(trace_id, variant)
        event = router.pair_from_trace(as_trace(document), document, "llm-traces", ARRIVAL)
        assert event is not None
        closes += processor.apply(0, event)
    (close,) = closes
    result = await scorer(ruleset=rules).score_thread(close)  # no judge: one skipped score
    (preference,) = result.scores
    assert (preference.scope, preference.project_name) == ("pair", "assistant")

    metrics = ScorerMetrics(CollectorRegistry())
    metrics.on_score_published(preference)
    assert projects_on(metrics) == {"assistant"}
