"""A rule's output as a decision question, and the Decisions API's answer as a verdict, over
HTTP against ``decisions_double.DecisionsDouble`` (which speaks the installed openai SDK's
``client.decisions`` contract) through the real SDK (issue 46, item 1)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from decisions_double import MODEL, REFUSE, DecisionsDouble, yes_no_rule
from fixtures import settings
from prometheus_client import CollectorRegistry, generate_latest
from pydantic import ValidationError

from stream.engine.scorer import Scorer
from stream.engine.verdicts import ParsedAnswer
from stream.errors import JudgeError
from stream.judge.client import JudgeClient
from stream.judge.decision_client import judge_client
from stream.judge.decision_questions import (
    NotAskableError,
    question_of,
    verdict_of,
)
from stream.judge.decisions_api import OpenAIDecisionsAPI
from stream.judge.transport import Decided, DecisionRequest, Failed
from stream.metrics import ScorerMetrics, sample_value
from stream.models import Trace
from stream.ruleset.schema import LLMJudgeRule, RuleSet
from stream.ruleset.specs import OutputSpec

YES_NO = OutputSpec(type="choice", choices={"Yes": 1.0, "No": 0.0})
GRADES = OutputSpec(type="choice", choices={"poor": 0.0, "fair": 0.5, "good": 1.0})
LIKERT = OutputSpec(
    min=1, max=5, integer=True, labels={1: "Very poor", 3: "Adequate", 5: "Excellent"}
)


@pytest.fixture
def model() -> Iterator[DecisionsDouble]:
    with DecisionsDouble() as double:
        yield double


def api(model: DecisionsDouble) -> OpenAIDecisionsAPI:
    return OpenAIDecisionsAPI(base_url=model.base_url, api_key="sk-test", timeout_s=5)


def test_each_output_shape_is_asked_as_its_question() -> None:
    assert question_of(YES_NO, "Is it correct?", "correct") == {
        "type": "predicate",
        "name": "correct",
        "instructions": "Is it correct?",
    }
    choice = question_of(GRADES, "Grade it.", "grade")
    assert choice["type"] == "choice"
    assert [c["value"] for c in choice["choices"]] == ["poor", "fair", "good"]
    score = question_of(LIKERT, "Rate it.", "quality")
    assert score["type"] == "score"
    assert [level["label"] for level in score["levels"]] == [
        "Very poor",
        "2",
        "Adequate",
        "4",
        "Excellent",
    ]
    true_false = OutputSpec(type="choice", choices={"true": 1.0, "false": 0.0})
    assert question_of(true_false, "?", "q")["type"] == "predicate"


def test_a_continuous_scale_cannot_be_asked() -> None:
    with pytest.raises(NotAskableError, match="continuous scale"):
        question_of(OutputSpec(min=0, max=1), "Rate it.", "q")


QUARTERS = OutputSpec(min=0, max=1, levels=[0, 0.25, 0.5, 0.75, 1])


async def test_a_continuous_scale_is_asked_on_the_levels_it_declares(
    model: DecisionsDouble,
) -> None:
    question = question_of(QUARTERS, "How faithful is it?", "faithful")
    assert [level["label"] for level in question["levels"]] == ["0", "0.25", "0.5", "0.75", "1"]
    model.script("faithful", {"0.75": 0.5, "1": 0.3, "0.5": 0.2})
    client = api(model)
    try:
        outcome = await client.decide(DecisionRequest(MODEL, "Q: 2+2? A: 4", [question]))
    finally:
        await client.close()
    assert isinstance(outcome, Decided)
    verdict = verdict_of(QUARTERS, outcome.answers[0])
    assert verdict is not None and (verdict.label, verdict.value) == ("0.75", 0.75)
    assert verdict.expected == pytest.approx(0.5 * 0.75 + 0.3 * 1 + 0.2 * 0.5)


@pytest.mark.parametrize(
    ("levels", "says"),
    [
        ([0.5, 0.25], "rise"),
        ([0, 2], "within min and max"),
        ([0.5], "at least 2"),
    ],
)
def test_declared_levels_rise_within_the_scale(levels: list[float], says: str) -> None:
    with pytest.raises(ValidationError, match=says):
        OutputSpec(min=0, max=1, levels=levels)
    with pytest.raises(ValidationError, match="drop levels"):
        OutputSpec(min=1, max=5, integer=True, levels=[1, 2])
    data = decision_rule().model_dump(exclude_none=True, exclude_defaults=True)
    data["output"] = {"min": 0, "max": 1, "levels": [0, 0.5, 1]}
    assert LLMJudgeRule.model_validate({**data, "kind": "llm_judge"}).output.levels == [0, 0.5, 1]


async def test_every_answer_comes_back_as_a_verdict_on_the_rules_scale(
    model: DecisionsDouble,
) -> None:
    model.script("correct", 0.92)
    model.script("grade", {"good": 0.7, "fair": 0.2})
    model.script("quality", {"Excellent": 0.6, "4": 0.3})
    questions = [
        question_of(YES_NO, "Is the answer correct?", "correct"),
        question_of(GRADES, "Grade the answer.", "grade"),
        question_of(LIKERT, "Rate the answer's quality.", "quality"),
    ]
    client = api(model)
    try:
        outcome = await client.decide(DecisionRequest(MODEL, "Q: 2+2? A: 4", questions))
    finally:
        await client.close()
    assert isinstance(outcome, Decided)
    assert outcome.model == MODEL
    assert outcome.usage is not None and outcome.usage.prompt_tokens > 0
    assert outcome.usage.completion_tokens == 0
    correct, grade, quality = (
        verdict_of(spec, answer)
        for spec, answer in zip((YES_NO, GRADES, LIKERT), outcome.answers, strict=True)
    )
    assert correct is not None and (correct.label, correct.value) == ("Yes", 1.0)
    assert correct.confidence == pytest.approx(0.92)
    assert correct.expected == pytest.approx(0.92)
    assert grade is not None and (grade.label, grade.value) == ("good", 1.0)
    assert grade.probabilities == pytest.approx({"poor": 0.1, "fair": 0.2, "good": 0.7})
    assert grade.expected == pytest.approx(0.2 * 0.5 + 0.7)
    assert quality is not None and (quality.label, quality.value) == ("Excellent", 5.0)
    assert quality.confidence == pytest.approx(0.6)
    # the rest (0.1) over the other three levels: 1, 2, 3
    assert quality.expected == pytest.approx(0.6 * 5 + 0.3 * 4 + 0.1 / 3 * (1 + 2 + 3))


async def test_a_refused_question_has_no_verdict_and_the_others_are_answered(
    model: DecisionsDouble,
) -> None:
    model.script("grade", REFUSE)
    model.script("correct", 0.1)
    questions = [
        question_of(GRADES, "Grade the answer.", "grade"),
        question_of(YES_NO, "Is the answer correct?", "correct"),
    ]
    client = api(model)
    try:
        outcome = await client.decide(DecisionRequest(MODEL, "text", questions))
    finally:
        await client.close()
    assert isinstance(outcome, Decided)
    assert verdict_of(GRADES, outcome.answers[0]) is None
    correct = verdict_of(YES_NO, outcome.answers[1])
    assert correct is not None and correct.label == "No" and correct.confidence == 0.9


async def test_the_providers_refusals_are_failures_of_the_kind_the_client_handles(
    model: DecisionsDouble,
) -> None:
    question = [question_of(YES_NO, "Is it correct?", "correct")]
    client = api(model)
    try:
        model.rate_limit_next(2.0)
        limited = await client.decide(DecisionRequest(MODEL, "text", question))
        model.fail_next(503)
        down = await client.decide(DecisionRequest(MODEL, "text", question))
        wrong_model = await client.decide(DecisionRequest("gpt-4.1", "text", question))
        too_many = await client.decide(DecisionRequest(MODEL, "text", question * 401))
        fine = await client.decide(DecisionRequest(MODEL, "text", question))
    finally:
        await client.close()
    assert isinstance(limited, Failed) and limited.kind == "rate_limited"
    assert limited.retry_after == 2.0
    assert isinstance(down, Failed) and (down.kind, down.status) == ("server_error", 503)
    assert isinstance(wrong_model, Failed) and wrong_model.kind == "client_error"
    assert "gpt-6-luna" in wrong_model.message
    assert isinstance(too_many, Failed) and too_many.kind == "client_error"
    assert isinstance(fine, Decided)


async def test_the_cached_input_tokens_are_reported(model: DecisionsDouble) -> None:
    model.cached_tokens = 5
    client = api(model)
    try:
        outcome = await client.decide(
            DecisionRequest(MODEL, "x" * 400, [question_of(YES_NO, "Is it?", "q")])
        )
    finally:
        await client.close()
    assert isinstance(outcome, Decided) and outcome.usage is not None
    assert outcome.usage.cached_tokens == 5


def test_an_answer_outside_the_rules_labels_is_an_error() -> None:
    answer = {
        "type": "choice",
        "choice": "excellent",
        "confidence": 0.9,
        "probabilities": [{"value": "excellent", "probability": 0.9}],
    }
    with pytest.raises(ValueError, match="not one of the rule's labels"):
        verdict_of(GRADES, answer)


# --- a rule judged by a decision model, through the judge client's policy ---------------


def decision_rule(**judge: Any) -> LLMJudgeRule:
    return yes_no_rule({"api": "decisions", **judge}, "Question: {{question}}\nAnswer: {{answer}}")


def test_a_decision_rule_asks_the_decision_model_by_default() -> None:
    assert decision_rule().judge.model == MODEL
    assert decision_rule(model="gpt-6-luna-mini").judge.model == "gpt-6-luna-mini"


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"output": {"min": 0, "max": 1}}, "continuous scale"),
        # log-probabilities are read on labels the judge writes, not on declared levels
        (
            {"output": {"min": 0, "max": 1, "levels": [0, 1]}, "judge": {"logprobs": True}},
            "continuous scale",
        ),
        ({"judge": {"api": "decisions", "mode": "batch"}}, "online and without tools"),
        ({"description": None}, "set judge.instructions"),
    ],
)
def test_a_rule_a_decision_model_cannot_answer_is_refused_with_the_reason(
    change: dict[str, Any], says: str
) -> None:
    data = decision_rule().model_dump(exclude_none=True, exclude_defaults=True)
    data = {**data, "kind": "llm_judge", "judge": {"api": "decisions"}, **change}
    data = {k: v for k, v in data.items() if v is not None}
    with pytest.raises(ValidationError, match=says):
        LLMJudgeRule.model_validate(data)


def client_at(model: DecisionsDouble, registry: CollectorRegistry) -> JudgeClient:
    config = settings(
        openai_base_url=model.base_url, openai_api_key="sk-test", judge_backoff_base_s=0.01
    ).judge_config()
    return judge_client(config, ScorerMetrics(registry))


async def test_a_decision_rule_gets_its_verdict_with_probabilities(
    model: DecisionsDouble,
) -> None:
    model.script("answer_correct", 0.87)
    client = client_at(model, CollectorRegistry())
    try:
        verdict = await client.judge(decision_rule(), "Question: 2+2?\nAnswer: 4", "Be strict.")
    finally:
        await client.close()
    answer = verdict.answer
    assert isinstance(answer, ParsedAnswer)
    assert (answer.raw_value, answer.label, answer.reason) == (1.0, "yes", None)
    assert answer.decision is not None
    assert answer.decision["probabilities"] == pytest.approx({"yes": 0.87, "no": 0.13})
    assert answer.decision["confidence"] == pytest.approx(0.87)
    assert verdict.model == MODEL and verdict.usage is not None
    sent = model.requests[0]
    assert sent["model"] == MODEL
    assert [m["role"] for m in sent["input"]] == ["system", "user"]
    assert sent["questions"] == [
        {
            "type": "predicate",
            "name": "answer_correct",
            "instructions": "Is the assistant's answer correct?",
        }
    ]


async def test_a_rate_limited_decision_waits_its_turn_and_a_refusal_fails_at_once(
    model: DecisionsDouble,
) -> None:
    registry = CollectorRegistry()
    client = client_at(model, registry)
    try:
        model.rate_limit_next(0.05)
        verdict = await client.judge(decision_rule(), "p")
        assert verdict.attempts == 2
        model.script("answer_correct", REFUSE)
        with pytest.raises(JudgeError) as refused:
            await client.judge(decision_rule(), "p")
    finally:
        await client.close()
    assert refused.value.kind == "refused"
    assert len(model.requests) == 3  # the refusal was not asked again
    page = generate_latest(registry).decode()
    calls = {
        outcome: sample_value(page, "scorer_judge_calls_total", model=MODEL, outcome=outcome)
        for outcome in ("ok", "rate_limited", "refused")
    }
    assert calls == {"ok": 1.0, "rate_limited": 1.0, "refused": 1.0}


async def test_a_decision_call_is_priced_at_the_decision_models_input_price(
    model: DecisionsDouble,
) -> None:
    registry = CollectorRegistry()
    client = client_at(model, registry)
    try:
        verdict = await client.judge(decision_rule(), "x" * 4000)
    finally:
        await client.close()
    assert verdict.usage is not None and verdict.usage.completion_tokens == 0
    page = generate_latest(registry).decode()
    cost = sample_value(page, "scorer_judge_cost_usd_total", model=MODEL, outcome="ok")
    assert cost == pytest.approx(verdict.usage.prompt_tokens * 0.10 / 1_000_000)


async def test_the_published_score_carries_the_decision(model: DecisionsDouble) -> None:
    """Through the scorer: the score of a decision rule is the most probable label's value,
    with the probabilities, the confidence and the expected value in ``details.decision``."""
    model.script("answer_correct", 0.3)
    rules = RuleSet([decision_rule()])
    metrics = ScorerMetrics(CollectorRegistry())
    cfg = settings(openai_base_url=model.base_url, openai_api_key="sk-test")
    client = judge_client(cfg.judge_config(), metrics)
    scorer = Scorer(rules, client, default_model=cfg.judge_model, observer=metrics)
    document = {
        "id": "t-1",
        "project_name": "shop",
        "input": {"messages": [{"role": "user", "content": "2+2?"}]},
        "output": {"content": "5"},
    }
    try:
        result = await scorer.score_trace(Trace.model_validate(document), document)
    finally:
        await client.close()
    (score,) = result.scores
    assert (score.status, score.raw_value, score.label, score.judge_model) == (
        "ok",
        0.0,
        "no",
        MODEL,
    )
    assert score.details is not None
    decision = score.details["decision"]
    assert decision["label"] == "no"
    assert decision["probabilities"] == pytest.approx({"yes": 0.3, "no": 0.7})
    assert (decision["confidence"], decision["expected"]) == pytest.approx((0.7, 0.3))
    assert model.requests[0]["input"][-1]["content"] == "Question: 2+2?\nAnswer: 5"


async def test_a_judge_client_without_a_decision_client_refuses_a_decision_rule() -> None:
    client = JudgeClient(settings(openai_api_key="sk-test").judge_config())
    try:
        with pytest.raises(JudgeError, match="no decision model client"):
            await client.judge(decision_rule(), "p")
    finally:
        await client.close()
