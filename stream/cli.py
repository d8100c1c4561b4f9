"""The ``scorer`` command line: demo, worker, replay, explain, rules check, sink."""

from __future__ import annotations

import asyncio
import logging
import sys
import time
import typing
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError
from pydantic_settings import SettingsError
from rich.console import Console
from rich.markup import escape
from rich.progress import Progress

from .config_errors import config_error
from .errors import ConfigError, RuleFileError, ScorerError
from .ruleset.loader import deployment_rules
from .settings import Settings

if typing.TYPE_CHECKING:
    from .explain import Explained, ExplainedClose, Invalid

app = typer.Typer(help="Kafka-native streaming scorer for LLM traces.", no_args_is_help=True)
rules_app = typer.Typer(help="Work with rule packs.", no_args_is_help=True)
app.add_typer(rules_app, name="rules")
sink_app = typer.Typer(
    help="Post scores to where traces are browsed (Langfuse, Opik).", no_args_is_help=True
)
app.add_typer(sink_app, name="sink")
# Rich assumes 80 columns when output is not a terminal (CI logs, pipes): rule ids are longer.
console = Console(width=None if sys.stdout.isatty() else 120)
# what stops a command: one line per problem, never wrapped, on stderr
error_console = Console(stderr=True, soft_wrap=True, highlight=False)


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
    from .demo import run_demo

    raise typer.Exit(run_demo(Settings(), traces, timeout, console, keep_running))


@app.command()
def worker(
    loglevel: Annotated[str, typer.Option(help="crit, error, warn, info or debug")] = "info",
) -> None:
    """Run a long-lived worker (embedded broker if KAFKA_BOOTSTRAP_SERVERS is not set)."""
    from .worker import run_worker

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
    the embedded broker a running `scorer worker` or `scorer demo --keep-running` started)."""
    from .kafka.broker import broker_in_use
    from .kafka.io import check_cluster, produce, read_traces

    settings = Settings()
    found = broker_in_use(settings.kafka_bootstrap_servers, settings.kafka)
    if found is None:
        console.print(
            "[red]set KAFKA_BOOTSTRAP_SERVERS to the broker to replay into[/] (or start "
            "`scorer worker`: its embedded broker is found by itself)"
        )
        raise typer.Exit(2)
    bootstrap, security = found
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
    the primary, and each comparison's B over A: counts and 95 % intervals, from the
    agreement and scores topics (KAFKA_BOOTSTRAP_SERVERS, else the running embedded broker)."""
    from .agreement.report import build, pairs_of, preferences_of, report_json
    from .kafka.io import check_cluster, read_all

    settings = Settings()
    bootstrap, security = scores_broker(settings)

    async def read() -> tuple[list[bytes], list[bytes]]:
        await check_cluster(bootstrap, security)
        topics = (settings.agreement_topic, settings.scores_topic)
        pairs, scores = await asyncio.gather(
            *(read_all(bootstrap, topic, security, idle) for topic in topics)
        )
        return pairs, scores

    joined, scores = asyncio.run(read())
    after = datetime.fromtimestamp(time.time() - since, UTC) if since else None
    report = build(pairs_of(joined, after, rule), preferences_of(scores, after, rule))
    if as_json:
        typer.echo(report_json(report))
        return
    for line in report.lines():
        console.print(line, highlight=False, markup=False)


@app.command()
def explain(
    file: Annotated[
        Path,
        typer.Argument(
            exists=True,
            dir_okay=False,
            help="Traces and coaching-session events: a trace (JSON), JSONL, or an Opik export",
        ),
    ],
    trace_id: Annotated[
        str | None,
        typer.Option("--trace-id", help="Only this trace of the file, and its thread or pair"),
    ] = None,
    thread_id: Annotated[
        str | None,
        typer.Option(
            "--thread-id", help="Only this thread, session or comparison key, and its traces"
        ),
    ] = None,
    topic: Annotated[
        str | None,
        typer.Option(
            help="As read from (default: the traces topic; the sessions topic: all session events)"
        ),
    ] = None,
    prompt: Annotated[
        bool, typer.Option("--prompt", help="Print the prompts it would send")
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="One JSON object per trace, thread close or pair")
    ] = False,
) -> None:
    """Print what every rule would decide for the traces and session events in FILE, and why:
    for each trace, every trace rule's decision (the filter condition that failed, sampled out,
    the missing path, a check's result, or the judge call it would make); then each thread,
    session and comparison pair they form, closed where the worker would close it (at the end
    of the file at the latest), with every thread or comparison rule's decision. Offline: no
    broker, no judge call; the worker's own engine and rules."""
    import orjson

    from .explain import ExplainedClose, ExplainedTrace, FileOptions, Invalid, explain_file
    from .kafka.io import message_value, read_traces
    from .threads.state import ThreadLimits

    settings = Settings()
    ruleset = deployment_rules(settings)
    options = FileOptions(
        default_model=settings.judge_model,
        traces_topic=settings.traces_topic,
        sessions_topic=settings.sessions_topic,
        max_prompt_tokens=settings.judge_max_prompt_tokens,
        inactivity_gap_s=settings.thread_inactivity_gap_s,
        limits=ThreadLimits(
            max_turns=settings.thread_max_turns, max_bytes=settings.thread_max_bytes
        ),
        turn_max_bytes=settings.turn_max_bytes,
    )
    records = explain_file(ruleset, [message_value(i) for i in read_traces(file)], options, topic)
    if trace_id is not None or thread_id is not None:
        # the trace and its thread or pair; the thread and its traces (both: either)
        closes = [r for r in records if isinstance(r, ExplainedClose)]
        threads = [c for c in closes if c.thread_id == thread_id]
        traces = {t for c in threads for t in (*c.traces, *c.variants.values())} | {trace_id}
        records = [
            r
            for r in records
            if (isinstance(r, ExplainedTrace) and r.trace_id in traces)
            or (
                isinstance(r, ExplainedClose)
                and (r.thread_id == thread_id or r.involves(trace_id or ""))
            )
        ]
    if not any(isinstance(r, ExplainedTrace | ExplainedClose) for r in records):
        for invalid in records:
            if isinstance(invalid, Invalid):
                _print_invalid(invalid)
        asked = [
            *([f"no trace found with id {trace_id!r}"] if trace_id is not None else []),
            *([f"no thread, session or pair found with id {thread_id!r}"] if thread_id else []),
        ]
        console.print(f"[red]{'; '.join(asked) or 'no trace or session event found'}[/]")
        raise typer.Exit(1)
    for record in records:
        if as_json:
            sys.stdout.write(orjson.dumps(record.as_dict()).decode() + "\n")
        elif isinstance(record, Invalid):
            _print_invalid(record)
        elif isinstance(record, ExplainedTrace):
            console.print(f"[bold]trace {escape(record.trace_id)}[/]", highlight=False)
            _print_rules(record.rules, prompt, settings.judge_configured)
        elif isinstance(record, ExplainedClose):
            _print_close(record)
            _print_rules(record.rules, prompt, settings.judge_configured)
        else:
            console.print(f"[yellow]note[/]: {escape(record.text)}", highlight=False)


def _print_invalid(record: Invalid) -> None:
    console.print(
        f"[red]invalid {record.what}[/] (the worker dead-letters it): {escape(record.error)}"
    )


def _print_close(close: ExplainedClose) -> None:
    """A thread's or a pair's close: what it is, what it holds and how it closes."""
    if close.scope == "pair":
        held = ", ".join(f"{v} (trace {t})" for v, t in close.variants.items())
        head = f"pair {close.thread_id} ({close.project_name}): variant {held}"
    else:
        turns = f"{close.turn_count} turn" + ("" if close.turn_count == 1 else "s")
        head = f"{close.kind} {close.thread_id} ({close.project_name}), {turns}"
    again = f", close {close.close_seq}" if close.close_seq > 1 else ""
    console.print(
        f"[bold]{escape(head)}{again}[/]: {escape(close.how)}", highlight=False, soft_wrap=True
    )
    if close.traces:
        console.print(
            f"  traces: {', '.join(close.traces)}", highlight=False, markup=False, soft_wrap=True
        )
    if close.matched:
        matched = ", ".join(close.matched)
        console.print(
            f"  rules its traces matched: {matched}", highlight=False, markup=False, soft_wrap=True
        )
    if close.ignored:
        ignored = ", ".join(close.ignored)
        console.print(
            f"  ignored (a variant it had): {ignored}",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )


def _print_rules(explained: list[Explained], prompt: bool, judge_configured: bool) -> None:
    """Each rule's decision, with the prompt it would send under ``--prompt``."""
    from .explain import DISABLED, WOULD_JUDGE

    for e in explained:
        value = f" {e.value:.3g}" if e.value is not None else ""
        colour = {
            "scored": "green",
            WOULD_JUDGE: "cyan",
            "filtered": "dim",
            DISABLED: "dim",
        }.get(e.outcome, "yellow")
        console.print(
            f"  [{colour}]{e.outcome:<11}[/] {e.pack}/{e.rule_id}{value}: {escape(e.detail or '')}",
            highlight=False,
            soft_wrap=True,
        )
        if prompt and e.prompt is not None:
            if e.system is not None:
                console.print(
                    f"--- system prompt ---\n{e.system}",
                    highlight=False,
                    markup=False,
                    soft_wrap=True,
                )
            console.print(
                f"--- prompt ---\n{e.prompt}\n---", highlight=False, markup=False, soft_wrap=True
            )
    if not judge_configured and any(e.outcome == WOULD_JUDGE for e in explained):
        console.print("  (no judge is configured: the worker would publish these as skipped)")


@rules_app.command("check")
def rules_check(
    directory: Annotated[
        Path | None, typer.Argument(help="Rules directory (default: the configured one)")
    ] = None,
    pack: Annotated[list[str] | None, typer.Option(help="Only these packs")] = None,
) -> None:
    """Validate rule files; print each file, field and problem. Exit 1 if any is wrong.

    Without DIR: the configured rules, with SCORER_DISABLED_RULES as the worker applies it.
    A rule switched off is validated all the same and listed as switched off."""
    from .ruleset.loader import check_rules, unknown_rule_ids

    if directory is None:
        settings = Settings()
        rules_dir, disabled = settings.rules_dir, settings.disabled_rules
    else:
        rules_dir, disabled = directory, []
    ruleset, errors = check_rules(rules_dir, pack, disabled)
    off = {d.rule.id: d.by for d in ruleset.disabled}
    every = [*ruleset.rules, *(d.rule for d in ruleset.disabled)]
    for rule in sorted(every, key=lambda r: (r.pack, r.id)):
        note = f" [yellow]switched off ({off[rule.id]})[/]" if rule.id in off else ""
        console.print(
            f"[green]ok[/]  {rule.pack}/{rule.id} v{rule.version} ({rule.scope}, {rule.engine})"
            + note
        )
    for error in errors:
        for problem in error.problems:
            console.print(f"[red]error[/] {error.path}: {problem}", highlight=False, soft_wrap=True)
    # --pack checks some packs: an id of another one is not unknown
    unknown = unknown_rule_ids(ruleset, disabled) if pack is None else None
    if unknown:
        console.print(f"[red]error[/] SCORER_DISABLED_RULES {unknown}", highlight=False)
    if not ruleset.rules and ruleset.disabled:
        console.print("[red]error[/] every rule is switched off: a worker would score nothing")
    switched = f" ({len(off)} switched off)" if off else ""
    console.print(f"{len(every)} rules ok{switched}, {len(errors)} files with errors")
    raise typer.Exit(1 if errors or unknown or not ruleset.rules else 0)


IdleOption = Annotated[
    float | None,
    typer.Option("--idle", help="Stop after this many seconds without a score (a backfill)"),
]
LoglevelOption = Annotated[str, typer.Option(help="crit, error, warn, info or debug")]


@sink_app.command("langfuse")
def sink_langfuse(idle: IdleOption = None, loglevel: LoglevelOption = "info") -> None:
    """Post every ok score to Langfuse (LANGFUSE_HOST, LANGFUSE_PUBLIC_KEY,
    LANGFUSE_SECRET_KEY): a trace score on its trace, a thread score on the session of that
    id. Reads the scores topic as consumer group <SCORER_APP_ID>-sink-langfuse; commits
    only what Langfuse accepted."""
    from .sinks import LangfuseSinkSettings, langfuse_sink

    sink = LangfuseSinkSettings()  # type: ignore[call-arg]  # the keys come from the environment
    _run_sink(lambda **where: langfuse_sink(sink, **where), idle, loglevel)


@sink_app.command("opik")
def sink_opik(idle: IdleOption = None, loglevel: LoglevelOption = "info") -> None:
    """Post every ok score to Opik as a feedback score (OPIK_URL_OVERRIDE, default a local
    Opik; OPIK_API_KEY and OPIK_WORKSPACE for Comet's cloud): a trace score on its trace, a
    thread score on the thread of that id. Reads the scores topic as consumer group
    <SCORER_APP_ID>-sink-opik; commits only what Opik accepted."""
    from .sinks import OpikSinkSettings, opik_sink

    sink = OpikSinkSettings()
    _run_sink(lambda **where: opik_sink(sink, **where), idle, loglevel)


def _run_sink(build: typing.Callable[..., typing.Any], idle: float | None, loglevel: str) -> None:
    """The broker as `scorer replay` finds it, then the sink until Ctrl-C, SIGTERM or idle."""
    import signal

    from .kafka.io import check_cluster

    logging.basicConfig(
        level=loglevel.upper().replace("WARN", "WARNING").replace("CRIT", "CRITICAL"),
        format="%(asctime)s %(levelname)s %(message)s",
    )
    settings = Settings()
    bootstrap, security = scores_broker(settings)
    sink = build(
        bootstrap=bootstrap, topic=settings.scores_topic, app_id=settings.app_id, security=security
    )

    async def run() -> None:
        await check_cluster(bootstrap, security)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        await sink.run(stop, idle)

    asyncio.run(run())


def scores_broker(settings: Settings) -> tuple[str, typing.Any]:
    """The broker the scores are on, as `scorer replay` finds it, and its security (None:
    plaintext); a ``ConfigError`` when there is none."""
    from .kafka.broker import broker_in_use

    found = broker_in_use(settings.kafka_bootstrap_servers, settings.kafka)
    if found is None:
        raise ConfigError(
            ["set KAFKA_BOOTSTRAP_SERVERS to the broker the scores are on (or start "
             "`scorer worker`: its embedded broker is found by itself)"]
        )  # fmt: skip
    return found


def main() -> None:
    """The ``scorer`` command. A mistake in the settings or the rules, or a broker that
    cannot be used, ends in one line per problem and exit code 2, not a traceback."""
    try:
        app()
    except (ValidationError, SettingsError) as exc:
        error = config_error(exc)
        if error is None:  # not about the settings: a bug, whose traceback is wanted
            raise
        stop(error)
    except ScorerError as exc:
        stop(exc)


def stop(exc: ScorerError) -> typing.NoReturn:
    """Print what stopped the command, one problem a line, and exit 2."""
    if isinstance(exc, ConfigError):
        problems = exc.problems
    elif isinstance(exc, RuleFileError):
        problems = [f"{exc.path}: {problem}" for problem in exc.problems]
    else:
        problems = [str(exc)]
    for problem in problems:
        error_console.print(f"[red]error:[/] {escape(' '.join(problem.split()))}")
    raise SystemExit(2) from None


if __name__ == "__main__":
    main()
