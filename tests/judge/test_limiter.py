"""Pacing judge calls: Retry-After forms, announced and measured rate limits."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from stream.judge.limiter import AdaptiveLimiter, duration_seconds, retry_after_seconds


def test_retry_after_forms() -> None:
    assert retry_after_seconds({"retry-after-ms": "250"}) == 0.25
    assert retry_after_seconds({"retry-after": "2"}) == 2.0
    assert retry_after_seconds({}) is None


def test_limiter_paces_to_an_announced_rate() -> None:
    limiter = AdaptiveLimiter(8)
    limiter.on_success({"x-ratelimit-limit-requests": "600"})
    assert limiter.announced
    assert limiter.interval == pytest.approx(0.1 / 0.985)


def test_limiter_measures_a_silent_limit_and_probes_back_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [100.0]
    monkeypatch.setattr("stream.judge.limiter.time.monotonic", lambda: clock[0])
    limiter = AdaptiveLimiter(8)
    for _ in range(100):  # 20 successes a second for 5 s
        clock[0] += 0.05
        limiter.on_success({})
    limiter.on_rate_limited(0.2, {})
    assert limiter.interval == pytest.approx(1 / (20 * 0.95), rel=0.02)
    assert limiter.limit == 4  # concurrency halved too
    cut = limiter.interval
    limiter.on_rate_limited(None, {})  # the same burst: no second cut within a second
    assert limiter.interval == cut
    for _ in range(20):  # a second of successes raises the pace by about 3 %
        clock[0] += 0.05
        limiter.on_success({})
    assert cut / limiter.interval == pytest.approx(1.03, rel=0.005)


def simulate(
    monkeypatch: pytest.MonkeyPatch, seconds: float, refuse: Callable[[float], bool], offered: float
) -> tuple[AdaptiveLimiter, list[tuple[float, bool]]]:
    """Calls offered at ``offered`` a second (as fast as the limiter's pace allows), each
    answered 429 when ``refuse(now)``; returns the limiter and every (time, refused)."""
    clock = [0.0]
    monkeypatch.setattr("stream.judge.limiter.time.monotonic", lambda: clock[0])
    limiter = AdaptiveLimiter(32)
    outcomes = []
    while clock[0] < seconds:
        clock[0] += max(1.0 / offered, limiter.interval)
        refused = refuse(clock[0])
        outcomes.append((clock[0], refused))
        if refused:
            limiter.on_rate_limited(None, {})
        else:
            limiter.on_success({})
    return limiter, outcomes


def test_429s_that_do_not_follow_the_rate_do_not_ratchet_it_down(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rng = random.Random(7)
    limiter, outcomes = simulate(monkeypatch, 60.0, lambda now: rng.random() < 1 / 7, 100.0)
    late = [refused for when, refused in outcomes if when >= 30.0]
    assert len(late) / 30.0 >= 80.0  # still near the offered 100 calls a second
    assert limiter.background == pytest.approx(1 / 7, abs=0.06)
    assert limiter.limit >= 16  # concurrency recovered


def test_a_silent_limit_is_found_and_held_just_under(monkeypatch: pytest.MonkeyPatch) -> None:
    bucket = {"tokens": 1.0, "at": 0.0}

    def refuse(now: float) -> bool:  # a provider that lets 20 calls a second through
        bucket["tokens"] = min(1.0, bucket["tokens"] + (now - bucket["at"]) * 20.0)
        bucket["at"] = now
        if bucket["tokens"] >= 1.0:
            bucket["tokens"] -= 1.0
            return False
        return True

    limiter, outcomes = simulate(monkeypatch, 120.0, refuse, 100.0)
    late = [refused for when, refused in outcomes if when >= 60.0]
    answered = sum(not r for r in late) / 60.0
    assert (
        answered >= 0.9 * 20.0
    )  # the limit is used (one call at a time: the bench measures more) ...
    assert sum(late) / len(late) < 0.02  # ... with under 2 % of calls refused
    assert limiter.background == 0.0  # these 429s follow the rate: never taken for noise


@pytest.fixture
def frozen(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The limiter's clock, set by the test; its sleeps return at once."""
    clock = [1000.0]

    async def no_sleep(seconds: float) -> None:
        return None

    monkeypatch.setattr("stream.judge.limiter.time.monotonic", lambda: clock[0])
    monkeypatch.setattr("stream.judge.limiter.asyncio.sleep", no_sleep)
    return clock


async def test_a_short_retry_after_belongs_to_the_call_that_got_it(frozen: list[float]) -> None:
    """OpenAI, Azure and Anthropic send Retry-After with a 429: one refused call among many
    answered waits it itself (the client's backoff); the others go on at once."""
    limiter = AdaptiveLimiter(8)
    for _ in range(20):
        frozen[0] += 0.05
        limiter.on_success({}, frozen[0])
    limiter.on_rate_limited(1.0, {}, frozen[0])
    assert await limiter.acquire() == frozen[0]


async def test_a_long_retry_after_holds_every_call(frozen: list[float]) -> None:
    """A pause as long as a quota window's reset is asked of every call."""
    limiter = AdaptiveLimiter(8)
    limiter.on_success({}, frozen[0])
    limiter.on_rate_limited(30.0, {}, frozen[0])
    assert await limiter.acquire() == pytest.approx(frozen[0] + 30.0)


async def test_most_calls_refused_at_once_hold_every_call_for_their_retry_after(
    frozen: list[float],
) -> None:
    limiter = AdaptiveLimiter(8)
    for _ in range(5):
        frozen[0] += 0.01
        limiter.on_rate_limited(2.0, {}, frozen[0])
    assert await limiter.acquire() == pytest.approx(frozen[0] + 2.0)


async def test_an_announced_token_limit_spaces_calls_by_their_tokens(frozen: list[float]) -> None:
    """OpenAI and Azure announce ``x-ratelimit-limit-tokens`` (per minute): calls of 9,500
    estimated tokens against 60,000 a minute (95 % of it used: 950 a second) go 10 s apart."""
    limiter = AdaptiveLimiter(8)
    limiter.on_success({"x-ratelimit-limit-tokens": "60000"}, frozen[0])
    first = await limiter.acquire(9500)
    second = await limiter.acquire(9500)
    assert second - first == pytest.approx(10.0)
    # the answer said it used 4,750 tokens more than estimated: the next call waits for them
    limiter.on_success({}, first, estimated=9500, used=14250)
    third = await limiter.acquire(0)
    assert third - second == pytest.approx(15.0)


async def test_a_spent_token_budget_holds_calls_until_it_resets(frozen: list[float]) -> None:
    limiter = AdaptiveLimiter(8)
    headers = {
        "x-ratelimit-limit-tokens": "60000",
        "x-ratelimit-remaining-tokens": "1200",
        "x-ratelimit-reset-tokens": "6.5s",
    }
    limiter.on_success(headers, frozen[0])
    assert await limiter.acquire(100) == pytest.approx(frozen[0] + 6.5)


def test_reset_durations_in_openai_form() -> None:
    assert duration_seconds("1s") == 1.0
    assert duration_seconds("6m0s") == 360.0
    assert duration_seconds("120ms") == pytest.approx(0.12)
    assert duration_seconds("1m30.5s") == 90.5
    assert duration_seconds("2") == 2.0
    assert duration_seconds("soon") is None
    assert duration_seconds(None) is None


def test_a_slow_down_holds_the_ramp_and_keeps_the_pace(frozen: list[float]) -> None:
    """OpenAI's 429 ``slow_down``: traffic grew too fast, even within the limits. The pace and
    concurrency reached stay; they stop growing for a while."""
    limiter = AdaptiveLimiter(32)
    for _ in range(6):
        frozen[0] += 0.1
        limiter.on_success({}, frozen[0])
    reached = limiter.limit
    limiter.on_rate_limited(None, {}, frozen[0], code="slow_down")
    assert limiter.limit == reached  # no cut
    for _ in range(50):
        frozen[0] += 0.1
        limiter.on_success({}, frozen[0])
    assert limiter.limit == reached  # no growth while held
    frozen[0] += 60.0
    limiter.on_success({}, frozen[0])
    assert limiter.limit > reached  # the ramp goes on afterwards
