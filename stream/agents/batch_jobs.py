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
from .agreement import agreement_sends

log = logging.getLogger(__name__)

TABLE_NAME = "batch-jobs"
DRAIN_TIMEOUT_S = 10.0  # how long a submission waits for its "submitting" writes
# a "submitting" entry is looked for (and sent again if no batch has its key) this long after
# it was written: its writer may still be uploading and creating the batch
RESUBMIT_AFTER_S = 600.0
# a batch's input file stays under the Batch API's 200 MB (prompts' characters, estimated)
MAX_BATCH_BYTES = 150_000_000
LINE_OVERHEAD_BYTES = 4_000  # a request's body beyond its prompts (schema, parameters)
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
        give_up_s: float = 1800.0,
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
        self._said: set[str] = set()  # why jobs were not deferred, said once each
        # batch id or key -> when its polling or submitting first failed in a row
        self._failing: dict[str, float] = {}
        self._sent: set[str] = set()  # keys of the batches this worker wrote submitting
        self.give_up_s = give_up_s
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
        """Keep ``deferred`` in its partition: the one its plan names (a thread close's
        thread-events partition: the close is scored by a task the agent's event may not
        outlive), else the partition of the record being scored (a trace's)."""
        why = self._keep(deferred)
        if why is not None and why not in self._said:
            self._said.add(why)
            log.warning("a batch rule is not deferred (judged online, or skipped): %s", why)
        return why

    def _keep(self, deferred: Deferred) -> str | None:
        raw_key = deferred.key.encode()
        rule = self._rule_of(deferred)
        if rule is None:  # planned with the scorer's rules: it has it
            return f"rule {deferred.rule_id} v{deferred.version} is not loaded"
        self._rules[_rule_key(rule)] = rule
        if deferred.partition >= 0:
            if self.table.get(raw_key) is None:  # else already pending: it stays as it is
                self._write(deferred)
            self.observer.on_batch_job(deferred.rule_id, deferred.pack, "deferred")
            return None
        event = current_event()
        if event is None:
            return "no record is being scored"
        topic, partition = event.message.topic, event.message.partition
        if topic in self._not_copartitioned:
            return f"{topic} is not co-partitioned with the {TABLE_NAME} table"
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
                    self._failing.pop(batch_id, None)
                    continue
                results = await self.api.results(state, [c for job in jobs for c in job.calls])
            except Exception as exc:
                why = f"polling batch {batch_id} failed: {exc}"
                await self._failed(batch_id, jobs, why, BatchState(batch_id, "unreadable"))
                continue
            self._failing.pop(batch_id, None)
            others = [line for line in results.stray if line.startswith("unknown custom_id")]
            if others:  # jobs of partitions another worker owns now: it reads them
                log.debug("batch %s: %d lines for other workers' jobs", batch_id, len(others))
            for line in results.stray:
                if not line.startswith("unknown custom_id"):
                    log.warning("batch %s: an unreadable line: %s", batch_id, line)
            self.observer.on_batch(state.status)
            # a job moved away meanwhile is its new owner's to finish
            await self._finish_all(jobs, state, results.items)

    async def _finish_one(
        self, job: Deferred, state: BatchState, items: dict[str, ItemAnswered | ItemFailed]
    ) -> None:
        async with self._finishing:  # calls asked online (expired items) run side by side
            await self.finish(job, state, items)

    async def resume(self, submitting: list[Deferred]) -> None:
        """Jobs written ``submitting`` whose batch id was never recorded (the create failed,
        its reply was lost, or the worker stopped): the batch found by its key, or the same
        jobs submitted again. Jobs another worker wrote (before a restart or a rebalance)
        wait ``RESUBMIT_AFTER_S`` first: it may still be creating their batch, which
        ``find`` would not see yet; this worker's own are not being created (a round at a
        time)."""
        by_key: defaultdict[str, list[Deferred]] = defaultdict(list)
        now = self.clock()
        for job in submitting:
            assert job.batch_key is not None
            mine = job.batch_key in self._sent
            if mine or now - job.extra.get("submitting_at", 0.0) >= RESUBMIT_AFTER_S:
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
            if rule is None:  # a reload replaced it and the worker restarted: said so
                await self._finish_all(jobs, BatchState("(not submitted)", "not submitted"), {})
                continue
            spec = rule.judge.batch
            requests = requests_in(jobs)
            if requests < spec.max_jobs and now - jobs[0].since < spec.max_wait_s:
                continue
            chunks = _chunks(jobs, spec.max_jobs, MAX_BATCH_BYTES)
            for index, chunk in enumerate(chunks):
                # every chunk but the last is full (by requests or bytes)
                full = index < len(chunks) - 1 or requests_in(chunk) >= spec.max_jobs
                if not full and now - chunk[0].since < spec.max_wait_s:
                    break  # the rest waits for more, or for its time
                await self.send(chunk)

    async def send(self, jobs: list[Deferred]) -> None:
        """Submit ``jobs`` as one batch: written ``submitting`` (durably) first, so that a
        worker stopping before their batch id is recorded finds the batch again."""
        if not self.ready():
            return  # a rebalance began during the round: the owner decides next round
        owned = self.owned()
        jobs = [job for job in jobs if job.partition in owned]
        rule = self._rule_of(jobs[0]) if jobs else None
        if rule is None:
            return  # none left, or a replaced rule (submit finishes those)
        rule = self._judged_by(rule, jobs[0].model)
        batch_jobs = [
            BatchJob(custom_id, self.client.request_for(rule, prompt, system))
            for job in jobs
            for custom_id, (prompt, system, _) in zip(job.calls, job.prompts(), strict=True)
        ]
        key = batch_key(batch_jobs)
        now = self.clock()
        for job in jobs:  # no await since ready() and owned(): still this worker's
            extra = {**job.extra, "submitting_at": now}
            self._write(replace(job, state="submitting", batch_key=key, extra=extra))
        self._sent.add(key)
        if not await drain_producer(self.app.producer, DRAIN_TIMEOUT_S):
            log.warning("batch %s not submitted: the producer did not drain in time", key)
            return
        try:
            state = await self.api.submit(batch_jobs, metadata={"scorer_rule": rule.id})
        except Exception as exc:
            why = f"submitting a batch of {len(batch_jobs)} requests for {rule.id} failed: {exc}"
            await self._failed(key, jobs, why, BatchState("(not submitted)", "not submitted"))
            return
        self._failing.pop(key, None)
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
            published = [s for s in [outcome.score, *outcome.extra] if s is not None]
            sends += agreement_sends(self.topics, published)  # judged scores meet their labels
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

    async def _failed(self, name: str, jobs: list[Deferred], why: str, state: BatchState) -> None:
        """A batch (by id) or a submission (by key) failed: tried again next round, until it
        has failed for ``give_up_s`` in a row (an endpoint without the Batch API, a batch the
        provider lost): then its jobs are asked by ordinary calls, saying why."""
        first = self._failing.setdefault(name, self.clock())
        if self.clock() - first < self.give_up_s:
            log.warning("%s (again next round)", why)
            return
        del self._failing[name]
        log.warning("%s, for %.0f s: its %d jobs are judged online", why, self.give_up_s, len(jobs))
        given_up = f"{why} (for {self.give_up_s:g} s, SCORER_BATCH_GIVE_UP_S)"
        items: dict[str, ItemAnswered | ItemFailed] = {
            c: ItemFailed(c, "error", given_up) for job in jobs for c in job.calls
        }
        await self._finish_all(jobs, state, items)

    async def _finish_all(
        self, jobs: list[Deferred], state: BatchState, items: dict[str, ItemAnswered | ItemFailed]
    ) -> None:
        owned = self.owned()
        mine = [job for job in jobs if job.partition in owned]
        await asyncio.gather(*(self._finish_one(job, state, items) for job in mine))

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


def requests_in(jobs: list[Deferred]) -> int:
    return sum(len(job.calls) for job in jobs)


def _chunks(jobs: list[Deferred], max_requests: int, max_bytes: int) -> list[list[Deferred]]:
    """``jobs`` in order, cut into batches of at most ``max_requests`` requests and about
    ``max_bytes`` of input (a job's calls stay in one batch; a job larger than a bound is a
    batch of its own)."""
    chunks: list[list[Deferred]] = []
    size = weight = 0
    for job in jobs:
        calls = len(job.calls)
        heavy = sum(
            len(p.encode()) + len((s or "").encode()) + LINE_OVERHEAD_BYTES
            for p, s, _ in job.prompts()
        )
        if not chunks or size + calls > max_requests or weight + heavy > max_bytes:
            chunks.append([])
            size = weight = 0
        chunks[-1].append(job)
        size += calls
        weight += heavy
    return chunks
