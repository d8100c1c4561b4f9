"""Which traces a rule applies to (its filter), and deterministic sampling."""

from __future__ import annotations

from functools import cached_property
from typing import Any

from pydantic import Field, field_validator, model_validator

from ..models import Trace, stable_fraction
from .paths import compile_path
from .specs import Strict
from .when import WhenExpression, compile_when


class RuleFilter(Strict):
    """Which traces a rule applies to. Every given condition must hold; lists are any-of."""

    topics: list[str] | None = None
    projects: list[str] | None = None
    trace_names: list[str] | None = None
    tags_any: list[str] | None = None
    tags_all: list[str] | None = None
    metadata: dict[str, Any] | None = Field(
        default=None, description="JMESPath (into trace metadata) -> required value"
    )
    when: str | None = Field(
        default=None,
        min_length=1,
        description="JMESPath over the whole trace (Trace.view; a tool-call rule's: over the "
        "call's document); it matches when the result is truthy. matches(subject, pattern) "
        "tests a regular expression",
    )

    @model_validator(mode="after")
    def _paths_compile(self) -> RuleFilter:
        for path in self.metadata or {}:
            compile_path(path)
        return self

    @field_validator("when")
    @classmethod
    def _when_compiles(cls, when: str | None) -> str | None:
        if when is not None:
            compile_when(when)  # ValueError: the loader names the field filter.when
        return when

    @cached_property
    def when_expression(self) -> WhenExpression | None:
        """``when``, compiled (once: it was checked when the rule loaded)."""
        return compile_when(self.when) if self.when is not None else None

    def matches(self, trace: Trace, topic: str | None = None) -> bool:
        return self.mismatch(trace, topic) is None

    def mismatch(self, trace: Trace, topic: str | None = None, subject: Any = None) -> str | None:
        """Why ``trace`` is not for this rule (the first condition that fails), or None.
        ``subject``: what ``when`` reads instead of the trace's view (a tool call's document);
        the other conditions are the trace's."""
        if self.topics is not None and topic not in self.topics:
            return f"filter.topics {self.topics}: topic is {topic!r}"
        if self.projects is not None and trace.project_name not in self.projects:
            return f"filter.projects {self.projects}: project_name is {trace.project_name!r}"
        if self.trace_names is not None and trace.name not in self.trace_names:
            return f"filter.trace_names {self.trace_names}: name is {trace.name!r}"
        if self.tags_any is not None or self.tags_all is not None:
            tags = set(trace.tags)
            if self.tags_any is not None and not tags.intersection(self.tags_any):
                return f"filter.tags_any {self.tags_any}: tags are {sorted(tags)}"
            if self.tags_all is not None and not tags.issuperset(self.tags_all):
                return f"filter.tags_all {self.tags_all}: tags are {sorted(tags)}"
        for path, expected in (self.metadata or {}).items():
            found = compile_path(path).search(trace.metadata)
            if found != expected:
                return f"filter.metadata {path!r} = {expected!r}: it is {found!r}"
        if self.when_expression is not None:  # last: the trace's view is built only here
            return self.when_expression.mismatch(trace.view if subject is None else subject)
        return None


class PackFilter(Strict):
    """A deployment's filter for one pack's rules, over what the rule files say
    (``SCORER_PACK_FILTERS``): the shipped packs' filters are defaults, not edits."""

    projects: list[str] | None = Field(default=None, description="Replaces every rule's")
    topics: list[str] | None = Field(default=None, description="Replaces every rule's")
    trace_names: dict[str, list[str]] | None = Field(
        default=None,
        description="A trace name the rule files filter on -> the names it stands for here "
        '(e.g. {"hub-coach-chat": ["hub-chat-v2", "hub-coach-chat"]})',
    )

    def apply(self, rule_filter: RuleFilter) -> RuleFilter:
        update: dict[str, Any] = {}
        if self.projects is not None:
            update["projects"] = self.projects
        if self.topics is not None:
            update["topics"] = self.topics
        if self.trace_names and rule_filter.trace_names is not None:
            update["trace_names"] = [
                name
                for written in rule_filter.trace_names
                for name in self.trace_names.get(written, [written])
            ]
        return rule_filter.model_copy(update=update)


def sampled(rule_id: str, rate: float, target_id: str) -> bool:
    """Whether ``target_id`` is in a rule's sample: deterministic by target id, so a
    redelivered trace is sampled the same way."""
    if rate >= 1.0:
        return True
    return stable_fraction(rule_id, target_id) < rate
