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

from ..models import Trace
from ..ruleset.schema import AnyRule

SEEN_SHOWN = 3  # the most frequent (name, project) pairs named in the report


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
    ``after`` of them, while they name a trace name and project not reported before)."""

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
        self.since = dict.fromkeys(self.rules, 0)
        self._recent: deque[tuple[str | None, str]] = deque(maxlen=max(after, 1))
        self._counts: Counter[tuple[str | None, str]] = Counter()
        self.conversation_rules = list(conversation_rules)
        self.report_threads = report_threads
        self._unjudged = 0  # traces with a thread id no conversation rule matched, unreported
        self._unjudged_recent: deque[tuple[str | None, str]] = deque(maxlen=max(after, 1))
        self._unjudged_named: set[tuple[str | None, str]] = set()

    @property
    def silent(self) -> set[str]:
        """The rules reported silent and not heard since."""
        return {rule_id for rule_id, since in self.since.items() if since >= self.after}

    def saw(self, trace: Trace, matched: Iterable[str], topic: str | None = None) -> None:
        """One trace (read from ``topic``), and the trace rules whose filter matched it."""
        if not self.after:
            return
        key = (trace.name, trace.project_name)
        if trace.thread_id is not None and self.report_threads is not None:
            self._saw_threaded(trace, key, topic)
        if len(self._recent) == self._recent.maxlen:
            old = self._recent[0]
            self._counts[old] -= 1
            if not self._counts[old]:
                del self._counts[old]
        self._recent.append(key)
        self._counts[key] += 1
        heard = set(matched)
        for rule_id in self.since:
            if rule_id in heard:
                if self.since[rule_id] >= self.after:
                    self.report(Silence(self.rules[rule_id], False, self.since[rule_id], []))
                self.since[rule_id] = 0
                continue
            self.since[rule_id] += 1
            if self.since[rule_id] == self.after:
                seen = self._counts.most_common(SEEN_SHOWN)
                self.report(Silence(self.rules[rule_id], True, self.after, seen))

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
