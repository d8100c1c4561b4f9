"""Whether the judge is there at all: provider-wide trouble holds calls instead of failing them.

Connection errors, timeouts, 5xx and 429s say nothing about one request: they mean the
provider is unavailable for now. When a call has seen nothing else for its whole attempt
budget, or ``CONSECUTIVE_FAILURES`` calls in a row failed that way (429s excepted: a rate
limit is pacing's business), the judge is *down*: calls stop and wait at ``admit``, a single
probe call goes out on a growing interval (at most a fifth of the outage so far, so a burst of
seconds is found over within a second or two of its end), and the first answer from the
provider brings the judge back *up* and lets every waiting call go. Waiting calls keep their traces unacked, so
consumption pauses through the in-flight bound and lag grows (visibly), and a restart
meanwhile loses nothing. Only a judge down for longer than ``outage_max_s`` makes calls fail
(``JudgeError`` of kind ``unavailable``); probes continue, so scoring resumes by itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from ..errors import JudgeError

log = logging.getLogger(__name__)

CONSECUTIVE_FAILURES = 5  # provider-wide failures in a row, across calls, that mean "down"
PROBE_SHARE = 0.2  # a down judge is probed at least this often, as a share of the outage so far
PROVIDER_WIDE = frozenset({"connection", "timeout", "server_error", "rate_limited"})


class JudgeHealth:
    """The judge's availability, shared by every call of one client."""

    def __init__(
        self,
        *,
        outage_max_s: float,
        probe_base_s: float,
        probe_max_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.outage_max_s = outage_max_s
        self.probe_base_s = probe_base_s
        self.probe_max_s = probe_max_s
        self.clock = clock
        self.available = True
        self.down_since: float | None = None
        self.last_trouble = ""
        self._unavailable_s = 0.0  # finished outages
        self._in_a_row = 0
        self._last_answer = float("-inf")
        self._probing = False
        self._probe_delay = probe_base_s
        self._next_probe = 0.0
        self._changed = asyncio.Event()

    def unavailable_seconds(self) -> float:
        """Time spent unavailable since start, the outage in progress included."""
        ongoing = self.clock() - self.down_since if self.down_since is not None else 0.0
        return self._unavailable_s + ongoing

    async def admit(self) -> bool:
        """Wait until a call may go out; True when it goes as the probe of a down judge.

        Raises ``JudgeError`` (``unavailable``) once the judge has been down for longer than
        ``outage_max_s`` and this call cannot be the probe.
        """
        while not self.available:
            now = self.clock()
            assert self.down_since is not None
            if not self._probing and now >= self._next_probe:
                self._probing = True
                return True
            if now - self.down_since >= self.outage_max_s:
                raise JudgeError(
                    f"judge unavailable for {now - self.down_since:.1f}s (over "
                    f"SCORER_JUDGE_OUTAGE_MAX_S={self.outage_max_s:g}); last trouble: "
                    f"{self.last_trouble}",
                    kind="unavailable",
                )
            wake = self._next_probe if not self._probing else now + self.probe_max_s
            wake = min(wake, self.down_since + self.outage_max_s)
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout=max(0.01, wake - now))
        return False

    def answered_since(self, moment: float) -> bool:
        """Whether the provider answered any call at or after ``moment`` (this clock)."""
        return self._last_answer >= moment

    def answered(self, probe: bool) -> None:
        """The provider answered (whatever it said): it is there."""
        self._in_a_row = 0
        self._last_answer = self.clock()
        if probe:
            self._probing = False
        if not self.available:
            assert self.down_since is not None
            outage = self.clock() - self.down_since
            self._unavailable_s += outage
            self.available, self.down_since = True, None
            self._probe_delay = self.probe_base_s
            log.warning("judge available again after %.1fs", outage)
            self._changed.set()

    def trouble(self, kind: str, message: str, probe: bool, *, exhausted: bool = False) -> None:
        """A provider-wide failure; ``exhausted``: the call's whole budget went on such ones."""
        self.last_trouble = message
        if probe:
            # the next probe later each time, but never later than a share of the outage so
            # far: a 10 s overload is found over within 2 s of its end, an hour's within minutes
            down_for = self.clock() - (self.down_since or self.clock())
            cap = max(self.probe_base_s, PROBE_SHARE * down_for)
            self._probing = False
            self._probe_delay = min(self.probe_max_s, self._probe_delay * 2, cap)
            self._next_probe = self.clock() + self._probe_delay
            self._changed.set()  # another waiting call may become the next probe when it is due
            return
        if kind != "rate_limited":
            self._in_a_row += 1
        if self.available and (exhausted or self._in_a_row >= CONSECUTIVE_FAILURES):
            self._go_down(message)

    def _go_down(self, message: str) -> None:
        now = self.clock()
        self.available, self.down_since = False, now
        self._next_probe = now + self._probe_delay
        log.warning(
            "judge unavailable (%s): holding calls, probing every %.1f s up to a fifth of the "
            "outage (%.0f s at most), giving up after %.0f s",
            message,
            self.probe_base_s,
            self.probe_max_s,
            self.outage_max_s,
        )
        self._changed.set()
