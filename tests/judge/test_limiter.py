"""Pacing judge calls: Retry-After forms, announced and measured rate limits."""

from __future__ import annotations

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
