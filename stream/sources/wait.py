"""The wait for reports after a recovery, shared by the thread processor and the span
assembly.

A partition taken over (a restart, a rebalance) is read again from its committed offset, so
what earlier reports said of the sources is forgotten. Until every source has been reported
on again, one no report has named is taken as unread: in a rebalance its new owner may not
have it yet, and its backlog may hold a thread's next turn or a trace's late span. Past
``wait_s`` the sources still silent count as read (no worker of the group reads them), and
that is said once in the log.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass
class ReportWait:
    """One wait for reports: from ``begin`` until ``until`` (-inf: not waiting)."""

    wait_s: float
    what: str  # the partitions taken over, as the log says them
    until: float = -math.inf

    def begin(self, now: float) -> None:
        """A recovery at ``now``: wait ``wait_s`` for reports on every source."""
        self.until = now + self.wait_s

    @property
    def waiting(self) -> bool:
        return self.until > -math.inf

    def over(self, now: float) -> bool:
        """The wait is on and its time is up at ``now``."""
        return now >= self.until > -math.inf

    @property
    def since(self) -> float:
        """When the wait began (the recovery)."""
        return self.until - self.wait_s

    def end(self, unheard: Iterable[str]) -> None:
        """The wait is over; the ``unheard`` sources now count as read, and are said."""
        self.until = -math.inf
        if silent := sorted(unheard):
            log.warning(
                "no worker reported on %s within %.0f s of taking over %s: counted as read "
                "(is a worker of the group reading it?)",
                ", ".join(silent),
                self.wait_s,
                self.what,
            )
