"""The outbox: what a scored target publishes, in one place (scores, decisions, and the
judged scores the agreement join reads)."""

from __future__ import annotations

from typing import Any, cast

import orjson

from stream.agreement.events import SCORE
from stream.delivery.outbox import Outbox
from stream.engine.records import scored
from stream.models import Decision, Scale, ScoreEvent, TraceDecisions

SCORES, DECISIONS, EVENTS = (cast(Any, name) for name in ("scores", "decisions", "events"))


def score(rule: str, *, model: str | None = "judge-1", variant: str | None = None) -> ScoreEvent:
    return ScoreEvent(
        score_id=f"id-{rule}-{variant}",
        rule_id=rule,
        pack="p",
        rule_version=1,
        scope="trace",
        target_id="t-1",
        project_name="proj",
        value=1.0,
        raw_value=1.0,
        scale=Scale(min=0, max=1),
        higher_is_better=True,
        status="ok",
        judge_model=model,
        variant=variant,
        reason="a long reason the join never reads",
    )


def records(*scores: ScoreEvent) -> Any:
    decision = Decision("t-1", "a", "p", 1, "proj", "scored")
    return scored("t-1", list(scores), TraceDecisions("t-1", "proj", [decision]))


def test_judged_scores_follow_the_scores_and_decisions_a_shadow_after_its_primary() -> None:
    shadow, primary = score("a", variant="cheap"), score("a")
    check = score("length", model=None)  # a deterministic check: the join never reads it
    sends = Outbox(SCORES, DECISIONS, EVENTS).sends(records(shadow, primary, check))

    assert [(topic, key) for topic, key, _, _ in sends] == [
        ("scores", b"t-1"),
        ("scores", b"t-1"),
        ("scores", b"t-1"),
        ("decisions", b"t-1"),
        ("events", b"t-1"),
        ("events", b"t-1"),
    ]
    joined = [value for topic, _, value, _ in sends if topic == "events"]
    assert all(value.startswith(SCORE) for value in joined)
    read = [orjson.loads(value[1:]) for value in joined]
    assert [event["variant"] for event in read] == [None, "cheap"]
    assert {event["reason"] for event in read} == {None}  # slim: without its bulky fields


def test_with_the_join_off_only_scores_and_decisions_are_sent() -> None:
    sends = Outbox(SCORES, DECISIONS).sends(records(score("a"), score("b")))
    assert [topic for topic, _, _, _ in sends] == ["scores", "scores", "decisions"]


def test_an_errored_judge_score_does_not_go_to_the_join() -> None:
    failed = score("a").model_copy(update={"status": "error", "raw_value": None})
    sends = Outbox(SCORES, DECISIONS, EVENTS).sends(records(failed))
    assert "events" not in [topic for topic, _, _, _ in sends]
