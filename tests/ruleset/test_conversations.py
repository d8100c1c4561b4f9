"""Fallback conversation rules: which rules a trace's turn goes to, which judge a thread, and
the loader's checks of the two groups' thread sections."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from fixtures import RULES_DIR

from stream.models import Trace
from stream.ruleset.conversations import ConversationRules
from stream.ruleset.loader import check_rules, load_rules

HUB = ["hub_conversational_coherence", "hub_user_frustration_score"]
GENERIC = [
    "conversation_coherence",
    "conversation_goal_completion",
    "conversation_user_frustration",
]


@pytest.fixture
def rules_copy(tmp_path: Path) -> Path:
    target = tmp_path / "rules"
    shutil.copytree(RULES_DIR, target)
    return target


def edit_thread(rules_dir: Path, pack: str, rule_id: str, **changes: object) -> None:
    path = rules_dir / pack / f"{rule_id}.yaml"
    data = yaml.safe_load(path.read_text())
    data["thread"].update(changes)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def problems(rules_dir: Path) -> list[str]:
    _, errors = check_rules(rules_dir)
    return [f"{Path(e.path).name}: {p}" for e in errors for p in e.problems]


def conversations() -> ConversationRules:
    return ConversationRules.of(load_rules(RULES_DIR, ["fretcoach", "conversation"]))


def trace(name: str | None, project: str = "fretcoach") -> Trace:
    return Trace(id="t1", name=name, project_name=project, thread_id="th-1")


def test_the_two_groups() -> None:
    rules = conversations()
    assert [r.id for r in rules.claiming] == HUB
    assert [r.id for r in rules.fallback] == GENERIC
    claiming, fallback = rules.spec(False), rules.spec(True)
    assert claiming is not None and fallback is not None
    assert claiming.user == "input.messages[-1].content"
    assert fallback.user.startswith("input.messages[-1].content || ")
    assert ConversationRules.of(load_rules(RULES_DIR, ["mlflow"])).spec(True) is None


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        pytest.param("hub-coach-chat", HUB, id="claimed: its pack's rules only"),
        pytest.param("my-own-chat", GENERIC, id="unclaimed: the fallback rules"),
        pytest.param(None, GENERIC, id="no name: the fallback rules"),
    ],
)
def test_a_trace_goes_to_the_rules_that_claim_it_else_to_the_fallback_ones(
    name: str | None, expected: list[str]
) -> None:
    assert [r.id for r in conversations().matching(trace(name), "llm-traces")] == expected


def test_a_thread_is_judged_by_its_claiming_rules_alone() -> None:
    rules = conversations()
    assert rules.judging(GENERIC) == set(GENERIC)
    assert rules.judging(HUB) == set(HUB)
    assert rules.judging(GENERIC + HUB[:1]) == set(HUB[:1])
    assert rules.judging([]) == set()


def test_without_fallback_rules_nothing_else_matches() -> None:
    rules = ConversationRules.of(load_rules(RULES_DIR, ["fretcoach"]))
    assert rules.matching(trace("my-own-chat"), "llm-traces") == []


def test_fallback_and_claiming_rules_may_read_turns_with_other_paths() -> None:
    assert problems(RULES_DIR) == []  # the shipped packs do, loaded together


def test_fallback_rules_must_share_their_paths(rules_copy: Path) -> None:
    edit_thread(rules_copy, "conversation", "conversation_user_frustration", end=None)
    found = problems(rules_copy)
    assert found == [
        "conversation_user_frustration.yaml: field thread: user/assistant/end paths or "
        "inactivity_gap_s differ from rule 'conversation_coherence'; every fallback "
        "conversation rule of a rule set must use the same ones"
    ]


def test_every_conversation_rule_shares_the_gap(rules_copy: Path) -> None:
    for rule_id in GENERIC:
        edit_thread(rules_copy, "conversation", rule_id, inactivity_gap_s=60)
    # the packs load in name order: the conversation pack's rules first, then FretCoach's
    assert problems(rules_copy) == [
        f"{rule_id}.yaml: field thread: inactivity_gap_s differs from rule "
        "'conversation_coherence'; every conversation rule of a rule set must use the same gap"
        for rule_id in HUB
    ]


def test_fallback_is_for_conversations_only(rules_copy: Path) -> None:
    edit_thread(rules_copy, "coaching", "coaching_question_endings", fallback=True)
    assert problems(rules_copy) == [
        "coaching_question_endings.yaml: field thread: fallback is for conversation threads only"
    ]
