"""The rule set a worker runs: the loaded rules (by scope, thread kind, pairing), the hash
that identifies the set, the rules switched off, and a deployment's pack filters over them."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field

import orjson

from ..errors import ScorerError
from .filters import PackFilter
from .kinds import AnyRule, ComparisonRule
from .specs import PairSpec, ThreadSpec

DISABLED_IN_FILE = "enabled: false"
DISABLED_BY_SETTING = "SCORER_DISABLED_RULES"


@dataclass(frozen=True)
class DisabledRule:
    """A rule loaded and validated but not run, and what switched it off (``by``: its file's
    ``enabled: false``, or ``SCORER_DISABLED_RULES``)."""

    rule: AnyRule
    by: str


@dataclass
class RuleSet:
    """The rules a worker runs, with a hash that identifies this exact set (the rules switched
    off are not in it, and are kept apart in ``disabled`` for listings)."""

    rules: list[AnyRule] = field(default_factory=list)
    digest: str = ""
    disabled: list[DisabledRule] = field(default_factory=list)

    @property
    def ids(self) -> set[str]:
        """Every loaded rule's id, switched off or not."""
        return {r.id for r in self.rules} | {d.rule.id for d in self.disabled}

    def for_scope(self, scope: str) -> list[AnyRule]:
        return [r for r in self.rules if r.scope == scope]

    def thread_rules(self, kind: str) -> list[AnyRule]:
        return [r for r in self.rules if r.thread is not None and r.thread.kind == kind]

    def pair_rules(self) -> list[ComparisonRule]:
        return [r for r in self.rules if isinstance(r, ComparisonRule)]

    def pair_spec(self) -> PairSpec | None:
        """The (agreed) pairing of the comparison rules, or None when there are none."""
        rules = self.pair_rules()
        return rules[0].pair if rules else None

    def thread_spec(self, kind: str) -> ThreadSpec | None:
        """The (agreed) thread spec of ``kind``, or None when no rule judges such threads."""
        rules = self.thread_rules(kind)
        return rules[0].thread if rules else None

    @property
    def packs(self) -> list[str]:
        return sorted({r.pack for r in self.rules})

    @property
    def projects(self) -> list[str]:
        """The projects the rules' filters name (after the deployment's pack filters)."""
        return sorted({p for r in self.rules for p in r.filter.projects or ()})

    def with_pack_filters(self, overrides: Mapping[str, PackFilter]) -> RuleSet:
        """This rule set with a deployment's filters over its packs' own (the digest says so);
        naming a pack that is not loaded is an error, not a silent no-op."""
        if not overrides:
            return self
        if unknown := sorted(set(overrides) - set(self.packs)):
            raise ScorerError(
                f"SCORER_PACK_FILTERS names packs that are not loaded: {unknown} "
                f"(loaded: {self.packs})"
            )
        rules = [
            rule.model_copy(update={"filter": overrides[rule.pack].apply(rule.filter)})
            if rule.pack in overrides
            else rule
            for rule in self.rules
        ]
        applied = orjson.dumps({pack: f.model_dump() for pack, f in sorted(overrides.items())})
        digest = hashlib.sha256(self.digest.encode() + applied).hexdigest()[:12]
        return RuleSet(rules, digest, self.disabled)
