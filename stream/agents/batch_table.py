"""The ``batch-jobs`` table: judge jobs deferred to a batch (design record 25), one entry a job
by its key, in the partition of the record that asked for it; and the rules they were planned
with.

An entry is written before the record that asked for it is acked (the commit waits for the
changelog write, ``kafka/mends/commits.py``): from then on the job is durably pending, and the source
record may be committed. The table is co-partitioned with the traces and thread-events topics,
so a job moves with its partition at a rebalance and whoever owns the partition finishes it.
An entry is ``waiting``, then ``submitting`` (with its batch's key), then ``submitted`` (with
the batch's id), and is tombstoned once its job is finished.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import faust

from ..app import raw_table
from ..engine.deferred import Deferred
from ..engine.plan import JudgedRule
from ..engine.scorer import Scorer
from ..kafka.mends.faust_state import owned_partitions, put_in_partition

log = logging.getLogger(__name__)

TABLE_NAME = "batch-jobs"

RuleKey = tuple[str, str, int]  # pack, rule id, version


class BatchTable:
    """The deferred jobs, read and written for the partitions this worker owns."""

    def __init__(self, app: faust.App, partitions: int, scorer: Scorer) -> None:
        self.app = app
        self.table = raw_table(app, TABLE_NAME, partitions)
        self.changelog_name = self.table.changelog_topic.get_topic_name()
        self.scorer = scorer
        # every judged rule a job was deferred for by this worker, by version: a job is
        # finished by the rule it was planned with, though a reload replaced it since
        self._rules: dict[RuleKey, JudgedRule] = {}

    def owned(self) -> set[int]:
        return owned_partitions(self.app, self.changelog_name)

    def ready(self) -> bool:
        """Whether the table is whole for the partitions owned (not rebalancing or
        recovering)."""
        app = self.app
        if app.rebalancing or getattr(app, "in_recovery", False):
            return False
        recovery = getattr(app.tables, "recovery", None)  # faust-streaming 0.15's
        return recovery is None or bool(recovery.completed.is_set())

    def pending(self) -> list[Deferred]:
        """The jobs of the partitions this worker owns, oldest first."""
        owned = self.owned()
        found = []
        for key, value in list(self.table.data.items()):
            try:
                deferred = Deferred.decode(value)
            except ValueError as exc:
                log.warning("batch job %r ignored: %s", key, exc)
                continue
            if deferred.partition in owned:
                found.append(deferred)
        return sorted(found, key=lambda d: d.since)

    def has(self, key: str) -> bool:
        """Whether the job ``key`` is pending already."""
        return self.table.get(key.encode()) is not None

    def put_in_event(self, deferred: Deferred, partition: int) -> None:
        """Write ``deferred`` through the record being scored, from ``partition`` of its topic
        (Faust raises ``PartitionsMismatch`` for a topic not co-partitioned with the table)."""
        deferred.partition = partition
        self.table[deferred.key.encode()] = deferred.encode()

    def write(self, job: Deferred) -> None:
        raw_key = job.key.encode()
        value = job.encode()
        self.table.send_changelog(job.partition, raw_key, value, value_serializer="raw")
        put_in_partition(self.table, job.partition, raw_key, value)  # no event in scope

    def tombstone(self, job: Deferred) -> None:
        raw_key = job.key.encode()
        self.table.send_changelog(job.partition, raw_key, None, value_serializer="raw")
        with contextlib.suppress(KeyError):
            del self.table.data[raw_key]

    def remember(self, rule: JudgedRule) -> None:
        """A job was deferred for ``rule``: it is finished by it, whatever a reload loads."""
        self._rules[_rule_key(rule)] = rule

    def rule_of(self, job: Deferred) -> JudgedRule | None:
        """The rule ``job`` was planned with: the scorer's, or one kept at its deferral."""
        key = (job.pack, job.rule_id, job.version)
        if (rule := self._rules.get(key)) is not None:
            return rule
        for loaded in self.scorer.ruleset.rules:
            if _rule_key(loaded) == key and isinstance(loaded, JudgedRule):
                return loaded
        return None


def _rule_key(rule: Any) -> RuleKey:
    return (rule.pack, rule.id, rule.version)
