"""``scorer backfill --mode batch``: a range's judge calls through the Batch API.

Every call the range's plans would make is submitted (one batch per rule and shadow, so one
model a batch, in chunks of the rule's ``judge.batch.max_jobs``), the batches are polled until they finish, and the plans are
then concluded from their answers by ``judge.batch_answers.BatchAnswers``, as the worker
concludes a deferred job (design record 25): an item the batch could not answer is asked
online instead, a refused one is an ``error`` score. A call that reads the trace through
tools is never batched: it is asked online. The batches are paid for once submitted:
``--max-usd`` is kept before (the plans that fit, at the batch rate), and a batch left running
by an interrupted command goes on (cancel it with the provider). Design record 41.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from rich.console import Console

from ..backfill import Backfill, Tally
from ..engine.plan import Plan
from ..engine.verdicts import Judge, ToolBox, Verdict
from ..judge.batch import BatchAPI, BatchJob, BatchState, ItemAnswered, ItemFailed, job_id
from ..judge.batch_answers import BatchAnswers
from ..judge.cache import CachingJudge
from ..judge.client import JudgeClient
from ..settings import Settings

POLL_FIRST_S = 2.0  # the first poll; then ``SCORER_BATCH_POLL_S`` at most, doubling up to it


RuleKey = tuple[str, str | None]  # a rule's id and its shadow's name (None: the rule's own)


def batch_calls(plans: list[Plan]) -> dict[RuleKey, list[tuple[Any, str, str | None]]]:
    """Every call the plans would make, by rule and shadow (a shadow may differ from its rule
    only in its model: its answers must not be read as the rule's): (rule, prompt, system
    prompt), each once."""
    calls: defaultdict[RuleKey, list[tuple[Any, str, str | None]]] = defaultdict(list)
    seen: set[tuple[str, str | None, str, str | None]] = set()
    jobs = (job for plan in plans for each in plan.each() for job in each.judge_jobs)
    for job in jobs:
        if job.tools is not None:
            continue
        for prompt, system in [(i.prompt, i.system) for i in job.items] or [
            (job.prompt, job.system)
        ]:
            key = (job.rule.id, job.rule.variant, prompt, system)
            if key not in seen:
                seen.add(key)
                calls[(job.rule.id, job.rule.variant)].append((job.rule, prompt, system))
    return dict(calls)


class PerRule:
    """A ``Judge`` answering each rule (and shadow) from its own batches' answers; a rule
    none was submitted for (one that reads the trace by tools) is asked online."""

    def __init__(self, answers: dict[RuleKey, BatchAnswers], online: Judge) -> None:
        self.answers = answers
        self.online = online

    @property
    def fallbacks(self) -> list[str]:
        return [why for answers in self.answers.values() for why in answers.fallbacks]

    async def judge(
        self,
        rule: Any,
        prompt: str,
        system: str | None = None,
        quoted: Sequence[str] = (),
        tools: ToolBox | None = None,
    ) -> Verdict:
        answers = self.answers.get((rule.id, rule.variant))
        judge = answers if answers is not None else self.online
        return await judge.judge(rule, prompt, system, quoted, tools)


async def batch_judge(
    settings: Settings, run: Backfill, plans: list[Plan], tally: Tally, console: Console
) -> Judge:
    """Submit the plans' calls as batches, wait for them, and the judge that answers from
    them (online where a batch gave no usable answer)."""
    online = run.scorer.context.judge
    client = online.inner if isinstance(online, CachingJudge) else online
    if not isinstance(client, JudgeClient):
        raise RuntimeError("batch mode needs the judge client")
    config = settings.judge_config()
    api = BatchAPI(
        base_url=settings.batch_base_url or config.base_url,
        api_key=config.api_key.get_secret_value() if config.api_key else None,
        timeout_s=config.timeout_s,
    )
    answers: dict[str, ItemAnswered | ItemFailed] = {}
    where: defaultdict[RuleKey, dict[tuple[str, str | None], str]] = defaultdict(dict)
    try:
        waiting: list[tuple[BatchState, list[str]]] = []
        for (rule_id, variant), calls in batch_calls(plans).items():
            name = rule_id if variant is None else f"{rule_id}@{variant}"
            size = calls[0][0].judge.batch.max_jobs
            for start in range(0, len(calls), size):
                jobs = []
                for rule, prompt, system in calls[start : start + size]:
                    request = client.request_for(rule, prompt, system)
                    custom = job_id(f"backfill/{name}", request)
                    jobs.append(BatchJob(custom, request))
                    where[(rule_id, variant)][(prompt, system)] = custom
                state = await api.submit(jobs, metadata={"scorer_rule": name})
                console.print(
                    f"batch {state.id} submitted: {len(jobs)} requests for {name}",
                    highlight=False,
                )
                waiting.append((state, [job.custom_id for job in jobs]))
        started, pause = time.monotonic(), POLL_FIRST_S
        while waiting:
            await asyncio.sleep(pause)
            pause = min(pause * 2, settings.batch_poll_s)
            still = []
            for state, ids in waiting:
                state = await api.poll(state.id)
                if not state.finished:
                    still.append((state, ids))
                    continue
                answers.update((await api.results(state, ids)).items)
                console.print(
                    f"batch {state.id} {state.status} after {time.monotonic() - started:.0f} s",
                    highlight=False,
                )
            waiting = still
    finally:
        await api.close()
    assert online is not None
    return PerRule(
        {key: BatchAnswers(client, online, calls, answers) for key, calls in where.items()},
        online,
    )
