"""``scorer explain``: what every rule would decide for a file, and why."""

from __future__ import annotations

import sys
import typing
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from ..ruleset.loader import deployment_rules
from ..settings import Settings
from .base import app, console

GROUPED_AFTER = 3  # switched-off rules of one reason listed one by one, up to this many

if typing.TYPE_CHECKING:
    from ..explain import Explained, ExplainedClose, FileOptions, Invalid


def file_options(settings: Settings) -> FileOptions:
    """What the deployment's settings say that planning a file as the worker would needs."""
    from ..explain import FileOptions
    from ..threads.state import ThreadLimits

    return FileOptions(
        default_model=settings.judge_model,
        traces_topic=settings.traces_topic,
        sessions_topic=settings.sessions_topic,
        max_prompt_tokens=settings.judge_max_prompt_tokens,
        inactivity_gap_s=settings.thread_inactivity_gap_s,
        limits=ThreadLimits(
            max_turns=settings.thread_max_turns, max_bytes=settings.thread_max_bytes
        ),
        turn_max_bytes=settings.turn_max_bytes,
        redaction=settings.redaction_policy(),
    )


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

    from ..explain import ExplainedClose, ExplainedTrace, Invalid, explain_file
    from ..kafka.io import message_value, read_traces

    settings = Settings()
    ruleset = deployment_rules(settings)
    options = file_options(settings)
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
    from ..explain import DISABLED, WOULD_JUDGE

    # rules switched off for one reason, more than a few (the default pack selection leaves
    # dozens out): one line for them all, not one each on every trace (--json lists each)
    off: dict[str, list[Explained]] = {}
    for e in explained:
        if e.outcome == DISABLED:
            off.setdefault(e.detail or "", []).append(e)
    grouped = {detail for detail, rules in off.items() if len(rules) > GROUPED_AFTER}
    call: dict[str, Any] | None = None
    for e in explained:
        if e.outcome == DISABLED and (e.detail or "") in grouped:
            continue
        if e.call is not None and e.call != call:  # a tool call's rules follow the trace's
            call = e.call
            console.print(
                f"  [bold]tool call {call['position'] + 1}[/] {escape(str(call['tool']))} "
                f"({escape(call['id'])})",
                highlight=False,
                soft_wrap=True,
            )
        indent = "    " if e.call is not None else "  "
        value = f" {e.value:.3g}" if e.value is not None else ""
        colour = {
            "scored": "green",
            WOULD_JUDGE: "cyan",
            "filtered": "dim",
            DISABLED: "dim",
        }.get(e.outcome, "yellow")
        console.print(
            f"{indent}[{colour}]{e.outcome:<11}[/] {e.pack}/{e.rule_id}{value}: "
            f"{escape(e.detail or '')}",
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
    for detail in sorted(grouped):
        packs = sorted({e.pack for e in off[detail]})
        console.print(
            f"  [dim]{DISABLED:<11}[/] {len(off[detail])} rules of {', '.join(packs)}: "
            f"{escape(detail)}",
            highlight=False,
            soft_wrap=True,
        )
    if not judge_configured and any(e.outcome == WOULD_JUDGE for e in explained):
        console.print("  (no judge is configured: the worker would publish these as skipped)")
