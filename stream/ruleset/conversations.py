"""Which conversation rules a trace's turn goes to, and which of them judge a thread.

Two groups of conversation rules: the *claiming* ones (a pack written for an application,
filtering on its trace names) and the *fallback* ones (``thread.fallback: true``: a generic
pack that scores any thread). A trace that a claiming rule's filter matches goes to the
claiming rules only; any other goes to the fallback rules whose filter matches it. A thread
whose traces some claiming rule matched is judged by those rules only, so a conversation is
never judged twice for the same quality. Each group folds its traces with its own turn
paths (the loader checks that the rules of a group agree).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

from ..models import Trace
from .kinds import AnyRule
from .rule_set import RuleSet
from .specs import ThreadSpec


@dataclass(frozen=True)
class ConversationRules:
    """A rule set's conversation rules, in two groups: claiming and fallback."""

    claiming: list[AnyRule] = field(default_factory=list)
    fallback: list[AnyRule] = field(default_factory=list)

    @classmethod
    def of(cls, ruleset: RuleSet) -> ConversationRules:
        rules = ruleset.thread_rules("conversation")
        return cls(
            [r for r in rules if r.thread is not None and not r.thread.fallback],
            [r for r in rules if r.thread is not None and r.thread.fallback],
        )

    @property
    def rules(self) -> list[AnyRule]:
        return self.claiming + self.fallback

    def matching(self, trace: Trace, topic: str | None) -> list[AnyRule]:
        """The rules a trace's turn goes to: the claiming rules whose filter matches it, else
        the fallback rules whose filter does (none: the trace is in no judged conversation)."""
        claimed = [r for r in self.claiming if r.filter.matches(trace, topic)]
        return claimed or [r for r in self.fallback if r.filter.matches(trace, topic)]

    def judging(self, matched: Collection[str]) -> set[str]:
        """Of the rules that matched a thread's traces (``matched``: their ids), those that
        judge the thread: the fallback ones only when no claiming rule matched."""
        claimed = {r.id for r in self.claiming if r.id in matched}
        return claimed or {r.id for r in self.fallback if r.id in matched}

    def spec(self, fallback: bool) -> ThreadSpec | None:
        """How the group's traces become turns (its rules agree), or None for an empty group."""
        group = self.fallback if fallback else self.claiming
        return group[0].thread if group else None
