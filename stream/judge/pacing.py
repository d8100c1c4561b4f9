"""The pace of judge calls in one unit (requests, or tokens), found from what the provider
says and does. Pure: times come in as arguments, nothing sleeps.

An announced limit (``x-ratelimit-limit-*``) is paced just under. A silent one is found from
its 429s by comparing their share between segments of calls sent at rates apart
(``segments.py``; what a judged segment says: ``pace_verdicts.py``): a share that rises with
the rate is a limit, paced just under what it let through (its *ceiling*) and probed above
slowly; one that stays the same is noise (the *background*), and lifts the pace. Design record
07 has the whole of it. The pacer keeps the segments, applies their verdicts and grows the
pace between them. A provider refusing every call is the limiter's to hold (``limiter.py``),
which says when calls go again (``resume``).
"""

from __future__ import annotations

import logging
import math
from collections import deque

from .pace_share import PROVEN_WINDOW_S, SharedPace, Source, Unit
from .pace_verdicts import UNDER, UP, Found, Lift, Move, Noise, Pace, SegmentVerdicts, Up
from .segments import (
    APART,
    MINUTE_S,
    NOISE_MAX,
    SEGMENT_MIN_CALLS,
    Segment,
    Traffic,
    runs_to_freeze,
)

log = logging.getLogger(__name__)


LONG_HOLD_S = 5.0  # a hold this long: the provider counts a window, not a rate
GROWTH_PER_S = 0.002  # the measured pace's growth a second near its ceiling, at first...
GROWTH_DOUBLING_S = 10.0  # ...doubling for every this long without a 429...
GROWTH_MAX_PER_S = 0.1  # ...up to this
RECOVERY_PER_S = 0.05  # growth a second while below UNDER x the ceiling
PROBE_OVER = 1.03  # the pace probes up to this far over the ceiling...
PROVEN_RATE_S = 30.0  # ...where this long without a 429 proves it the new ceiling...
PROVEN_GUESS_S = 10.0  # ...this long if the ceiling was a guess from a moment's answers...
# ...a minute if it was found as a window (PROVEN_WINDOW_S: a window counting a minute lets a
# pace over its limit through for up to a minute)
LATE_S = 0.5  # a call started this late for its turn keeps the pace's schedule
CYCLE_MIN_S = 5.0  # a probe over the ceiling refused this long after the last: re-measure
PROBE_BACKOFF_MAX = 4  # each probe over the ceiling refused halves the next one's climb, so far


class Pacer(SharedPace):
    """How fast calls may start in one unit: ``rate`` units a second (None: unpaced), from an
    announced limit or a measured ceiling, and when the next call may start; in a fleet, at
    this worker's share of the account's (``SharedPace``)."""

    def __init__(self, unit: Unit, headroom: float) -> None:
        self.unit = unit
        self.headroom = headroom  # the share of an announced limit used
        self.share = 1.0  # this worker's share of the account's limit (``fleet.py``)
        self.announced: float | None = None  # the provider's limit, units a second
        self.findings = 0  # ceilings found (or proven) here: the fleet hears of each
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
        self._refused_at: float | None = None  # a rate sent when calls in a row were refused
        self._proven_s = PROVEN_RATE_S  # held that long there without a 429: the new ceiling
        self._last_grown: float | None = None
        self.held_minute = 0.0  # let through in the minute before the provider refused all
        self._hold_began: float | None = None  # ...which began then (calls sent before count)
        self.traffic = Traffic()  # what was sent and let through lately
        self.verdicts = SegmentVerdicts(unit)  # what each judged segment says

    # --- the next call ----------------------------------------------------------------------
    def earliest(self, now: float) -> float:
        """When a call may start, by this pace."""
        start = max(now, self.held_until)
        return max(start, self.free_at) if self.rate else start

    def book(self, start: float, cost: float, asked: float) -> None:
        """A call of ``cost`` units starts at ``start`` (it asked at ``asked``)."""
        self.traffic.sent(start, cost)
        if self.rate:
            self.bound = start > asked + 1e-9
            spacing = cost / self.rate
            if self.bound and self.free_at <= start < self.free_at + min(LATE_S, spacing):
                # it waited for its turn and started late (a busy event loop), by less than
                # a call's spacing: the pace's schedule is kept, not moved back by the delay
                self.free_at += spacing
            else:
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
        self.announced = per_minute / MINUTE_S
        self.rate = self.announced * self.headroom * self.share
        self.source = "announced"
        self.segment, self.closing = None, []

    def spent_until(self, until: float) -> None:
        """The announced budget is spent until ``until`` (its reset)."""
        self.held_until = max(self.held_until, until)

    # --- what the provider did --------------------------------------------------------------
    def answered(self, started: float, cost: float, now: float, *, grow: bool = True) -> None:
        """A call of ``cost`` units that started at ``started`` was let through (``grow``:
        the pace may grow, unless the provider asked it not to)."""
        self.traffic.let_through(started, cost, now)
        if self._hold_began is not None and started <= self._hold_began:
            self.held_minute += cost  # sent before the window closed: it let this through
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
                through = self.traffic.let_through_since(now - min(since, MINUTE_S), now)
                if through < self.ceiling:
                    self.ceiling = through
                    self.findings += 1
            self._probes_failed += 1
            self._cut(self.ceiling * UNDER, now)

    def freeze(self, now: float) -> None:
        """Calls in a row are refused: stop the rate growing, at what was let through lately
        (unpaced, a 429 frees its slot at once and the next call goes: a storm)."""
        if self.rate is None and self.source != "announced":
            self._refused_at = self.traffic.sent_lately(now)
            self._move(self.traffic.let_through_lately(now), now)

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
            self.held_minute = self.traffic.minute_let_through(now)
            self._hold_began = now
            self._close(now, judged=False)
            self._moved_at = now

    def resume(
        self,
        held_s: float,
        now: float,
        *,
        abrupt: bool = False,
        others: float = 0.0,
        found: float | None = None,
    ) -> None:
        """Calls go again after the provider refused every one for ``held_s``.

        A long hold, or one that came abruptly (calls let through until all were refused,
        none refused before), is a provider counting a window or a bucket a minute deep: the
        last minute let its limit through, so pace at that (a minute is how providers state
        limits), and probe over it only a minute at a time. A short hold after refusals
        mixed with answers is a shallow bucket: pace at what it let through just before.

        The minute is the one before the hold began (what the window let through before it
        closed), or the one before now if more went through since: a hold as long as the
        window itself leaves only its probes in the minute before now. In a fleet the window
        let through the other workers' minute too (``others``, each said when held): the
        pace is this worker's share of it; or the fleet's first worker out of the hold found
        the account's limit (``found``): this worker's share of that."""
        self._hold_began = None
        if self.source == "announced":
            return
        if found is not None:
            self.history.clear()
            self.adopt(found, now)
            return
        self.history.clear()
        mine = max(self.traffic.minute_let_through(now), self.held_minute)
        minute = mine / MINUTE_S if not others else (mine + others) / MINUTE_S * self.share
        if held_s >= LONG_HOLD_S or abrupt:
            self._found(minute, now)
            self._proven_s = PROVEN_WINDOW_S
        else:
            self._found(max(self.traffic.let_through_lately(now - held_s), minute), now)
            self._proven_s = PROVEN_GUESS_S  # a guess from a moment: proven higher sooner

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
        """A segment's calls are answered: apply what its share of 429s says
        (``pace_verdicts.py``)."""
        pace = Pace(self.rate, self.ceiling, self.background, self.ramping)
        match self.verdicts.of(segment, self.history, pace, now):
            case Found(ceiling=ceiling, lowering=lowering):
                self._found(ceiling, now)
                if lowering is not None:
                    self.verdicts.lowered(lowering, now)
            case Noise(low=low, high=high):
                self._noise(low, high, now)
            case Up(rate=rate):
                self._up(now, rate)
            case Move(rate=rate):
                self._move(rate, now)
            case Lift():
                self._lift(now)

    def _up(self, now: float, rate: float | None = None) -> None:
        """Test a higher pace, short of a rate refused before."""
        higher = (rate if rate is not None else self.rate or 0.0) * UP
        if self._refused_at is not None:
            higher = min(higher, self._refused_at * UNDER)
        if higher > (self.rate or 0.0) * (1 + APART / 2):
            self._move(higher, now)

    def runs_to_freeze(self) -> int:
        """Calls in a row refused that stop the rate growing (see ``segments.runs_to_freeze``)."""
        return runs_to_freeze(self.background)

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
        self.findings += 1
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
        """The share of 429s did not follow the rate: background, and no pace of our own. The
        background is taken a standard error above the two segments' share: from forty-odd
        calls the share is rough, and one taken low lets later segments' chance excess pass
        for a limit (a worker found a limit at half its rate among 1 in 7 refused at random)."""
        answers = low.answers + high.answers
        share = (low.refused + high.refused) / answers
        self.background = min(NOISE_MAX, share + math.sqrt(share * (1 - share) / answers))
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
                self.findings += 1
                self._probes_failed = 0
            return
        self.rate = min(top, self.rate * (1.0 + growth * elapsed))
