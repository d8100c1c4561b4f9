"""Judge jobs waiting for a batch (design record 25): the worker's ``Deferrer``, which keeps a
deferred job in the ``batch-jobs`` table, and the timer that submits, polls and finishes them.

A job deferred by the scorer (``judge.mode: batch``, or a spent ``defer`` budget) is written
to the table (``batch_table.py``) in the partition of the record that asked for it, before that
record is acked: from then on it is durably pending, and the source record may be committed.
Every ``SCORER_BATCH_POLL_S`` a round (``batch_rounds.py``) submits the waiting jobs and polls
their batches, and the jobs of a finished batch are concluded and published
(``batch_finish.py``); only then is an entry tombstoned.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import faust
from faust.exceptions import PartitionsMismatch
from faust.streams import current_event

from ..app import Topics
from ..engine.deferred import Deferred
from ..engine.plan import JudgeJob
from ..engine.scorer import Scorer
from ..engine.verdicts import Judge
from ..judge.batch import BatchAPI
from ..judge.cache import CachingJudge
from ..judge.client import JudgeClient
from ..observer import Observer
from .batch_finish import BatchFinisher
from .batch_rounds import BatchRounds
from .batch_table import TABLE_NAME, BatchTable

log = logging.getLogger(__name__)


class BatchJobs:
    """The worker's ``Deferrer``: judge jobs kept in the ``batch-jobs`` table until their
    batch answers (``scorer.context.deferrer`` is set to it)."""

    def __init__(
        self,
        app: faust.App,
        *,
        partitions: int,
        scorer: Scorer,
        client: JudgeClient,
        online: Judge,
        api: BatchAPI,
        topics: Topics,
        observer: Observer,
        poll_s: float,
        give_up_s: float = 1800.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.table = BatchTable(app, partitions, scorer)
        self.caching = online if isinstance(online, CachingJudge) else None
        self.observer = observer
        self.finisher = BatchFinisher(
            app,
            self.table,
            scorer=scorer,
            client=client,
            online=online,
            topics=topics,
            observer=observer,
            clock=clock,
        )
        self.rounds = BatchRounds(
            app,
            self.table,
            self.finisher,
            scorer=scorer,
            client=client,
            api=api,
            observer=observer,
            poll_s=poll_s,
            give_up_s=give_up_s,
            clock=clock,
        )
        self._not_copartitioned: set[str] = set()
        self._said: set[str] = set()  # why jobs were not deferred, said once each
        # the queue needs the scorer (to conclude its jobs) and the scorer the queue (to defer
        # them to it): the one collaborator set after construction
        scorer.context.deferrer = self
        app.timer(poll_s, name="batch-jobs")(self.rounds.tick)

    def holds(self, job: JudgeJob) -> bool:
        if self.caching is None:
            return False
        prompts = [(i.prompt, i.system) for i in job.items] or [(job.prompt, job.system)]
        return all(self.caching.holds(job.rule, prompt, system) for prompt, system in prompts)

    def defer(self, deferred: Deferred) -> str | None:
        """Keep ``deferred`` in its partition: the one its plan names (a thread close's
        thread-events partition: the close is scored by a task the agent's event may not
        outlive), else the partition of the record being scored (a trace's)."""
        why = self._keep(deferred)
        if why is not None and why not in self._said:
            self._said.add(why)
            log.warning("a batch rule is not deferred (judged online, or skipped): %s", why)
        return why

    def _keep(self, deferred: Deferred) -> str | None:
        rule = self.table.rule_of(deferred)
        if rule is None:  # planned with the scorer's rules: it has it
            return f"rule {deferred.rule_id} v{deferred.version} is not loaded"
        self.table.remember(rule)
        if deferred.partition >= 0:
            if not self.table.has(deferred.key):  # else already pending: it stays as it is
                self.table.write(deferred)
            self.observer.on_batch_job(deferred.rule_id, deferred.pack, "deferred")
            return None
        event = current_event()
        if event is None:
            return "no record is being scored"
        topic, partition = event.message.topic, event.message.partition
        if topic in self._not_copartitioned:
            return f"{topic} is not co-partitioned with the {TABLE_NAME} table"
        try:
            if self.table.has(deferred.key):
                return None  # already pending (a redelivered record): it stays as it is
            self.table.put_in_event(deferred, partition)
        except PartitionsMismatch as exc:
            self._not_copartitioned.add(topic)
            log.warning("batch rules on %s are judged online: %s", topic, exc)
            return f"{topic} is not co-partitioned with the {TABLE_NAME} table"
        self.observer.on_batch_job(deferred.rule_id, deferred.pack, "deferred")
        return None
