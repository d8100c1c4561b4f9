"""Score events and decision records: deterministic ids, normalised values, result order."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from stream.engine.outcomes import (
    Measured,
    RuleOutcome,
    ScoreShape,
    Target,
    TraceResult,
    make_decision,
    make_score,
    score_rule_key,
)
from stream.models import Scale, ThreadInfo
from stream.ruleset.schema import RULE_ADAPTER, AnyRule

NOW = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def judged(**changes: Any) -> AnyRule:
    data: dict[str, Any] = {
        "id": "clarity",
        "pack": "demo",
        "version": 2,
        "scope": "trace",
        "kind": "llm_judge",
        "variables": {"output": "output"},
        "prompt": "Rate {{output}}",
        "output": {"min": 1, "max": 5, "higher_is_better": False},
    }
    data.update(changes)
    return RULE_ADAPTER.validate_python(data)


def target(key: str = "t-1", thread: ThreadInfo | None = None) -> Target:
    return Target(id="t-1", project_name="proj", score_key=key, thread=thread)


def test_ok_score_is_normalised_and_carries_the_rule_and_target() -> None:
    rule = judged()
    score = make_score(
        rule, target(), ScoreShape.of_rule(rule), Measured("ok", raw_value=4, label="good"), NOW
    )
    assert (score.rule_id, score.pack, score.rule_version, score.scope) == (
        "clarity",
        "demo",
        2,
        "trace",
    )
    assert (score.target_id, score.project_name, score.created_at) == ("t-1", "proj", NOW)
    assert score.value == 0.75 and score.raw_value == 4 and score.label == "good"
    assert score.scale == Scale(min=1, max=5) and score.higher_is_better is False


def test_a_score_that_is_not_ok_has_no_value_even_with_a_raw_value() -> None:
    rule = judged()
    measured = Measured("error", status_reason="judge timed out", raw_value=3)
    score = make_score(rule, target(), ScoreShape.of_rule(rule), measured, NOW)
    assert score.value is None and score.raw_value is None
    assert (score.status, score.status_reason) == ("error", "judge timed out")
    unmeasured = make_score(rule, target(), ScoreShape.of_rule(rule), Measured("ok"), NOW)
    assert unmeasured.value is None and unmeasured.raw_value is None


def test_score_ids_are_deterministic_and_differ_by_criterion_version_and_close() -> None:
    rule = judged()
    scale = Scale(min=0, max=1)

    def sid(criterion: str | None, key: str = "t-1", r: AnyRule = rule) -> str:
        shape = ScoreShape(criterion, scale, True)
        return make_score(r, target(key), shape, Measured("ok", raw_value=1), NOW).score_id

    assert sid(None) == sid(None)
    ids = {sid(None), sid("a"), sid("b"), sid(None, "thread-9#1"), sid(None, "thread-9#2")}
    assert len(ids) == 5
    assert sid(None, r=judged(version=3)) != sid(None)


def test_a_thread_score_carries_its_thread_close() -> None:
    rule = judged(scope="thread", thread={"kind": "session"})
    info = ThreadInfo(
        kind="session", close_seq=2, close_reason="end", turn_count=3, dropped_turns=0
    )
    measured = Measured("ok", raw_value=5)
    score = make_score(rule, target("s-1#2", info), ScoreShape.of_rule(rule), measured, NOW)
    assert score.scope == "thread" and score.thread == info and score.value == 1.0


def test_score_rule_key_adds_the_criterion() -> None:
    rule = judged()
    assert score_rule_key(rule, None) == "clarity"
    assert score_rule_key(rule, "tone") == "clarity/tone"


def test_make_decision_records_the_rule_target_and_score_id() -> None:
    rule = judged()
    decision = make_decision(rule, target("t-1#3"), "skipped", NOW, detail="why", sid="s-1")
    assert (decision.target_id, decision.rule_id, decision.pack) == ("t-1", "clarity", "demo")
    assert (decision.rule_version, decision.project_name) == (2, "proj")
    assert (decision.outcome, decision.detail, decision.score_id) == ("skipped", "why", "s-1")
    assert decision.created_at == NOW


def test_result_scores_keep_rule_order_with_rubric_extras_after_their_score() -> None:
    rule = judged()

    def score(criterion: str | None) -> Any:
        shape = ScoreShape(criterion, Scale(min=0, max=1), True)
        return make_score(rule, target(), shape, Measured("ok", raw_value=1), NOW)

    def decision() -> Any:
        return make_decision(rule, target(), "scored", NOW)

    result = TraceResult(
        [
            RuleOutcome(decision(), score("overall"), [score("a"), score("b")]),
            RuleOutcome(make_decision(rule, target(), "filtered", NOW), None),
            RuleOutcome(decision(), score(None)),
        ]
    )
    assert [s.criterion for s in result.scores] == ["overall", "a", "b", None]
    assert [d.outcome for d in result.decisions] == ["scored", "filtered", "scored"]
