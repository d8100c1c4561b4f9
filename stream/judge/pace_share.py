"""A pacer's side of the fleet (``fleet.py``, design record 46): its share of the account's
limits, a limit another worker found taken up, the account's limit as this pacer knows it."""

from __future__ import annotations

from collections import deque
from typing import Literal, Protocol

from .segments import Segment

Unit = Literal["requests", "tokens"]
Source = Literal["announced", "measured"]

PROVEN_WINDOW_S = 60.0  # a window's ceiling: over it only after a quiet minute


class FleetSide(Protocol):
    """What a limiter tells its place in the fleet and asks of it (``fleet.FleetLink``)."""

    def started(self, now: float) -> None: ...

    def answered(self, now: float, *, refused: bool) -> None: ...

    def probed_elsewhere(self, wall: float) -> bool: ...

    def resuming(self, unit: Unit, held_at: float | None, wall: float) -> dict[str, float]: ...


class SharedPace:
    """What ``pacing.Pacer`` does for its fleet; the state it reads and moves is the pacer's."""

    headroom: float
    share: float
    announced: float | None
    source: Source | None
    rate: float | None
    ceiling: float | None
    free_at: float
    history: deque[Segment]
    _refused_at: float | None
    _moved_at: float
    _proven_s: float
    _hold_began: float | None
    findings: int

    def _close(self, now: float, *, judged: bool) -> None:
        raise NotImplementedError  # the pacer's

    def _found(self, ceiling: float, now: float) -> None:
        raise NotImplementedError  # the pacer's

    def reshare(self, share: float, now: float) -> None:
        """This worker's share of the account's limit is now ``share``: an announced pace is
        that share of the announcement, a measured one scales with it (what it measured was
        measured at the old share), and measures afresh from now."""
        old, self.share = self.share, share
        if self.source == "announced" and self.announced is not None:
            self.rate = self.announced * self.headroom * share
            return
        if self.source != "measured" or not self.rate:
            return
        factor = share / old
        self.rate *= factor
        if self.ceiling is not None:
            self.ceiling *= factor
        if self._refused_at is not None:
            self._refused_at *= factor
        self.history.clear()
        self._close(now, judged=False)
        self._moved_at = now
        self.free_at = min(self.free_at, now)

    def adopt(self, per_s: float, now: float) -> None:
        """Another worker found the account's limit at ``per_s`` (the whole account's units a
        second): pace at this worker's share of it, a window's ceiling (over it only after a
        quiet minute)."""
        self._found(per_s * self.share, now)
        self._proven_s = PROVEN_WINDOW_S
        self.findings -= 1  # taken up, not found here: the fleet is not told it again

    def account_limit(self) -> tuple[Source, float] | None:
        """The account's limit as this pacer knows it (units a second of the whole
        account): announced, or the measured ceiling over this worker's share; None."""
        if self.source == "announced" and self.announced is not None:
            return "announced", self.announced
        if self.ceiling is not None and self.source == "measured":
            return "measured", self.ceiling / self.share
        return None

    def let_go(self) -> None:
        """An early hold was soon over (a shallow bucket's, ``limiter.py``): the pace goes on
        as it was, its segments to find the rate."""
        self._hold_began = None
