"""Segments: the judge calls sent at about one pace, and what two of them at rates apart say
of the provider's 429s (a limit, or noise). Pure: the pacer (``pacing.py``) keeps them."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

MINUTE_S = 60.0  # providers state their limits a minute
SEGMENT_CALLS = 20  # calls that judge the share of 429s at one rate...
SEGMENT_MIN_S = 0.5  # ...sent over this long at least...
SEGMENT_MAX_S = 3.0  # ...or as many as went in this long (slow paces: long token calls)...
SEGMENT_MIN_CALLS = 6  # ...if at least these
BINDING = 0.9  # a segment sent at this share of its pace or more was held back by it
APART = 0.15  # rates this far apart (a share of the higher) compare
FREEZE_RUN = 4  # calls in a row refused (none between let through) that stop the rate growing
CLEAN = 0.03  # a share of 429s within this of the background is clean
REFUSED_MIN = 2  # a segment with fewer 429s than this is clean
NOISE_MAX = 0.3  # a share of 429s above this is never background...
NOISE_MIN = 3  # ...nor one of fewer refusals than this in a segment
NOISE_GROWTH = 0.7  # see noise_like
NOISE_APART = 0.3  # see noise_like
LIMIT_Z = 2.0  # the share of 429s this many standard errors higher at the higher rate: a limit
NOISE_Z = 1.0  # within this many: the same share (noise)


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
    def held_back(self) -> bool:
        """Paced, and sent at (nearly) its pace: the pace bound it."""
        return self.rate is not None and self.sent_rate >= self.rate * BINDING

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


def beyond_background(segment: Segment, background: float) -> bool:
    """Whether a segment refused more than the ``background`` share explains: a few calls
    at least (``REFUSED_MIN``), ``CLEAN`` over it, and by two standard errors of a share that
    size (a background of one in five refuses three in twenty by chance)."""
    if segment.refused < REFUSED_MIN or segment.share - background <= CLEAN:
        return False
    if background <= 0.0:
        return True
    spread = math.sqrt(background * (1 - background) / segment.answers)
    return segment.share - background > 2.0 * spread


def runs_to_freeze(background: float) -> int:
    """Calls in a row refused that stop the rate growing: ``FREEZE_RUN``, more with a
    background (a run its share makes once in ten thousand)."""
    if background <= 0.0:
        return FREEZE_RUN
    return max(FREEZE_RUN, math.ceil(math.log(1e-4) / math.log(background)))


def apart(a: float, b: float) -> bool:
    return abs(a - b) >= APART * max(a, b)


def noise_like(low: Segment, high: Segment) -> bool:
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


def let_through_at_limit(low: Segment, high: Segment) -> float:
    """What a limit between two segments lets through a second: what the higher rate let
    through, measured over its span; but an unpaced segment goes in bunches and measures
    short, and a lower one refused too measures the same limit: then the paced one, or the
    smaller (a clean lower one only bounds it from below)."""
    if low.refused < REFUSED_MIN:
        return max(high.let_through_rate, low.let_through_rate)
    if high.rate is None and low.rate is not None:
        return low.let_through_rate
    return min(high.let_through_rate, low.let_through_rate)


def z_score(low: Segment, high: Segment) -> float:
    """How many standard errors the share of 429s at the higher rate is above the lower's
    (the two-proportion z statistic, shares pooled)."""
    pooled = (low.refused + high.refused) / (low.answers + high.answers)
    variance = pooled * (1 - pooled) * (1 / low.answers + 1 / high.answers)
    if variance <= 0:
        return 0.0 if high.share == low.share else math.copysign(math.inf, high.share - low.share)
    return (high.share - low.share) / math.sqrt(variance)


class Traffic:
    """What a pacer sent over the last second and had let through over the last minute."""

    def __init__(self) -> None:
        self._sent: deque[tuple[float, float]] = deque()  # (started, units)
        self._through: deque[tuple[float, float, float]] = deque()  # (answered, started, units)

    def sent(self, started: float, units: float) -> None:
        self._sent.append((started, units))
        # only the last second is ever asked for (``sent_lately``, at a refusal): what is a
        # minute older than the newest start goes (a start may be booked ahead of now)
        while self._sent[0][0] <= started - MINUTE_S:
            self._sent.popleft()

    def let_through(self, started: float, units: float, now: float) -> None:
        self._through.append((now, started, units))
        self._forget(now)

    def sent_lately(self, now: float) -> float:
        """Units sent over the last second."""
        while self._sent and self._sent[0][0] <= now - 1.0:
            self._sent.popleft()
        return sum(units for _, units in self._sent)

    def minute_let_through(self, now: float) -> float:
        """Units let through over the last minute (by when they were answered)."""
        self._forget(now)
        return sum(units for _, _, units in self._through)

    def oldest_let_through(self, now: float) -> float | None:
        """When the oldest call let through in the last minute started."""
        self._forget(now)
        return min((started for _, started, _ in self._through), default=None)

    def let_through_since(self, since: float, now: float) -> float:
        """Units let through a second since ``since`` (by answer)."""
        total = sum(units for when, _, units in self._through if when > since)
        return total / max(now - since, 1e-9)

    def let_through_lately(self, now: float) -> float:
        """Units let through a second over the second before ``now`` (one call at least)."""
        recent = sum(units for when, _, units in self._through if now - 1.0 < when <= now)
        smallest = min((units for _, _, units in self._through), default=1.0)
        return max(recent, smallest)

    def _forget(self, now: float) -> None:
        while self._through and self._through[0][0] <= now - MINUTE_S:
            self._through.popleft()
