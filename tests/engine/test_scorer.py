"""The scorer without a judge: skipped and filtered outcomes, decisions, missing variables."""

from __future__ import annotations

from fixtures import as_trace, hub_trace, live_trace, scorer


async def test_no_judge_configured_gives_skipped_scores_saying_how() -> None:
    s = scorer(None)
    document = live_trace()
    result = await s.score_trace(as_trace(document), document)
    by_rule = {x.rule_id: x for x in result.scores}
    assert by_rule["studio_live_coach_feedback_quality"].status == "skipped"
    assert "OPENAI_BASE_URL" in by_rule["studio_live_coach_feedback_quality"].status_reason
    assert by_rule["studio_live_coach_feedback_format"].status == "ok"  # checks need no judge


async def test_missing_path_is_a_skipped_score_naming_it() -> None:
    document = hub_trace(5)  # output is null: an upstream error
    result = await scorer(None).score_trace(as_trace(document), document)
    score = next(x for x in result.scores if x.rule_id == "hub_answer_correctness")
    assert score.status == "skipped"
    assert "'output.messages[-1].content' is missing" in score.status_reason
    decision = next(d for d in result.decisions if d.rule_id == "hub_answer_correctness")
    assert decision.outcome == "skipped"


async def test_filtered_rules_only_leave_a_decision() -> None:
    document = live_trace()
    result = await scorer(None).score_trace(as_trace(document), document)
    filtered = {d.rule_id for d in result.decisions if d.outcome == "filtered"}
    assert "hub_answer_correctness" in filtered
    assert not any(x.rule_id == "hub_answer_correctness" for x in result.scores)
