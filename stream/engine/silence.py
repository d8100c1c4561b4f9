"""Rules that never fire say so: a trace rule whose filter matched none of the last N traces
is reported once, naming its filter and the trace names and projects that came instead.

"The rule never fires and nothing says why" is the most common complaint about online
evaluation (a filter on a trace name the application does not use, a project renamed).
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


class SilenceWatch:
    """Counts, per trace rule, the traces since its filter last matched one."""

    def __init__(
        self, rules: Iterable[AnyRule], after: int, report: Callable[[Silence], None]
    ) -> None:
        self.rules = {rule.id: rule for rule in rules}
        self.after = after
        self.report = report
        self.since = dict.fromkeys(self.rules, 0)
        self._recent: deque[tuple[str | None, str]] = deque(maxlen=max(after, 1))
        self._counts: Counter[tuple[str | None, str]] = Counter()

    @property
    def silent(self) -> set[str]:
        """The rules reported silent and not heard since."""
        return {rule_id for rule_id, since in self.since.items() if since >= self.after}

    def saw(self, trace: Trace, matched: Iterable[str]) -> None:
        """One trace, and the rules whose filter matched it."""
        if not self.after:
            return
        key = (trace.name, trace.project_name)
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
