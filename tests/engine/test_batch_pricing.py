"""A call answered through the Batch API is priced at the batch rate: half the online price
unless the price table says otherwise; a sum of batch and online calls is priced online."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from stream.engine.spend import (
    DEFAULT_JUDGE_PRICES,
    ModelPrice,
    cache_saving,
    judge_cost,
)
from stream.models import TokenUsage
from stream.settings import Settings

ONLINE = TokenUsage(prompt_tokens=1_000, completion_tokens=200, total_tokens=1_200)
BATCHED = ONLINE.model_copy(update={"batch": True})


@pytest.mark.parametrize("model", sorted(DEFAULT_JUDGE_PRICES))
def test_a_batched_call_costs_half_the_same_online_call(model: str) -> None:
    online = judge_cost(DEFAULT_JUDGE_PRICES, model, ONLINE)
    batched = judge_cost(DEFAULT_JUDGE_PRICES, model, BATCHED)
    assert online is not None and online > 0
    assert batched == pytest.approx(online / 2)


def test_cached_tokens_in_a_batch_cost_half_the_cached_rate() -> None:
    price = ModelPrice(input=2.0, output=8.0, cached_input=0.5)
    # 600 input at $1, 400 cached at $0.25, 100 output at $4, per million
    assert price.cost(1_000, 100, cached_tokens=400, batch=True) == pytest.approx(
        (600 * 1.0 + 400 * 0.25 + 100 * 4.0) / 1e6
    )
    unpriced = ModelPrice(input=2.0, output=8.0)  # cached tokens as input: input halved
    assert unpriced.cost(1_000, 100, cached_tokens=400, batch=True) == pytest.approx(
        (1_000 * 1.0 + 100 * 4.0) / 1e6
    )
    usage = BATCHED.model_copy(update={"cached_tokens": 400})
    saved = cache_saving(lambda m, u: judge_cost({"m": price}, m, u), "m", usage)
    assert saved == pytest.approx(400 * (1.0 - 0.25) / 1e6)  # the saving at the batch rates


def test_explicit_batch_prices_are_used(monkeypatch: pytest.MonkeyPatch) -> None:
    prices = '{"j": {"input": 2.0, "output": 8.0, "batch_input": 1.5, "batch_output": 3.0}}'
    monkeypatch.setenv("SCORER_JUDGE_PRICES", prices)
    loaded = Settings().judge_prices
    assert judge_cost(loaded, "j", BATCHED) == pytest.approx((1_000 * 1.5 + 200 * 3.0) / 1e6)
    assert judge_cost(loaded, "j", ONLINE) == pytest.approx((1_000 * 2.0 + 200 * 8.0) / 1e6)
    # one of the two given: the other is half its online price
    half = ModelPrice(input=2.0, output=8.0, batch_output=6.0)
    assert half.cost(1_000, 200, batch=True) == pytest.approx((1_000 * 1.0 + 200 * 6.0) / 1e6)
    with pytest.raises(ValidationError):
        ModelPrice(input=1.0, output=2.0, batch_input=-0.1)


def test_a_mixed_sum_is_priced_online_and_a_batch_sum_stays_batch() -> None:
    assert (BATCHED + BATCHED).batch is True
    assert (BATCHED + ONLINE).batch is False and (ONLINE + BATCHED).batch is False
    mixed = BATCHED + ONLINE
    assert judge_cost(DEFAULT_JUDGE_PRICES, "gpt-4o", mixed) == pytest.approx(
        2 * (judge_cost(DEFAULT_JUDGE_PRICES, "gpt-4o", ONLINE) or 0.0)
    )
    assert TokenUsage().batch is False


def test_a_dated_snapshot_is_priced_as_its_model() -> None:
    """OpenAI answers a call to gpt-4.1-nano as gpt-4.1-nano-2025-04-14 (the completion's
    ``model``): a score's judge model is priced as the model asked for."""
    asked = judge_cost(DEFAULT_JUDGE_PRICES, "gpt-4.1-nano", ONLINE)
    assert asked is not None
    assert judge_cost(DEFAULT_JUDGE_PRICES, "gpt-4.1-nano-2025-04-14", ONLINE) == asked
    assert judge_cost({"claude-x": ModelPrice(input=1, output=1)}, "claude-x-20241022", ONLINE)
    assert judge_cost(DEFAULT_JUDGE_PRICES, "gpt-4.1-nano-preview", ONLINE) is None
