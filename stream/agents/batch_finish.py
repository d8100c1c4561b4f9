"""Deferred judge jobs finished from their batch's answers (design record 25).

Each job is concluded as its rule's kind concludes a live call (``judge/batch_answers.py``:
failed, expired or unreadable items asked again by an ordinary call, refused ones an ``error``
score), its scores, decision record and agreement events are published, its verdicts kept in
the verdict cache, and only then its entry in the ``batch-jobs`` table is tombstoned. A bug on
the way dead-letters the entry (kept, with the error) instead.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import replace

import faust

from ..app import Topics
from ..delivery.dead_letter import DeadLetters
from ..delivery.publisher import Publisher
from ..engine.deferred import Deferred, finish_deferred
from ..engine.kinds import primary_shape
from ..engine.outcomes import Measured, RuleOutcome
from ..engine.plan import JudgedRule
from ..engine.scorer import Scorer
from ..engine.verdicts import Judge
from ..judge.batch import BatchState, ItemAnswered, ItemFailed
from ..judge.batch_answers import BatchAnswers
from ..judge.cache import CachingJudge
from ..judge.client import JudgeClient
from ..models import utcnow
from ..observer import Observer
from .batch_table import BatchTable

log = logging.getLogger(__name__)

FINISHING_AT_ONCE = 32  # jobs of a finished batch concluded and published at once

Items = dict[str, ItemAnswered | ItemFailed]  # a batch's answers, by call id


class BatchFinisher:
    """Concludes and publishes the jobs of a finished (or given up) batch."""

    def __init__(
        self,
        app: faust.App,
        table: BatchTable,
        *,
        scorer: Scorer,
        client: JudgeClient,
        online: Judge,
        topics: Topics,
        observer: Observer,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.table = table
        self.scorer = scorer
        self.client = client
        self.online = online
        self.caching = online if isinstance(online, CachingJudge) else None
        self.topics = topics
        self.outbox = topics.outbox()  # what a finished job publishes
        self.observer = observer
        self.clock = clock
        self.publisher = Publisher(app)
        self.dead_letters = DeadLetters(topics.dlq, observer)
        self._finishing = asyncio.Semaphore(FINISHING_AT_ONCE)

    async def finish_all(self, jobs: list[Deferred], state: BatchState, items: Items) -> None:
        """Finish those of ``jobs`` still in partitions this worker owns (a job moved away
        meanwhile is its new owner's to finish)."""
        owned = self.table.owned()
        mine = [job for job in jobs if job.partition in owned]
        await asyncio.gather(*(self._finish_one(job, state, items) for job in mine))

    async def _finish_one(self, job: Deferred, state: BatchState, items: Items) -> None:
        async with self._finishing:  # calls asked online (expired items) run side by side
            await self.finish(job, state, items)

    async def finish(self, job: Deferred, state: BatchState, items: Items) -> None:
        """Conclude ``job`` from its batch's answers, publish, keep its verdicts, then drop
        the entry; a bug on the way dead-letters the entry (kept, with the error)."""
        try:
            outcome, answers = await self._conclude(job, state, items)
            sends = self.outbox.sends(job.records(outcome))
        except Exception as exc:
            log.exception("finishing batch job %s of %s failed", job.key, job.rule_id)
            where = {"scorer.batch.id": state.id, "scorer.rule": job.rule_id}
            sends = self.dead_letters.kept(
                job.key,
                job.encode(),
                self.table.changelog_name,
                "finishing a batch job",
                exc,
                where,
            )
            await self.publisher.send_until_delivered(sends)
            self.table.tombstone(job)
            return
        await self.publisher.send_until_delivered(sends)
        for score in [outcome.score, *outcome.extra]:
            if score is not None:
                self.observer.on_score_published(score)
        if self.caching is not None:
            try:  # an optimisation: a failure to keep them costs a call later, nothing more
                for rule, prompt, system, verdict in answers.answered:
                    self.caching.keep(rule, prompt, system, verdict, job.partition)
            except Exception:
                log.exception(
                    "keeping batch %s's verdicts failed: asked again if replayed", state.id
                )
        self.observer.on_batch_job(job.rule_id, job.pack, "finished")
        self.table.tombstone(job)

    async def _conclude(
        self, job: Deferred, state: BatchState, items: Items
    ) -> tuple[RuleOutcome, BatchAnswers]:
        """The rule's outcome from the batch's answers, as its kind concludes a live call;
        ``details.batch`` on its scores says which batch, how long it waited, and any call
        made online instead."""
        calls = {(p, s): c for c, (p, s, _) in zip(job.calls, job.prompts(), strict=True)}
        answers = BatchAnswers(self.client, self.online, calls, items)
        ctx = self.scorer.context
        rule = self.table.rule_of(job)
        if rule is None:
            outcome = self._replaced(job)
        else:
            outcome = await finish_deferred(ctx, job, rule, answers)
        said = answers.details(state.id, max(0.0, self.clock() - job.since))
        for score in [outcome.score, *outcome.extra]:
            if score is not None:
                score.details = {**(score.details or {}), "batch": said}
        return outcome, answers

    def _replaced(self, job: Deferred) -> RuleOutcome:
        """A job whose rule version this worker does not have (a reload replaced it, and the
        worker restarted since): an ``error`` score of the current rule saying so."""
        current = next((r for r in self.scorer.ruleset.rules if r.id == job.rule_id), None)
        if not isinstance(current, JudgedRule):
            raise LookupError(f"rule {job.rule_id} is no longer loaded")
        why = (
            f"rule {job.rule_id} v{job.version} was replaced by v{current.version} while its "
            "batch was pending, and this worker has restarted since: it has no v"
            f"{job.version} to read the answer with"
        )
        ctx = self.scorer.context
        ctx = replace(ctx, shapes={**ctx.shapes, current.id: primary_shape(current)})
        return ctx.finish(current, job.plan(), Measured("error", why), utcnow())
