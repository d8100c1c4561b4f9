"""Budgets that degrade: ``skip`` (a spent budget skips its rules), ``sample`` (the rule's rate is
lowered so the rest of the budget lasts the window, deterministic per target id, and recovers in
the next window), ``fallback`` (a spent budget's rules are judged by a cheaper model, and their
scores name it), ``defer`` (a spent budget's rules are judged later in a batch, at the batch
rate)."""

from __future__ import annotations

import re

import pytest
from fixtures import as_trace, live_trace, scorer
from pydantic import ValidationError
from scripted_judge import MockJudge

from stream.engine.spend import (
    Admission,
    Budget,
    ModelPrice,
    SpendLedger,
    judge_cost,
    sample_factor,
)
from stream.judge.cache import CachingJudge, VerdictCache
from stream.judge.client import JudgeClient
from stream.models import TokenUsage
from stream.ruleset.filters import sampled
from stream.settings import Settings

USAGE = TokenUsage(prompt_tokens=900, completion_tokens=100, total_tokens=1000)
RULE = "studio_live_coach_feedback_quality"
HOUR = 3600.0


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0  # 2027-01-15 08:00 UTC, on the hour

    def __call__(self) -> float:
        return self.now


# -- configuration ------------------------------------------------------------------------


def test_a_defer_budget_loads_from_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCORER_JUDGE_BUDGETS", '[{"rule": "r", "usd": 5, "mode": "defer"}]')
    (budget,) = Settings().judge_budgets
    assert (budget.mode, budget.fallback) == ("defer", None)
    with pytest.raises(ValidationError, match="other modes name none"):
        Budget(rule="r", usd=5, mode="defer", fallback="nano")


def test_a_fallback_alone_means_mode_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCORER_JUDGE_BUDGETS", '[{"rule": "r", "usd": 5, "fallback": "nano"}]')
    (budget,) = Settings().judge_budgets
    assert (budget.mode, budget.fallback) == ("fallback", "nano")
    assert Budget(rule="r", usd=5).mode == "skip"  # today's behaviour stays the default


@pytest.mark.parametrize(
    "fields",
    [
        {"rule": "r", "usd": 1, "mode": "fallback"},  # no model to fall back to
        {"rule": "r", "usd": 1, "mode": "sample", "fallback": "nano"},
        {"model": "nano", "usd": 1, "fallback": "nano"},
        {"rule": "r", "usd": 1, "mode": "slow"},
    ],
)
def test_a_mode_is_one_of_skip_sample_fallback_with_its_model(fields: dict) -> None:
    with pytest.raises(ValidationError):
        Budget(**fields)


# -- the sample arithmetic ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("left", "offered", "calls", "spent", "elapsed_s", "factor"),
    [
        (1.0, 1, 0, 0.0, 0.0, 1.0),  # no call yet: no cost to go by
        # $0.50 left at $0.01 a call pays for 50 calls; 100 targets in the first half hour,
        # so 100 more to come: half of them
        (0.5, 100, 50, 0.5, 1800.0, 0.5),
        (0.9, 10, 10, 0.1, 1800.0, 1.0),  # spending slower than it lasts: the whole rate
        (0.0, 100, 100, 1.0, 1800.0, 0.0),  # spent
        (0.3, 100, 10, 0.7, 3600.0, 1.0),  # the window's last instant
    ],
)
def test_the_factor_is_what_the_rest_of_the_budget_pays_for_over_what_is_to_come(
    left: float, offered: int, calls: int, spent: float, elapsed_s: float, factor: float
) -> None:
    assert sample_factor(left, offered, calls, spent, elapsed_s, 3600 - elapsed_s) == (
        pytest.approx(factor)
    )


def run_window(ledger: SpendLedger, clock: Clock, rule_rate: float, targets: int) -> dict:
    """``targets`` targets arriving evenly over one hour, each judged when admitted and
    sampled (deterministically by its id) at the rate the ledger allows."""
    start, rates = clock.now, []
    judged: list[int] = []
    skipped: list[int] = []
    for i in range(targets):
        clock.now = start + i * HOUR / targets
        admission = ledger.admit("r", "m", rule_rate)
        if admission.skipped is not None:
            skipped.append(i)
            continue
        rates.append(admission.rate)
        if sampled("r", admission.rate, f"target-{start}-{i}"):
            ledger.record("r", "m", USAGE)
            judged.append(i)
    quarters = [
        sum(1 for i in judged if q * targets // 4 <= i < (q + 1) * targets // 4) for q in range(4)
    ]
    return {"judged": len(judged), "skipped": skipped, "rates": rates, "quarters": quarters}


def test_sampling_spreads_a_budget_over_its_window_and_recovers_in_the_next() -> None:
    clock = Clock()
    # a call costs $0.01; 400 targets an hour at the full rate would cost $4 of a $1 budget
    budget = Budget(rule="r", usd=1.0, window="hour", mode="sample")
    ledger = SpendLedger([budget], lambda m, u: 0.01, clock)
    first = run_window(ledger, clock, 1.0, 400)
    assert ledger.used()[0][1] <= 1.0 + 1e-9
    assert first["judged"] >= 90  # the budget is spent, none of it over
    # spread over the window: every quarter judges about a quarter of it (the hash's noise)
    assert all(15 <= judged <= 35 for judged in first["quarters"]), first["quarters"]
    # the last calls' dollar runs out only in the window's last minutes
    assert all(i >= 390 for i in first["skipped"])
    assert max(first["rates"]) == 1.0 and all(0.15 < r < 0.35 for r in first["rates"][40:-20])

    clock.now = 1_800_000_000.0 + HOUR  # the next window: the rule's own rate again
    admission = ledger.admit("r", "m", 1.0)
    assert (admission.rate, admission.lowered, admission.skipped) == (1.0, None, None)


def test_a_skip_budget_under_the_same_demand_stops_halfway() -> None:
    clock = Clock()
    ledger = SpendLedger([Budget(rule="r", usd=1.0, window="hour")], lambda m, u: 0.01, clock)
    run = run_window(ledger, clock, 1.0, 400)
    assert run["judged"] == 100 and len(run["skipped"]) == 300
    assert run["quarters"] == [100, 0, 0, 0]


def test_the_lowered_rate_is_never_above_the_rules_own() -> None:
    clock = Clock()
    budget = Budget(rule="r", usd=1.0, window="hour", mode="sample")
    ledger = SpendLedger([budget], lambda m, u: 0.01, clock)
    run = run_window(ledger, clock, 0.5, 800)  # at its own rate, $4 an hour
    assert max(run["rates"]) == 0.5 and all(i >= 780 for i in run["skipped"])
    assert ledger.used()[0][1] <= 1.0 + 1e-9


def test_a_spent_fallback_budget_judges_with_the_cheaper_model_until_that_is_spent() -> None:
    clock = Clock()
    budgets = [
        Budget(rule="r", usd=0.01, window="hour", fallback="nano"),
        Budget(model="nano", usd=0.02, window="hour"),
    ]
    ledger = SpendLedger(budgets, lambda m, u: 0.01, clock)
    assert ledger.admit("r", "big").model == "big"
    ledger.record("r", "big", USAGE)
    admission = ledger.admit("r", "big")
    assert admission.model == "nano" and admission.skipped is None
    assert admission.fell_back is not None
    assert admission.fell_back.startswith("rule r: $0.01 per hour is spent")
    assert admission.fell_back.endswith("judged by nano instead of big")
    ledger.record("r", "nano", USAGE)
    ledger.record("r", "nano", USAGE)
    spent = ledger.admit("r", "big")
    assert spent.skipped is not None and spent.skipped.startswith("budget exhausted: rule r")
    assert "and so is model nano: $0.02 per hour is spent" in spent.skipped
    clock.now += HOUR
    assert ledger.admit("r", "big").model == "big"


def test_a_spent_defer_budget_sends_the_rule_to_a_batch_until_the_window_resets() -> None:
    clock = Clock()
    prices = {"big": ModelPrice(input=10.0, output=10.0)}
    budget = Budget(rule="r", usd=0.01, window="hour", mode="defer")
    ledger = SpendLedger([budget], lambda m, u: judge_cost(prices, m, u), clock)
    assert ledger.admit("r", "big", 0.5) == Admission("big", 0.5)  # not spent yet
    ledger.record("r", "big", USAGE)  # 1,000 tokens at $10 a million: $0.01, all of it
    admission = ledger.admit("r", "big", 0.5)
    assert admission.skipped is None and admission.fell_back is None
    assert (admission.model, admission.rate) == ("big", 0.5)  # same judge, same sampling
    assert admission.deferred == (
        "rule r: $0.01 per hour is spent; it resets at 2027-01-15 09:00 UTC: judged in a batch"
    )
    assert admission.budget == {"mode": "defer", "budget": "rule r: $0.01 per hour"}
    assert ledger.exhausted("r", "big") is not None  # spent, whatever its mode
    # what the batch charges when it completes is the batch rate: half
    ledger.record("r", "big", USAGE.model_copy(update={"batch": True}))
    assert ledger.share(0) == pytest.approx(1.5)
    assert ledger.admit("r", "other").deferred is not None  # a rule budget, any model
    clock.now += HOUR
    assert ledger.admit("r", "big").deferred is None


def test_a_model_defer_budget_defers_only_that_models_rules() -> None:
    clock = Clock()
    ledger = SpendLedger([Budget(model="big", tokens=1000, mode="defer")], clock=clock)
    ledger.record("r", "big", USAGE)
    assert ledger.admit("r", "big").deferred is not None
    assert ledger.admit("r", "small") == Admission("small", 1.0)


# -- what the scores say ------------------------------------------------------------------


async def test_a_fallback_score_names_the_cheaper_model_it_was_judged_by() -> None:
    with MockJudge() as server:
        server.script("evaluating live guitar coach", '{"score": 3, "reason": "fine"}')
        s = scorer(server.base_url, judge_model="gpt-4o")
        s.ledger = SpendLedger([Budget(rule=RULE, tokens=1, fallback="gpt-4.1-nano")])
        document = live_trace()
        first = await s.score_trace(as_trace(document), document)
        second = await s.score_trace(as_trace(document), document)
        assert s.judge is not None
        await s.judge.close()
    before = next(x for x in first.scores if x.rule_id == RULE)
    after = next(x for x in second.scores if x.rule_id == RULE)
    assert (before.status, before.judge_model) == ("ok", "gpt-4o")
    assert (after.status, after.judge_model) == ("ok", "gpt-4.1-nano")
    assert after.details is not None
    assert after.details["budget"] == {
        "mode": "fallback",
        "budget": f"rule {RULE}: 1 tokens per day",
        "model": "gpt-4.1-nano",
        "instead_of": "gpt-4o",
    }
    models = [
        r["body"]["model"] for r in server.requests if "evaluating live guitar coach" in str(r)
    ]
    assert models == ["gpt-4o", "gpt-4.1-nano"]
    decision = next(d for d in second.decisions if d.rule_id == RULE)
    assert "judged by gpt-4.1-nano instead of gpt-4o" in (decision.detail or "")


async def test_sampled_scores_carry_the_rate_and_the_rest_are_sampled_out_by_id() -> None:
    clock = Clock()
    budget = Budget(rule=RULE, usd=1.0, window="hour", mode="sample")
    ledger = SpendLedger([budget], lambda m, u: 0.0025, clock)
    for i in range(340):  # the first half hour: 340 targets, $0.85 spent
        clock.now = 1_800_000_000.0 + i * 1800 / 340
        ledger.admit(RULE, "gpt-4o-mini")
        ledger.record(RULE, "gpt-4o-mini", USAGE)
    clock.now = 1_800_000_000.0 + 1800
    # $0.15 pays for 60 calls, 340 targets are to come: a rate of about 0.18 at first, falling
    ids = [f"trace-{i}" for i in range(40)]
    with MockJudge() as server:
        server.script("evaluating live guitar coach", '{"score": 3, "reason": "fine"}')
        s = scorer(server.base_url)
        s.ledger = ledger
        results = []
        for trace_id in ids:
            document = {**live_trace(), "id": trace_id}
            results.append(await s.score_trace(as_trace(document), document))
        assert s.judge is not None
        await s.judge.close()
    judged = 0
    for trace_id, result in zip(ids, results, strict=True):
        decision = next(d for d in result.decisions if d.rule_id == RULE)
        score = next((x for x in result.scores if x.rule_id == RULE), None)
        if score is None:
            assert decision.outcome == "sampled_out" and decision.detail is not None
            said = re.fullmatch(
                rf"sampling rate 1 lowered to (0\.\d+) by budget rule {RULE}: \$1 per hour "
                r"\(\d+% of it left for 50% of the window\)",
                decision.detail,
            )
            assert said is not None, decision.detail
            assert 0.1 < float(said[1]) < 0.2
            assert not sampled(RULE, float(said[1]), trace_id)
            continue
        judged += 1
        assert score.status == "ok" and score.details is not None
        rate = score.details["sampled_at"]
        assert 0.1 < rate < 0.2 and sampled(RULE, rate, trace_id)
        assert score.details["budget"]["mode"] == "sample"
        assert score.details["budget"]["rule_rate"] == 1.0
        assert "lowered to" in (decision.detail or "")
    assert 0 < judged < 20


async def test_a_spent_skip_budget_still_publishes_a_kept_verdict_which_costs_nothing() -> None:
    """A verdict the cache holds makes no call and charges nothing: a spent budget does not
    skip it. A target whose verdict is not kept is skipped, saying why."""
    with MockJudge() as server:
        server.script("evaluating live guitar coach", '{"score": 3, "reason": "fine"}')
        s = scorer(server.base_url)
        client = s.judge
        assert isinstance(client, JudgeClient)
        caching = CachingJudge(client, VerdictCache(), default_model=client.default_model)
        s.context.judge, s.context.holds = caching, caching.holds
        s.ledger = SpendLedger([Budget(rule=RULE, tokens=1)])
        document = live_trace()
        first = await s.score_trace(as_trace(document), document)  # spends the budget
        again = await s.score_trace(as_trace(document), document)
        other = live_trace(1)  # another exchange: another prompt
        fresh = await s.score_trace(as_trace(other), other)
        await caching.close()
    before, kept = (next(x for x in r.scores if x.rule_id == RULE) for r in (first, again))
    assert before.status == "ok" and kept.status == "ok"
    assert kept.details is not None and kept.details["cached"] is True
    assert kept.value == before.value and kept.usage is None
    skipped = next(x for x in fresh.scores if x.rule_id == RULE)
    assert skipped.status == "skipped"
    assert (skipped.status_reason or "").startswith("budget exhausted")
    assert sum("evaluating live guitar coach" in str(r) for r in server.requests) == 1
