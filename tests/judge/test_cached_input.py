"""Cached input tokens: read from the usage the provider gives (the openai SDK's own types),
priced at the model's cached-input rate (as input when none is set), carried on the score and
counted: the tokens and dollars the provider's prompt cache saved, and each rule's cost."""

from __future__ import annotations

import pytest
from fixtures import as_trace, fretcoach_rules, live_trace, settings
from openai.types import CompletionUsage
from openai.types.completion_usage import PromptTokensDetails
from prometheus_client import CollectorRegistry
from pydantic import ValidationError
from scripted_judge import MockJudge

from stream.engine.scorer import Scorer
from stream.engine.spend import (
    DEFAULT_JUDGE_PRICES,
    ModelPrice,
    SpendLedger,
    cache_saving,
    judge_cost,
)
from stream.judge.client import JudgeClient
from stream.judge.openai_api import token_usage
from stream.metrics import ScorerMetrics
from stream.models import TokenUsage
from stream.settings import Settings

RULE = "studio_live_coach_feedback_quality"


def test_cached_tokens_are_read_from_prompt_tokens_details() -> None:
    usage = CompletionUsage(
        prompt_tokens=2_000,
        completion_tokens=50,
        total_tokens=2_050,
        prompt_tokens_details=PromptTokensDetails(cached_tokens=1_536, audio_tokens=0),
    )
    assert token_usage(usage) == TokenUsage(
        prompt_tokens=2_000, completion_tokens=50, total_tokens=2_050, cached_tokens=1_536
    )


@pytest.mark.parametrize(
    "details",
    [None, PromptTokensDetails(), PromptTokensDetails(cached_tokens=None, audio_tokens=3)],
    ids=["no details", "empty details", "cached_tokens null"],
)
def test_a_usage_without_cached_tokens_has_none_cached(details: PromptTokensDetails | None) -> None:
    usage = CompletionUsage(
        prompt_tokens=700, completion_tokens=20, total_tokens=720, prompt_tokens_details=details
    )
    parsed = token_usage(usage)
    assert (parsed.prompt_tokens, parsed.cached_tokens) == (700, 0)


def test_a_provider_cannot_report_more_cached_than_sent() -> None:
    usage = CompletionUsage.model_validate(
        {
            "prompt_tokens": 100,
            "completion_tokens": 1,
            "total_tokens": 101,
            "prompt_tokens_details": {"cached_tokens": 4_096},
        }
    )
    assert token_usage(usage).cached_tokens == 100


def test_cached_tokens_cost_the_cached_rate_and_the_rest_the_input_rate() -> None:
    price = ModelPrice(input=2.0, output=8.0, cached_input=0.5)
    # 600 input at $2, 400 cached at $0.50, 100 output at $8, per million
    assert price.cost(1_000, 100, cached_tokens=400) == pytest.approx(
        (600 * 2.0 + 400 * 0.5 + 100 * 8.0) / 1e6
    )
    assert price.cost(1_000, 100) == pytest.approx((1_000 * 2.0 + 100 * 8.0) / 1e6)


def test_without_a_cached_price_cached_tokens_cost_as_input() -> None:
    price = ModelPrice(input=2.0, output=8.0)
    assert price.cost(1_000, 100, cached_tokens=400) == price.cost(1_000, 100)
    usage = TokenUsage(prompt_tokens=1_000, completion_tokens=100, cached_tokens=400)
    assert cache_saving(lambda m, u: judge_cost({"m": price}, m, u), "m", usage) == 0.0


def test_the_saving_is_the_cached_tokens_at_input_less_cached_price() -> None:
    usage = TokenUsage(prompt_tokens=3_000, completion_tokens=10, cached_tokens=2_048)
    prices = DEFAULT_JUDGE_PRICES

    def cost(model: str, used: TokenUsage) -> float | None:
        return judge_cost(prices, model, used)

    assert cache_saving(cost, "gpt-4o-mini", usage) == pytest.approx(2_048 * (0.15 - 0.075) / 1e6)
    assert cache_saving(cost, "a-local-model", usage) is None  # no price: nothing estimated


# models whose list price names no cached-input rate: their cached tokens are priced as input
NO_CACHED_RATE = {"gpt-6-luna"}  # the Decisions API: $0.10 per million input tokens, no other


def test_every_default_price_has_a_cached_rate_below_its_input_rate() -> None:
    for model, price in DEFAULT_JUDGE_PRICES.items():
        if model in NO_CACHED_RATE:
            assert price.cached_input is None, model
            continue
        assert price.cached_input is not None and price.cached_input < price.input, model


def test_scorer_judge_prices_take_a_cached_input_price(monkeypatch: pytest.MonkeyPatch) -> None:
    prices = '{"my-judge": {"input": 1.0, "output": 2.0, "cached_input": 0.1}}'
    monkeypatch.setenv("SCORER_JUDGE_PRICES", prices)
    loaded = Settings().judge_prices
    assert loaded["my-judge"].cached_input == 0.1
    with pytest.raises(ValidationError):
        ModelPrice(input=1.0, output=2.0, cached_input=-0.1)


async def test_the_score_carries_cached_tokens_and_the_saving_is_counted() -> None:
    cfg = settings(openai_api_key="sk-test-secret")
    metrics = ScorerMetrics(CollectorRegistry())

    def sample(name: str, **labels: str) -> float | None:
        return metrics.registry.get_sample_value(f"scorer_{name}", labels)

    with MockJudge() as server:
        server.cached_prompt_tokens = 64
        server.script("evaluating live guitar coach", '{"score": 3, "reason": "fine"}')
        judge = JudgeClient(
            cfg.model_copy(update={"openai_base_url": server.base_url}).judge_config(), metrics
        )
        ledger = SpendLedger([], cfg.judge_cost)
        s = Scorer(
            fretcoach_rules(), judge, default_model="gpt-4o-mini", observer=metrics, ledger=ledger
        )
        document = live_trace()
        result = await s.score_trace(as_trace(document), document)
        await judge.close()
    score = next(x for x in result.scores if x.rule_id == RULE)
    assert score.status == "ok" and score.usage is not None
    assert score.usage.cached_tokens == 64
    assert score.model_dump(mode="json")["usage"]["cached_tokens"] == 64
    calls = sample("judge_calls_total", model="gpt-4o-mini", outcome="ok") or 0.0
    assert calls >= 1
    # every answered call of the worker had 64 cached tokens
    assert sample("judge_prompt_cached_tokens_total", model="gpt-4o-mini") == 64 * calls
    assert sample("judge_prompt_cache_saved_usd_total", model="gpt-4o-mini") == pytest.approx(
        64 * calls * (0.15 - 0.075) / 1e6
    )
    paid = cfg.judge_cost("gpt-4o-mini", score.usage)
    assert paid is not None
    rule_cost = sample(
        "rule_judge_cost_usd_total", rule=RULE, pack="fretcoach", model="gpt-4o-mini"
    )
    assert rule_cost == pytest.approx(paid)
