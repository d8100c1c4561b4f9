"""The limiter's recent calls by when they were sent, and what became of each: what tells a
run of refusals (calls in a row refused) and whether it came abruptly."""

from __future__ import annotations

from typing import Literal

Outcome = Literal["pending", "ok", "refused", "lost"]

SENT_KEPT = 256  # recent calls remembered by when they were sent
ABRUPT_CALLS = 20  # calls before a hold's run looked at to tell an abrupt one


class SentCalls:
    """The last ``SENT_KEPT`` calls by start (each start is unique), with their outcome."""

    def __init__(self) -> None:
        self.calls: dict[float, Outcome] = {}

    def sent(self, started: float) -> None:
        self.calls[started] = "pending"
        if len(self.calls) > SENT_KEPT:
            del self.calls[next(iter(self.calls))]

    def mark(self, started: float, outcome: Outcome) -> None:
        if started in self.calls:
            self.calls[started] = outcome

    def refused_abruptly(self) -> bool:
        """Whether the calls sent before the last run of refusals were all let through: a
        provider that lets everything through until it refuses everything (a window, a
        bucket a minute deep), not one that refused a share all along (a shallow bucket)."""
        outcomes = [o for o in self.calls.values() if o in ("ok", "refused")]
        while outcomes and outcomes[-1] == "refused":
            outcomes.pop()  # the run itself
        before = outcomes[-ABRUPT_CALLS:]
        return len(before) >= ABRUPT_CALLS // 2 and before.count("refused") == 0

    def refused_run(self, started: float) -> tuple[int, float]:
        """How many calls in a row up to the one sent at ``started`` were refused, by when
        they were sent (a call still waiting for its answer, or let through, ends the run;
        one that failed otherwise is skipped), and over how long they were sent."""
        run, first = 0, started
        for when in reversed(self.calls):
            if when > started:
                continue
            outcome = self.calls[when]
            if outcome == "refused":
                run, first = run + 1, when
            elif outcome != "lost":
                break
        return run, started - first
