"""A cascade rule (``judge.cascade``): a decision model first, the rule's own judge only where
it is unsure, both on an audit share (the first tier as the shadow ``cascade``). Through the
scorer, against a real HTTP endpoint serving the chat judge and the decision model
(``decisions_double.JudgeAndDecisions``) as OpenAI serves both (issue 46, item 3)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from decisions_double import MODEL, REFUSE, JudgeAndDecisions, yes_no_rule
from fixtures import settings
from prometheus_client import CollectorRegistry
from pydantic import ValidationError
from scripted_judge import Reply

from stream.agreement.cascade_spend import cascade_spend
from stream.engine.outcomes import TraceResult
from stream.engine.scorer import Scorer
from stream.engine.spend import SpendLedger
from stream.judge.decision_client import judge_client
from stream.metrics import ScorerMetrics
from stream.models import Trace
from stream.ruleset.schema import LLMJudgeRule, RuleSet

CHAT_MODEL = "gpt-4o-mini"


def cascade_rule(audit_rate: float = 0.0, **cascade: Any) -> LLMJudgeRule:
    tiers = {"accept": {"min_confidence": 0.9}, "audit_rate": audit_rate, **cascade}
    prompt = "Judge the answer.\nQuestion: {{question}}\nAnswer: {{answer}}"
    return yes_no_rule({"cascade": tiers}, prompt)


def trace(n: int) -> dict[str, Any]:
    return {
        "id": f"t-{n}",
        "project_name": "shop",
        "input": {"messages": [{"role": "user", "content": f"{n}+{n}?"}]},
        "output": {"content": str(2 * n)},
    }


@pytest.fixture
def endpoint() -> Iterator[JudgeAndDecisions]:
    with JudgeAndDecisions() as both:
        both.script("Judge the answer", '{"result": "no", "reason": "the judge says no"}')
        yield both


async def scored(
    endpoint: JudgeAndDecisions, rule: LLMJudgeRule, *documents: dict[str, Any]
) -> tuple[list[TraceResult], ScorerMetrics]:
    metrics = ScorerMetrics(CollectorRegistry())
    cfg = settings(openai_base_url=endpoint.base_url, openai_api_key="sk-test")
    client = judge_client(cfg.judge_config(), metrics)
    ledger = SpendLedger((), cfg.judge_cost)  # as the worker makes it: the rules' cost counted
    scorer = Scorer(
        RuleSet([rule]), client, default_model=CHAT_MODEL, observer=metrics, ledger=ledger
    )
    try:
        results = [await scorer.score_trace(Trace.model_validate(d), d) for d in documents]
    finally:
        await client.close()
    return results, metrics


def cascaded(metrics: ScorerMetrics, tier: str, reason: str) -> float | None:
    labels = {"rule": "answer_correct", "pack": "p", "tier": tier, "reason": reason}
    return metrics.registry.get_sample_value("scorer_cascade_verdicts_total", labels)


async def test_a_confident_first_tier_decides_and_the_judge_is_not_asked(
    endpoint: JudgeAndDecisions,
) -> None:
    endpoint.decisions.script("answer_correct", 0.97)
    (result,), metrics = await scored(endpoint, cascade_rule(), trace(1))
    (score,) = result.scores
    assert (score.status, score.label, score.judge_model) == ("ok", "yes", MODEL)
    assert score.details is not None
    assert score.details["cascade"] == {"tier": "first", "confidence": pytest.approx(0.97)}
    assert score.details["decision"]["probabilities"] == pytest.approx({"yes": 0.97, "no": 0.03})
    assert endpoint.requests == [] and len(endpoint.decisions.requests) == 1
    assert cascaded(metrics, "first", "accepted") == 1.0


async def test_an_unsure_first_tier_is_escalated_to_the_rules_own_judge(
    endpoint: JudgeAndDecisions,
) -> None:
    endpoint.decisions.script("answer_correct", 0.7)
    (result,), metrics = await scored(endpoint, cascade_rule(), trace(1))
    (score,) = result.scores
    assert (score.status, score.label, score.judge_model) == ("ok", "no", CHAT_MODEL)
    assert score.reason == "the judge says no"
    assert score.details is not None
    first = score.details["cascade"].pop("first")
    assert score.details["cascade"] == {
        "tier": "judge",
        "escalated": "low_confidence",
        "first_confidence": pytest.approx(0.7),
    }
    # what the first tier used, so the score says what each tier cost
    assert (first["model"], first["cached"]) == (MODEL, False)
    assert first["usage"]["prompt_tokens"] > 0 and "completion_tokens" not in first["usage"]
    # the judge read the rule's own prompt, unchanged
    assert endpoint.prompts() == ["Judge the answer.\nQuestion: 1+1?\nAnswer: 2"]
    assert cascaded(metrics, "judge", "low_confidence") == 1.0


async def test_a_first_tier_that_declines_is_escalated(endpoint: JudgeAndDecisions) -> None:
    endpoint.decisions.script("answer_correct", REFUSE)
    (result,), metrics = await scored(endpoint, cascade_rule(), trace(1))
    (score,) = result.scores
    assert score.judge_model == CHAT_MODEL
    assert score.details is not None
    first = score.details["cascade"].pop("first")  # a declined question is still paid for
    assert score.details["cascade"] == {"tier": "judge", "escalated": "first_failed"}
    assert first["model"] == MODEL and first["usage"]["prompt_tokens"] > 0
    assert cascaded(metrics, "judge", "first_failed") == 1.0


async def test_on_the_audit_share_both_tiers_judge_the_first_as_the_shadow_cascade(
    endpoint: JudgeAndDecisions,
) -> None:
    endpoint.decisions.script("answer_correct", 0.99)
    results, metrics = await scored(endpoint, cascade_rule(audit_rate=1.0), trace(1), trace(2))
    for result in results:
        primary = next(s for s in result.scores if s.variant is None)
        shadow = next(s for s in result.scores if s.variant == "cascade")
        assert (primary.judge_model, primary.label) == (CHAT_MODEL, "no")
        assert primary.details is not None
        assert primary.details["cascade"] == {"tier": "judge", "escalated": "audit"}
        assert (shadow.judge_model, shadow.label, shadow.status) == (MODEL, "yes", "ok")
        assert shadow.score_id != primary.score_id
        assert shadow.details is not None and shadow.details["decision"]["confidence"] == 0.99
    assert cascaded(metrics, "judge", "audit") == 2.0
    assert len(endpoint.requests) == 2 and len(endpoint.decisions.requests) == 2


async def test_the_audit_share_is_a_hashed_sample_of_the_targets(
    endpoint: JudgeAndDecisions,
) -> None:
    endpoint.decisions.script("answer_correct", 0.99)
    documents = [trace(n) for n in range(200)]
    results, metrics = await scored(endpoint, cascade_rule(audit_rate=0.1), *documents)
    audited = [r for r in results if any(s.variant == "cascade" for s in r.scores)]
    assert 8 <= len(audited) <= 35  # 10 % of 200, by a hash of the target id
    assert cascaded(metrics, "judge", "audit") == len(audited)
    assert cascaded(metrics, "first", "accepted") == 200 - len(audited)
    again, _ = await scored(endpoint, cascade_rule(audit_rate=0.1), *documents)
    assert [any(s.variant for s in r.scores) for r in again] == [
        any(s.variant for s in r.scores) for r in results
    ]


def test_a_cascade_needs_an_askable_output_and_an_online_chat_judge() -> None:
    rule = cascade_rule()
    assert rule.judge.cascade is not None and rule.judge.cascade.first.model == MODEL
    data = rule.model_dump(exclude_none=True)
    with pytest.raises(ValidationError, match="continuous scale"):
        LLMJudgeRule.model_validate({**data, "output": {"min": 0, "max": 1}})
    with pytest.raises(ValidationError, match="before an online chat judge"):
        LLMJudgeRule.model_validate({**data, "judge": {**data["judge"], "mode": "batch"}})
    with pytest.raises(ValidationError, match=r"cannot go with judge\.tools"):
        LLMJudgeRule.model_validate({**data, "judge": {**data["judge"], "tools": "trace"}})


SMALL = "gpt-4.1-nano"


def chat_cascade_rule(audit_rate: float = 0.0) -> LLMJudgeRule:
    return cascade_rule(audit_rate, first={"api": "chat", "model": SMALL})


def small_says(endpoint: JudgeAndDecisions, label: str, p: float) -> None:
    """The small model answers ``label`` with probability ``p`` at its verdict's token."""
    other = "no" if label == "yes" else "yes"
    answer = f'{{"choice": "{label}", "reason": "small"}}'
    reply = Reply(answer, alternatives={label: {label: p, other: 1 - p}})
    endpoint.script("Judge the answer", reply, model=SMALL)


def spent(metrics: ScorerMetrics, tier: str) -> float | None:
    labels = {"rule": "answer_correct", "pack": "p", "tier": tier}
    return metrics.registry.get_sample_value("scorer_cascade_cost_usd_total", labels)


async def test_a_chat_first_tier_is_read_through_its_log_probabilities(
    endpoint: JudgeAndDecisions,
) -> None:
    small_says(endpoint, "yes", 0.95)
    (result,), metrics = await scored(endpoint, chat_cascade_rule(), trace(1))
    (score,) = result.scores
    assert (score.status, score.label, score.judge_model) == ("ok", "yes", SMALL)
    assert score.details is not None
    assert score.details["cascade"] == {"tier": "first", "confidence": pytest.approx(0.95)}
    assert score.details["decision"]["source"] == "logprobs"
    (sent,) = [r["body"] for r in endpoint.requests]  # the judge was not asked
    assert (sent["model"], sent["logprobs"]) == (SMALL, True)
    # the first tier read the rule's own prompt
    assert endpoint.prompts() == ["Judge the answer.\nQuestion: 1+1?\nAnswer: 2"]
    assert cascaded(metrics, "first", "accepted") == 1.0
    assert (spent(metrics, "first") or 0.0) > 0.0 and spent(metrics, "judge") is None


async def test_an_unsure_chat_first_tier_escalates_and_each_tier_is_costed(
    endpoint: JudgeAndDecisions,
) -> None:
    small_says(endpoint, "yes", 0.7)
    (result,), metrics = await scored(endpoint, chat_cascade_rule(), trace(1))
    (score,) = result.scores
    assert (score.label, score.judge_model) == ("no", CHAT_MODEL)
    assert score.details is not None
    assert score.details["cascade"]["escalated"] == "low_confidence"
    assert [r["body"]["model"] for r in endpoint.requests] == [SMALL, CHAT_MODEL]
    assert "logprobs" not in endpoint.requests[1]["body"]  # the judge is asked as before
    first, judge = spent(metrics, "first"), spent(metrics, "judge")
    assert first is not None and judge is not None and judge > first > 0.0


async def test_a_chat_first_tier_without_log_probabilities_escalates_every_target() -> None:
    with JudgeAndDecisions(logprobs="none") as endpoint:
        endpoint.script("Judge the answer", '{"result": "no", "reason": "the judge says no"}')
        small_says(endpoint, "yes", 0.99)
        results, metrics = await scored(endpoint, chat_cascade_rule(), trace(1), trace(2))
    for result in results:
        (score,) = result.scores
        assert score.judge_model == CHAT_MODEL and score.details is not None
        assert score.details["cascade"]["escalated"] == "no_confidence"
        assert score.details["cascade"]["first"]["model"] == SMALL
    assert cascaded(metrics, "judge", "no_confidence") == 2.0


def test_a_chat_first_tier_names_its_model_and_asks_no_question() -> None:
    with pytest.raises(ValidationError, match="names its model"):
        cascade_rule(first={"api": "chat"})
    with pytest.raises(ValidationError, match="drop instructions"):
        cascade_rule(first={"api": "chat", "model": SMALL, "instructions": "Is it right?"})
    tier = chat_cascade_rule().cascade_first()
    assert (tier.judge.api, tier.judge.model, tier.judge.logprobs) == ("chat", SMALL, True)
    assert tier.cascade_tier == "first" and chat_cascade_rule().cascade_tier == "judge"


async def test_the_scores_price_each_tier_as_the_metrics_do(endpoint: JudgeAndDecisions) -> None:
    """``scorer agreement``'s spend is read from the published scores; the metrics count the
    calls as they are made: two accounts of one run that must agree."""
    for n in range(12):
        p = 0.95 if n % 3 else 0.6
        reply = Reply('{"choice": "yes", "reason": "small"}', alternatives={"yes": {"yes": p}})
        endpoint.script(f"Question: {n}+{n}?", reply, model=SMALL)
    documents = [trace(n) for n in range(12)]
    results, metrics = await scored(endpoint, chat_cascade_rule(audit_rate=0.25), *documents)
    records = [s.model_dump_json().encode() for r in results for s in r.scores]
    price = settings().judge_cost
    (spend,) = cascade_spend(records + records[:3], None, None, price)  # a redelivery: once
    primaries = [s for r in results for s in r.scores if s.variant is None]
    judged = [s for s in primaries if s.details and s.details["cascade"]["tier"] == "judge"]
    assert spend.targets == 12 and sum(spend.escalated.values()) == len(judged)
    audited = {n for n, r in enumerate(results) if any(s.variant for s in r.scores)}
    unsure = {n for n in range(12) if n % 3 == 0}  # the small model's 0.6
    assert spend.escalated == Counter(
        {"audit": len(audited), "low_confidence": len(unsure - audited)}
    )
    assert spend.first_usd == pytest.approx(spent(metrics, "first"))
    assert spend.judge_usd == pytest.approx(spent(metrics, "judge"))
    assert spend.judge_paid == len(judged)
    line = spend.line()
    assert "judge decided" in line and "the judge alone about" in line
    assert cascade_spend(records, None, "another_rule", price) == []
    # a model the price table lacks is said, not counted
    (unpriced,) = cascade_spend(records, None, None, lambda m, u: None if m == SMALL else 1.0)
    assert unpriced.unpriced == {SMALL} and unpriced.first_usd == 0.0
    assert unpriced.judge_usd == len(judged)
    # verdicts from the verdict cache cost nothing
    cached = []
    for record in records:
        score = orjson.loads(record)
        score["details"]["cached"] = True
        if first := score["details"].get("cascade", {}).get("first"):
            first["cached"] = True
        cached.append(orjson.dumps(score))
    (free,) = cascade_spend(cached, None, None, price)
    assert (free.first_usd, free.judge_usd, free.judge_paid, free.targets) == (0.0, 0.0, 0, 12)
