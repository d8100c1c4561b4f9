"""Rubric answers as scores: forced NA answers, criterion order, statuses and usage."""

from __future__ import annotations

from functools import cache

from fixtures import RULES_DIR

from stream.engine.rubric import measured_scores, rubric_input
from stream.engine.verdicts import RubricAnswers, Verdict
from stream.models import Scale, TokenUsage
from stream.ruleset.aggregators import CriterionAnswer, RubricScore
from stream.ruleset.loader import load_rule_file
from stream.ruleset.schema import RubricRule

USAGE = TokenUsage(prompt_tokens=1200, completion_tokens=300, total_tokens=1500)


@cache
def coaching_rule() -> RubricRule:
    rule = load_rule_file(RULES_DIR / "coaching" / "coaching_transcript.yaml")
    assert isinstance(rule, RubricRule)
    return rule


@cache
def critique_rule() -> RubricRule:
    rule = load_rule_file(RULES_DIR / "critique" / "response_critique.yaml")
    assert isinstance(rule, RubricRule)
    return rule


def verdict(answer: RubricAnswers) -> Verdict:
    return Verdict(answer=answer, model="judge-x", latency_ms=42.0, usage=USAGE, attempts=1)


def yes(reason: str = "fine") -> CriterionAnswer:
    return CriterionAnswer(1.0, "YES", reason)


def no(reason: str = "failed") -> CriterionAnswer:
    return CriterionAnswer(0.0, "NO", reason)


def coaching_ids() -> list[str]:
    return [c.id for c in coaching_rule().criteria]


def critique_ids() -> list[str]:
    return [c.id for c in critique_rule().criteria]


def all_yes_reversed() -> RubricAnswers:
    """Every coaching criterion answered YES, in the reverse of the rubric's order."""
    return {cid: yes(f"{cid} ok") for cid in reversed(coaching_ids())}


def test_input_lists_criteria_and_answers_in_rubric_order() -> None:
    rule = coaching_rule()
    rubric = rubric_input(rule, verdict(all_yes_reversed()), {})

    assert [c.id for c in rubric.criteria] == coaching_ids()
    assert [c.name for c in rubric.criteria][:2] == [
        "Accurate understanding across topics",
        "Appropriate handling of ambiguity",
    ]
    assert list(rubric.answers) == coaching_ids()
    assert rubric.scale == rule.output.scale
    assert all(a is not None and a.forced is None for a in rubric.answers.values())


def test_answers_for_criteria_the_rubric_does_not_have_are_dropped() -> None:
    answers = all_yes_reversed()
    answers["CQ99"] = no("not a criterion")

    rubric = rubric_input(coaching_rule(), verdict(answers), {})

    assert "CQ99" not in rubric.answers
    assert len(rubric.answers) == len(coaching_ids())


def test_forced_na_replaces_the_judges_answer_and_keeps_its_label_in_the_reason() -> None:
    rule = coaching_rule()
    answers = all_yes_reversed()
    answers["MT4"] = no("no history used")

    rubric = rubric_input(rule, verdict(answers), {"MT4": "turn_count < 3"})

    forced = rubric.answers["MT4"]
    assert forced is not None
    assert forced.label == "NA"
    assert rule.output.choices is not None
    assert forced.raw_value == rule.output.choices["NA"]
    assert forced.reason is None
    assert forced.forced == "turn_count < 3; the judge said NO"
    # the other answers are the judge's own
    assert rubric.answers["MT5"] == answers["MT5"]


def test_forced_na_for_a_criterion_the_judge_left_out_says_only_why() -> None:
    answers = all_yes_reversed()
    del answers["MT4"]

    rubric = rubric_input(coaching_rule(), verdict(answers), {"MT4": "turn_count < 3"})

    forced = rubric.answers["MT4"]
    assert forced is not None
    assert forced.label == "NA"
    assert forced.forced == "turn_count < 3"
    # still in criterion order although the judge's dict did not have it
    assert list(rubric.answers) == coaching_ids()


def test_criteria_the_judge_left_out_stay_absent_and_unusable_ones_stay_none() -> None:
    answers = all_yes_reversed()
    del answers["CQ2"]
    answers["CP4"] = None

    rubric = rubric_input(coaching_rule(), verdict(answers), {})

    assert "CQ2" not in rubric.answers
    assert "CP4" in rubric.answers
    assert rubric.answers["CP4"] is None
    assert list(rubric.answers) == [c for c in coaching_ids() if c != "CQ2"]


def test_forced_answers_reach_the_aggregator() -> None:
    rule = coaching_rule()
    answers = all_yes_reversed()
    answers["MT4"] = no("no history used")

    unforced = rule.aggregator.func(
        rubric_input(rule, verdict(answers), {}), rule.validated_aggregate
    )
    forced = rule.aggregator.func(
        rubric_input(rule, verdict(answers), {"MT4": "too short"}), rule.validated_aggregate
    )

    mt4_unforced = next(s for s in unforced if s.name == "MT4")
    mt4_forced = next(s for s in forced if s.name == "MT4")
    assert (mt4_unforced.label, mt4_unforced.raw_value) == ("NO", 0.0)
    assert (mt4_forced.label, mt4_forced.raw_value) == ("NA", 1.0)
    assert mt4_forced.reason == "too short; the judge said NO"
    assert next(s for s in forced if s.name == "score").raw_value == 1.0
    assert next(s for s in unforced if s.name == "score").raw_value == 0.9


def test_measured_scores_are_ok_and_usage_is_on_the_primary_score_only() -> None:
    rule = coaching_rule()
    judged = verdict(all_yes_reversed())
    results = rule.aggregator.func(rubric_input(rule, judged, {}), rule.validated_aggregate)

    shaped = measured_scores(rule, judged, results)

    assert [shape.criterion for shape, _ in shaped] == [r.name for r in results]
    assert all(m.status == "ok" and m.status_reason is None for _, m in shaped)
    assert all(m.judge_model == "judge-x" and m.latency_ms == 42.0 for _, m in shaped)
    with_usage = [shape.criterion for shape, m in shaped if m.usage is not None]
    assert with_usage == [rule.aggregator.primary] == ["score"]
    primary = next(m for shape, m in shaped if shape.criterion == "score")
    assert primary.usage == USAGE
    assert primary.raw_value == 1.0
    assert primary.label == "pass"
    assert primary.details is not None and primary.details["passed"] is True


def test_measured_scores_keep_each_results_shape() -> None:
    rule = coaching_rule()
    results = [
        RubricScore("score", 0.5, Scale(min=0, max=1), higher_is_better=False),
        RubricScore("CQ1", 2.0, Scale(min=1, max=3), label="x", reason="why"),
    ]

    shaped = measured_scores(rule, verdict(all_yes_reversed()), results)

    (shape0, m0), (shape1, m1) = shaped
    assert (shape0.criterion, shape0.scale, shape0.higher_is_better) == (
        "score",
        Scale(min=0, max=1),
        False,
    )
    assert (shape1.criterion, shape1.scale, shape1.higher_is_better) == (
        "CQ1",
        Scale(min=1, max=3),
        True,
    )
    assert (m1.raw_value, m1.label, m1.reason) == (2.0, "x", "why")
    assert m0.usage == USAGE and m1.usage is None


def test_missing_ratings_are_error_scores_with_the_aggregators_reason() -> None:
    rule = critique_rule()
    answers: RubricAnswers = {
        cid: CriterionAnswer(3.0, "No Issues", "ok") for cid in critique_ids()
    }
    del answers["safety"]
    judged = verdict(answers)
    results = rule.aggregator.func(rubric_input(rule, judged, {}), rule.validated_aggregate)

    shaped = {shape.criterion: m for shape, m in measured_scores(rule, judged, results)}

    assert shaped["safety"].status == "error"
    assert shaped["safety"].status_reason == "the judge's rating of Safety is missing"
    assert shaped["safety"].raw_value is None
    assert shaped["overall"].status == "error"
    assert shaped["overall"].status_reason is not None
    assert "unrated: Safety" in shaped["overall"].status_reason
    # the primary score carries the call's usage even when it is an error
    assert shaped["overall"].usage == USAGE
    assert shaped["code_quality"].status == "ok"
    assert shaped["code_quality"].usage is None


def test_a_result_without_a_value_is_an_error_even_without_a_reason() -> None:
    rule = critique_rule()
    results = [RubricScore("overall", None, Scale(min=1, max=5))]

    [(_, measured)] = measured_scores(rule, verdict({}), results)

    assert measured.status == "error"
    assert measured.status_reason is None


def test_critique_overall_is_the_primary_score() -> None:
    rule = critique_rule()
    answers: RubricAnswers = {
        cid: CriterionAnswer(3.0, "No Issues", "ok") for cid in critique_ids()
    }
    answers["technical_accuracy"] = CriterionAnswer(1.0, "Major Issues", "broken")
    judged = verdict(answers)
    results = rule.aggregator.func(rubric_input(rule, judged, {}), rule.validated_aggregate)

    shaped = measured_scores(rule, judged, results)

    shape, overall = shaped[0]
    assert shape.criterion == "overall"
    assert shape.scale == Scale(min=1, max=5)
    assert (overall.status, overall.raw_value, overall.label) == ("ok", 2.0, "Inadequate")
    assert overall.usage == USAGE
    assert sum(m.usage is not None for _, m in shaped) == 1
