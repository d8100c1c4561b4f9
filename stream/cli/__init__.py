"""The ``scorer`` command line: demo, worker, replay, agreement, explain, rules check, sink,
canary record.

One module per group of commands; each registers on the Typer apps of ``base``."""

from __future__ import annotations

from pydantic import ValidationError
from pydantic_settings import SettingsError

from ..config_errors import config_error
from ..errors import ScorerError
from . import backfill, canary, commands, estimate, explain, rules, sinks  # noqa: F401  (they register their commands)
from .base import app, console, scores_broker, stop

__all__ = ["app", "console", "main", "scores_broker", "stop"]


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
