"""Rules that never fire say so: a trace rule whose filter matched none of the last N traces
is reported once, naming its filter and the trace names and projects that came instead.

"The rule never fires and nothing says why" is the most common complaint about online
evaluation (a filter on a trace name the application does not use, a project renamed).
Threads likewise: when traces carry a ``thread_id`` but no conversation rule matches them,
their threads get no thread score, and the watch says so, naming those traces.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from math import inf

from ..models import Trace
from ..ruleset.schema import AnyRule

SEEN_SHOWN = 3  # the most frequent (name, project) pairs named in the report
FORGET_PAST = 64  # pairs gone from the window kept, beyond twice the window, before forgetting


@dataclass(frozen=True)
class Silence:
    """A rule found silent (or heard again: ``silent`` False)."""

    rule: AnyRule
    silent: bool
    traces: int  # traces since the rule last matched
    seen: list[tuple[tuple[str | None, str], int]]  # (name, project) -> count, most first

    def describe(self) -> str:
        conditions = self.rule.filter.model_dump(exclude_none=True)
        seen = ", ".join(f"name {n!r} in project {p!r} ({c})" for (n, p), c in self.seen)
        return (
            f"rule {self.rule.pack}/{self.rule.id} matched none of the last {self.traces} traces; "
            f"its filter: {conditions}; the traces were mostly: {seen or 'none'} "
            "(SCORER_PACK_FILTERS maps a pack's trace names and projects to yours)"
        )


@dataclass(frozen=True)
class UnjudgedThreads:
    """Traces that carry a ``thread_id`` but that no conversation rule matched."""

    conversation_rules: list[AnyRule]  # the loaded ones, none of which matched
    traces: int  # such traces since the last report
    seen: list[tuple[tuple[str | None, str], int]]  # (name, project) -> count, most first

    def describe(self) -> str:
        seen = ", ".join(f"name {n!r} in project {p!r} ({c})" for (n, p), c in self.seen)
        if self.conversation_rules:
            rules = "; ".join(
                f"{r.pack}/{r.id} {r.filter.model_dump(exclude_none=True)}"
                for r in self.conversation_rules
            )
            why = f"no conversation rule's filter matches them (loaded: {rules})"
        else:
            why = (
                "no conversation rule is loaded (SCORER_PACKS leaves out the conversation "
                "pack, which scores any thread)"
            )
        return (
            f"{self.traces} traces carried a thread_id but matched no thread rule, so their "
            f"threads get no thread score: {why}; those traces were mostly: {seen} "
            "(SCORER_PACK_FILTERS maps a pack's trace names and projects to yours)"
        )


class SilenceWatch:
    """Counts, per trace rule, the traces since its filter last matched one; and the traces
    with a thread id that no conversation rule matched (``report_threads``: reported every
    ``after`` of them, while they name a trace name and project not reported before).

    A trace costs little whatever the number of rules: each rule keeps the trace count at
    which it was last heard, its count since then is read on demand, and the rules are looked
    over only from the earliest count at which one of them can fall silent (``_due``), or when
    a silent one is heard again."""

    def __init__(
        self,
        rules: Iterable[AnyRule],
        after: int,
        report: Callable[[Silence], None],
        conversation_rules: Iterable[AnyRule] = (),
        report_threads: Callable[[UnjudgedThreads], None] | None = None,
    ) -> None:
        self.rules = {rule.id: rule for rule in rules}
        self.after = after
        self.report = report
        self._traces = 0  # traces seen
        self._heard = dict.fromkeys(self.rules, 0)  # rule id -> ``_traces`` when last matched
        self._silent: set[str] = set()  # reported silent, not heard since
        self._due = after if self.rules else inf  # no rule falls silent before this count
        self._window = max(after, 1)
        self._recent: deque[tuple[str | None, str]] = deque(maxlen=self._window)
        # (name, project) -> the trace count it last came at, in the order each came back
        # into the window (``_counts``); ones gone from the window forgotten now and then
        self._runs: dict[tuple[str | None, str], int] = {}
        self.conversation_rules = list(conversation_rules)
        self.report_threads = report_threads
        self._unjudged = 0  # traces with a thread id no conversation rule matched, unreported
        self._unjudged_recent: deque[tuple[str | None, str]] = deque(maxlen=max(after, 1))
        self._unjudged_named: set[tuple[str | None, str]] = set()

    @property
    def since(self) -> dict[str, int]:
        """Per rule, the traces since its filter last matched one (the first trace: none)."""
        return {rule_id: self._traces - heard for rule_id, heard in self._heard.items()}

    @property
    def _counts(self) -> Counter[tuple[str | None, str]]:
        """The (name, project) pairs of the last ``after`` traces, counted, in the order that
        ``most_common`` breaks ties by: by when each came back into the window (as a count
        kept up trace by trace would hold them, each pair added when it came and removed when
        its last trace left)."""
        counts = Counter(self._recent)
        return Counter({key: counts[key] for key in self._runs if key in counts})

    def _forget(self, traces: int) -> None:
        """The pairs no longer in the window at the ``traces``-th trace forgotten (one that
        comes again is back in the window, last in order, as if it had been kept)."""
        start = traces - self._window
        self._runs = {key: last for key, last in self._runs.items() if last > start}

    @property
    def silent(self) -> set[str]:
        """The rules reported silent and not heard since."""
        return set(self._silent)

    def saw(self, trace: Trace, matched: Iterable[str], topic: str | None = None) -> None:
        """One trace (read from ``topic``), and the trace rules whose filter matched it."""
        if not self.after:
            return
        key = (trace.name, trace.project_name)
        if trace.thread_id is not None and self.report_threads is not None:
            self._saw_threaded(trace, key, topic)
        self._traces = traces = self._traces + 1
        self._recent.append(key)
        runs = self._runs
        last = runs.get(key)
        if last is not None and traces - last < self._window:
            runs[key] = traces  # still in the window: keeps its place
        else:  # back in the window (or new): last in order
            if last is not None:
                del runs[key]
            runs[key] = traces
            if len(runs) > 2 * self._window + FORGET_PAST:
                self._forget(traces)
        if not isinstance(matched, list):
            matched = list(matched)
        if traces >= self._due or (self._silent and not self._silent.isdisjoint(matched)):
            self._look_over(traces, matched)
            return
        heard = self._heard
        for rule_id in matched:
            if rule_id in heard:
                heard[rule_id] = traces

    def _look_over(self, traces: int, matched: list[str]) -> None:
        """Every rule, in order, at the ``traces``-th trace: the ones heard again and the ones
        falling silent reported; the next count at which one can fall silent."""
        matched_now = set(matched)
        after, heard, silent = self.after, self._heard, self._silent
        due = inf
        for rule_id, last in heard.items():
            if rule_id in matched_now:
                if rule_id in silent:
                    silent.discard(rule_id)
                    self.report(Silence(self.rules[rule_id], False, traces - 1 - last, []))
                heard[rule_id] = last = traces
            elif rule_id not in silent and traces - last == after:
                silent.add(rule_id)
                seen = self._counts.most_common(SEEN_SHOWN)
                self.report(Silence(self.rules[rule_id], True, after, seen))
            if rule_id not in silent and last + after < due:
                due = last + after
        self._due = due

    def _saw_threaded(self, trace: Trace, key: tuple[str | None, str], topic: str | None) -> None:
        if any(rule.filter.matches(trace, topic) for rule in self.conversation_rules):
            return
        self._unjudged += 1
        self._unjudged_recent.append(key)
        if self._unjudged < self.after:
            return
        self._unjudged = 0
        seen = Counter(self._unjudged_recent).most_common(SEEN_SHOWN)
        if all(name in self._unjudged_named for name, _ in seen):
            return  # said already: once per trace name and project
        self._unjudged_named.update(name for name, _ in seen)
        assert self.report_threads is not None
        self.report_threads(UnjudgedThreads(self.conversation_rules, self.after, seen))
