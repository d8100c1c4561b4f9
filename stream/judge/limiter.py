"""Pacing judge calls to what the provider lets through: one limiter per endpoint and model,
bounding calls in flight, pacing requests and tokens (``pacing.Pacer``, announced or measured),
and holding every call when the provider refuses them all."""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Callable, Mapping
from typing import Literal

from .headers import duration_seconds, number
from .pace_share import FleetSide
from .pacing import LONG_HOLD_S, Pacer
from .segments import FREEZE_RUN, MINUTE_S
from .sent import SentCalls

CLOCK_SLACK_S = 1e-6  # a start this close is now (a wait shorter may not move a float clock)
SLOW_START = 4  # calls in flight at first, one more per answer up to the maximum
# a Retry-After this long is the provider asking for a pause (a quota window resetting), not
# one call's turn: every call waits for it
LONG_PAUSE_S = 10.0
# this many calls in a row refused, by when they were sent, none between let through or still
# waiting for its answer: every call waits (a 429 comes back at once and an answer after the
# model's latency, so counted by arrival, 429s bunch up even while most calls go through)
HOLD_RUN = 6
# ...or this many, when every call before them was let through (a window closing at once)
HOLD_RUN_ABRUPT = 3
HOLD_SPAN_S = 0.03  # ...sent over this long at least (calls sent together are refused together)
PROBE_FIRST_S = 1.0  # while held, one call goes at a time: first after this...
PROBE_GROWTH = 2.0  # ...then this much later each time it is refused...
PROBE_SHARE = 0.5  # ...but never later than this share of the time held so far
# ...except once a window counting a minute should reopen (the minute's first call let through
# has left it): then a probe a second for this long, so the limit is back within a second of
# reopening (a window counting its refusals too reopens a little later than its first call)
REOPEN_PROBING_S = 20.0
REQUEST_HEADROOM = 0.985  # the share of an announced request limit used
TOKEN_HEADROOM = 0.95  # the share of an announced token limit used
# OpenAI's 429 slow_down: the request rate grew too fast, even within the limits; the ramp
# (concurrency and pace growing) holds this long, the pace reached is kept
SLOW_DOWN_HOLD_S = 60.0

Limit = Literal["requests", "tokens"]


class AdaptiveLimiter:
    """Bounds judge calls in flight and paces them to what the provider lets through.

    - Concurrency: slow start (from 4, one more per answer) up to the maximum. A 429 does not
      cut it: the pace bounds the rate, and a refused call frees its slot at once.
    - Pace: one ``Pacer`` for requests and one for tokens (each call's estimated tokens),
      announced (``x-ratelimit-limit-*``: paced just under; a token budget too spent for
      another call holds calls until made up, or ``x-ratelimit-reset-tokens``) or measured
      from 429s shown to follow the rate (``pacing.py``). A 429 that says tokens (OpenAI's
      ``type: tokens``, Anthropic's and Azure's messages) is the token limit's; any other,
      the request limit's. In a fleet (``fleet.py``), this worker's share of the account's.
    - Retry-After belongs to the call that got it: other calls go on. Every call waits only
      when the provider asks for a long pause (``LONG_PAUSE_S``) or refuses ``HOLD_RUN``
      calls in a row (``HOLD_RUN_ABRUPT`` after calls all let through): a *hold*. Then one
      call at a time goes as a probe (one in the fleet), first after a second, each refusal
      doubling the wait up to half the time held, never past the moment the last minute's
      first call leaves a minute's window; from then a probe a second for
      ``REOPEN_PROBING_S`` (a window counting its refusals reopens later, and a Retry-After
      may understate the wait). The first probe let through ends the hold; the measured
      paces resume at what the provider (to the fleet) let through in the minute before.
    - A 429 ``slow_down`` (OpenAI: the request rate grew too fast, even within the limits)
      holds the ramp (concurrency and pace stop growing) for ``SLOW_DOWN_HOLD_S``.
    """

    def __init__(
        self,
        max_concurrency: int,
        *,
        rate_headroom: float = REQUEST_HEADROOM,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.clock = clock
        self.max = max_concurrency
        self.limit = float(min(max_concurrency, SLOW_START))
        self.in_flight = 0
        self.requests = Pacer("requests", rate_headroom)
        self.tokens = Pacer("tokens", TOKEN_HEADROOM)
        self._turn = asyncio.Lock()  # calls take their turn in order (asyncio's Lock is FIFO)
        self._changed = asyncio.Event()  # a slot freed or a pace moved: the next call looks again
        self._sent = SentCalls()  # recent calls by start: pending, ok, refused, lost
        self._held_since: float | None = None
        self._abrupt = False  # the hold came with no refusal before its run
        self._early = False  # the hold began early (``HOLD_RUN_ABRUPT``)...
        self._early_holds = True  # ...which stops once one proved short (a shallow bucket)
        self._held_for: Limit | None = None  # the limit the refusals named
        self._next_probe = 0.0
        self._probe_wait = PROBE_FIRST_S
        self._probe: float | None = None  # when the probe in flight started
        self._reopens_at: float | None = None  # when the hold's window should let calls again
        self._ramp_held_until = float("-inf")
        self._recent_costs: list[float] = []
        self._last_start = float("-inf")
        self.waiting = 0  # calls waiting for their turn (the backlog)
        # this limiter's place among the workers judging with the same account (None: alone)
        self.fleet: FleetSide | None = None
        self.wall: Callable[[], float] = time.time
        self.held_at: float | None = None  # when the last hold began (wall)

    # --- a call's turn ----------------------------------------------------------------------
    async def acquire(self, tokens: int = 0) -> float:
        """Wait for a slot and the call's turn (``tokens``: its estimated cost); returns when
        it starts (this clock)."""
        asked = self.clock()
        self.waiting += 1
        try:
            return await self._take_turn(tokens, asked)
        finally:
            self.waiting -= 1

    async def _take_turn(self, tokens: int, asked: float) -> float:
        async with self._turn:
            while True:
                now = self.clock()
                start = self._earliest(tokens, now)
                if start <= now + CLOCK_SLACK_S:
                    break
                self._changed.clear()
                wait = None if math.isinf(start) else start - now
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), wait)
            # a call's start is its name in the paces' books: no two alike
            now = max(now, self._last_start + 1e-9)
            self._last_start = now
            self.in_flight += 1
            self._sent.sent(now)
            if self._held_since is not None:
                self._probe = now
            self.requests.book(now, 1.0, asked)
            self.tokens.book(now, float(tokens), asked)
            self._recent_costs = [*self._recent_costs[-31:], float(tokens)]
            if self.fleet is not None:
                self.fleet.started(now)
        return now

    def _earliest(self, tokens: int, now: float) -> float:
        """When the next call may start: inf while it must wait for a slot or the probe."""
        if self.in_flight >= max(1, int(self.limit)):
            return math.inf
        if self._held_since is not None:
            if self._probe is not None:
                return math.inf
            if now >= self._next_probe and self.fleet and self.fleet.probed_elsewhere(self.wall()):
                # another held worker of the fleet probes: this one waits to hear it end
                self._next_probe = now + PROBE_FIRST_S
            return max(now, self._next_probe)
        return max(self.requests.earliest(now), self.tokens.earliest(now))

    async def release(self) -> None:
        self.in_flight -= 1
        self._changed.set()

    # --- what came back ---------------------------------------------------------------------
    def on_success(
        self,
        headers: Mapping[str, str] | None,
        started: float | None = None,
        *,
        estimated: int = 0,
        used: int = 0,
    ) -> None:
        """A call that started at ``started`` was answered; it was paced for ``estimated``
        tokens and the provider says it used ``used``."""
        now = self.clock()
        started = now if started is None else started
        self._learn(headers, now)
        self._sent.mark(started, "ok")
        if self.fleet is not None:
            self.fleet.answered(now, refused=False)
        ramping = now >= self._ramp_held_until
        if ramping and self.limit < self.max:
            self.limit = min(float(self.max), self.limit + 1.0)
        for pacer in (self.requests, self.tokens):
            pacer.ramping = self.limit < self.max
        if used and estimated:
            self.tokens.settle(estimated, used)
        if self._held_since is not None and started == self._probe:
            self.on_failure(started)  # the probe's answer ends the hold; it measures nothing
            self._end_hold(now)
            return
        self.requests.answered(started, 1.0, now, grow=ramping)
        self.tokens.answered(started, float(estimated), now, grow=ramping)
        self._changed.set()

    def on_failure(self, started: float) -> None:
        """A call that started at ``started`` got no answer that says anything of the limits
        (a timeout, a 5xx, a refused request): the paces' measuring waits for it no longer."""
        self._sent.mark(started, "lost")
        now = self.clock()
        self.requests.lost(started, now)
        self.tokens.lost(started, now)

    def on_rate_limited(
        self,
        retry_after: float | None,
        headers: Mapping[str, str] | None,
        started: float | None = None,
        code: str | None = None,
        *,
        limit: Limit | None = None,
        estimated: int = 0,
    ) -> None:
        """A call that started at ``started`` was answered 429 (``code``: the provider's;
        ``limit``: the limit it names, if it names one)."""
        now = self.clock()
        started = now if started is None else started
        if code == "slow_down":
            # not over a limit: traffic grew too fast; grow no further for a while, keep the
            # pace reached (the refused call waits its own Retry-After or backoff)
            self._ramp_held_until = now + SLOW_DOWN_HOLD_S
            return
        self._learn(headers, now)
        self._sent.mark(started, "refused")
        if self.fleet is not None:
            self.fleet.answered(now, refused=True)
        if self._held_since is not None and started >= self._held_since:
            self.on_failure(started)  # a probe (or a call let go before the hold began)
            if started == self._probe:
                self._probe = None
                self._probe_refused(retry_after, now)
            return
        if limit == "tokens":
            self.tokens.refused(started, float(estimated), now)
            self.requests.lost(started, now)
        else:
            self.requests.refused(started, 1.0, now)
            self.tokens.lost(started, now)
        if retry_after is not None and retry_after >= LONG_PAUSE_S:
            self._hold(now, retry_after, limit)
        else:
            run, span = self._sent.refused_run(started)
            # token calls are few and large: a shorter run of them refused is no bunching
            early = (
                self._early_holds
                and limit != "tokens"
                and HOLD_RUN_ABRUPT <= run < HOLD_RUN
                and self._sent.refused_abruptly()
            )
            if (
                (run >= HOLD_RUN and span >= HOLD_SPAN_S)
                or early
                or (limit == "tokens" and run >= FREEZE_RUN)
            ):
                self._hold(now, retry_after or 0.0, limit, early=early)
            elif (
                run
                >= (pacer := self.tokens if limit == "tokens" else self.requests).runs_to_freeze()
            ):
                pacer.freeze(now)
        self._changed.set()

    # --- holding every call -----------------------------------------------------------------
    def _hold(
        self, now: float, retry_after: float, limit: Limit | None, *, early: bool = False
    ) -> None:
        """The provider refuses every call (for ``limit``): one probe at a time from now on."""
        if self._held_since is None:
            self._held_since = now
            self._held_for = limit
            # held early (a short run): a short hold is a shallow bucket's, not a deep one's
            self._abrupt = not early and self._sent.refused_abruptly()
            self._early = early
            self._probe = None
            self._probe_wait = PROBE_FIRST_S
            self._reopens_at = self._minute_reopens(now)
            self.held_at = self.wall()
            self.requests.hold(now)
            self.tokens.hold(now)
        self._next_probe = max(self._next_probe, now + max(retry_after, PROBE_FIRST_S))

    def _probe_refused(self, retry_after: float | None, now: float) -> None:
        assert self._held_since is not None
        if retry_after is not None and retry_after >= LONG_PAUSE_S:
            self._next_probe = now + retry_after
            self._changed.set()
            return
        reopens = self._reopens_at
        if reopens is not None and reopens <= now <= reopens + REOPEN_PROBING_S:
            # the window the refusals imply has reopened, or is about to: a probe a second
            self._next_probe = now + max(PROBE_FIRST_S, retry_after or 0.0)
            self._changed.set()
            return
        held = now - self._held_since
        self._probe_wait = min(
            self._probe_wait * PROBE_GROWTH, max(PROBE_FIRST_S, held * PROBE_SHARE)
        )
        wait = max(self._probe_wait, retry_after or 0.0)
        # a provider counting a minute lets calls through once the minute's first has left it
        reopens = self._minute_reopens(now)
        self._next_probe = now + wait if reopens is None else min(now + wait, reopens)
        self._changed.set()

    def _minute_reopens(self, now: float) -> float | None:
        oldest = self.requests.traffic.oldest_let_through(now)
        if oldest is None or oldest + MINUTE_S <= now:
            return None
        return oldest + MINUTE_S + 0.05

    def _end_hold(self, now: float) -> None:
        assert self._held_since is not None
        held = now - self._held_since
        # held early and let through again in a moment: a shallow bucket, no window. The paces
        # go on as before the hold (their segments find its rate), and no hold begins early
        shallow = self._early and held < LONG_HOLD_S
        self._early_holds = self._early_holds and not shallow
        self._held_since = None
        self._probe = None
        self._reopens_at = None
        self._next_probe = 0.0
        for pacer in (self.requests, self.tokens):
            if shallow:
                pacer.let_go()
                continue
            if pacer.source != "announced" and (
                pacer.rate is not None
                or pacer.ceiling
                or pacer is (self.tokens if self._held_for == "tokens" else self.requests)
            ):
                says = (
                    self.fleet.resuming(pacer.unit, self.held_at, self.wall()) if self.fleet else {}
                )
                pacer.resume(held, now, abrupt=self._abrupt, **says)
        self._changed.set()

    # --- what the provider said -------------------------------------------------------------
    def _learn(self, headers: Mapping[str, str] | None, now: float) -> None:
        """Announced limits: ``x-ratelimit-limit-requests`` and ``-tokens`` pace calls; a
        token budget too spent for a call like the last ones (``x-ratelimit-remaining-tokens``)
        holds them (see the class doc)."""
        if not headers:
            return
        requests = number(headers.get("x-ratelimit-limit-requests"))
        if requests is not None and requests > 0:
            self.requests.announce(requests)
        tokens = number(headers.get("x-ratelimit-limit-tokens"))
        if tokens is None or tokens <= 0:
            return
        self.tokens.announce(tokens)
        remaining = number(headers.get("x-ratelimit-remaining-tokens"))
        reset = duration_seconds(headers.get("x-ratelimit-reset-tokens"))
        needed = self._mean_cost()
        if remaining is not None and reset is not None and remaining < needed:
            # not enough left for a call like the last ones: wait until the provider has
            # made up the difference at its rate, or until it resets, whichever comes first
            # (x-ratelimit-reset-tokens is when it is back to full, OpenAI's guide says)
            self.tokens.spent_until(now + min(reset, (needed - remaining) / (tokens / MINUTE_S)))

    # --- the fleet (``fleet.py``) ----------------------------------------------------------
    def reshare(self, share: float) -> None:
        """This worker's share of the account's limits is now ``share``."""
        now = self.clock()
        self.requests.reshare(share, now)
        self.tokens.reshare(share, now)
        self._changed.set()

    # --- reading ----------------------------------------------------------------------------
    def _mean_cost(self) -> float:
        """The mean estimated tokens of the last calls."""
        costs = self._recent_costs
        return sum(costs) / len(costs) if costs else 0.0

    def pace(self) -> tuple[float, str]:
        """Calls a second this pacer lets start now, and why: ``announced`` (the provider's
        limit), ``measured`` (found by 429s), ``paused`` (held: a long Retry-After, or every
        call refused) or ``none`` (0: no pace of its own, calls start as answers come)."""
        if self._held_since is not None:
            return 0.0, "paused"
        paces = []
        if self.requests.rate and self.requests.source:
            paces.append((self.requests.rate, self.requests.source))
        if self.tokens.rate and self.tokens.source and (mean := self._mean_cost()) > 0:
            paces.append((self.tokens.rate / mean, self.tokens.source))
        if not paces:
            return 0.0, "none"
        return min(paces)

    def held_for(self) -> float:
        """Seconds every call has been held (the provider refusing them all); 0 when not."""
        return self.clock() - self._held_since if self._held_since is not None else 0.0

    def token_limit_per_minute(self) -> float:
        """The token limit the provider announced (per minute), NaN when it has not."""
        if self.tokens.source != "announced" or not self.tokens.rate:
            return math.nan
        return self.tokens.rate / TOKEN_HEADROOM * MINUTE_S
