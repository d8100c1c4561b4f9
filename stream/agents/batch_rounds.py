"""The batch timer's round (design record 25): deferred judge jobs submitted to the Batch API
and their batches polled.

Every ``SCORER_BATCH_POLL_S`` each worker, for the partitions it owns:

1. polls each batch its ``submitted`` jobs are in; once a batch is finished, reads its output
   and error files and has each job finished from them (``batch_finish.py``);
2. looks again for the batches of ``submitting`` jobs (a worker died between creating a
   batch and recording its id): found by their ``batch_key`` in the batch's metadata, else
   submitted again (the same jobs, the same key);
3. submits the ``waiting`` jobs of each rule and model once they hold ``judge.batch.max_jobs``
   requests or the oldest has waited ``judge.batch.max_wait_s``: each entry is written
   ``submitting`` with the batch's key and the producer drained before the batch is created,
   then ``submitted`` with its id. A job is never in two batches.

A batch that cannot be polled, or a submission that fails, is tried again next round until it
has failed for ``give_up_s`` in a row; then its jobs are asked by ordinary calls.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import replace

import faust

from ..engine.deferred import Deferred
from ..engine.plan import JudgedRule
from ..engine.scorer import Scorer
from ..judge.batch import BatchAPI, BatchJob, BatchState, ItemFailed, batch_key
from ..judge.client import JudgeClient
from ..kafka.mends.commits import drain_producer
from ..observer import Observer
from .batch_finish import BatchFinisher, Items
from .batch_table import BatchTable

log = logging.getLogger(__name__)

DRAIN_TIMEOUT_S = 10.0  # how long a submission waits for its "submitting" writes
# a "submitting" entry is looked for (and sent again if no batch has its key) this long after
# it was written: its writer may still be uploading and creating the batch
RESUBMIT_AFTER_S = 600.0
# a batch's input file stays under the Batch API's 200 MB (prompts' characters, estimated)
MAX_BATCH_BYTES = 150_000_000
LINE_OVERHEAD_BYTES = 4_000  # a request's body beyond its prompts (schema, parameters)


class BatchRounds:
    """Submits the waiting jobs, polls their batches, and hands the answered ones on to be
    finished; one round a tick of the timer."""

    def __init__(
        self,
        app: faust.App,
        table: BatchTable,
        finisher: BatchFinisher,
        *,
        scorer: Scorer,
        client: JudgeClient,
        api: BatchAPI,
        observer: Observer,
        poll_s: float,
        give_up_s: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.app = app
        self.table = table
        self.finisher = finisher
        self.scorer = scorer
        self.client = client
        self.api = api
        self.observer = observer
        self.poll_s = poll_s
        self.give_up_s = give_up_s
        self.clock = clock
        # batch id or key -> when its polling or submitting first failed in a row
        self._failing: dict[str, float] = {}
        self._sent: set[str] = set()  # keys of the batches this worker wrote submitting

    async def tick(self) -> None:
        """One round: poll submitted batches, find or resubmit unrecorded ones, submit. A
        failure is logged and the round tried again at the next interval (an exception out
        of a Faust timer stops the worker)."""
        if not self.table.ready():
            return
        try:
            await self.round()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("a batch round failed: tried again in %s s", self.poll_s)

    async def round(self) -> None:
        jobs = self.table.pending()
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
            await self.finisher.finish_all(jobs, state, results.items)

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
            rule = self.table.rule_of(jobs[0])
            if rule is None:  # a reload replaced it and the worker restarted: said so
                not_submitted = BatchState("(not submitted)", "not submitted")
                await self.finisher.finish_all(jobs, not_submitted, {})
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
        if not self.table.ready():
            return  # a rebalance began during the round: the owner decides next round
        owned = self.table.owned()
        jobs = [job for job in jobs if job.partition in owned]
        rule = self.table.rule_of(jobs[0]) if jobs else None
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
            self.table.write(replace(job, state="submitting", batch_key=key, extra=extra))
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
            self.table.write(replace(job, state="submitted", batch_key=key, batch_id=state.id))

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
        items: Items = {c: ItemFailed(c, "error", given_up) for job in jobs for c in job.calls}
        await self.finisher.finish_all(jobs, state, items)

    def _judged_by(self, rule: JudgedRule, model: str) -> JudgedRule:
        """``rule`` judged by ``model`` (a fallback budget's, when one sent it there)."""
        if self.scorer.context.model_of(rule) == model:
            return rule
        return rule.model_copy(update={"judge": rule.judge.model_copy(update={"model": model})})


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
