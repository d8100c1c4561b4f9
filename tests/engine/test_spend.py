"""Spend budgets: per rule or model, USD or tokens, per hour or day; a spent one skips."""

from __future__ import annotations

import pytest
from fixtures import as_trace, live_trace, scorer
from pydantic import ValidationError
from scripted_judge import MockJudge

from stream.engine.spend import Budget, SpendLedger
from stream.models import TokenUsage

USAGE = TokenUsage(prompt_tokens=900, completion_tokens=100, total_tokens=1000)


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0  # 2027-01-15 08:00 UTC, on the hour

    def __call__(self) -> float:
        return self.now


def test_a_usd_budget_for_a_rule_is_spent_then_resets_with_its_window() -> None:
    clock = Clock()
    ledger = SpendLedger([Budget(rule="r", usd=0.02, window="hour")], lambda m, u: 0.01, clock)
    assert ledger.exhausted("r", "m") is None
    ledger.record("r", "m", USAGE)
    assert ledger.exhausted("r", "m") is None
    ledger.record("r", "m", USAGE)
    why = ledger.exhausted("r", "m")
    assert why is not None and why.startswith("budget exhausted: rule r: $0.02 per hour")
    assert "resets at 2027-01-15 09:00 UTC" in why
    assert ledger.exhausted("other", "m") is None  # a rule budget covers that rule only
    clock.now += 3600
    assert ledger.exhausted("r", "m") is None
    assert ledger.used() == [(Budget(rule="r", usd=0.02, window="hour"), 0.0)]


def test_a_token_budget_for_a_model_covers_every_rule_on_it() -> None:
    ledger = SpendLedger([Budget(model="llama", tokens=1500)], clock=Clock())
    ledger.record("a", "llama", USAGE)
    assert ledger.exhausted("b", "llama") is None
    ledger.record("b", "llama", USAGE)
    assert ledger.used()[0][1] == pytest.approx(2000 / 1500)
    assert ledger.exhausted("c", "llama") is not None
    assert ledger.exhausted("c", "gpt-4o-mini") is None


@pytest.mark.parametrize(
    "fields",
    [
        {"usd": 1.0},
        {"rule": "r", "model": "m", "usd": 1.0},
        {"rule": "r"},
        {"rule": "r", "usd": 1, "tokens": 5},
    ],
)
def test_a_budget_names_one_target_and_one_amount(fields: dict) -> None:
    with pytest.raises(ValidationError):
        Budget(**fields)


async def test_a_spent_budget_skips_its_rule_and_the_decision_says_so() -> None:
    with MockJudge() as server:
        server.script("evaluating live guitar coach", '{"score": 3, "reason": "fine"}')
        s = scorer(server.base_url)
        rule = "studio_live_coach_feedback_quality"
        s.ledger = SpendLedger([Budget(rule=rule, tokens=1)])
        document = live_trace()
        first = await s.score_trace(as_trace(document), document)
        second = await s.score_trace(as_trace(document), document)
        assert next(x for x in first.scores if x.rule_id == rule).status == "ok"
        skipped = next(x for x in second.scores if x.rule_id == rule)
        assert skipped.status == "skipped"
        assert skipped.status_reason is not None
        assert skipped.status_reason.startswith("budget exhausted: rule " + rule)
        decision = next(d for d in second.decisions if d.rule_id == rule)
        assert decision.outcome == "skipped" and decision.detail == skipped.status_reason
        assert sum("evaluating live guitar coach" in p for p in server.prompts()) == 1
        assert s.judge is not None
        await s.judge.close()


async def test_unusable_answers_are_charged_to_the_budget() -> None:
    with MockJudge() as server:
        server.script("evaluating live guitar coach", "no idea", "still none")
        s = scorer(server.base_url, judge_max_attempts=2)
        rule = "studio_live_coach_feedback_quality"
        s.ledger = SpendLedger([Budget(rule=rule, tokens=10**6)])
        document = live_trace()
        result = await s.score_trace(as_trace(document), document)
        failed = next(x for x in result.scores if x.rule_id == rule)
        assert failed.status == "error" and failed.usage is not None
        tokens = failed.usage.prompt_tokens + failed.usage.completion_tokens
        assert tokens > 0
        assert s.ledger.used()[0][1] == pytest.approx(tokens / 10**6)
        assert s.judge is not None
        await s.judge.close()
