"""What a judged segment says the pace should do: a limit found (and the ceiling it lets
through), noise, a higher pace to test, a pace to move to, or no pace of our own. Decided from
the segment, the segments judged before it and where the pace stands; the pacer
(``pacing.py``) applies the verdict. Design record 07 has the whole of it.

A share of 429s that rises with the rate between two segments at rates apart is a limit; one
that stays the same is noise (the *background*). With nothing to compare with yet, a segment
refused at a pace it kept to lowers the ceiling to what it let through; right after such a
lowering, the same share again is noise, not a lower limit (``SegmentVerdicts`` remembers the
last lowering).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

from .segments import (
    CLEAN,
    LIMIT_Z,
    NOISE_MAX,
    NOISE_MIN,
    NOISE_Z,
    REFUSED_MIN,
    SEGMENT_CALLS,
    Segment,
    apart,
    beyond_background,
    let_through_at_limit,
    noise_like,
    z_score,
)

log = logging.getLogger(__name__)

FREEZE_SHARE = 0.5  # a share of 429s this high is not tested higher
UP = 1.25  # a rate that can still grow is tested this much higher
UNDER = 0.97  # the pace under a ceiling found
LOWERED_MEMORY_S = 15.0  # a lowering is compared with the refusals after it this long
LOWER_MAX = 0.8  # one refused segment lowers a ceiling to this share of it at most


@dataclass(frozen=True)
class Pace:
    """Where a pacer stands when a segment is judged."""

    rate: float | None  # units a second (None: unpaced)
    ceiling: float | None  # what the provider was found to let through
    background: float  # share of 429s found not to follow the rate
    ramping: bool  # the limiter's concurrency still grows: so does an unpaced rate


@dataclass(frozen=True)
class Found:
    """A limit: the provider lets ``ceiling`` units a second through. ``lowering``: the
    refused segment that lowered it, remembered once the pace has moved."""

    ceiling: float
    lowering: Segment | None = None


@dataclass(frozen=True)
class Noise:
    """The share of 429s did not follow the rate between ``low`` and ``high``: background."""

    low: Segment
    high: Segment


@dataclass(frozen=True)
class Up:
    """Test a pace higher than ``rate`` (None: the pace now)."""

    rate: float | None = None


@dataclass(frozen=True)
class Move:
    """Pace at ``rate`` (measured)."""

    rate: float


@dataclass(frozen=True)
class Lift:
    """No limit behind the 429s: no pace of our own (a ceiling found stands)."""


Verdict = Found | Noise | Up | Move | Lift


class SegmentVerdicts:
    """The verdicts of one pacer's segments, judged one after another."""

    def __init__(self, unit: str) -> None:
        self.unit = unit
        self._lowered_at = float("-inf")
        self._lowered_from: Segment | None = None  # the refused segment that last lowered it

    def lowered(self, segment: Segment, now: float) -> None:
        """``segment`` lowered the ceiling (a ``Found`` with its ``lowering``), applied."""
        self._lowered_from, self._lowered_at = segment, now

    def of(
        self, segment: Segment, history: Sequence[Segment], pace: Pace, now: float
    ) -> Verdict | None:
        """A segment's calls are answered: decide what its share of 429s says (module doc);
        None: nothing to do."""
        if not beyond_background(segment, pace.background):
            return self._clean(segment, history, pace, now)
        other = next((s for s in reversed(history) if apart(s.sent_rate, segment.sent_rate)), None)
        if other is not None:
            low, high = sorted((other, segment), key=lambda s: s.sent_rate)
            z = z_score(low, high)
            if z >= LIMIT_Z:
                log.debug("%s limit: %s refused more than %s", self.unit, high, low)
                return Found(let_through_at_limit(low, high))
            if z <= NOISE_Z and noise_like(low, high):
                return Noise(low, high)
        # nothing to compare with yet: move the rate
        excess = segment.share - pace.background
        if pace.rate is None and pace.ramping and excess < FREEZE_SHARE:
            return None  # the rate still grows by itself: the next segment compares
        if pace.ramping and excess < FREEZE_SHARE and pace.ceiling is None:
            return Up(segment.sent_rate)
        if segment.let_through_rate <= 0:
            return None  # nothing let through: the limiter holds calls, nothing to measure
        if segment.held_back:
            return self._refused_at_pace(segment, pace)
        ceiling = pace.ceiling if pace.ceiling is not None else math.inf
        return Move(min(segment.let_through_rate, ceiling) * UNDER)

    def _clean(
        self, segment: Segment, history: Sequence[Segment], pace: Pace, now: float
    ) -> Verdict | None:
        """No more 429s than the background: after a refused segment at a rate well above, a
        limit between; under test, a pace to raise (where it binds) or to lift."""
        if now - self._lowered_at > LOWERED_MEMORY_S:
            self._lowered_from = None  # (a clean segment or two between is noise's way too)
        previous = history[-1] if history else None
        if (
            previous is not None
            and previous.share - pace.background > CLEAN
            and previous.refused >= REFUSED_MIN
            and previous.sent_rate > segment.sent_rate
            and apart(previous.sent_rate, segment.sent_rate)
        ):
            # refused higher, clean here: a limit between, at most what the higher let
            # through (sent in bunches, unpaced, it lets through more than its limit)
            through = previous.let_through_rate
            if previous.rate is None:
                through = min(through, segment.sent_rate * UP)
            return Found(max(through, segment.sent_rate))
        if pace.ceiling is None and pace.rate is not None:
            # clean where the pace binds: higher; clean and not held back by it: none needed
            return Up() if segment.held_back else Lift()
        return None

    def _refused_at_pace(self, segment: Segment, pace: Pace) -> Verdict | None:
        """Refused at a pace it kept to: what it let through is its ceiling (a lower one than
        found before, if any: its limit came down, or was measured high). Right after such a
        lowering, the same share again is noise, not a lower limit: never ratchet down on one
        verdict after another."""
        lowered, self._lowered_from = self._lowered_from, None
        # refused more than noise ever is: a limit lower still, lowered again
        if lowered is not None and segment.share <= NOISE_MAX:
            if (
                z_score(segment, lowered) <= NOISE_Z
                and min(segment.refused, lowered.refused) >= NOISE_MIN
            ):
                return Noise(segment, lowered)
            self._lowered_from = lowered  # not clean yet: wait for the next segment
            return None
        if segment.answers < SEGMENT_CALLS // 2:
            return None  # too few calls to lower a ceiling on (long token calls)
        if pace.ceiling is None or segment.let_through_rate < pace.ceiling:
            # a lower ceiling, by a fifth at most on one segment's word
            floor = pace.ceiling * LOWER_MAX if pace.ceiling is not None else 0.0
            return Found(max(segment.let_through_rate, floor), lowering=segment)
        return None
