"""Pacing judge calls to what the provider lets through: adaptive concurrency and rate,
and the provider's own word on when to come back (Retry-After)."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Mapping
from email.utils import parsedate_to_datetime

RATE_WINDOW_S = 5.0  # successes counted to estimate what the provider lets through
RATE_CUT = 0.95  # after a 429, pace at this share of the measured rate...
RATE_GROWTH_PER_S = 0.03  # ...then probe upward by this share per second


class AdaptiveLimiter:
    """Bounds judge calls in flight and adapts to the provider instead of hammering it.

    - Concurrency: additive increase on success, halve on a 429 (AIMD), within [1, max].
    - Pacing, announced: when the provider states its request rate (OpenAI's
      ``x-ratelimit-limit-requests``), calls are spaced to stay just under it.
    - Pacing, measured: otherwise a 429 paces calls at 95 % of the success rate measured over
      the last seconds, and the pace then rises 3 % a second until the next 429 (AIMD on the
      request rate), so a silent limit costs a few 429s a cycle, not a steady stream of them.
    - Cool-down: a 429 with Retry-After holds every new call until that time.
    """

    def __init__(self, max_concurrency: int, *, rate_headroom: float = 0.985) -> None:
        self.max = max_concurrency
        self.limit = float(max_concurrency)
        self.in_flight = 0
        self.rate_headroom = rate_headroom
        self.interval = 0.0  # seconds between call starts; 0: no pacing
        self.announced = False  # the interval comes from the provider's own figure
        self._next_start = 0.0
        self._cooldown_until = 0.0
        self._successes: deque[float] = deque()
        self._last_success = 0.0
        self._last_cut = 0.0
        self._cond = asyncio.Condition()

    async def acquire(self) -> None:
        async with self._cond:
            await self._cond.wait_for(lambda: self.in_flight < max(1, int(self.limit)))
            self.in_flight += 1
            now = time.monotonic()
            start = max(now, self._next_start, self._cooldown_until)
            self._next_start = start + self.interval
        if start > now:
            await asyncio.sleep(start - now)

    async def release(self) -> None:
        async with self._cond:
            self.in_flight -= 1
            self._cond.notify_all()

    def on_success(self, headers: Mapping[str, str] | None) -> None:
        now = time.monotonic()
        self.limit = min(self.max, self.limit + 1.0 / max(self.limit, 1.0))
        self._successes.append(now)
        while self._successes[0] < now - RATE_WINDOW_S:
            self._successes.popleft()
        if headers is not None:
            self._learn_rate(headers)
        if self.interval and not self.announced and self._last_success:
            self.interval /= 1.0 + RATE_GROWTH_PER_S * (now - self._last_success)
        self._last_success = now

    def on_rate_limited(self, retry_after: float | None, headers: Mapping[str, str] | None) -> None:
        now = time.monotonic()
        self.limit = max(1.0, self.limit / 2)
        if headers is not None:
            self._learn_rate(headers)
        if not self.announced and now - self._last_cut > 1.0:
            self._cut_rate(now)
        if retry_after:
            self._cooldown_until = max(self._cooldown_until, now + retry_after)

    def _cut_rate(self, now: float) -> None:
        """Pace at a share of what the provider has let through lately (one cut per burst)."""
        while self._successes and self._successes[0] < now - RATE_WINDOW_S:
            self._successes.popleft()
        if len(self._successes) < 2:
            return  # nothing measured yet: Retry-After and backoff do the work
        # over at least a second: right after start-up a burst would look like a huge rate
        span = max(now - self._successes[0], 1.0)
        measured = len(self._successes) / span
        current = 1.0 / self.interval if self.interval else measured
        self.interval = 1.0 / (min(measured, current) * RATE_CUT)
        self._last_cut = now

    def _learn_rate(self, headers: Mapping[str, str]) -> None:
        value = headers.get("x-ratelimit-limit-requests")
        if not value:
            return
        try:
            per_minute = float(value)
        except ValueError:
            return
        if per_minute > 0:
            self.interval = 60.0 / (per_minute * self.rate_headroom)
            self.announced = True


def retry_after_seconds(headers: Mapping[str, str] | None) -> float | None:
    """Seconds to wait from ``retry-after-ms`` / ``retry-after`` (seconds or HTTP date)."""
    if headers is None:
        return None
    if ms := headers.get("retry-after-ms"):
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    if value := headers.get("retry-after"):
        try:
            return max(0.0, float(value))
        except ValueError:
            try:
                return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
            except (TypeError, ValueError):
                return None
    return None
