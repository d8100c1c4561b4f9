"""Rule filters (which traces a rule applies to) and deterministic sampling."""

from __future__ import annotations

from typing import Any

import pytest
from fixtures import fretcoach_rules
from pydantic import ValidationError

from stream.errors import ScorerError
from stream.models import Trace
from stream.ruleset.filters import PackFilter, RuleFilter, sampled
from stream.ruleset.loader import deployment_rules
from stream.settings import Settings

TRACE = Trace(
    id="t-1",
    project_name="fretcoach",
    name="hub-coach-chat",
    tags=["prod", "hub", "v2"],
    metadata={"env": "prod", "user": {"tier": "pro"}, "flags": ["beta"]},
)


def test_an_empty_filter_matches_every_trace_and_topic() -> None:
    assert RuleFilter().matches(TRACE)
    assert RuleFilter().matches(Trace(id="bare"), topic="anything")


@pytest.mark.parametrize(
    ("conditions", "topic", "expected"),
    [
        ({"topics": ["traces"]}, "traces", True),
        ({"topics": ["traces"]}, "other", False),
        ({"topics": ["traces"]}, None, False),
        ({"projects": ["fretcoach", "x"]}, None, True),
        ({"projects": ["x"]}, None, False),
        ({"trace_names": ["hub-coach-chat"]}, None, True),
        ({"trace_names": ["studio-live-coach"]}, None, False),
        ({"tags_any": ["dev", "hub"]}, None, True),
        ({"tags_any": ["dev"]}, None, False),
        ({"tags_all": ["prod", "hub"]}, None, True),
        ({"tags_all": ["prod", "dev"]}, None, False),
        ({"metadata": {"env": "prod", "user.tier": "pro"}}, None, True),
        ({"metadata": {"user.tier": "free"}}, None, False),
        ({"metadata": {"missing.path": None}}, None, True),  # an absent path reads as null
        ({"metadata": {"contains(flags, 'beta')": True}}, None, True),
        ({"projects": ["fretcoach"], "tags_all": ["prod"], "topics": ["t"]}, "u", False),
    ],
)
def test_every_given_condition_must_hold(
    conditions: dict[str, Any], topic: str | None, expected: bool
) -> None:
    assert RuleFilter(**conditions).matches(TRACE, topic=topic) is expected


def test_unknown_keys_and_bad_metadata_paths_are_rejected() -> None:
    with pytest.raises(ValidationError, match="extra"):
        RuleFilter.model_validate({"tags": ["prod"]})
    with pytest.raises(ValidationError, match=r"user\.\["):
        RuleFilter(metadata={"user.[": "x"})


def test_sampling_is_deterministic_per_rule_and_target() -> None:
    ids = [f"trace-{i}" for i in range(200)]
    first = [sampled("rule-a", 0.5, t) for t in ids]
    assert first == [sampled("rule-a", 0.5, t) for t in ids]
    assert first != [sampled("rule-b", 0.5, t) for t in ids]  # each rule samples its own set


def test_sampling_rate_zero_takes_nothing_and_one_takes_everything() -> None:
    ids = [f"trace-{i}" for i in range(500)]
    assert not any(sampled("r", 0.0, t) for t in ids)
    assert all(sampled("r", 1.0, t) for t in ids)


@pytest.mark.parametrize("rate", [0.1, 0.25, 0.5, 0.9])
def test_sampling_takes_roughly_the_rate(rate: float) -> None:
    n = 10_000
    taken = sum(sampled("rule", rate, f"trace-{i}") for i in range(n))
    assert abs(taken / n - rate) < 0.03


def test_a_deployment_maps_a_packs_trace_names_and_projects_without_editing_its_files() -> None:
    shipped = fretcoach_rules()
    mapped = shipped.with_pack_filters(
        {
            "fretcoach": PackFilter(
                projects=["prod-coach"],
                trace_names={"hub-coach-chat": ["hub-chat-v2", "hub-coach-chat"]},
            )
        }
    )
    hub = {r.id: r for r in mapped.rules}["hub_answer_correctness"]
    live = {r.id: r for r in mapped.rules}["studio_live_coach_feedback_quality"]
    assert hub.filter.trace_names == ["hub-chat-v2", "hub-coach-chat"]
    assert live.filter.trace_names == ["studio-live-coach"]  # not named: as shipped
    assert hub.filter.projects == live.filter.projects == ["prod-coach"]
    assert hub.filter.matches(Trace(id="t", name="hub-chat-v2", project_name="prod-coach"))
    assert not hub.filter.matches(Trace(id="t", name="hub-chat-v2", project_name="fretcoach"))
    assert mapped.digest != shipped.digest  # the loaded set is not the shipped one
    assert {r.id: r.filter for r in shipped.rules}["hub_answer_correctness"].projects is None


def test_pack_filters_for_a_pack_not_loaded_are_an_error() -> None:
    with pytest.raises(ScorerError, match=r"not loaded: \['fretcoch'\]"):
        fretcoach_rules().with_pack_filters({"fretcoch": PackFilter(projects=["x"])})


def test_pack_filters_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCORER_PACKS", '["fretcoach"]')
    monkeypatch.setenv(
        "SCORER_PACK_FILTERS", '{"fretcoach": {"trace_names": {"studio-live-coach": ["live"]}}}'
    )
    ruleset = deployment_rules(Settings())
    live = {r.id: r for r in ruleset.rules}["studio_live_coach_feedback_quality"]
    assert live.filter.trace_names == ["live"]


@pytest.mark.parametrize(
    ("conditions", "why"),
    [
        ({"topics": ["a"]}, "filter.topics ['a']: topic is 'llm-traces'"),
        ({"projects": ["p"]}, "filter.projects ['p']: project_name is 'default'"),
        ({"trace_names": ["n"]}, "filter.trace_names ['n']: name is 'chat'"),
        ({"tags_any": ["x"]}, "filter.tags_any ['x']: tags are ['prod']"),
        ({"tags_all": ["prod", "x"]}, "filter.tags_all ['prod', 'x']: tags are ['prod']"),
        ({"metadata": {"env": "eu"}}, "filter.metadata 'env' = 'eu': it is None"),
        ({"trace_names": ["chat"], "tags_any": ["prod"]}, None),
    ],
)
def test_a_mismatch_names_the_condition_that_failed(conditions: dict, why: str | None) -> None:
    trace = Trace(id="t", name="chat", tags=["prod"])
    assert RuleFilter(**conditions).mismatch(trace, "llm-traces") == why
