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


def scores_broker(settings: Settings) -> tuple[str, typing.Any]:
    """The broker the scores are on, as `scorer replay` finds it, and its security (None:
    plaintext); a ``ConfigError`` when there is none."""
    from ..kafka.broker import broker_in_use

    found = broker_in_use(settings.kafka_bootstrap_servers, settings.kafka)
    if found is None:
        raise ConfigError(
            ["set KAFKA_BOOTSTRAP_SERVERS to the broker the scores are on (or start "
             "`scorer worker`: its embedded broker is found by itself)"]
        )  # fmt: skip
    return found


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
