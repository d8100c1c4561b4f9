"""``scorer canary record``: a rule's reference items made from a file of its inputs, each
judged once (the verdict cache bypassed) and written with the verdict recorded (design record
47). The verdict cache cannot give them: it keeps a hash of each prompt, never the input."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer

from ..errors import ConfigError
from ..settings import Settings
from .base import app, console

canary_app = typer.Typer(help="The judge canary's reference items.", no_args_is_help=True)
app.add_typer(canary_app, name="canary")


@canary_app.command("record")
def record(
    rule_id: Annotated[str, typer.Argument(metavar="RULE", help="The rule's id")],
    inputs: Annotated[
        Path,
        typer.Argument(
            exists=True,
            dir_okay=False,
            help="JSONL (or an Opik export): what the rule reads, one a line (a trace for a "
            "trace rule; a thread or pair document for a thread or comparison rule)",
        ),
    ],
    out: Annotated[
        Path, typer.Option("--out", "-o", help="The items file to write (JSONL)")
    ] = Path("canary.jsonl"),
    limit: Annotated[int, typer.Option(help="At most this many inputs", min=1)] = 200,
    force: Annotated[bool, typer.Option("--force", help="Overwrite --out")] = False,
) -> None:
    """Judge each input once with RULE's judge (the configured one: OPENAI_BASE_URL,
    SCORER_JUDGE_MODEL; the cache bypassed) and write it with its verdict as a canary item;
    name the file in the rule's `canary: {items: ...}`. Inputs the judge could not answer are
    left out and counted."""
    from ..canary import judge_inputs
    from ..judge.decision_client import judge_client
    from ..kafka.io import read_traces
    from ..observer import Observer
    from ..ruleset.kinds import CriteriaRule, LLMJudgeRule
    from ..ruleset.loader import load_rules, pack_selection

    settings = Settings()
    if out.exists() and not force:
        raise ConfigError([f"--out {out} exists: pass --force to overwrite it"])
    if not settings.judge_configured:
        raise ConfigError(["no judge: set OPENAI_BASE_URL (and OPENAI_API_KEY) to record verdicts"])
    packs, _ = pack_selection(settings.rules_dir, settings.packs or ["all"])
    ruleset = load_rules(settings.rules_dir, packs)
    every = [*ruleset.rules, *(off.rule for off in ruleset.disabled)]
    rule = next((r for r in every if r.id == rule_id), None)
    if not isinstance(rule, LLMJudgeRule | CriteriaRule):
        what = "is not a judged rule" if rule is not None else "names no rule of the packs found"
        raise ConfigError([f"RULE {rule_id!r} {what} (a canary re-judges a judge's verdicts)"])
    documents: list[tuple[str, dict[str, Any], None]] = []
    for number, found in enumerate(read_traces(inputs)[:limit], 1):
        if not isinstance(found, dict):
            raise ConfigError([f"{inputs} line {number}: not a JSON object"])
        item_id = found.get("id") if isinstance(found.get("id"), str) else f"line {number}"
        documents.append((str(item_id), found, None))
    model = rule.judge.model or settings.judge_model
    console.print(f"judging {len(documents)} inputs with {rule.pack}/{rule.id} ({model})")
    client = judge_client(settings.judge_config(), Observer())

    async def judge_all() -> list[Any]:
        try:
            return await judge_inputs(
                rule,
                documents,
                client,
                default_model=settings.judge_model,
                max_prompt_tokens=settings.judge_max_prompt_tokens,
                redaction=settings.redaction_policy(),
            )
        finally:
            await client.close()

    judged = asyncio.run(judge_all())
    at = datetime.now(UTC).isoformat()
    written, missed = 0, []
    with out.open("wb") as items:
        for (item_id, document, _), verdict in zip(documents, judged, strict=True):
            if verdict.status != "ok":
                missed.append(f"{item_id}: {verdict.status} ({verdict.reason})")
                continue
            recorded = {
                "value": verdict.value,
                "raw_value": verdict.raw_value,
                "label": verdict.label,
                "model": verdict.answered_by or model,
                "at": at,
            }
            items.write(orjson.dumps({"id": item_id, "input": document, "recorded": recorded}))
            items.write(b"\n")
            written += 1
    for line in missed:
        console.print(f"[yellow]left out[/] {line}", highlight=False, soft_wrap=True)
    console.print(f"wrote {written} items to {out} ({len(missed)} left out)", highlight=False)
    console.print(
        "[yellow]the items hold the inputs as given, unmasked[/]: choose inputs without personal "
        "data, or review the file, before it goes into the rules folder",
        highlight=False,
    )
    raise typer.Exit(0 if written else 1)
