"""Which traces a rule applies to (its filter), and deterministic sampling."""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from ..models import Trace, stable_fraction
from .paths import compile_path
from .specs import Strict


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

    @model_validator(mode="after")
    def _paths_compile(self) -> RuleFilter:
        for path in self.metadata or {}:
            compile_path(path)
        return self

    def matches(self, trace: Trace, topic: str | None = None) -> bool:
        if self.topics is not None and topic not in self.topics:
            return False
        if self.projects is not None and trace.project_name not in self.projects:
            return False
        if self.trace_names is not None and trace.name not in self.trace_names:
            return False
        tags = set(trace.tags)
        if self.tags_any is not None and not tags.intersection(self.tags_any):
            return False
        if self.tags_all is not None and not tags.issuperset(self.tags_all):
            return False
        for path, expected in (self.metadata or {}).items():
            if compile_path(path).search(trace.metadata) != expected:
                return False
        return True


def sampled(rule_id: str, rate: float, target_id: str) -> bool:
    """Whether ``target_id`` is in a rule's sample: deterministic by target id, so a
    redelivered trace is sampled the same way."""
    if rate >= 1.0:
        return True
    return stable_fraction(rule_id, target_id) < rate
