"""``scorer backfill``: named rules over the traces a topic received in a past range.

The range's records are read once (``kafka/time_range.py``) and scored by the worker's own
engine with only the named rules: each trace with the trace rules, and the threads and
pairs the range's traces form, folded as ``scorer explain`` folds a file (closed on their end,
past their gap, or at the end of the range), with the thread and comparison rules. What a
rule publishes is the score events a worker would, with the same deterministic ids: a trace's
score id hashes the rule, its version and the trace id; a thread close's, the close the fold
made from the records' own times, so the same range folds into the same closes.

Nothing is scored twice: the scores topic is read from the range's start first, and a rule
whose score for a target is already there (from the worker, or an earlier backfill) makes no
call and publishes nothing for it. Calls go through the verdict cache (in memory, for the
run), the judge's own pacing and retries, and, in ``batch`` mode, through the Batch API: the
whole range planned first, its calls submitted as one batch per rule, and every target then
concluded from the batch's answers as the worker concludes a deferred job. A budget
(``max_usd``) stops the run before the target that would pass it. Scores only: no decision
records are published (they would be partial for a target scored by other rules too). Design
record 41.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .engine.kinds import primary_shape
from .engine.outcomes import TraceResult, score_rule_key
from .engine.plan import JudgeJob, Plan
from .engine.scorer import Scorer
from .engine.verdicts import Judge
from .errors import ConfigError
from .explain import FileOptions, FileThreads, Invalid, first_moment, parse_message
from .models import ScoreEvent, TokenUsage, Trace, score_id
from .observer import Observer
from .ruleset.schema import RuleSet
from .threads.events import SessionEvent

log = logging.getLogger(__name__)


def named_rules(ruleset: RuleSet, rule_ids: Sequence[str]) -> RuleSet:
    """``ruleset`` with only the rules named (a rule switched off by its file or the
    deployment, or unknown, is a ``ConfigError`` naming it)."""
    wanted = list(dict.fromkeys(rule_ids))
    found = {rule.id: rule for rule in ruleset.rules}
    off = {d.rule.id: d.by for d in ruleset.disabled}
    problems = []
    for rule_id in wanted:
        if rule_id in found:
            continue
        if rule_id in off:
            problems.append(f"rule {rule_id!r} is switched off ({off[rule_id]})")
        else:
            problems.append(f"no rule {rule_id!r} is loaded (loaded: {sorted(found)})")
    if problems:
        raise ConfigError(problems)
    return RuleSet([found[rule_id] for rule_id in wanted], ruleset.digest)


class Tally(Observer):
    """What a backfill has done so far; the judge client reports each call to it."""

    def __init__(self) -> None:
        self.traces = self.closes = 0  # targets scored
        self.already_scored = 0  # a rule's targets skipped: their score is on the topic
        self.published = 0
        self.judge_calls = self.prompt_tokens = self.completion_tokens = 0
        self.usd = 0.0
        self.unpriced = 0  # answered calls on a model with no price
        self.stopped: str | None = None  # why it stopped before the end (the budget)
        self.invalid = 0
        self.errors = 0  # error scores published (a later run asks again for them)

    def on_judge_call(
        self,
        model: str,
        outcome: str,
        seconds: float | None,
        usage: TokenUsage | None = None,
        cost_usd: float | None = None,
    ) -> None:
        self.judge_calls += 1
        if usage is not None:
            self.prompt_tokens += usage.prompt_tokens
            self.completion_tokens += usage.completion_tokens
            if cost_usd is None:
                self.unpriced += 1
            else:
                self.usd += cost_usd


@dataclass
class Targets:
    """The range's traces and the closes they fold into, ready to plan."""

    traces: list[tuple[Trace, Any, str]] = field(default_factory=list)  # with its topic
    closes: list[Any] = field(default_factory=list)  # ThreadClose
    invalid: int = 0
    still_open: int = 0  # threads the range ends in: not scored


def targets_of(
    ruleset: RuleSet, messages: Iterable[tuple[str, bytes]], options: FileOptions, traces_topic: str
) -> Targets:
    """The traces of ``messages`` (each with the topic it was read from) and, where thread
    or comparison rules are named, the closes they fold into (as ``scorer explain`` folds a
    file)."""
    parsed: list[tuple[str, Any]] = []
    found = Targets()
    for topic, raw in messages:
        item = parse_message(raw, topic, options.sessions_topic)  # as scorer explain reads
        if isinstance(item, Invalid):
            found.invalid += 1
        else:
            parsed.append((topic, item))
    found.traces = [(*item, topic) for topic, item in parsed if isinstance(item, tuple)]
    if any(rule.scope not in ("trace", "tool_call") for rule in ruleset.rules):
        threads = FileThreads(ruleset, options, start=first_moment([i for _, i in parsed]))
        for topic, item in parsed:
            if isinstance(item, SessionEvent):
                if threads.reads_sessions:
                    threads.add_session(item)
            else:
                threads.add_trace(item[0], item[1], topic or traces_topic)
        closes = threads.finish()
        # a thread still open when the range ends has not closed in it: not scored (the
        # worker scores it when it closes; a later range holds its close)
        found.closes = [close.close for close in closes if not close.at_end]
        found.still_open = sum(close.at_end for close in closes)
    return found


def primary_id(job_or_rule: Any, plan: Plan) -> str:
    """The id of the score that stands for a rule's decision on ``plan``'s target: its one
    score, a rubric's aggregate, a comparison's preference (``primary_shape``)."""
    rule = job_or_rule.rule if isinstance(job_or_rule, JudgeJob) else job_or_rule
    key = score_rule_key(rule, primary_shape(rule).criterion)
    return score_id(key, rule.version, rule.scope, plan.target.score_key)


def unscored(plan: Plan, existing: set[str]) -> int:
    """Drop from ``plan`` (and its tool calls' plans) what the scores topic already holds,
    and what publishes nothing; how many rules' scores were already there."""
    already = sum(_unscored(each, existing) for each in plan.each())
    plan.parts = [part for part in plan.parts if part.outcomes or part.judge_jobs]
    return already


def _unscored(plan: Plan, existing: set[str]) -> int:
    before = sum(o.score is not None for o in plan.outcomes) + len(plan.judge_jobs)
    plan.outcomes = [  # a rule filtered out or sampled out publishes nothing: not a target
        o for o in plan.outcomes if o.score is not None and o.score.score_id not in existing
    ]
    plan.judge_jobs = [j for j in plan.judge_jobs if primary_id(j, plan) not in existing]
    return before - len(plan.outcomes) - len(plan.judge_jobs)


class Backfill:
    """Scores ``targets`` with ``scorer`` (built on the named rules and the run's judge),
    skipping the targets whose score ``existing`` holds (the ids of scores that need no
    asking again: ok ones, and a check's whatever their status), and hands each target's
    new scores to ``publish``."""

    def __init__(
        self,
        scorer: Scorer,
        existing: set[str],
        publish: Callable[[str, list[ScoreEvent]], Any],
        tally: Tally,
        max_usd: float | None = None,
        cost_of: Callable[[Plan], float | None] = lambda plan: 0.0,
        on_progress: Callable[[Tally], None] = lambda tally: None,
        concurrency: int = 16,
    ) -> None:
        self.scorer = scorer
        self.existing = existing
        self.publish = publish
        self.max_usd = max_usd
        self.cost_of = cost_of
        self.on_progress = on_progress
        self.concurrency = concurrency
        self.tally = tally
        self.reserved = 0.0  # the estimated cost of the targets being judged now

    def plans(self, targets: Targets, planner: Scorer | None = None) -> list[Plan]:
        """Every target's plan (made by ``planner``, else the scorer: a planner whose judge
        is never called plans judge jobs where the run has no judge yet), less what is
        already scored: those with anything to do."""
        planner = planner or self.scorer
        plans = []
        for trace, document, topic in targets.traces:
            plans.append(planner.plan(trace, document, topic))
        for close in targets.closes:
            plans.append(planner.plan_thread(close))
        for plan in plans:
            self.tally.already_scored += unscored(plan, self.existing)
        self.tally.invalid = targets.invalid
        return [plan for plan in plans if plan.decided() or plan.waits]

    async def run(self, plans: list[Plan], judge: Judge | None = None) -> Tally:
        """Finish every plan (with ``judge`` instead of the scorer's own when given: a
        batch's answers), at most ``concurrency`` at once, publishing each as it finishes."""
        if judge is not None:
            self.scorer.context.judge = judge
        waiting = asyncio.Semaphore(self.concurrency)
        publishing = asyncio.Lock()  # one target's scores at a time, in the order finished

        async def one(plan: Plan) -> None:
            async with waiting:
                if self.tally.stopped is not None:
                    return
                cost = self.cost_of(plan) or 0.0
                if (
                    self.max_usd is not None
                    and self.tally.usd + self.reserved + cost > self.max_usd
                ):
                    self.tally.stopped = (
                        f"the next target would pass the budget of ${self.max_usd:g} "
                        f"(${self.tally.usd:,.4f} spent)"
                    )
                    return
                self.reserved += cost
                try:
                    result: TraceResult = await self.scorer.finish(plan)
                finally:
                    self.reserved -= cost
                fresh = [s for s in result.scores if s.score_id not in self.existing]
                async with publishing:
                    self.existing.update(s.score_id for s in fresh)
                    if fresh:
                        await self.publish(plan.target.id, fresh)
                        self.tally.published += len(fresh)
                        self.tally.errors += sum(s.status == "error" for s in fresh)
                    if plan.target.thread is None:
                        self.tally.traces += 1
                    else:
                        self.tally.closes += 1
                    self.on_progress(self.tally)

        # in order (the semaphore admits its waiters first come, first served), so a budget
        # stops at one target and every one after it
        await asyncio.gather(*(one(plan) for plan in plans))
        return self.tally
