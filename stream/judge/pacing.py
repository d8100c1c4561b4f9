"""The pace of judge calls in one unit (requests, or tokens), found from what the provider
says and does. Pure: times come in as arguments, nothing sleeps.

A provider limits requests and tokens a minute, and says so (OpenAI's and Azure's
``x-ratelimit-limit-*``) or does not. An announced limit is paced just under. A silent one is
found by its 429s; but a 429 alone proves nothing, since some providers and gateways refuse a
share of calls whatever the rate. So calls are kept in *segments*, each the calls sent at about
one rate, judged once every one of them is answered (a 429 comes back at once, an answer after
the model's latency: counting by arrival would overstate the 429s), and the share of 429s is
compared between segments sent at rates apart:

- a share that rises with the rate (by a two-proportion z test, or past ``NOISE_MAX``) is a
  limit: the pace is set just under what the provider let through at the higher rate (its
  *ceiling*), and from there probes upward slowly, faster the longer it goes without a 429 (a
  limit may be raised), as TCP CUBIC's window does;
- a share that stays the same is noise: it becomes the *background*, no longer a signal, and
  the pace is lifted (each refused call still waits its own Retry-After).

While the rate still grows by itself (the limiter's slow start), segments at rising rates come
for free; otherwise the pacer moves the rate to compare (up while it can grow, else down to
what was let through). Meanwhile a run of refusals (most of the last answers) stops the rate
growing (a freeze at what was let through), and fewer change nothing.

Nothing here holds every call: a provider refusing everything is the limiter's business
(``limiter.py``), which tells the pacer when calls go again (``resume``).
"""

from __future__ import annotations

import logging
import math
from collections import deque
from dataclasses import dataclass
from typing import Literal

log = logging.getLogger(__name__)

Unit = Literal["requests", "tokens"]
Source = Literal["announced", "measured"]

MINUTE_S = 60.0  # providers state their limits a minute
SEGMENT_CALLS = 20  # calls that judge the share of 429s at one rate...
SEGMENT_MIN_S = 0.5  # ...sent over this long at least...
SEGMENT_MAX_S = 3.0  # ...or as many as went in this long (slow paces: long token calls)...
SEGMENT_MIN_CALLS = 6  # ...if at least these
APART = 0.15  # rates this far apart (a share of the higher) compare
FREEZE_SHARE = 0.5  # a share of 429s this high is not tested higher
FREEZE_RUN = 4  # calls in a row refused (none between let through) that stop the rate growing
REFUSED_MIN = 2  # a segment with fewer 429s than this is clean
NOISE_MAX = 0.3  # a share of 429s above this is never background...
NOISE_MIN = 3  # ...nor one of fewer refusals than this in a segment
NOISE_GROWTH = 0.7  # see _noise_like
NOISE_APART = 0.3  # see _noise_like
LIMIT_Z = 2.0  # the share of 429s this many standard errors higher at the higher rate: a limit
NOISE_Z = 1.0  # within this many: the same share (noise)
UP = 1.25  # a rate that can still grow is tested this much higher
UNDER = 0.97  # the pace under a ceiling found
CLEAN = 0.03  # a share of 429s within this of the background is clean
LONG_HOLD_S = 5.0  # a hold this long: the provider counts a window, not a rate
GROWTH_PER_S = 0.002  # the measured pace's growth a second near its ceiling, at first...
GROWTH_DOUBLING_S = 10.0  # ...doubling for every this long without a 429...
GROWTH_MAX_PER_S = 0.1  # ...up to this
RECOVERY_PER_S = 0.05  # growth a second while below UNDER x the ceiling
PROBE_OVER = 1.03  # the pace probes up to this far over the ceiling...
PROVEN_RATE_S = 30.0  # ...where this long without a 429 proves it the new ceiling...
PROVEN_GUESS_S = 10.0  # ...this long if the ceiling was a guess from a moment's answers...
PROVEN_WINDOW_S = 60.0  # ...a minute if it was found as a window (a window counting a
# minute lets a pace over its limit through for up to a minute)
CYCLE_MIN_S = 5.0  # a probe over the ceiling refused this long after the last: re-measure
PROBE_BACKOFF_MAX = 4  # each probe over the ceiling refused halves the next one's climb, so far
LOWERED_MEMORY_S = 15.0  # a lowering is compared with the refusals after it this long
LOWER_MAX = 0.8  # one refused segment lowers a ceiling to this share of it at most
BINDING = 0.9  # a segment sent at this share of its pace or more was held back by it


@dataclass
class Segment:
    """The calls started from ``started`` until ``closed`` at about one rate: how many went,
    how many are answered, refused, let through. ``judged``: its verdict counts (a segment cut
    short by a change of pace is history only)."""

    started: float
    rate: float | None  # the pace set for it (units a second); None: unpaced
    closed: float | None = None
    judged: bool = True
    sent: int = 0
    sent_units: float = 0.0
    answers: int = 0
    refused: int = 0
    let_through: float = 0.0  # units answered 200

    @property
    def share(self) -> float:
        return self.refused / self.answers if self.answers else 0.0

    @property
    def complete(self) -> bool:
        return self.closed is not None and self.answers >= self.sent

    def full(self, now: float) -> bool:
        long = now - self.started
        if long >= SEGMENT_MAX_S:
            return self.sent >= SEGMENT_MIN_CALLS
        return self.sent >= SEGMENT_CALLS and long >= SEGMENT_MIN_S

    @property
    def span(self) -> float:
        assert self.closed is not None
        return max(self.closed - self.started, SEGMENT_MIN_S)  # calls sent at once: no rate

    @property
    def sent_rate(self) -> float:
        return self.sent_units / self.span

    @property
    def let_through_rate(self) -> float:
        """Units let through a second: the sent rate times the share answered 200."""
        return self.let_through / self.span


class Pacer:
    """How fast calls may start in one unit: ``rate`` units a second (None: unpaced), from an
    announced limit or a measured ceiling, and when the next call may start."""

    def __init__(self, unit: Unit, headroom: float) -> None:
        self.unit = unit
        self.headroom = headroom  # the share of an announced limit used
        self.rate: float | None = None
        self.source: Source | None = None
        self.ceiling: float | None = None  # units a second the provider was found to let through
        self.background = 0.0  # share of 429s found not to follow the rate
        self.ramping = True  # the limiter's concurrency still grows: so does an unpaced rate
        self.free_at = float("-inf")  # when the units booked so far are paid for
        self.held_until = float("-inf")  # an announced budget is spent until then
        self.bound = False  # the last call waited for this pace
        self.segment: Segment | None = None  # taking calls now
        self.closing: list[Segment] = []  # closed to new calls, waiting for their answers
        self.history: deque[Segment] = deque(maxlen=4)  # judged, newest last
        self._pending: dict[float, Segment] = {}  # calls in flight (by their unique start)
        self._last_load = float("-inf")  # the pace was last cut for a 429 then
        self._moved_at = float("-inf")  # the pace was last set (not grown) then
        self._at_top: float | None = None  # the pace reached PROBE_OVER x the ceiling then
        self._probes_failed = 0  # probes over the ceiling refused since it last rose
        self._lowered_at = float("-inf")
        self._lowered_from: Segment | None = None  # the refused segment that last lowered it
        self._refused_at: float | None = None  # a rate sent when calls in a row were refused
        self._sent: deque[tuple[float, float]] = deque()  # (started, units), the last second
        self._proven_s = PROVEN_RATE_S  # held that long there without a 429: the new ceiling
        self._last_grown: float | None = None
        # (answered, started, units) of the calls let through in the last minute
        self._let_through: deque[tuple[float, float, float]] = deque()

    # --- the next call ----------------------------------------------------------------------
    def earliest(self, now: float) -> float:
        """When a call may start, by this pace."""
        start = max(now, self.held_until)
        return max(start, self.free_at) if self.rate else start

    def book(self, start: float, cost: float, asked: float) -> None:
        """A call of ``cost`` units starts at ``start`` (it asked at ``asked``)."""
        self._sent.append((start, cost))
        if self.rate:
            self.bound = start > asked + 1e-9
            self.free_at = max(self.free_at, start) + cost / self.rate
        if self.source == "announced":
            return
        if self.segment is None:
            self.segment = Segment(start, self.rate)
        elif self.segment.full(start):
            self._close(start, judged=True)
            self.segment = Segment(start, self.rate)
        self.segment.sent += 1
        self.segment.sent_units += cost
        self._pending[start] = self.segment

    def settle(self, estimated: float, used: float) -> None:
        """The provider counted ``used`` for a call paced as ``estimated``: pay the gap."""
        if self.rate and self.source == "announced":
            self.free_at += (used - estimated) / self.rate

    # --- what the provider said ------------------------------------------------------------
    def announce(self, per_minute: float) -> None:
        """The provider stated its limit: pace just under it, nothing left to measure."""
        self.rate = per_minute / MINUTE_S * self.headroom
        self.source = "announced"
        self.segment, self.closing = None, []

    def spent_until(self, until: float) -> None:
        """The announced budget is spent until ``until`` (its reset)."""
        self.held_until = max(self.held_until, until)

    # --- what the provider did --------------------------------------------------------------
    def answered(self, started: float, cost: float, now: float, *, grow: bool = True) -> None:
        """A call of ``cost`` units that started at ``started`` was let through (``grow``:
        the pace may grow, unless the provider asked it not to)."""
        self._let_through.append((now, started, cost))
        self._forget(now)
        self._count(started, cost, refused=False, now=now)
        if grow:
            self._grow(now)
        else:
            self._last_grown = now

    def refused(self, started: float, cost: float, now: float) -> None:
        """A call that started at ``started`` was answered 429 for this unit's limit."""
        if self.source == "announced":
            return  # the announced figure paces; the refused call waits its own Retry-After
        self._count(started, cost, refused=True, now=now)
        if (
            self.rate is not None
            and self.ceiling is not None
            and started >= self._last_load
            and self.rate > self.ceiling
        ):
            # probed over the ceiling: back under it. Refused again within a cycle: the
            # ceiling was high; what got through since the last cut is nearer
            since = now - self._last_load
            if since >= CYCLE_MIN_S:
                through = self._let_through_since(now - min(since, MINUTE_S), now)
                self.ceiling = min(self.ceiling, through)
            self._probes_failed += 1
            self._cut(self.ceiling * UNDER, now)

    def freeze(self, now: float) -> None:
        """Calls in a row are refused: stop the rate growing, at what was let through lately
        (unpaced, a 429 frees its slot at once and the next call goes: a storm)."""
        if self.rate is None and self.source != "announced":
            self._refused_at = self._sent_lately(now)
            self._move(self._let_through_lately(now), now)

    def lost(self, started: float, now: float) -> None:
        """A call that started at ``started`` got no answer that says anything of the limit
        (a timeout, a 5xx): its segment waits for it no longer."""
        if (segment := self._pending.pop(started, None)) is not None:
            segment.sent -= 1
            self._settle_closing(now)

    def hold(self, now: float) -> None:
        """The provider refuses every call: what is measured until it lets calls through
        again says nothing of a rate."""
        if self.source != "announced":
            self._close(now, judged=False)
            self._moved_at = now

    def resume(self, held_s: float, now: float, *, abrupt: bool = False) -> None:
        """Calls go again after the provider refused every one for ``held_s``.

        A long hold, or one that came abruptly (calls let through until all were refused,
        none refused before), is a provider counting a window or a bucket a minute deep: the
        last minute let its limit through, so pace at that (a minute is how providers state
        limits), and probe over it only a minute at a time. A short hold after refusals
        mixed with answers is a shallow bucket: pace at what it let through just before."""
        if self.source == "announced":
            return
        self.history.clear()
        minute = self.minute_let_through(now) / MINUTE_S
        if held_s >= LONG_HOLD_S or abrupt:
            self._found(minute, now)
            self._proven_s = PROVEN_WINDOW_S
        else:
            self._found(max(self._let_through_lately(now - held_s), minute), now)
            self._proven_s = PROVEN_GUESS_S  # a guess from a moment: proven higher sooner

    # --- reading ----------------------------------------------------------------------------
    def minute_let_through(self, now: float) -> float:
        """Units let through over the last minute (by when they were answered)."""
        self._forget(now)
        return sum(units for _, _, units in self._let_through)

    def oldest_let_through(self, now: float) -> float | None:
        """When the oldest call let through in the last minute started."""
        self._forget(now)
        return min((started for _, started, _ in self._let_through), default=None)

    def _let_through_since(self, since: float, now: float) -> float:
        """Units let through a second since ``since`` (by answer)."""
        total = sum(units for when, _, units in self._let_through if when > since)
        return total / max(now - since, 1e-9)

    def _sent_lately(self, now: float) -> float:
        """Units sent over the last second."""
        while self._sent and self._sent[0][0] <= now - 1.0:
            self._sent.popleft()
        return sum(units for _, units in self._sent)

    def _let_through_lately(self, now: float) -> float:
        """Units let through a second over the second before ``now`` (one call at least)."""
        recent = sum(units for when, _, units in self._let_through if now - 1.0 < when <= now)
        smallest = min((units for _, _, units in self._let_through), default=1.0)
        return max(recent, smallest)

    def _forget(self, now: float) -> None:
        while self._let_through and self._let_through[0][0] <= now - MINUTE_S:
            self._let_through.popleft()

    # --- the measuring ---------------------------------------------------------------------
    def _close(self, now: float, *, judged: bool) -> None:
        """The segment taking calls takes no more; it is judged (or kept as history) once its
        calls are answered."""
        if self.segment is None:
            return
        segment, self.segment = self.segment, None
        segment.closed, segment.judged = now, judged
        if segment.sent:
            self.closing.append(segment)
            self._settle_closing(now)

    def _count(self, started: float, cost: float, *, refused: bool, now: float) -> None:
        """Count an answer in the segment its call started in."""
        if self.source == "announced":
            return
        if (segment := self._pending.pop(started, None)) is not None:
            segment.answers += 1
            segment.refused += refused
            segment.let_through += 0.0 if refused else cost
        self._settle_closing(now)

    def _settle_closing(self, now: float) -> None:
        """Judge the closed segments whose calls are all answered, oldest first."""
        while self.closing and self.closing[0].complete:
            segment = self.closing.pop(0)
            if segment.answers >= SEGMENT_MIN_CALLS:
                if segment.judged and segment.started >= self._moved_at:
                    self._judge(segment, now)
                self.history.append(segment)

    def _judge(self, segment: Segment, now: float) -> None:
        """A segment's calls are answered: decide what its share of 429s says (module doc)."""
        excess = segment.share - self.background
        previous = self.history[-1] if self.history else None
        if not self._beyond_background(segment):
            if now - self._lowered_at > LOWERED_MEMORY_S:
                self._lowered_from = None  # (a clean segment or two between is noise's way too)
            if (
                previous is not None
                and previous.share - self.background > CLEAN
                and previous.refused >= REFUSED_MIN
                and previous.sent_rate > segment.sent_rate
                and _apart(previous.sent_rate, segment.sent_rate)
            ):
                # refused higher, clean here: a limit between, at most what the higher let
                # through (sent in bunches, unpaced, it lets through more than its limit)
                through = previous.let_through_rate
                if previous.rate is None:
                    through = min(through, segment.sent_rate * UP)
                self._found(max(through, segment.sent_rate), now)
            elif self.ceiling is None and self.rate is not None:
                if segment.sent_rate >= segment.rate * BINDING if segment.rate else False:
                    self._up(now)  # clean where the pace binds: higher
                else:
                    self._lift(now)  # clean and not held back by the pace: none needed
            return
        other = next(
            (s for s in reversed(self.history) if _apart(s.sent_rate, segment.sent_rate)), None
        )
        if other is not None:
            low, high = sorted((other, segment), key=lambda s: s.sent_rate)
            z = _z(low, high)
            if z >= LIMIT_Z:
                log.debug(
                    "%s limit: %d/%d refused at %.3f/s (let through %.3f/s), %d/%d at %.3f/s "
                    "(%.3f/s)",
                    self.unit,
                    high.refused,
                    high.answers,
                    high.sent_rate,
                    high.let_through_rate,
                    low.refused,
                    low.answers,
                    low.sent_rate,
                    low.let_through_rate,
                )
                self._found(_let_through_at_limit(low, high), now)
                return
            if z <= NOISE_Z and _noise_like(low, high):
                self._noise(low, high, now)
                return
        # nothing to compare with yet: move the rate
        if self.rate is None and self.ramping and excess < FREEZE_SHARE:
            return  # the rate still grows by itself: the next segment compares
        if self.ramping and excess < FREEZE_SHARE and self.ceiling is None:
            self._up(now, segment.sent_rate)
        elif segment.let_through_rate <= 0:
            return  # nothing let through: the limiter holds calls, nothing to measure
        elif segment.rate is not None and segment.sent_rate >= segment.rate * BINDING:
            # refused at a pace it kept to: what it let through is its ceiling (a lower one
            # than found before, if any: its limit came down, or was measured high). Right
            # after such a lowering, the same share again is noise, not a lower limit: never
            # ratchet down on one verdict after another
            lowered, self._lowered_from = self._lowered_from, None
            # refused more than noise ever is: a limit lower still, lowered again
            if lowered is not None and segment.share <= NOISE_MAX:
                if (
                    _z(segment, lowered) <= NOISE_Z
                    and min(segment.refused, lowered.refused) >= NOISE_MIN
                ):
                    self._noise(segment, lowered, now)
                else:
                    self._lowered_from = lowered  # not clean yet: wait for the next segment
                return
            if segment.answers < SEGMENT_CALLS // 2:
                return  # too few calls to lower a ceiling on (long token calls)
            if self.ceiling is None or segment.let_through_rate < self.ceiling:
                # a lower ceiling, by a fifth at most on one segment's word
                floor = self.ceiling * LOWER_MAX if self.ceiling is not None else 0.0
                self._found(max(segment.let_through_rate, floor), now)
                self._lowered_from, self._lowered_at = segment, now
        else:
            ceiling = self.ceiling if self.ceiling is not None else math.inf
            self._move(min(segment.let_through_rate, ceiling) * UNDER, now)

    def _up(self, now: float, rate: float | None = None) -> None:
        """Test a higher pace, short of a rate refused before."""
        higher = (rate if rate is not None else self.rate or 0.0) * UP
        if self._refused_at is not None:
            higher = min(higher, self._refused_at * UNDER)
        if higher > (self.rate or 0.0) * (1 + APART / 2):
            self._move(higher, now)

    def _beyond_background(self, segment: Segment) -> bool:
        """Whether a segment refused more than the background explains: a few calls at
        least (``REFUSED_MIN``), ``CLEAN`` over it, and by two standard errors of a share
        that size (a known background of one in five refuses three in twenty by chance)."""
        if segment.refused < REFUSED_MIN or segment.share - self.background <= CLEAN:
            return False
        if self.background <= 0.0:
            return True
        spread = math.sqrt(self.background * (1 - self.background) / segment.answers)
        return segment.share - self.background > 2.0 * spread

    def runs_to_freeze(self) -> int:
        """Calls in a row refused that stop the rate growing: ``FREEZE_RUN``, more with a
        background (a run its share makes once in ten thousand)."""
        if self.background <= 0.0:
            return FREEZE_RUN
        return max(FREEZE_RUN, math.ceil(math.log(1e-4) / math.log(self.background)))

    def _move(self, rate: float, now: float) -> None:
        """Pace at ``rate`` (measured), a new segment from now."""
        log.debug("%s pace %s -> %.3f/s (ceiling %s)", self.unit, self.rate, rate, self.ceiling)
        self._close(now, judged=False)
        self._moved_at = now
        self.rate = max(rate, 1e-3)
        self.source = "measured"
        self.free_at = min(self.free_at, now)  # what was booked at the old pace is not owed

    def _found(self, ceiling: float, now: float) -> None:
        """The provider lets ``ceiling`` units a second through: pace just under it. Found
        from a few seconds' answers, it is proven higher sooner (``PROVEN_GUESS_S``)."""
        if ceiling <= 0:
            return
        log.debug("%s ceiling %s -> %.3f/s", self.unit, self.ceiling, ceiling)
        self.ceiling = ceiling
        self._proven_s = PROVEN_GUESS_S
        self._move(ceiling * UNDER, now)
        self._last_load = now

    def _cut(self, rate: float, now: float) -> None:
        log.debug(
            "%s over the ceiling %s: pace %s -> %.3f/s", self.unit, self.ceiling, self.rate, rate
        )
        self._close(now, judged=False)
        self._moved_at = now
        self.rate = min(self.rate or rate, rate)
        self.free_at = min(self.free_at, now)
        self._last_load = now
        self._at_top = None

    def _noise(self, low: Segment, high: Segment, now: float) -> None:
        """The share of 429s did not follow the rate: background, and no pace of our own."""
        self.background = (low.refused + high.refused) / (low.answers + high.answers)
        log.debug(
            "%s 429s at %.3f/s and %.3f/s alike: background %.3f",
            self.unit,
            low.sent_rate,
            high.sent_rate,
            self.background,
        )
        self.ceiling = None
        self.history.clear()
        self._lift(now)

    def _lift(self, now: float) -> None:
        """No limit found behind the 429s: no pace of our own (a ceiling found stands)."""
        self._close(now, judged=False)
        self._moved_at = now
        if self.ceiling is None:
            self.rate = None
            self.source = None

    def _grow(self, now: float) -> None:
        """A measured pace climbs while calls wait for it: quickly back to just under the
        ceiling, then slowly above it, faster the longer no 429 came."""
        last, self._last_grown = self._last_grown, now
        if self.source != "measured" or not self.rate or not self.bound or last is None:
            return
        if self.ceiling is None:
            return  # under test: the rate moves only by the segments' verdicts
        elapsed = min(now - last, 1.0)
        if self.rate < self.ceiling * UNDER:
            growth = RECOVERY_PER_S
        else:
            quiet = now - self._last_load
            if self._proven_s >= PROVEN_WINDOW_S and quiet < PROVEN_WINDOW_S:
                return  # a window's ceiling is exact: over it only after a quiet minute
            growth = min(GROWTH_MAX_PER_S, GROWTH_PER_S * 2.0 ** (quiet / GROWTH_DOUBLING_S))
            growth /= 2.0 ** min(self._probes_failed, PROBE_BACKOFF_MAX)  # it held: probe less
        top = self.ceiling * PROBE_OVER
        if self.rate >= top:
            if self._at_top is None:
                self._at_top = now
            elif now - self._at_top >= self._proven_s and now - self._last_load >= self._proven_s:
                self._proven_s = PROVEN_RATE_S
                self.ceiling, self._at_top = self.rate, None  # a minute over it, no 429
                self._probes_failed = 0
            return
        self.rate = min(top, self.rate * (1.0 + growth * elapsed))


def _apart(a: float, b: float) -> bool:
    return abs(a - b) >= APART * max(a, b)


def _noise_like(low: Segment, high: Segment) -> bool:
    """Whether two segments look like a share of 429s that does not follow the rate: each
    refused a few calls (``NOISE_MIN``), not most (``NOISE_MAX``), the lower one paced (calls
    spaced evenly, not in bunches that a limit refuses), and what was let through
    grew with the rate sent (a limit lets the same through whatever is sent): on a log
    scale, at least ``NOISE_GROWTH`` of the way from the same to in proportion."""
    if min(low.refused, high.refused) < NOISE_MIN or high.share > NOISE_MAX:
        return False
    if low.rate is None:
        return False  # unpaced, calls go in bunches: its rate says little of the moments
    if high.sent_rate < low.sent_rate * (1 + NOISE_APART):
        return False  # too close to tell a limit's refusals from a constant share
    if low.let_through_rate <= 0 or high.sent_rate <= low.sent_rate:
        return False
    grew = math.log(max(high.let_through_rate, 1e-9) / low.let_through_rate)
    return grew >= NOISE_GROWTH * math.log(high.sent_rate / low.sent_rate)


def _let_through_at_limit(low: Segment, high: Segment) -> float:
    """What a limit between two segments lets through a second: what the higher rate let
    through, measured over its span; but an unpaced segment goes in bunches and measures
    short, and a lower one refused too measures the same limit: then the paced one, or the
    smaller (a clean lower one only bounds it from below)."""
    if low.refused < REFUSED_MIN:
        return max(high.let_through_rate, low.let_through_rate)
    if high.rate is None and low.rate is not None:
        return low.let_through_rate
    return min(high.let_through_rate, low.let_through_rate)


def _z(low: Segment, high: Segment) -> float:
    """How many standard errors the share of 429s at the higher rate is above the lower's
    (the two-proportion z statistic, shares pooled)."""
    pooled = (low.refused + high.refused) / (low.answers + high.answers)
    variance = pooled * (1 - pooled) * (1 / low.answers + 1 / high.answers)
    if variance <= 0:
        return 0.0 if high.share == low.share else math.copysign(math.inf, high.share - low.share)
    return (high.share - low.share) / math.sqrt(variance)
