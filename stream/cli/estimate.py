"""``scorer estimate``: the bill before the run (design record 40)."""

from __future__ import annotations

import asyncio
import re
import time
import typing
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated

import orjson
import typer
from pydantic import TypeAdapter, ValidationError

from ..errors import ConfigError
from ..ruleset.loader import deployment_rules
from ..settings import Settings
from .base import app, console, scores_broker
from .explain import file_options

if typing.TYPE_CHECKING:
    from ..estimate import Estimate

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}


def duration_s(text: str) -> float:
    """Seconds in ``text``: ``90s``, ``30m``, ``24h``, ``7d``, ``2w`` (or ISO 8601, ``P7D``)."""
    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", text)
    if found:
        return float(found[1]) * UNITS[found[2]]
    try:
        return TypeAdapter(timedelta).validate_python(text).total_seconds()
    except ValidationError:
        raise ConfigError(
            [f"{text!r} is not a duration: write e.g. 90s, 30m, 24h, 7d or 2w"]
        ) from None


def moment_ms(text: str) -> int:
    """Milliseconds since the epoch of an ISO 8601 time (no zone: UTC)."""
    try:
        moment = TypeAdapter(datetime).validate_python(text)
    except ValidationError:
        raise ConfigError(
            [f"{text!r} is not a time: write e.g. 2026-12-01T00:00:00Z or 2026-12-01"]
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def time_range(since: str | None, start: str | None, end: str | None) -> tuple[int, int | None]:
    """[start, end) in ms from ``--since`` or ``--from``/``--to`` (end None: up to the moment
    the range is read)."""
    if since is not None and (start is not None or end is not None):
        raise ConfigError(["give either --since or --from/--to, not both"])
    if since is not None:
        return int((time.time() - duration_s(since)) * 1000), None
    if start is None:
        raise ConfigError(["give the range: --since DURATION, or --from TIME [--to TIME]"])
    return moment_ms(start), moment_ms(end) if end is not None else None


def topic_messages(
    settings: Settings, topic: str, start_ms: int, end_ms: int | None
) -> list[bytes]:
    """The values of ``topic``'s records in [``start_ms``, ``end_ms``), on the broker
    `scorer replay` uses."""
    from ..kafka.io import check_cluster
    from ..kafka.time_range import read_range

    bootstrap, security = scores_broker(settings)

    async def read() -> list[bytes]:
        await check_cluster(bootstrap, security)
        return [r.value async for r in read_range(bootstrap, topic, start_ms, end_ms, security)]

    return asyncio.run(read())


def reported_prompt_tokens(settings: Settings, since: str) -> dict[str, int]:
    """Score id -> the prompt tokens its judge call reported, for the judged (not cached)
    scores of the last ``since`` on the scores topic."""
    from ..kafka.io import check_cluster
    from ..kafka.time_range import json_records

    start_ms = int((time.time() - duration_s(since)) * 1000)
    bootstrap, security = scores_broker(settings)

    async def read() -> dict[str, int]:
        await check_cluster(bootstrap, security)
        found: dict[str, int] = {}
        topic = settings.scores_topic
        async for event in json_records(bootstrap, topic, start_ms, None, security):
            usage = event.get("usage")
            tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
            if tokens and event.get("criterion") is None:
                found[str(event.get("score_id"))] = int(tokens)
        return found

    return asyncio.run(read())


@app.command()
def estimate(
    file: Annotated[
        Path | None,
        typer.Argument(
            exists=True, dir_okay=False, help="Traces and session events (JSONL or an Opik export)"
        ),
    ] = None,
    topic: Annotated[
        str | None, typer.Option(help="Plan the records of this topic instead (with --since)")
    ] = None,
    since: Annotated[
        str | None, typer.Option(help="With --topic: the records of the last DURATION (7d, 24h)")
    ] = None,
    start: Annotated[str | None, typer.Option("--from", help="With --topic: from TIME")] = None,
    end: Annotated[str | None, typer.Option("--to", help="With --topic: up to TIME")] = None,
    sample: Annotated[int | None, typer.Option(help="Plan only the first N records", min=1)] = None,
    traces_per_day: Annotated[
        float | None, typer.Option(help="Also price a day at this many traces")
    ] = None,
    calibrate: Annotated[
        str | None,
        typer.Option(
            help="Correct the token count by the usage the scores of the last DURATION "
            "reported for these traces (needs the broker the scores are on)"
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object")] = False,
) -> None:
    """What the loaded rule set would cost on a sample of traces, before it runs: per rule and
    in total, the judge calls, prompt and completion tokens and US dollars (online and in
    batch mode), per 1 000 traces and per day. Plans the sample as the worker would (filters,
    sampling, fan-out bounds, thread closes, cache hits within the sample); calls no judge."""
    from ..estimate import MIN_CALIBRATION_CALLS, calibrated, estimate_messages
    from ..kafka.io import message_value, read_traces

    settings = Settings()
    if (file is None) == (topic is None):
        raise ConfigError(["give a FILE, or --topic T with --since DURATION or --from/--to"])
    if file is not None and (since or start or end):
        raise ConfigError(["--since, --from and --to read a --topic; a FILE is read whole"])
    if file is not None:
        messages = [message_value(item) for item in read_traces(file)]
        read_as = None
    else:
        assert topic is not None
        messages = topic_messages(settings, topic, *time_range(since, start, end))
        read_as = topic
    if sample is not None:
        messages = messages[:sample]
    ruleset, options = deployment_rules(settings), file_options(settings)
    caching = bool(settings.judge_cache_ttl_s and settings.judge_cache_max_entries)
    found = estimate_messages(
        ruleset, messages, options, settings.judge_cost, topic=read_as, caching=caching
    )
    if calibrate is not None:
        counter = calibrated(found.basis, reported_prompt_tokens(settings, calibrate))
        if counter is None:
            found.notes.append(
                f"not calibrated: fewer than {MIN_CALIBRATION_CALLS} of the sample's judged "
                f"traces have a score with usage in the last {calibrate}"
            )
        else:
            found = estimate_messages(
                ruleset, messages, options, settings.judge_cost, counter, read_as, caching
            )
    if as_json:
        typer.echo(orjson.dumps(found.as_dict(traces_per_day)).decode())
        return
    print_estimate(found, traces_per_day)


def _usd(value: float | None) -> str:
    return "no price" if value is None else f"${value:,.4f}"


def print_estimate(found: Estimate, traces_per_day: float | None) -> None:
    """The estimate as a table, then the totals per 1 000 traces and per day."""
    from rich.table import Table

    head = f"{found.traces} traces, {found.closes} thread and pair closes"
    console.print(
        f"[bold]sample[/]: {head}" + (f", {found.invalid} invalid" if found.invalid else "")
    )
    table = Table(show_edge=False, pad_edge=False)
    for column in (
        "rule",
        "scope",
        "model",
        "calls",
        "cache hits",
        "prompt tok",
        "compl. tok",
        "online",
        "batch",
    ):
        table.add_column(
            column, justify="left" if column in ("rule", "scope", "model") else "right"
        )
    for rule in found.rules:
        table.add_row(
            f"{rule.pack}/{rule.rule_id}",
            rule.scope,
            rule.model,
            f"{rule.judge_calls}"
            + (f" (+{rule.tool_rounds_max} max)" if rule.tool_rounds_max else ""),
            str(rule.cache_hits),
            f"{rule.prompt_tokens:,}",
            f"{rule.completion_tokens:,}",
            _usd(rule.usd),
            _usd(rule.usd_batch),
        )
    total = found.total
    table.add_row(
        "[bold]total[/]", "", "", str(total.judge_calls), str(total.cache_hits),
        f"{total.prompt_tokens:,}", f"{total.completion_tokens:,}", _usd(total.usd), _usd(total.usd_batch),
    )  # fmt: skip
    console.print(table)
    if found.traces:
        per = found.per_thousand
        console.print(
            f"per 1 000 traces: {per(total.judge_calls):,.0f} judge calls, "
            f"{per(total.prompt_tokens):,.0f} prompt tokens, {_usd(per(total.usd))} online, "
            f"{_usd(per(total.usd_batch))} in batch mode",
            highlight=False,
        )
        if traces_per_day is not None:
            day = traces_per_day / 1000
            online, batch = per(total.usd), per(total.usd_batch)
            console.print(
                f"per day at {traces_per_day:,.0f} traces: {per(total.judge_calls) * day:,.0f} "  # type: ignore[operator]
                f"judge calls, {_usd(None if online is None else online * day)} online, "
                f"{_usd(None if batch is None else batch * day)} in batch mode",
                highlight=False,
            )
    console.print(f"prompt tokens: {found.tokens_counted_by}", highlight=False)
    console.print(f"completion tokens: assumed {found.completion_assumed}", highlight=False)
    for note in found.notes:
        console.print(f"note: {note}", highlight=False)
    if not found.rules:
        console.print("no rule would call the judge on this sample")
