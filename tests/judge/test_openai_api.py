"""The OpenAI transport through the real SDK against the provider simulator: each answer a
real provider gives becomes the provider-neutral outcome the client's policy acts on."""

from __future__ import annotations

from provider_sim import (
    Answer,
    ParamRefusal,
    ProviderSim,
    RateLimit,
    RetryAfter,
    SlowDown,
)

from stream.judge.openai_api import OpenAIChatAPI
from stream.judge.transport import Answered, ChatRequest, Failed


def request(**fields: object) -> ChatRequest:
    base: dict[str, object] = {
        "model": "gpt-4o-mini",
        "messages": [{"role": "user", "content": "judge this"}],
        "temperature": 0.0,
    }
    return ChatRequest(**(base | fields))  # type: ignore[arg-type]


async def outcomes(sim: ProviderSim, *requests: ChatRequest) -> list[Answered | Failed]:
    api = OpenAIChatAPI(base_url=sim.base_url, api_key="sk-test", timeout_s=5.0)
    try:
        return [await api.complete(r) for r in requests]
    finally:
        await api.close()


async def test_a_rate_limit_429_carries_its_retry_after_headers_and_code() -> None:
    limits = RateLimit(60, burst=1)
    with ProviderSim(requests=limits, retry_after=RetryAfter("exact", ms=True)) as sim:
        first, second = await outcomes(sim, request(), request())
    assert isinstance(first, Answered)
    assert first.headers.get("x-ratelimit-limit-requests") == "60"
    assert isinstance(second, Failed) and second.kind == "rate_limited"
    assert second.code == "rate_limit_exceeded"
    assert second.retry_after is not None and 0.0 < second.retry_after <= 1.0
    assert second.headers is not None and "x-ratelimit-remaining-requests" in second.headers


async def test_insufficient_quota_is_not_a_rate() -> None:
    with ProviderSim(quota_requests=1) as sim:
        answered, refused = await outcomes(sim, request(), request())
    assert isinstance(answered, Answered)
    assert isinstance(refused, Failed) and refused.kind == "quota_exhausted"
    assert "insufficient_quota" in refused.message and refused.retry_after is None


async def test_a_slow_down_429_is_told_apart_by_its_code() -> None:
    with ProviderSim(slow_down=SlowDown(growth=1.0, floor=1, window_s=60.0)) as sim:
        results = await outcomes(sim, request(), request(), request())
    refused = [r for r in results if isinstance(r, Failed)]
    assert refused and {(r.kind, r.code) for r in refused} == {("rate_limited", "slow_down")}


async def test_parameters_a_reasoning_model_refuses_name_the_parameter() -> None:
    refusal = ParamRefusal(("temperature", "max_tokens"))
    with ProviderSim(refused_params=[refusal]) as sim:
        results = await outcomes(
            sim,
            request(max_tokens=100),
            request(temperature=None, max_tokens=100),
            request(temperature=None, max_tokens=100, max_tokens_name="max_completion_tokens"),
        )
    first, second, third = results
    assert isinstance(first, Failed) and (first.kind, first.param) == (
        "unsupported_parameter",
        "temperature",
    )
    assert isinstance(second, Failed) and (second.kind, second.param) == (
        "unsupported_parameter",
        "max_tokens",
    )
    assert isinstance(third, Answered)


async def test_cut_declined_and_usage_less_answers_say_so() -> None:
    answers = {
        "cut": Answer(content='{"score": 1, "reason": "long"}', cut_to=10),
        "declined": Answer(refusal="I can't help with that."),
        "bare": Answer(usage=False),
    }
    with ProviderSim(answers=answers) as sim:
        cut, declined, bare = await outcomes(
            sim, request(model="cut"), request(model="declined"), request(model="bare")
        )
    assert isinstance(cut, Answered) and cut.finish_reason == "length"
    assert cut.content == '{"score": '
    assert isinstance(declined, Answered) and declined.refusal == "I can't help with that."
    assert declined.content is None
    assert isinstance(bare, Answered) and bare.usage is None and bare.content
