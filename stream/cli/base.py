"""What every ``scorer`` command shares: the Typer apps, the consoles, how a command stops
on a mistake, and where the scores are."""

from __future__ import annotations

import sys
import typing

import typer
from rich.console import Console
from rich.markup import escape

from ..errors import ConfigError, RuleFileError, ScorerError
from ..settings import Settings

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


def scores_broker(
    settings: Settings, what: str = "the broker the scores are on"
) -> tuple[str, typing.Any]:
    """The broker the scores are on (``what``: another use of it), as `scorer replay` finds it,
    and its security (None: plaintext); a ``ConfigError`` when there is none, or when several
    embedded brokers run and there is no terminal to ask which."""
    from ..kafka.broker import broker_in_use

    ask = ask_which_broker if sys.stdin.isatty() else None
    found = broker_in_use(settings.kafka_bootstrap_servers, settings.kafka, ask)
    if found is None:
        raise ConfigError(
            [f"set KAFKA_BOOTSTRAP_SERVERS to {what} (or start "
             "`scorer worker`: its embedded broker is found by itself)"]
        )  # fmt: skip
    return found


def ask_which_broker(candidates: list[str]) -> str:
    """The embedded broker a terminal's user picks of those running."""
    console.print("several embedded brokers run on this host:", highlight=False)
    for shown, bootstrap in enumerate(candidates, 1):
        console.print(f"  {shown}. {bootstrap}", highlight=False)
    while True:
        number: int = typer.prompt(f"which one (1-{len(candidates)})", type=int)
        if 1 <= number <= len(candidates):
            return candidates[number - 1]
        console.print(f"{number} is not one of 1 to {len(candidates)}", highlight=False)


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
