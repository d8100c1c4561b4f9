"""``scorer demo``, ``worker``, ``replay`` and ``agreement``."""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import Progress

from ..settings import Settings
from .base import app, console, scores_broker


@app.command()
def demo(
    traces: Annotated[
        Path | None, typer.Option(help="Traces to produce (default: bundled samples)")
    ] = None,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for every score")] = 120.0,
    keep_running: Annotated[
        bool,
        typer.Option(
            "--keep-running",
            help="Keep the broker (port 9092), the worker and its metrics endpoint (port 6066) "
            "up after the summary, until Ctrl-C",
        ),
    ] = False,
) -> None:
    """Start the embedded broker (unless KAFKA_BOOTSTRAP_SERVERS is set) and a worker, produce
    the sample traces and print a summary of the scores that come back."""
    from ..demo import run_demo

    raise typer.Exit(run_demo(Settings(), traces, timeout, console, keep_running))


GEN0_THRESHOLD = 20_000  # Python's default is 700


def settle_collector() -> None:
    """The cyclic garbage collector as a long-lived worker wants it.

    - What the worker imported lives as long as it does (about 140,000 objects), so it is
      frozen out of the collector's full passes, which walked all of it twice every 20,000
      traces (9 us a trace).
    - A collection of the youngest generation runs every ``GEN0_THRESHOLD`` net new container
      objects, not every 700. At 700 a trace batch in flight is still alive at most
      collections: it is walked, moved to the older generations and walked again there
      before it dies. That cost 2.9 us a trace of the bench's 40,000 (257 against 141 ms of
      collections, design record 54). The garbage waiting meanwhile stays small: on traces
      of 100 KB the worker's peak RSS was 158 MiB against 150 MiB at 700."""
    gc.collect()  # the imports' cyclic garbage freed, not frozen with the rest
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GEN0_THRESHOLD, older, oldest)


@app.command()
def worker(
    loglevel: Annotated[str, typer.Option(help="crit, error, warn, info or debug")] = "info",
) -> None:
    """Run a long-lived worker (embedded broker if KAFKA_BOOTSTRAP_SERVERS is not set)."""
    from ..worker import run_worker

    settle_collector()
    logging.basicConfig(
        level=loglevel.upper().replace("WARN", "WARNING").replace("CRIT", "CRITICAL")
    )
    run_worker(Settings(), loglevel=loglevel)


@app.command()
def replay(
    file: Annotated[
        Path, typer.Argument(exists=True, dir_okay=False, help="JSONL or an Opik trace export")
    ],
    topic: Annotated[str | None, typer.Option(help="Topic (default: the traces topic)")] = None,
) -> None:
    """Produce traces from a file, for backfills and demos (into KAFKA_BOOTSTRAP_SERVERS, else
    the embedded broker a running `scorer worker` or `scorer demo --keep-running` started; with
    several running, asked which on a terminal)."""
    from ..kafka.io import check_cluster, produce, read_traces

    settings = Settings()
    bootstrap, security = scores_broker(settings, "the broker to replay into")
    if not settings.kafka_bootstrap_servers:
        console.print(f"replaying into the embedded broker on {bootstrap}")
    asyncio.run(check_cluster(bootstrap, security))
    items = read_traces(file)
    target = topic or settings.traces_topic
    with Progress(console=console) as progress:
        task = progress.add_task(f"replaying into {target}", total=len(items))
        n = asyncio.run(produce(bootstrap, target, items, lambda: progress.advance(task), security))
    console.print(f"produced {n} traces to {target}")


@app.command()
def agreement(
    rule: Annotated[str | None, typer.Option(help="Only this rule")] = None,
    since: Annotated[
        float | None, typer.Option(help="Only pairs joined in the last SECONDS (default: all)")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON document")] = False,
    idle: Annotated[
        float, typer.Option(help="Stop reading a topic after SECONDS without a record")
    ] = 2.0,
) -> None:
    """How far each rule's judge agrees with human labels, each shadow with the labels and
    the primary, each cascade's curve over confidence cuts and what its tiers cost, and each
    comparison's B over A: counts and 95 % intervals, from the agreement and scores topics;
    and each judge canary's last round, from the canary topic (KAFKA_BOOTSTRAP_SERVERS, else
    the running embedded broker)."""
    import orjson

    from ..agreement.canary_report import canary_lines, canary_summary
    from ..agreement.cascade_spend import cascade_spend
    from ..agreement.position import audits_of
    from ..agreement.report import build, pairs_of, preferences_of
    from ..canary import canary_topic, rounds_of
    from ..kafka.io import check_cluster, read_all

    settings = Settings()
    bootstrap, security = scores_broker(settings)

    async def read() -> list[list[bytes]]:
        await check_cluster(bootstrap, security)
        topics = (settings.agreement_topic, settings.scores_topic, canary_topic(settings.app_id))
        return list(
            await asyncio.gather(*(read_all(bootstrap, topic, security, idle) for topic in topics))
        )

    joined, scores, canary = asyncio.run(read())
    after = datetime.fromtimestamp(time.time() - since, UTC) if since else None
    spend = cascade_spend(scores, after, rule, settings.judge_cost)
    report = build(pairs_of(joined, after, rule), preferences_of(scores, after, rule), spend)
    rounds = rounds_of(canary, after, rule)
    audits = audits_of(scores, after, rule)  # the judge's position preference
    if as_json:
        document = {**report.as_dict(), "canary": canary_summary(rounds)}
        document["position"] = [audit.as_dict() for audit in audits]
        typer.echo(orjson.dumps(document, option=orjson.OPT_INDENT_2).decode())
        return
    for line in [*report.lines(), *(a.line() for a in audits), *canary_lines(rounds)]:
        console.print(line, highlight=False, markup=False)
