"""``scorer backfill``: named rules over a past range of the traces topic (design record 41)."""

from __future__ import annotations

import asyncio
import sys
import time
import typing
from dataclasses import replace
from typing import Annotated

import typer
from rich.markup import escape

from ..errors import ConfigError
from ..settings import Settings
from .base import app, console, scores_broker
from .estimate import print_estimate, time_range
from .explain import file_options

OUTAGE_MAX_S = 120.0  # how long a run waits out a judge that does not answer

if typing.TYPE_CHECKING:
    from ..backfill import Backfill, Tally
    from ..engine.plan import Plan
    from ..kafka.security import KafkaSecurity
    from ..ruleset.schema import RuleSet


async def existing_scores(
    bootstrap: str,
    topic: str,
    start_ms: int,
    ruleset: RuleSet,
    security: KafkaSecurity | None,
) -> set[str]:
    """The ids of the named rules' scores on the scores topic since ``start_ms`` that need no
    asking again: a judged rule's ok ones (an error, or a skip for want of a judge or a
    budget, is asked again), and a check's whatever their status (it would say the same)."""
    from ..kafka.time_range import json_records
    from ..ruleset.schema import PromptedRule

    judged = {rule.id for rule in ruleset.rules if isinstance(rule, PromptedRule)}
    checks = {rule.id for rule in ruleset.rules} - judged
    found: set[str] = set()
    async for event in json_records(bootstrap, topic, start_ms, None, security):
        rule_id = event.get("rule_id")
        if rule_id in checks or (rule_id in judged and event.get("status") == "ok"):
            found.add(str(event.get("score_id")))
    return found


async def range_messages(
    bootstrap: str,
    topics: list[str],
    start_ms: int,
    end_ms: int | None,
    security: KafkaSecurity | None,
) -> list[tuple[str, bytes]]:
    """Each topic's records in the range, with their topic, in the order of their time."""
    from ..kafka.time_range import read_range

    found: list[tuple[int, str, bytes]] = []
    for topic in topics:
        async for record in read_range(bootstrap, topic, start_ms, end_ms, security):
            found.append((record.timestamp_ms, topic, record.value))
    found.sort(key=lambda item: item[0])  # stable: a partition's order within one time
    return [(topic, value) for _, topic, value in found]


@app.command()
def backfill(
    rules: Annotated[
        list[str], typer.Option("--rules", help="The rules to run, by id (R1,R2 or repeated)")
    ],
    since: Annotated[
        str | None, typer.Option(help="The traces of the last DURATION (7d, 24h, 90m)")
    ] = None,
    start: Annotated[str | None, typer.Option("--from", help="From TIME (ISO 8601)")] = None,
    end: Annotated[str | None, typer.Option("--to", help="Up to TIME (default: now)")] = None,
    topic: Annotated[
        str | None, typer.Option(help="The traces topic (default: SCORER_TRACES_TOPIC)")
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print what it would cost, and stop")
    ] = False,
    mode: Annotated[
        str, typer.Option(help="online, or batch: through the Batch API, at its price")
    ] = "online",
    max_usd: Annotated[
        float | None, typer.Option(help="Stop before the target that would pass this spend")
    ] = None,
    yes: Annotated[bool, typer.Option("--yes", help="Go on without asking")] = False,
) -> None:
    """Run the named rules over the traces a topic received in a past range, and publish
    their scores as the worker would (the same ids: a target already scored, by the worker or
    an earlier backfill, is skipped, and costs nothing). Prints the estimate first and asks to
    go on; shows calls, tokens and dollars as it goes."""
    from ..backfill import Backfill, Tally, named_rules, targets_of
    from ..engine.scorer import Scorer
    from ..estimate import estimate_plans
    from ..explain import planning_scorer
    from ..kafka.io import check_cluster
    from ..ruleset.loader import ALL_PACKS, deployment_rules
    from ..ruleset.schema import PromptedRule

    if mode not in ("online", "batch"):
        raise ConfigError([f"--mode is online or batch, not {mode!r}"])
    settings = Settings()
    rule_ids = [r.strip() for given in rules for r in given.split(",") if r.strip()]
    ruleset = named_rules(deployment_rules(settings, [ALL_PACKS]), rule_ids)
    masked = [(r.id, r.judge.redact) for r in ruleset.rules if isinstance(r, PromptedRule)]
    if problems := settings.redaction_problems(masked):
        raise ConfigError(problems)
    start_ms, end_ms = time_range(since, start, end)
    bootstrap, security = scores_broker(settings, "the broker the traces are on")
    traces_topic = topic or settings.traces_topic
    topics = [traces_topic]
    if any(rule.scope == "thread" for rule in ruleset.rules) and settings.sessions_topic:
        topics.append(settings.sessions_topic)  # sessions fold from their own topic

    async def read() -> tuple[list[tuple[str, bytes]], set[str]]:
        await check_cluster(bootstrap, security)
        readable = [t for t in topics if t == traces_topic or await _exists(t)]
        messages = await range_messages(bootstrap, readable, start_ms, end_ms, security)
        scored = await existing_scores(
            bootstrap, settings.scores_topic, start_ms, ruleset, security
        )
        return messages, scored

    async def _exists(name: str) -> bool:
        from aiokafka import AIOKafkaConsumer

        from ..kafka.io import options

        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, **options(security))
        await consumer.start()
        try:
            return name in await consumer.topics()
        finally:
            await consumer.stop()

    judged = [rule.id for rule in ruleset.rules if isinstance(rule, PromptedRule)]
    if judged and not settings.judge_configured and not dry_run:
        raise ConfigError(
            [f"{', '.join(judged)} need a judge: set OPENAI_BASE_URL (and OPENAI_API_KEY), "
             "or look first with --dry-run"]
        )  # fmt: skip
    with console.status("reading the range and the scores already published"):
        messages, existing = asyncio.run(read())
    tally = Tally()
    judge = _judge(settings, tally, ruleset) if not dry_run else None
    scorer = Scorer(
        ruleset,
        judge,
        default_model=settings.judge_model,
        observer=tally,
        max_prompt_tokens=settings.judge_max_prompt_tokens,
    )
    options = file_options(settings)
    scorer.context.redaction = options.redaction
    targets = targets_of(ruleset, messages, options, traces_topic)
    publish = ScorePublisher(bootstrap, settings.scores_topic, security)

    def cost_of(plan: Plan) -> float | None:
        return estimate_plans([plan], settings.judge_model, settings.judge_cost).total.usd

    run = Backfill(scorer, existing, publish, tally, max_usd, cost_of)
    planner = planning_scorer(
        ruleset, settings.judge_model, settings.judge_max_prompt_tokens, options.redaction
    )
    plans = run.plans(targets, planner)
    found = estimate_plans(plans, settings.judge_model, settings.judge_cost)
    still = f"; {targets.still_open} threads still open at its end (not scored)"
    console.print(
        f"[bold]backfill[/] of {', '.join(rule_ids)} over {len(messages)} records of "
        f"{', '.join(topics)}: {len(targets.traces)} traces, {len(targets.closes)} closes, "
        f"{len(plans)} to score; {tally.already_scored} already scored (skipped)"
        + (still if targets.still_open else ""),
        highlight=False,
    )
    print_estimate(found, None)
    if dry_run or not plans:
        raise typer.Exit(0)
    if max_usd is not None and found.total.judge_calls and found.total.usd is None:
        raise ConfigError(
            ["--max-usd cannot be kept: a model these rules are judged by has no price "
             "(SCORER_JUDGE_PRICES)"]
        )  # fmt: skip
    if mode == "batch" and max_usd is not None:
        plans = within_batch_budget(plans, max_usd, settings, tally)
    if not yes:
        if not sys.stdin.isatty():
            raise ConfigError(["not a terminal to ask on: add --yes to go on (or --dry-run)"])
        typer.confirm("go on?", abort=True)
    asyncio.run(_run(run, plans, settings, mode, tally, publish))
    _report(tally)
    raise typer.Exit(1 if tally.stopped or tally.errors else 0)


def within_batch_budget(
    plans: list[Plan], max_usd: float, settings: Settings, tally: Tally
) -> list[Plan]:
    """The plans, in order, whose estimated cost at the batch rate fits ``max_usd`` (a batch
    is paid for once submitted: the budget is kept before, not while it runs)."""
    from ..estimate import estimate_plans

    kept: list[Plan] = []
    spent = 0.0
    for plan in plans:
        cost = estimate_plans([plan], settings.judge_model, settings.judge_cost).total.usd_batch
        if spent + (cost or 0.0) > max_usd:
            tally.stopped = (
                f"{len(plans) - len(kept)} targets left out: past the budget of ${max_usd:g} "
                f"at the batch rate (${spent:,.4f} estimated for the rest)"
            )
            break
        spent += cost or 0.0
        kept.append(plan)
    return kept


def _judge(settings: Settings, tally: Tally, ruleset: typing.Any) -> typing.Any:
    """The run's judge: the client (reporting each call to ``tally``) behind a verdict cache
    in memory; None where no judge is configured."""
    from ..judge.cache import CachingJudge, VerdictCache
    from ..judge.decision_client import judge_client

    if not settings.judge_configured:
        return None
    config = settings.judge_config()
    # an outage fails the calls after minutes, not the worker's hour: their error scores are
    # asked again by the next run, which the exit code and the report say
    config = replace(config, outage_max_s=min(config.outage_max_s, OUTAGE_MAX_S))
    client = judge_client(config, tally)
    if not settings.judge_cache_ttl_s or not settings.judge_cache_max_entries:
        return client
    cache = VerdictCache(settings.judge_cache_ttl_s, settings.judge_cache_max_entries)
    return CachingJudge(
        client, cache, default_model=settings.judge_model, price=settings.judge_cost
    )


class ScorePublisher:
    """Publishes a target's scores to the scores topic, keyed by the target id as the
    worker keys them (the producer started at the first score)."""

    def __init__(self, bootstrap: str, topic: str, security: KafkaSecurity | None) -> None:
        self.bootstrap, self.topic, self.security = bootstrap, topic, security
        self.producer: typing.Any = None

    async def __call__(self, key: str, scores: list[typing.Any]) -> None:
        if self.producer is None:
            from aiokafka import AIOKafkaProducer

            from ..kafka.io import options

            self.producer = AIOKafkaProducer(
                bootstrap_servers=self.bootstrap, acks="all", **options(self.security)
            )
            await self.producer.start()
        sent = [
            await self.producer.send(self.topic, score.to_bytes(), key=key.encode())
            for score in scores
        ]
        await asyncio.gather(*sent)

    async def close(self) -> None:
        if self.producer is not None:
            await self.producer.stop()


async def _run(
    run: Backfill,
    plans: list[Plan],
    settings: Settings,
    mode: str,
    tally: Tally,
    publish: ScorePublisher,
) -> None:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, console=console) as progress:
        task = progress.add_task("scoring", total=len(plans))

        def shown(now: Tally) -> None:
            progress.update(
                task,
                completed=now.traces + now.closes,
                description=(
                    f"{now.judge_calls} calls, {now.prompt_tokens:,} prompt tokens, ${now.usd:,.4f}"
                ),
            )

        run.on_progress = shown
        started = time.monotonic()
        online = run.scorer.context.judge
        try:
            if mode == "batch":
                from .backfill_batch import batch_judge

                answers = await batch_judge(settings, run, plans, tally, console)
                await run.run(plans, answers)
                if fallbacks := getattr(answers, "fallbacks", None):
                    console.print(
                        f"[yellow]{len(fallbacks)} calls asked online[/] instead: "
                        f"{escape(fallbacks[0])}",
                        highlight=False,
                    )
            else:
                await run.run(plans)
        finally:
            await publish.close()
            closing = getattr(online, "close", None)
            if closing is not None:
                await closing()
        shown(tally)
    console.print(f"done in {time.monotonic() - started:.1f} s", highlight=False)


def _report(tally: Tally) -> None:
    console.print(
        f"scored {tally.traces} traces and {tally.closes} closes: {tally.published} scores "
        f"published, {tally.judge_calls} judge calls, {tally.prompt_tokens:,} prompt and "
        f"{tally.completion_tokens:,} completion tokens, ${tally.usd:,.4f}"
        + (f" ({tally.unpriced} calls on a model with no price)" if tally.unpriced else ""),
        highlight=False,
    )
    if tally.errors:
        console.print(
            f"[yellow]{tally.errors} error scores[/]: the judge did not answer them (a run "
            "again asks for them, and only them)",
            highlight=False,
        )
    if tally.stopped:
        console.print(f"[yellow]stopped early[/]: {tally.stopped}", highlight=False)
