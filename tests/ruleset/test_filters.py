"""Rule filters (which traces a rule applies to) and deterministic sampling."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from stream.models import Trace
from stream.ruleset.filters import RuleFilter, sampled

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
