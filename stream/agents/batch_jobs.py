"""Judge jobs waiting for a batch: the ``batch-jobs`` table, and the timer that submits,
polls and finishes them (design record 25).

A job deferred by the scorer (``judge.mode: batch``, or a spent ``defer`` budget) is written
to the table in the partition of the record that asked for it, before that record is acked
(the commit waits for the changelog write, ``kafka/commits.py``): from then on it is durably
pending, and the source record may be committed. The table is co-partitioned with the
traces and thread-events topics, so a job moves with its partition at a rebalance and
whoever owns the partition finishes it.

Every ``SCORER_BATCH_POLL_S`` each worker, for the partitions it owns:

1. polls each batch its ``submitted`` jobs are in; once a batch is finished, reads its output
   and error files and finishes each job: the rule's kind concludes the batch's answers as it
   concludes a live call's (``judge/batch_answers.py``: failed, expired or unreadable items
   asked again by an ordinary call, refused ones an ``error`` score), the scores and a
   decision record are published, the verdicts kept in the verdict cache, and only then the
   entry is tombstoned;
2. looks again for the batches of ``submitting`` jobs (a worker died between creating a
   batch and recording its id): found by their ``batch_key`` in the batch's metadata, else
   submitted again (the same jobs, the same key);
3. submits the ``waiting`` jobs of each rule and model once they hold ``judge.batch.max_jobs``
   requests or the oldest has waited ``judge.batch.max_wait_s``: each entry is written
   ``submitting`` with the batch's key and the producer drained before the batch is created,
   then ``submitted`` with its id. A job is never in two batches.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

import faust
from faust.exceptions import PartitionsMismatch
from faust.streams import current_event

from ..app import Topics, raw_table
from ..delivery.dead_letter import DeadLetters
from ..delivery.publisher import Publisher, sends_of
from ..engine.deferred import Deferred, finish_deferred
from ..engine.kinds import primary_shape
from ..engine.outcomes import Measured, RuleOutcome
from ..engine.plan import JudgedRule, JudgeJob
from ..engine.scorer import Scorer
from ..engine.verdicts import Judge
from ..judge.batch import BatchAPI, BatchJob, BatchState, ItemAnswered, ItemFailed, batch_key
from ..judge.batch_answers import BatchAnswers
from ..judge.cache import CachingJudge
from ..judge.client import JudgeClient
from ..kafka.commits import drain_producer
from ..kafka.faust_state import owned_partitions, put_in_partition
from ..models import utcnow
from ..observer import Observer

log = logging.getLogger(__name__)

TABLE_NAME = "batch-jobs"
DRAIN_TIMEOUT_S = 10.0  # how long a submission waits for its "submitting" writes
FINISHING_AT_ONCE = 32  # jobs of a finished batch concluded and published at once

RuleKey = tuple[str, str, int]  # pack, rule id, version


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
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.app = app
        self.table = raw_table(app, TABLE_NAME, partitions)
        self.changelog_name = self.table.changelog_topic.get_topic_name()
        self.scorer = scorer
        self.client = client
        self.online = online
        self.caching = online if isinstance(online, CachingJudge) else None
        self.api = api
        self.topics = topics
        self.observer = observer
        self.clock = clock
        self.publisher = Publisher(app)
        self.dead_letters = DeadLetters(topics.dlq, observer)
        # every judged rule a job was deferred for by this worker, by version: a job is
        # finished by the rule it was planned with, though a reload replaced it since
        self._rules: dict[RuleKey, JudgedRule] = {}
        self._not_copartitioned: set[str] = set()
        self._finishing = asyncio.Semaphore(FINISHING_AT_ONCE)
        scorer.context.deferrer = self
        self.poll_s = poll_s
        app.timer(poll_s, name="batch-jobs")(self.tick)

    # -- the scorer's side: keep a job pending ---------------------------------------

    def holds(self, job: JudgeJob) -> bool:
        if self.caching is None:
            return False
        prompts = [(i.prompt, i.system) for i in job.items] or [(job.prompt, job.system)]
        return all(self.caching.holds(job.rule, prompt, system) for prompt, system in prompts)

    def defer(self, deferred: Deferred) -> str | None:
        event = current_event()
        if event is None:
            return "no record is being scored"
        topic, partition = event.message.topic, event.message.partition
        if topic in self._not_copartitioned:
            return f"{topic} is not co-partitioned with the {TABLE_NAME} table"
        raw_key = deferred.key.encode()
        rule = self._rule_of(deferred)
        if rule is None:  # planned with the scorer's rules: it has it
            return f"rule {deferred.rule_id} v{deferred.version} is not loaded"
        self._rules[_rule_key(rule)] = rule
        try:
            if self.table.get(raw_key) is not None:
                return None  # already pending (a redelivered record): it stays as it is
            deferred.partition = partition
            self.table[raw_key] = deferred.encode()
        except PartitionsMismatch as exc:
            self._not_copartitioned.add(topic)
            log.warning("batch rules on %s are judged online: %s", topic, exc)
            return f"{topic} is not co-partitioned with the {TABLE_NAME} table"
        self.observer.on_batch_job(deferred.rule_id, deferred.pack, "deferred")
        return None

    # -- the timer's side -------------------------------------------------------------

    def owned(self) -> set[int]:
        return owned_partitions(self.app, self.changelog_name)

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

    def ready(self) -> bool:
        """Whether the table is whole for the partitions owned (not rebalancing or
        recovering)."""
        app = self.app
        if app.rebalancing or getattr(app, "in_recovery", False):
            return False
        recovery = getattr(app.tables, "recovery", None)  # faust-streaming 0.15's
        return recovery is None or bool(recovery.completed.is_set())

    async def tick(self) -> None:
        """One round: poll submitted batches, find or resubmit unrecorded ones, submit. A
        failure is logged and the round tried again at the next interval (an exception out
        of a Faust timer stops the worker)."""
        if not self.ready():
            return
        try:
            await self.round()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("a batch round failed: tried again in %s s", self.poll_s)

    async def round(self) -> None:
        jobs = self.pending()
        states: defaultdict[str, list[Deferred]] = defaultdict(list)
        for job in jobs:
            states[job.state].append(job)
        oldest = max(0.0, self.clock() - jobs[0].since) if jobs else 0.0
        self.observer.on_batch_pending(len(jobs), oldest)
        await self.poll(states["submitted"])
        await self.resume(states["submitting"])
        await self.submit(states["waiting"])

    async def poll(self, submitted: list[Deferred]) -> None:
        """Finish the jobs of every batch that has finished."""
        by_batch: defaultdict[str, list[Deferred]] = defaultdict(list)
        for job in submitted:
            assert job.batch_id is not None
            by_batch[job.batch_id].append(job)
        for batch_id, jobs in by_batch.items():
            try:
                state = await self.api.poll(batch_id)
                if not state.finished:
                    continue
                results = await self.api.results(state, [c for job in jobs for c in job.calls])
            except Exception as exc:
                log.warning("polling batch %s failed (asked again next round): %s", batch_id, exc)
                continue
            others = [line for line in results.stray if line.startswith("unknown custom_id")]
            if others:  # jobs of partitions another worker owns now: it reads them
                log.debug("batch %s: %d lines for other workers' jobs", batch_id, len(others))
            for line in results.stray:
                if not line.startswith("unknown custom_id"):
                    log.warning("batch %s: an unreadable line: %s", batch_id, line)
            self.observer.on_batch(state.status)
            owned = self.owned()  # a job moved away meanwhile is its new owner's to finish
            mine = [job for job in jobs if job.partition in owned]
            await asyncio.gather(*(self._finish_one(job, state, results.items) for job in mine))

    async def _finish_one(
        self, job: Deferred, state: BatchState, items: dict[str, ItemAnswered | ItemFailed]
    ) -> None:
        async with self._finishing:  # calls asked online (expired items) run side by side
            await self.finish(job, state, items)

    async def resume(self, submitting: list[Deferred]) -> None:
        """Jobs written ``submitting`` whose batch id was never recorded: the batch created
        before the worker stopped, found by its key, or the same jobs submitted again."""
        by_key: defaultdict[str, list[Deferred]] = defaultdict(list)
        for job in submitting:
            assert job.batch_key is not None
            by_key[job.batch_key].append(job)
        for key, jobs in by_key.items():
            try:
                found = await self.api.find(key)
            except Exception as exc:
                log.warning("looking for batch %s failed (asked again next round): %s", key, exc)
                continue
            if found is not None:
                log.info(
                    "batch %s of %d jobs found by its key after a restart", found.id, len(jobs)
                )
                self._record(jobs, found, key)
            else:
                await self.send(jobs)

    async def submit(self, waiting: list[Deferred]) -> None:
        """Send each rule's waiting jobs in batches of at most ``judge.batch.max_jobs``
        requests, once they fill one or the oldest has waited ``max_wait_s``."""
        groups: defaultdict[tuple[str, str, int, str], list[Deferred]] = defaultdict(list)
        for job in waiting:
            groups[(job.pack, job.rule_id, job.version, job.model)].append(job)
        now = self.clock()
        for jobs in groups.values():
            rule = self._rule_of(jobs[0])
            if rule is None:
                await self.drop(jobs, "its rule is no longer loaded")
                continue
            spec = rule.judge.batch
            requests = sum(len(job.calls) for job in jobs)
            if requests < spec.max_jobs and now - jobs[0].since < spec.max_wait_s:
                continue
            for chunk in _chunks(jobs, spec.max_jobs):
                full = sum(len(job.calls) for job in chunk) >= spec.max_jobs
                if not full and now - chunk[0].since < spec.max_wait_s:
                    break  # the rest waits for more, or for its time
                await self.send(chunk)

    async def send(self, jobs: list[Deferred]) -> None:
        """Submit ``jobs`` as one batch: written ``submitting`` (durably) first, so that a
        worker stopping before their batch id is recorded finds the batch again."""
        rule = self._rule_of(jobs[0])
        if rule is None:
            await self.drop(jobs, "its rule is no longer loaded")
            return
        rule = self._judged_by(rule, jobs[0].model)
        batch_jobs = [
            BatchJob(custom_id, self.client.request_for(rule, prompt, system))
            for job in jobs
            for custom_id, (prompt, system, _) in zip(job.calls, job.prompts(), strict=True)
        ]
        key = batch_key(batch_jobs)
        for job in jobs:
            self._write(replace(job, state="submitting", batch_key=key))
        if not await drain_producer(self.app.producer, DRAIN_TIMEOUT_S):
            log.warning("batch %s not submitted: the producer did not drain in time", key)
            return
        try:
            state = await self.api.submit(batch_jobs, metadata={"scorer_rule": rule.id})
        except Exception as exc:
            log.warning(
                "submitting a batch of %d requests for %s failed (again next round): %s",
                len(batch_jobs),
                rule.id,
                exc,
            )
            return
        log.info("batch %s submitted: %d requests for %s", state.id, len(batch_jobs), rule.id)
        self.observer.on_batch("submitted")
        self._record(jobs, state, key)

    def _record(self, jobs: Iterable[Deferred], state: BatchState, key: str) -> None:
        for job in jobs:
            self._write(replace(job, state="submitted", batch_key=key, batch_id=state.id))

    async def finish(
        self, job: Deferred, state: BatchState, items: dict[str, ItemAnswered | ItemFailed]
    ) -> None:
        """Conclude ``job`` from its batch's answers, publish, keep its verdicts, then drop
        the entry; a bug on the way dead-letters the entry (kept, with the error)."""
        try:
            outcome, answers = await self._conclude(job, state, items)
            sends = sends_of(self.topics.scores, self.topics.decisions, job.records(outcome))
        except Exception as exc:
            log.exception("finishing batch job %s of %s failed", job.key, job.rule_id)
            where = {"scorer.batch.id": state.id, "scorer.rule": job.rule_id}
            sends = self.dead_letters.kept(
                job.key, job.encode(), self.changelog_name, "finishing a batch job", exc, where
            )
            await self.publisher.send_until_delivered(sends)
            self._tombstone(job)
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
        self._tombstone(job)

    async def _conclude(
        self, job: Deferred, state: BatchState, items: dict[str, ItemAnswered | ItemFailed]
    ) -> tuple[RuleOutcome, BatchAnswers]:
        """The rule's outcome from the batch's answers, as its kind concludes a live call;
        ``details.batch`` on its scores says which batch, how long it waited, and any call
        made online instead."""
        calls = {(p, s): c for c, (p, s, _) in zip(job.calls, job.prompts(), strict=True)}
        answers = BatchAnswers(self.client, self.online, calls, items)
        ctx = self.scorer.context
        rule = self._rule_of(job)
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

    async def drop(self, jobs: list[Deferred], why: str) -> None:
        """Jobs that cannot be finished: dead-lettered with why, then dropped."""
        for job in jobs:
            log.warning("batch job %s of %s dropped: %s", job.key, job.rule_id, why)
            sends = self.dead_letters.kept(
                job.key,
                job.encode(),
                self.changelog_name,
                "submitting a batch job",
                LookupError(why),
                {"scorer.rule": job.rule_id},
            )
            await self.publisher.send_until_delivered(sends)
            self._tombstone(job)

    # -- the table ------------------------------------------------------------------

    def _rule_of(self, job: Deferred) -> JudgedRule | None:
        """The rule ``job`` was planned with: the scorer's, or one kept at its deferral."""
        key = (job.pack, job.rule_id, job.version)
        if (rule := self._rules.get(key)) is not None:
            return rule
        for loaded in self.scorer.ruleset.rules:
            if _rule_key(loaded) == key and isinstance(loaded, JudgedRule):
                return loaded
        return None

    def _judged_by(self, rule: JudgedRule, model: str) -> JudgedRule:
        """``rule`` judged by ``model`` (a fallback budget's, when one sent it there)."""
        if self.scorer.context.model_of(rule) == model:
            return rule
        return rule.model_copy(update={"judge": rule.judge.model_copy(update={"model": model})})

    def _write(self, job: Deferred) -> None:
        raw_key = job.key.encode()
        value = job.encode()
        self.table.send_changelog(job.partition, raw_key, value, value_serializer="raw")
        put_in_partition(self.table, job.partition, raw_key, value)  # no event in scope

    def _tombstone(self, job: Deferred) -> None:
        raw_key = job.key.encode()
        self.table.send_changelog(job.partition, raw_key, None, value_serializer="raw")
        with contextlib.suppress(KeyError):
            del self.table.data[raw_key]


def _rule_key(rule: Any) -> RuleKey:
    return (rule.pack, rule.id, rule.version)


def _judged_by(rule: JudgedRule, model: str) -> JudgedRule:
    """``rule`` judged by ``model`` (a fallback budget's model, when one sent it there)."""
    if (rule.judge.model or "") == model or (rule.judge.model is None and not model):
        return rule
    return rule.model_copy(update={"judge": rule.judge.model_copy(update={"model": model})})


def _chunks(jobs: list[Deferred], max_requests: int) -> list[list[Deferred]]:
    """``jobs`` in order, cut into batches of at most ``max_requests`` requests (a job's
    calls stay in one batch; a job larger than the bound is a batch of its own)."""
    chunks: list[list[Deferred]] = []
    size = 0
    for job in jobs:
        if not chunks or size + len(job.calls) > max_requests:
            chunks.append([])
            size = 0
        chunks[-1].append(job)
        size += len(job.calls)
    return chunks
