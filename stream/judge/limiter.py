"""Pacing judge calls to what the provider lets through: adaptive concurrency, a request
rate and a token rate, announced or measured; Retry-After for the call that got it."""

from __future__ import annotations

import asyncio
import math
import re
import time
from collections import deque
from collections.abc import Mapping
from email.utils import parsedate_to_datetime

RATE_WINDOW_S = 5.0  # successes counted to estimate what the provider lets through
RATE_CUT = 0.95  # after a 429, pace at this share of the measured rate...
RATE_GROWTH_PER_S = 0.03  # ...then probe upward by this share per second
TRIAL_S = 1.0  # a cut is watched this long (and MIN_SAMPLES calls), then kept or undone
SLOW_START = 4  # calls in flight at first
MIN_SAMPLES = 30  # calls needed on each side of a cut before its 429 shares are compared
# a Retry-After this long is the provider asking for a pause (a quota window resetting), not
# one call's turn: every call waits for it
LONG_PAUSE_S = 10.0
# most calls started within this long refused (this many at least): the provider pushes back
# on all of them at once, and every call waits for the Retry-After it gave
MASS_WINDOW_S = 1.0
MASS_SHARE = 0.5
MASS_MIN = 4
TOKEN_HEADROOM = 0.95  # the share of an announced token limit used
# OpenAI's 429 slow_down: the request rate grew too fast, even within the limits; the ramp
# (concurrency and pace growing) holds this long, the pace reached is kept
SLOW_DOWN_HOLD_S = 60.0


class AdaptiveLimiter:
    """Bounds judge calls in flight and adapts to the provider instead of hammering it.

    - Concurrency: slow start (from 4, one more per answer) until the first 429, then
      additive increase on success and halve on a 429 (AIMD), within [1, max].
    - Pacing, announced: when the provider states its request rate (OpenAI's
      ``x-ratelimit-limit-requests``), calls are spaced to stay just under it.
    - Pacing, measured: otherwise a 429 paces calls at 95 % of the success rate measured over
      the last seconds, and the pace then rises 3 % a second until the next 429 (AIMD on the
      request rate), so a silent limit costs a few 429s a cycle, not a steady stream of them.
    - Retry-After belongs to the call that got it (the client waits it before asking again):
      it holds every new call only when it is long (``LONG_PAUSE_S``: a quota resetting) or
      when most calls started in the last moment were refused at once.
    - A 429 ``slow_down`` (OpenAI: the request rate grew too fast, even within the limits)
      holds the ramp (concurrency and pace stop growing) for ``SLOW_DOWN_HOLD_S``; the pace
      reached is kept.
    - Tokens, announced: when the provider states its token limit (OpenAI's and Azure's
      ``x-ratelimit-limit-tokens``), each call is spaced by its estimated tokens so that the
      tokens sent stay under it, corrected by what each answer says it used, and held until
      ``x-ratelimit-reset-tokens`` when ``x-ratelimit-remaining-tokens`` cannot cover it.
    - 429s that do not follow the load: every cut is watched for ``TRIAL_S``; if the share of
      calls answered 429 stayed about the same, the 429s are not the provider pushing back on
      our rate (a share of calls is refused whatever the rate): the cut is undone and that
      share becomes the background, which no longer cuts pace or concurrency (the call that
      got the 429 still waits its own Retry-After and backoff). A share well above the
      background is a load signal again.
    """

    def __init__(self, max_concurrency: int, *, rate_headroom: float = 0.985) -> None:
        self.max = max_concurrency
        # slow start: a few calls at first, one more per answer (doubling every round trip) up
        # to the maximum, until the first 429; then additive increase
        self.limit = float(min(max_concurrency, SLOW_START))
        self._slow_start = True
        self.in_flight = 0
        self.rate_headroom = rate_headroom
        self.interval = 0.0  # seconds between call starts; 0: no pacing
        self.announced = False  # the interval comes from the provider's own figure
        self._next_start = 0.0
        self._cooldown_until = 0.0
        self._successes: deque[float] = deque()
        self._last_success = 0.0
        self._last_cut = 0.0
        self._outcomes: deque[tuple[float, bool]] = deque()  # (when, answered 429)
        self.background = 0.0  # share of 429s measured not to follow our rate
        self._trial: tuple[float, float] | None = None  # when a cut was made, the 429 share then
        self.token_rate = 0.0  # tokens a second the provider announced (x our headroom); 0: none
        self._tokens_free_at = 0.0  # when the tokens of the calls paced so far are paid for
        self._tokens_held_until = 0.0  # the announced token budget is spent until then
        self._ramp_held_until = 0.0  # a slow_down 429 holds the ramp until then
        self._cond = asyncio.Condition()

    async def acquire(self, tokens: int = 0) -> float:
        """Wait for a slot and the call's turn (``tokens``: its estimated cost); returns when
        it starts (this clock)."""
        async with self._cond:
            await self._cond.wait_for(lambda: self.in_flight < max(1, int(self.limit)))
            self.in_flight += 1
            now = time.monotonic()
            start = max(now, self._next_start, self._cooldown_until)
            self._next_start = start + self.interval
            if self.token_rate:
                start = max(start, self._tokens_free_at, self._tokens_held_until)
                self._tokens_free_at = start + tokens / self.token_rate
        if start > now:
            await asyncio.sleep(start - now)
        return start

    async def release(self) -> None:
        async with self._cond:
            self.in_flight -= 1
            self._cond.notify_all()

    def on_success(
        self,
        headers: Mapping[str, str] | None,
        started: float | None = None,
        *,
        estimated: int = 0,
        used: int = 0,
    ) -> None:
        """A call that started at ``started`` was answered; it was paced for ``estimated``
        tokens and used ``used``."""
        now = time.monotonic()
        ramping = now >= self._ramp_held_until
        if self.token_rate and used and estimated:
            # the provider counts what it counts: pace the next calls by the difference
            self._tokens_free_at += (used - estimated) / self.token_rate
        self._record(now if started is None else started, limited=False)
        step = 1.0 if self._slow_start else 1.0 / max(self.limit, 1.0)
        if ramping:
            self.limit = min(self.max, self.limit + step)
        self._successes.append(now)
        while self._successes[0] < now - RATE_WINDOW_S:
            self._successes.popleft()
        if headers is not None:
            self._learn_rate(headers)
            self._learn_tokens(headers, now)
        if self.interval and not self.announced and self._last_success and ramping:
            self.interval /= 1.0 + RATE_GROWTH_PER_S * (now - self._last_success)
        self._last_success = now
        self._judge_trial(now)

    def on_rate_limited(
        self,
        retry_after: float | None,
        headers: Mapping[str, str] | None,
        started: float | None = None,
        code: str | None = None,
    ) -> None:
        """A call that started at ``started`` was answered 429 (``code``: the provider's)."""
        now = time.monotonic()
        if code == "slow_down":
            # not over a limit: traffic grew too fast; grow no further for a while, keep the
            # pace reached (the refused call waits its own Retry-After or backoff)
            self._slow_start = False
            self._ramp_held_until = now + SLOW_DOWN_HOLD_S
            return
        self._record(now if started is None else started, limited=True)
        if headers is not None:
            self._learn_rate(headers)
            self._learn_tokens(headers, now)
        if retry_after and (retry_after >= LONG_PAUSE_S or self._refused_at_once(now)):
            # a pause asked of every call (a quota resetting), or most calls refused at once
            self._cooldown_until = max(self._cooldown_until, now + retry_after)
        self._judge_trial(now)
        if self._in_background(now):
            return  # the provider refuses this share whatever our rate: no cut
        self._slow_start = False
        self.limit = max(1.0, self.limit / 2)
        if now - self._last_cut > 1.0:  # one cut of the pace per burst of 429s
            self._last_cut = now
            if not self.announced:
                self._cut_rate(now)
            share, seen = self._share(now - RATE_WINDOW_S)
            if self._trial is None and seen >= MIN_SAMPLES:
                self._trial = (now, share)

    def pace(self) -> tuple[float, str]:
        """Calls a second this pacer lets start now, and why: ``announced`` (the provider's
        request limit), ``measured`` (found by 429s), ``paused`` (a long Retry-After, or most
        calls refused at once: none start until it ends) or ``none`` (0: no pace of its own,
        calls start as answers come)."""
        if self._cooldown_until > time.monotonic():
            return 0.0, "paused"
        if self.interval:
            return 1.0 / self.interval, "announced" if self.announced else "measured"
        return 0.0, "none"

    def token_limit_per_minute(self) -> float:
        """The token limit the provider announced (per minute), NaN when it has not."""
        return self.token_rate / TOKEN_HEADROOM * 60.0 if self.token_rate else math.nan

    def _refused_at_once(self, now: float) -> bool:
        """Whether most calls started in the last ``MASS_WINDOW_S`` were refused."""
        share, seen = self._share(now - MASS_WINDOW_S)
        return share * seen >= MASS_MIN and share >= MASS_SHARE

    def _record(self, started: float, *, limited: bool) -> None:
        """An outcome, by when its call started: a cut is judged by the calls sent after it,
        not by those already in flight when it was made."""
        self._outcomes.append((started, limited))
        while self._outcomes[0][0] < started - 2 * RATE_WINDOW_S:
            self._outcomes.popleft()

    def _share(self, since: float) -> tuple[float, int]:
        """The share of calls started after ``since`` answered 429, and how many that is."""
        recent = [limited for when, limited in self._outcomes if when > since]
        return (sum(recent) / len(recent) if recent else 0.0), len(recent)

    def _in_background(self, now: float) -> bool:
        if self.background <= 0.0:
            return False
        share, seen = self._share(now - RATE_WINDOW_S)
        return seen >= MIN_SAMPLES and share <= self.background * 1.5 + 0.02

    def _judge_trial(self, now: float) -> None:
        """Keep a cut that made 429s rarer; undo one that did not (see the class doc)."""
        if self._trial is None or now - self._trial[0] < TRIAL_S:
            return
        started, before = self._trial
        after, seen = self._share(started)
        if seen < MIN_SAMPLES:
            return  # too few calls yet to tell
        self._trial = None
        # the same share of 429s at a lower rate (two at least: one could be the tail of the
        # burst that caused the cut): they do not follow our rate, so no pacing of our own and
        # the concurrency there was; a share that fell says it was a limit, one that rose is
        # the pace climbing back over it
        if before > 0.0 and after * seen >= 2 and before * 0.7 <= after <= before * 1.5:
            self.background = after
            if not self.announced:
                self.interval = 0.0
            self.limit = float(self.max)
        elif after < before * 0.5:
            self.background = min(self.background, after)

    def _cut_rate(self, now: float) -> bool:
        """Pace at a share of what the provider has let through lately (one cut per burst);
        False when too little was measured to cut."""
        while self._successes and self._successes[0] < now - RATE_WINDOW_S:
            self._successes.popleft()
        if len(self._successes) < 2:
            return False  # nothing measured yet: Retry-After and backoff do the work
        # over at least a second: right after start-up a burst would look like a huge rate
        span = max(now - self._successes[0], 1.0)
        measured = len(self._successes) / span
        current = 1.0 / self.interval if self.interval else measured
        self.interval = 1.0 / (min(measured, current) * RATE_CUT)
        self._last_cut = now
        return True

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

    def _learn_tokens(self, headers: Mapping[str, str], now: float) -> None:
        """The announced token limit paces calls by their tokens; a remaining budget too small
        for another call holds them until it resets."""
        limit = _number(headers.get("x-ratelimit-limit-tokens"))
        if limit is None or limit <= 0:
            return
        self.token_rate = limit / 60.0 * TOKEN_HEADROOM
        remaining = _number(headers.get("x-ratelimit-remaining-tokens"))
        reset = duration_seconds(headers.get("x-ratelimit-reset-tokens"))
        if remaining is not None and reset is not None and remaining < limit * (1 - TOKEN_HEADROOM):
            self._tokens_held_until = max(self._tokens_held_until, now + reset)


def _number(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        return None


_DURATION = re.compile(
    r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m(?!s))?(?:(\d+(?:\.\d+)?)s)?(?:(\d+(?:\.\d+)?)ms)?"
)


def duration_seconds(value: str | None) -> float | None:
    """Seconds in an OpenAI reset duration (``x-ratelimit-reset-*``: "1s", "6m0s", "120ms",
    "1m30.5s"), or a bare number of seconds; None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if (number := _number(value)) is not None:
        return max(0.0, number)
    match = _DURATION.fullmatch(value)
    if match is None or not any(match.groups()):
        return None
    hours, minutes, seconds, millis = (float(g) if g else 0.0 for g in match.groups())
    return hours * 3600 + minutes * 60 + seconds + millis / 1000


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
