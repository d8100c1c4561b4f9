"""Pacing judge calls: Retry-After forms, announced and measured rate limits."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from stream.judge.limiter import AdaptiveLimiter, retry_after_seconds


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
