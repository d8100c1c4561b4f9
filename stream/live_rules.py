"""Rule files reloaded while the worker runs: when a file under a rules folder changes
(looked at every ``SCORER_RULES_RELOAD_S``), or on SIGHUP.

The new rule set is loaded and validated exactly as at start-up (``deployment_rules``) before
anything changes: a bad file keeps the running set and logs the file, the field and the
problem. A good one is swapped in between two records, so each trace is scored wholly by the
old set or wholly by the new one; what is being judged keeps the rules it was planned with.
Rules that need an agent this worker did not start with (the first session rule, the first
thread or pair rule) need a restart, and say so. See docs/design/16-live-rule-reload.md.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from . import __version__
from .engine.scorer import Scorer
from .engine.silence import SilenceWatch
from .errors import RuleFileError, ScorerError
from .observer import Observer
from .ruleset.loader import RulesConfig, deployment_rules
from .ruleset.location import folders_of
from .ruleset.schema import PromptedRule, RuleSet
from .threads.gaps import inactivity_gaps
from .threads.processor import ThreadProcessor
from .threads.router import ThreadRouter

log = logging.getLogger(__name__)


def rules_fingerprint(rules_dir: Path | Iterable[Path]) -> str:
    """What changes when a rule or pack file is added, removed or edited in any of the rules
    folders: every file's folder, path, size and modification time (Python's caches left
    out)."""
    folders = folders_of(rules_dir)
    if not any(folder.is_dir() for folder in folders):
        return "missing"
    digest = hashlib.sha256()
    for folder in folders:
        digest.update(f"{folder}\0".encode())
        if not folder.is_dir():
            digest.update(b"missing\n")
            continue
        for path in sorted(folder.rglob("*")):
            if "__pycache__" in path.parts or not path.is_file():
                continue
            try:
                stat = path.stat()
            except OSError:  # removed while we looked
                continue
            digest.update(
                f"{path.relative_to(folder)}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode()
            )
    return digest.hexdigest()


def rule_directions(ruleset: RuleSet) -> list[tuple[str, str, str, int]]:
    """Each rule's id, pack, scope and direction, as the rule metrics carry them."""
    return [
        (rule.id, rule.pack, rule.scope, 1 if rule.output.higher_is_better else -1)
        for rule in ruleset.rules
    ]


def rule_min_drops(ruleset: RuleSet) -> list[tuple[str, str, str, float]]:
    """Each rule's id, pack, scope and smallest drop that pages (``alert.min_drop``,
    normalised), as the score-drop alert reads them."""
    return [
        (rule.id, rule.pack, rule.scope, rule.alert.normalised(rule.output))
        for rule in ruleset.rules
    ]


def export_rule_set(metrics: Observer, ruleset: RuleSet) -> None:
    """What the alerts read of a rule set, told to the metrics at start and at every reload:
    its digest and each rule's direction, agreement bound and smallest drop that pages."""
    metrics.on_rules_loaded(__version__, ruleset.digest, rule_directions(ruleset))
    metrics.on_agreement_thresholds(agreement_thresholds(ruleset))
    metrics.on_alert_bounds(rule_min_drops(ruleset))


def agreement_thresholds(ruleset: RuleSet) -> list[tuple[str, str, str, str, float, int]]:
    """Each rule's agreement bound (``agreement:``): rule, measure, window, direction (min or
    max), threshold and the labels needed before it holds, as the alert reads them."""
    found = []
    for rule in ruleset.rules:
        spec = getattr(rule, "agreement", None)
        if spec is not None:
            found.append(
                (
                    rule.id,
                    spec.measure,
                    spec.window,
                    spec.direction,
                    spec.threshold,
                    spec.min_labels,
                )
            )
    return found


@dataclass(frozen=True)
class Wiring:
    """The agents a worker started with: what a reloaded rule set may use without a restart."""

    sessions: bool  # the session agent (session rules)
    threads: bool  # the thread agent (conversation, session and pair rules close there)

    @classmethod
    def of(cls, ruleset: RuleSet, router: ThreadRouter) -> Wiring:
        return cls(
            sessions=bool(router.session_rules),
            threads=bool(ruleset.for_scope("thread") or ruleset.pair_rules()),
        )

    def missing(self, ruleset: RuleSet) -> str | None:
        """What ``ruleset`` needs that this worker was not started with, or None."""
        if ruleset.thread_rules("session") and not self.sessions:
            return "it adds session rules, and this worker started without the session agent"
        if (ruleset.for_scope("thread") or ruleset.pair_rules()) and not self.threads:
            return "it adds thread or pair rules, and this worker started without the thread agent"
        return None


class ReloadConfig(RulesConfig, Protocol):
    """What a reload reads of the deployment (``Settings`` is one)."""

    @property
    def thread_inactivity_gap_s(self) -> float: ...

    def redaction_problems(self, rules: Iterable[tuple[str, bool | list[str]]]) -> list[str]: ...


class LiveRules:
    """The worker's rule set, reloaded from its files when they change."""

    def __init__(
        self,
        settings: ReloadConfig,
        ruleset: RuleSet,
        scorer: Scorer,
        router: ThreadRouter,
        metrics: Observer,
        silence: Callable[[RuleSet], SilenceWatch | None],
        processor: ThreadProcessor | None = None,
    ) -> None:
        self.settings = settings
        self.ruleset = ruleset
        self.scorer = scorer
        self.router = router
        self.metrics = metrics
        self.silence = silence
        self.wiring = Wiring.of(ruleset, router)
        self.processor = processor  # the thread agent's, when it has one
        self.fingerprint = rules_fingerprint(settings.rules_dir)

    def check(self) -> bool:
        """Reload if a file changed since the last look; whether a new set runs now."""
        fingerprint = rules_fingerprint(self.settings.rules_dir)
        if fingerprint == self.fingerprint:
            return False
        self.fingerprint = fingerprint
        return self.reload("a rule file changed")

    def reload(self, why: str) -> bool:
        """Load, validate and swap in the rule files' set; whether a new set runs now."""
        self.fingerprint = rules_fingerprint(self.settings.rules_dir)
        try:
            ruleset = deployment_rules(self.settings)
        except ScorerError as exc:
            problems = (
                [f"{exc.path}: {p}" if not p.startswith(exc.path) else p for p in exc.problems]
                if isinstance(exc, RuleFileError)
                else [str(exc)]
            )
            return self._invalid(why, problems)
        if ruleset.digest == self.ruleset.digest:
            log.info("rules looked at (%s): unchanged, rule set %s", why, ruleset.digest)
            return False
        masked = [(r.id, r.judge.redact) for r in ruleset.rules if isinstance(r, PromptedRule)]
        if problems := self.settings.redaction_problems(masked):  # as start-up refuses them
            return self._invalid(why, problems)
        if (missing := self.wiring.missing(ruleset)) is not None:
            log.error(
                "rules not reloaded (%s): %s; restart the worker to run rule set %s "
                "(the running rule set %s stays)",
                why,
                missing,
                ruleset.digest,
                self.ruleset.digest,
            )
            self.metrics.on_rules_reload("needs_restart")
            return False
        self._swap(ruleset, why)
        return True

    def _invalid(self, why: str, problems: list[str]) -> bool:
        """A set refused: the running one stays, and the log says why (False: not swapped)."""
        log.error(
            "rules not reloaded (%s): the running rule set %s stays; fix and save again:\n  %s",
            why,
            self.ruleset.digest,
            "\n  ".join(problems),
        )
        self.metrics.on_rules_reload("invalid")
        return False

    def _swap(self, ruleset: RuleSet, why: str) -> None:
        before = {rule.id: rule for rule in self.ruleset.rules}
        after = {rule.id: rule for rule in ruleset.rules}
        self.scorer.use(ruleset, self.silence(ruleset))
        self.router.use(ruleset)
        if self.processor is not None:
            self.processor.gaps = inactivity_gaps(ruleset, self.settings.thread_inactivity_gap_s)
        export_rule_set(self.metrics, ruleset)
        self.metrics.on_rules_reload("reloaded", ruleset.projects)
        changed = sorted(i for i in before.keys() & after.keys() if before[i] != after[i])
        log.warning(
            "rules reloaded (%s): rule set %s -> %s; added %s, removed %s, changed %s",
            why,
            self.ruleset.digest,
            ruleset.digest,
            sorted(after.keys() - before.keys()) or "none",
            sorted(before.keys() - after.keys()) or "none",
            changed or "none",
        )
        self.ruleset = ruleset
