"""The provider simulator itself, through the openai SDK against its real HTTP server: each
documented behaviour answers as the SDK would see it from a hosted provider."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam
from provider_sim import (
    Answer,
    Overload,
    ParamRefusal,
    ProviderSim,
    RateLimit,
    Refusals,
    RetryAfter,
    SlowDown,
    openai_duration,
)

MODEL = "sim-model"
Start = Callable[..., tuple[ProviderSim, openai.OpenAI]]


class FakeClock:
    """The simulator's monotonic clock, moved by hand."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


@dataclass
class Outcome:
    status: int
    headers: dict[str, str]
    body: Any  # the completion the SDK parsed, or the error object it read


def ask(client: openai.OpenAI, prompt: str = "hi", **params: Any) -> Outcome:
    """One chat completion through the SDK (no retries), whatever came back."""
    params.setdefault("model", MODEL)
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": prompt}]
    try:
        raw = client.chat.completions.with_raw_response.create(messages=messages, **params)
    except openai.APIStatusError as exc:
        return Outcome(exc.status_code, dict(exc.response.headers), exc.body)
    return Outcome(200, dict(raw.headers), raw.parse())


def statuses(client: openai.OpenAI, n: int, **params: Any) -> list[int]:
    return [ask(client, **params).status for _ in range(n)]


def seconds_of(duration: str) -> float:
    """OpenAI's duration format ("120ms", "1m30.5s", "2h0m1s") in seconds."""
    parts = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m(?!s))?(?:([\d.]+)s)?(?:(\d+)ms)?", duration)
    assert parts is not None and duration, duration
    hours, minutes, seconds, ms = (float(p) if p else 0.0 for p in parts.groups())
    return hours * 3600 + minutes * 60 + seconds + ms / 1000


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def provider() -> Iterator[Start]:
    """Start a simulator with the given options; a client on it that never retries."""
    started: list[ProviderSim] = []

    def start(**options: Any) -> tuple[ProviderSim, openai.OpenAI]:
        sim = ProviderSim(**options).start()
        started.append(sim)
        return sim, openai.OpenAI(base_url=sim.base_url, api_key="sim", max_retries=0)

    yield start
    for sim in started:
        sim.stop()


def test_a_bucket_admits_its_burst_then_refuses_with_the_exact_wait(
    provider: Start, clock: FakeClock
) -> None:
    sim, client = provider(
        requests=RateLimit(60, burst=3), retry_after=RetryAfter("exact", ms=True), clock=clock
    )
    assert statuses(client, 3) == [200, 200, 200]
    refused = ask(client)
    assert refused.status == 429
    assert (refused.headers["retry-after"], refused.headers["retry-after-ms"]) == ("1", "1000")
    assert refused.body["type"] == "requests" and refused.body["code"] == "rate_limit_exceeded"
    assert refused.body["message"].startswith(
        f"Rate limit reached for {MODEL} in organization org-sim on requests per min (RPM):"
        " Limit 60, Used 3, Requested 1. Please try again in 1s."
    )
    clock.advance(0.4)
    assert ask(client).headers["retry-after-ms"] == "600"
    clock.advance(0.6)
    assert statuses(client, 2) == [200, 429]
    assert sim.statuses == [200, 200, 200, 429, 429, 200, 429]
    assert [c.reason for c in sim.calls][-2:] == ["answered", "requests"]


def test_a_sliding_window_refuses_the_next_call_until_the_oldest_leaves(
    provider: Start, clock: FakeClock
) -> None:
    _, client = provider(requests=RateLimit(600, shape="window", window_s=2), clock=clock)
    assert statuses(client, 10) == [200] * 10  # 20 calls in any 2 s
    clock.advance(1.5)
    assert statuses(client, 10) == [200] * 10
    refused = ask(client)
    assert (refused.status, refused.headers["retry-after"]) == (429, "1")  # 0.5 s, rounded up
    assert "Please try again in 500ms" in refused.body["message"]
    clock.advance(0.5)  # the first ten leave the window
    assert statuses(client, 11) == [200] * 10 + [429]


def test_a_window_on_the_real_clock(provider: Start) -> None:
    sim, client = provider(requests=RateLimit(600, shape="window", window_s=0.5))
    assert statuses(client, 6) == [200] * 5 + [429]
    time.sleep(0.5)
    assert ask(client).status == 200
    assert sim.calls[-1].at - sim.calls[0].at >= 0.5


def test_announced_limits_count_down_and_their_reset_parses(
    provider: Start, clock: FakeClock
) -> None:
    _, client = provider(
        requests=RateLimit(600, burst=5), tokens=RateLimit(6000, burst=1000), clock=clock
    )
    seen = [ask(client, "x" * 400, max_tokens=100).headers for _ in range(3)]  # 200 tokens each
    assert [h["x-ratelimit-remaining-requests"] for h in seen] == ["4", "3", "2"]
    assert [h["x-ratelimit-remaining-tokens"] for h in seen] == ["800", "600", "400"]
    last = seen[-1]
    assert (last["x-ratelimit-limit-requests"], last["x-ratelimit-limit-tokens"]) == ("600", "6000")
    assert seconds_of(last["x-ratelimit-reset-requests"]) == pytest.approx(0.3)  # 3 at 10/s
    assert seconds_of(last["x-ratelimit-reset-tokens"]) == pytest.approx(6.0)  # 600 at 100/s
    assert last["x-ratelimit-reset-tokens"] == "6s"
    refused = [ask(client).headers for _ in range(3)][-1]  # the 429s announce as well
    assert refused["x-ratelimit-remaining-requests"] == "0"


def test_a_silent_limit_announces_nothing(provider: Start, clock: FakeClock) -> None:
    _, client = provider(
        requests=RateLimit(60, announced=False), tokens=RateLimit(6000), clock=clock
    )
    answered, refused = ask(client).headers, ask(client).headers
    for headers in (answered, refused):
        assert not any(name.endswith("-requests") for name in headers)
        assert headers["x-ratelimit-limit-tokens"] == "6000"


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.12, "120ms"), (1.0, "1s"), (90.5, "1m30.5s"), (360.0, "6m0s"), (7201.0, "2h0m1s")],
)
def test_reset_durations_are_written_as_openai_writes_them(seconds: float, text: str) -> None:
    assert openai_duration(seconds) == text
    assert seconds_of(text) == pytest.approx(seconds)


def test_a_token_limit_refuses_a_large_prompt_and_says_tokens(
    provider: Start, clock: FakeClock
) -> None:
    sim, client = provider(
        tokens=RateLimit(60_000, shape="window", window_s=1),  # 1,000 tokens in any second
        completion_estimate=50,
        clock=clock,
    )
    assert ask(client, "x" * 2000, max_tokens=100).status == 200  # 500 + 100 tokens
    refused = ask(client, "x" * 2000, max_tokens=100)
    assert refused.status == 429
    assert refused.body["type"] == "tokens" and refused.body["code"] == "rate_limit_exceeded"
    assert "tokens per min (TPM): Limit 60000, Used 600, Requested 600" in refused.body["message"]
    assert refused.headers["retry-after"] == "1"
    too_large = ask(client, "x" * 4000)  # 1,000 + 50 estimated: more than the whole window
    assert too_large.status == 429 and "retry-after" not in too_large.headers
    assert too_large.body["message"].startswith(
        f"Request too large for {MODEL} in organization org-sim on tokens per min (TPM)"
    )
    assert [(c.tokens, c.reason) for c in sim.calls] == [
        (600, "answered"),
        (600, "tokens"),
        (1050, "too_large"),
    ]


def test_a_call_over_the_bucket_burst_passes_at_the_limits_pace(
    provider: Start, clock: FakeClock
) -> None:
    _, client = provider(tokens=RateLimit(60_000), clock=clock)  # 1,000 tokens a second
    big = "x" * 12_000  # 3,000 tokens: over the burst, under the minute
    assert ask(client, big).status == 200
    assert ask(client, big).headers["retry-after"] == "3"  # the debt, then a full bucket
    clock.advance(3)
    assert ask(client, big).status == 200


def test_an_understated_retry_after_says_one_while_the_real_wait_is_longer(
    provider: Start, clock: FakeClock
) -> None:
    _, client = provider(
        requests=RateLimit(600, shape="window", window_s=3),
        retry_after=RetryAfter("understated"),
        clock=clock,
    )
    assert statuses(client, 30) == [200] * 30
    refused = ask(client)
    assert refused.headers["retry-after"] == "1" and "try again in 3s" in refused.body["message"]
    clock.advance(1)
    assert ask(client).status == 429  # waiting what it said is not enough
    clock.advance(2)
    assert ask(client).status == 200


def test_fixed_and_absent_retry_after(provider: Start, clock: FakeClock) -> None:
    _, fixed = provider(
        requests=RateLimit(60, burst=1), retry_after=RetryAfter("fixed", 7), clock=clock
    )
    assert [ask(fixed).headers.get("retry-after") for _ in range(2)] == [None, "7"]
    _, silent = provider(
        requests=RateLimit(60, burst=1), retry_after=RetryAfter("none"), clock=clock
    )
    refused = [ask(silent) for _ in range(2)][-1]
    assert refused.status == 429 and "retry-after" not in refused.headers


def test_refused_calls_count_when_the_provider_says_they_do(
    provider: Start, clock: FakeClock
) -> None:
    _, client = provider(requests=RateLimit(60, burst=1, count_refused=True), clock=clock)
    assert statuses(client, 2) == [200, 429]
    clock.advance(1)  # the refused call took the second that came back
    assert ask(client).status == 429
    clock.advance(2)
    assert ask(client).status == 200


def test_insufficient_quota_never_clears(provider: Start, clock: FakeClock) -> None:
    sim, client = provider(quota_requests=2, clock=clock)
    assert statuses(client, 2) == [200, 200]
    for _ in range(3):
        refused = ask(client)
        clock.advance(3600)
        assert refused.status == 429 and "retry-after" not in refused.headers
        assert refused.body == {
            "message": "You exceeded your current quota, please check your plan and billing details.",
            "type": "insufficient_quota",
            "param": None,
            "code": "insufficient_quota",
        }
    assert [c.reason for c in sim.calls][-1] == "insufficient_quota"


def test_random_refusals_hit_their_share(provider: Start) -> None:
    sim, client = provider(refusals=Refusals(share=1 / 7, seed=3))
    statuses(client, 350)
    assert 0.1 < sim.share_429() < 0.19
    assert {c.reason for c in sim.calls if c.status == 429} == {"refused_anyway"}


@pytest.mark.parametrize("retry_after", [RetryAfter("fixed", 1), RetryAfter("none")])
def test_every_nth_call_is_refused(provider: Start, retry_after: RetryAfter) -> None:
    sim, client = provider(refusals=Refusals(every=7, retry_after=retry_after))
    outcomes = [ask(client) for _ in range(70)]
    assert [i for i, o in enumerate(outcomes, 1) if o.status == 429] == list(range(7, 71, 7))
    said = {o.headers.get("retry-after") for o in outcomes if o.status == 429}
    assert said == ({"1"} if retry_after.mode == "fixed" else {None})
    assert sim.share_429() == pytest.approx(1 / 7)


def test_overload_bursts_start_and_stop_on_schedule(provider: Start, clock: FakeClock) -> None:
    overload = Overload(period_s=60, burst_s=10, retry_after=RetryAfter("exact"))
    _, client = provider(overload=overload, clock=clock)
    seen = []
    for at in (0, 9.5, 10, 59.9, 60, 69.99, 70):
        clock.t = 1000.0 + at
        seen.append(ask(client))
    assert [o.status for o in seen] == [529, 529, 200, 200, 529, 529, 200]
    assert [o.headers.get("retry-after") for o in seen[:2]] == ["10", "1"]
    assert seen[0].body == {"type": "overloaded_error", "message": "Overloaded"}  # the SDK's read


def test_an_overload_can_answer_503_as_openai(provider: Start, clock: FakeClock) -> None:
    _, client = provider(overload=Overload(burst_s=5, status=503, offset_s=30), clock=clock)
    assert ask(client).status == 200
    clock.advance(31)
    refused = ask(client)
    assert refused.status == 503 and "retry-after" not in refused.headers
    assert refused.body["message"] == "The engine is currently overloaded, please try again later."


def test_slow_down_refuses_a_ramp_steeper_than_allowed_even_within_the_limit(
    provider: Start, clock: FakeClock
) -> None:
    sim, client = provider(
        requests=RateLimit(6000), slow_down=SlowDown(growth=2, floor=5, window_s=1), clock=clock
    )
    assert statuses(client, 6) == [200] * 5 + [429]
    clock.advance(1)  # six arrived in the last window: twelve may now
    assert statuses(client, 13) == [200] * 12 + [429]
    refused = ask(client)
    assert refused.body["code"] == "slow_down"
    assert refused.body["message"].startswith(
        "A sudden increase in your request rate is impacting service reliability."
        " Please reduce your request rate"
    )
    assert {c.reason for c in sim.calls if c.status == 429} == {"slow_down"}  # not the limit


def test_reasoning_models_refuse_parameters_they_do_not_take(provider: Start) -> None:
    _, client = provider(
        refused_params=[
            ParamRefusal(("temperature", "max_tokens"), models=("o-sim",)),
            ParamRefusal(("response_format",), models=("plain-sim",)),
        ]
    )
    no_max = ask(client, model="o-sim", max_tokens=50)
    assert no_max.status == 400
    assert no_max.body == {
        "message": "Unsupported parameter: 'max_tokens' is not supported with this model."
        " Use 'max_completion_tokens' instead.",
        "type": "invalid_request_error",
        "param": "max_tokens",
        "code": "unsupported_parameter",
    }
    cold = ask(client, model="o-sim", temperature=0)
    assert (cold.status, cold.body["code"], cold.body["param"]) == (
        400,
        "unsupported_value",
        "temperature",
    )
    assert cold.body["message"] == (
        "Unsupported value: 'temperature' does not support 0 with this model."
        " Only the default (1) value is supported."
    )
    assert ask(client, model="o-sim", temperature=1, max_completion_tokens=50).status == 200
    assert ask(client, model="other", temperature=0, max_tokens=50).status == 200
    schema = {"type": "json_schema", "json_schema": {"name": "v", "schema": {"type": "object"}}}
    plain = ask(client, model="plain-sim", response_format=schema)
    assert plain.status == 400 and "response_format" in plain.body["message"]
    assert ask(client, model="o-sim", response_format=schema).status == 200


def test_answers_come_back_as_the_sdk_parses_them(provider: Start) -> None:
    _, client = provider(
        answer=Answer(content=lambda prompt, body: f'{{"echo": "{prompt}"}}'),
        answers={
            "cut-sim": Answer(cut_to=5),
            "refusing-sim": Answer(refusal="I can't help with that."),
            "no-usage-sim": Answer(usage=False),
        },
    )
    echoed = ask(client, "x" * 40).body
    assert echoed.choices[0].message.content == '{"echo": "' + "x" * 40 + '"}'
    assert echoed.choices[0].finish_reason == "stop"
    assert echoed.usage.prompt_tokens == 10 and echoed.usage.completion_tokens == 13
    assert echoed.usage.total_tokens == 23
    cut = ask(client, model="cut-sim").body.choices[0]
    assert (cut.finish_reason, cut.message.content) == ("length", '{"sco')
    short = ask(client, max_tokens=2).body.choices[0]  # the answer outgrows max_tokens
    assert (short.finish_reason, short.message.content) == ("length", '{"echo":')
    refusal = ask(client, model="refusing-sim").body.choices[0].message
    assert (refusal.content, refusal.refusal) == (None, "I can't help with that.")
    assert ask(client, model="no-usage-sim").body.usage is None


async def test_calls_are_served_concurrently_with_their_latency(provider: Start) -> None:
    sim, _ = provider(latency_s=0.3, jitter_s=0.05, seed=1)
    client = openai.AsyncOpenAI(base_url=sim.base_url, api_key="sim", max_retries=0)
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]
    started = time.monotonic()
    await asyncio.gather(
        *(client.chat.completions.create(model=MODEL, messages=messages) for _ in range(20))
    )
    elapsed = time.monotonic() - started
    await client.close()
    assert 0.25 <= elapsed < 1.0  # twenty calls of about 0.3 s each, side by side
    assert sim.statuses == [200] * 20


def test_the_record_gives_a_benchs_figures(provider: Start, clock: FakeClock) -> None:
    sim, client = provider(requests=RateLimit(60, burst=1), tokens=RateLimit(60_000), clock=clock)
    start = sim.now()
    for _ in range(10):  # two calls a second against one a second allowed
        assert statuses(client, 2, prompt="x" * 400) == [200, 429]  # 100 tokens each
        clock.advance(1)
    end = sim.now()
    assert sim.share_429() == 0.5
    assert sim.accepted_per_s(start, end) == pytest.approx(1.0)
    assert sim.requests_used(start, end) == pytest.approx(1.0)
    assert sim.tokens_per_s(start, end) == pytest.approx(100.0)
    assert sim.tokens_used(start, end) == pytest.approx(0.1)
    assert sim.accepted_per_s() == pytest.approx(10 / 9)  # first to last arrival by default


def test_limits_are_per_model_unless_shared(provider: Start, clock: FakeClock) -> None:
    sim, client = provider(requests=RateLimit(60, burst=1), clock=clock)
    assert [ask(client, model=m).status for m in ("a", "b", "a")] == [200, 200, 429]
    assert (sim.share_429(model="a"), sim.share_429(model="b")) == (0.5, 0.0)
    _, shared = provider(requests=RateLimit(60, burst=1), limits_per_model=False, clock=clock)
    assert [ask(shared, model=m).status for m in ("a", "b")] == [200, 429]
