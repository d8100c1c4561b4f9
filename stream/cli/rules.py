"""``scorer rules check``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..settings import Settings
from .base import console, rules_app


@rules_app.command("check")
def rules_check(
    directory: Annotated[
        Path | None,
        typer.Argument(help="A rules directory (default: the configured ones, SCORER_RULES_DIR)"),
    ] = None,
    pack: Annotated[list[str] | None, typer.Option(help="Only these packs")] = None,
) -> None:
    """Validate rule files; print each file, field and problem. Exit 1 if any is wrong.

    Without DIR: every pack of the configured folders (and the shipped packs), with
    SCORER_PACKS and SCORER_DISABLED_RULES as the worker applies them. A rule switched off, or
    not loaded, is validated all the same and listed as such."""
    from ..ruleset.loader import (
        NOT_LOADED_BY_DEFAULT,
        check_rules,
        pack_selection,
        unknown_rule_ids,
    )

    loaded: list[str] | None = None  # the packs SCORER_PACKS lists (None: every one)
    if directory is None:
        settings = Settings()
        rules_dir, disabled = settings.rules_dir, settings.disabled_rules
        loaded, checks_only = pack_selection(rules_dir, settings.packs)
        ruleset, errors = check_rules(rules_dir, pack, disabled, checks_only)
    else:
        disabled = []
        ruleset, errors = check_rules(directory, pack, disabled)
    off = {d.rule.id: d.by for d in ruleset.disabled}
    every = [*ruleset.rules, *(d.rule for d in ruleset.disabled)]
    left_out = 0
    for rule in sorted(every, key=lambda r: (r.pack, r.id)):
        note = ""
        if off.get(rule.id) == NOT_LOADED_BY_DEFAULT:
            note = " [yellow]not loaded by default[/] (SCORER_PACKS)"
        elif rule.id in off:
            note = f" [yellow]switched off ({off[rule.id]})[/]"
        elif loaded is not None and rule.pack not in loaded:
            note = " [yellow]not loaded[/] (SCORER_PACKS does not list its pack)"
            left_out += 1
        console.print(
            f"[green]ok[/]  {rule.pack}/{rule.id} v{rule.version} ({rule.scope}, {rule.engine})"
            + note,
            highlight=False,
            soft_wrap=True,
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
    by_default = sum(1 for by in off.values() if by == NOT_LOADED_BY_DEFAULT)
    if by_default:
        console.print(
            f"{by_default} judge rules of the shipped packs are not loaded by default: "
            'SCORER_PACKS=\'["all"]\' loads every pack, \'["conversation", "mlflow"]\' '
            "those two",
            highlight=False,
            soft_wrap=True,
        )
    if left_out:
        console.print(f"{left_out} rules of packs SCORER_PACKS does not list are not loaded")
    switched_off = len(off) - by_default
    switched = f" ({switched_off} switched off)" if switched_off else ""
    console.print(f"{len(every)} rules ok{switched}, {len(errors)} files with errors")
    raise typer.Exit(1 if errors or unknown or not ruleset.rules else 0)
