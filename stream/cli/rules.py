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
        Path | None, typer.Argument(help="Rules directory (default: the configured one)")
    ] = None,
    pack: Annotated[list[str] | None, typer.Option(help="Only these packs")] = None,
) -> None:
    """Validate rule files; print each file, field and problem. Exit 1 if any is wrong.

    Without DIR: the configured rules, with SCORER_DISABLED_RULES as the worker applies it.
    A rule switched off is validated all the same and listed as switched off."""
    from ..ruleset.loader import check_rules, unknown_rule_ids

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
