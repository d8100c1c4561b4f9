"""Pacing judge calls: Retry-After and reset forms, the limiter's hold, announced limits, and
the pacer's verdicts on its segments (a limit, noise, no ratchet). The whole client against
each provider behaviour of issue 25's table is ``test_pacing.py``."""

from __future__ import annotations

import asyncio

import pytest

from stream.judge.headers import duration_seconds, retry_after_seconds
from stream.judge.limiter import HOLD_RUN, LONG_PAUSE_S, AdaptiveLimiter
from stream.judge.pacing import Pacer
from stream.judge.segments import SEGMENT_CALLS


class Clock:
    """A monotonic clock moved by hand."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_retry_after_forms() -> None:
    assert retry_after_seconds({"retry-after-ms": "250"}) == 0.25
    assert retry_after_seconds({"retry-after": "2"}) == 2.0
    assert retry_after_seconds({}) is None


def test_reset_durations_in_openai_form() -> None:
    assert duration_seconds("1s") == 1.0
    assert duration_seconds("6m0s") == 360.0
    assert duration_seconds("120ms") == pytest.approx(0.12)
    assert duration_seconds("1m30.5s") == 90.5
    assert duration_seconds("2") == 2.0
    assert duration_seconds("soon") is None
    assert duration_seconds(None) is None


async def test_an_announced_request_limit_paces_just_under() -> None:
    clock = Clock()
    limiter = AdaptiveLimiter(8, clock=clock)
    limiter.on_success({"x-ratelimit-limit-requests": "600"}, clock.t)
    assert limiter.pace() == (pytest.approx(10 * 0.985), "announced")
    first = await limiter.acquire()
    await limiter.release()
    assert limiter.requests.earliest(clock.t) == pytest.approx(first + 1 / (10 * 0.985))


async def test_an_announced_token_limit_spaces_calls_by_their_tokens() -> None:
    """OpenAI and Azure announce ``x-ratelimit-limit-tokens`` (per minute): calls of 9,500
    estimated tokens against 60,000 a minute (95 % of it used: 950 a second) go 10 s apart;
    an answer that used more than estimated pushes the next call back by the difference."""
    clock = Clock()
    limiter = AdaptiveLimiter(8, clock=clock)
    limiter.on_success({"x-ratelimit-limit-tokens": "60000"}, clock.t)
    first = await limiter.acquire(9500)
    assert limiter.tokens.earliest(clock.t) - first == pytest.approx(10.0)
    limiter.on_success({}, first, estimated=9500, used=14250)
    assert limiter.tokens.earliest(clock.t) - first == pytest.approx(15.0)


def test_a_token_budget_too_spent_for_a_call_holds_calls_until_made_up() -> None:
    """``x-ratelimit-remaining-tokens`` below what a call takes: calls wait until the provider
    has made up the difference at its announced rate (or its reset, if sooner)."""
    clock = Clock()
    limiter = AdaptiveLimiter(8, clock=clock)
    limiter._recent_costs = [3000.0]
    headers = {
        "x-ratelimit-limit-tokens": "60000",  # 1,000 a second
        "x-ratelimit-remaining-tokens": "1200",
        "x-ratelimit-reset-tokens": "58s",
    }
    limiter.on_success(headers, clock.t)
    assert limiter.tokens.held_until == pytest.approx(clock.t + 1.8)  # 1,800 short


async def test_a_short_retry_after_belongs_to_the_call_that_got_it() -> None:
    """OpenAI, Azure and Anthropic send Retry-After with a 429: one refused call among many
    answered waits it itself (the client's backoff); the next call goes at once."""
    clock = Clock()
    limiter = AdaptiveLimiter(8, clock=clock)
    for _ in range(3):
        started = await limiter.acquire()
        await limiter.release()
        clock.t += 0.05
        limiter.on_success({}, started)
    started = await limiter.acquire()
    await limiter.release()
    limiter.on_rate_limited(1.0, {}, started)
    assert await limiter.acquire() == pytest.approx(clock.t)
    assert limiter.pace() == (0.0, "none")


async def test_a_long_retry_after_holds_every_call() -> None:
    """A pause as long as a quota window's reset is asked of every call."""
    clock = Clock()
    limiter = AdaptiveLimiter(8, clock=clock)
    started = await limiter.acquire()
    await limiter.release()
    limiter.on_rate_limited(LONG_PAUSE_S * 3, {}, started)
    assert limiter.pace() == (0.0, "paused")
    waiting = asyncio.create_task(limiter.acquire())
    await asyncio.sleep(0)
    assert not waiting.done()
    clock.t += LONG_PAUSE_S * 3
    limiter._changed.set()
    assert await asyncio.wait_for(waiting, 1) == pytest.approx(clock.t)


async def test_every_call_refused_holds_all_but_one_probe_until_one_is_let_through() -> None:
    """Calls in a row refused, none between let through or waiting: one call goes at a time,
    later each time; the first let through ends the hold."""
    clock = Clock()
    limiter = AdaptiveLimiter(32, clock=clock)
    starts = []
    for _ in range(HOLD_RUN + 1):
        starts.append(await limiter.acquire())
        await limiter.release()
        clock.t += 0.05
    for started in starts:
        limiter.on_rate_limited(None, {}, started)
    assert limiter.pace() == (0.0, "paused")
    probe = asyncio.create_task(limiter.acquire())
    other = asyncio.create_task(limiter.acquire())
    await asyncio.sleep(0.01)
    assert not probe.done()  # the first probe waits a second
    clock.t += 1.0
    limiter._changed.set()
    probe_start = await asyncio.wait_for(probe, 1)
    await asyncio.sleep(0.01)
    assert not other.done()  # one probe at a time
    await limiter.release()
    limiter.on_success({}, probe_start)
    assert limiter.pace()[1] != "paused"
    await asyncio.wait_for(other, 1)


def test_a_slow_down_holds_the_ramp_and_keeps_the_pace() -> None:
    """OpenAI's 429 ``slow_down``: traffic grew too fast, even within the limits. The
    concurrency reached stays; it stops growing for a while."""
    clock = Clock()
    limiter = AdaptiveLimiter(32, clock=clock)
    for _ in range(3):
        clock.t += 0.1
        limiter.on_success({}, clock.t)
    reached = limiter.limit
    limiter.on_rate_limited(None, {}, clock.t, code="slow_down")
    assert limiter.limit == reached
    for _ in range(20):
        clock.t += 0.1
        limiter.on_success({}, clock.t)
    assert limiter.limit == reached  # no growth while held
    clock.t += 60.0
    limiter.on_success({}, clock.t)
    assert limiter.limit > reached  # the ramp goes on afterwards


# --- the pacer's verdicts -----------------------------------------------------------------


def segment_at(
    pacer: Pacer, rate: float, refused_every: int | None, calls: int, clock: Clock
) -> None:
    """``calls`` calls at ``rate`` a second, every ``refused_every``-th one answered 429 (the
    answers come at once; the pacer judges a segment when its calls are answered)."""
    for i in range(calls):
        clock.t += 1.0 / rate
        pacer.book(clock.t, 1.0, clock.t)
        if refused_every and i % refused_every == refused_every - 1:
            pacer.refused(clock.t, 1.0, clock.t)
        else:
            pacer.answered(clock.t, 1.0, clock.t)


def test_refused_at_a_pace_kept_to_is_a_limit_at_what_was_let_through() -> None:
    """At full concurrency (nothing grows by itself), a pace kept to and refused one call in
    four lets through 15 a second: its ceiling, paced just under."""
    clock = Clock()
    pacer = Pacer("requests", 0.985)
    pacer.ramping = False
    pacer._move(20.0, clock.t)
    segment_at(pacer, 20.0, 4, SEGMENT_CALLS + 1, clock)
    assert pacer.ceiling == pytest.approx(15.0, rel=0.1)  # what it let through
    assert pacer.rate == pytest.approx(pacer.ceiling * 0.97)


def test_the_same_share_at_rates_apart_is_noise_and_lifts_the_pace() -> None:
    """One call in five refused at 30 a second and at 15: the 429s do not follow the rate."""
    clock = Clock()
    pacer = Pacer("requests", 0.985)
    pacer.ramping = False
    pacer._move(30.0, clock.t)
    segment_at(pacer, 30.0, 5, SEGMENT_CALLS + 1, clock)
    pacer._move(15.0, clock.t)
    segment_at(pacer, 15.0, 5, SEGMENT_CALLS + 1, clock)
    segment_at(pacer, 15.0, 5, SEGMENT_CALLS + 1, clock)
    # the share the two segments saw, taken a standard error higher (about 40 calls: rough)
    assert 0.2 < pacer.background < 0.2 + 0.1
    assert pacer.rate is None and pacer.ceiling is None


def test_refusals_at_a_lowered_pace_never_ratchet_it_down_again() -> None:
    """A share of 429s that stays after the pace was lowered for it is noise: the pace is not
    lowered a second time on the next segment."""
    clock = Clock()
    pacer = Pacer("requests", 0.985)
    pacer.ramping = False
    pacer._found(40.0, clock.t)
    rate = pacer.rate
    assert rate is not None
    segment_at(pacer, rate, 7, SEGMENT_CALLS + 1, clock)
    lowered = pacer.rate
    assert lowered is not None and lowered < rate
    for _ in range(3):
        segment_at(pacer, pacer.rate or rate, 7, SEGMENT_CALLS + 1, clock)
    assert pacer.rate is None or pacer.rate >= lowered * 0.99


def test_a_hold_of_a_minute_resumes_at_what_the_minute_let_through() -> None:
    """A window counting a minute: 600 let through, then everything refused for 50 s. It
    lets 600 a minute through: 10 a second, paced just under."""
    clock = Clock()
    pacer = Pacer("requests", 0.985)
    for _ in range(600):
        clock.t += 0.01
        pacer.book(clock.t, 1.0, clock.t)
        pacer.answered(clock.t, 1.0, clock.t)
    clock.t += 50.0
    pacer.resume(50.0, clock.t)
    assert pacer.ceiling == pytest.approx(10.0, rel=0.02)
