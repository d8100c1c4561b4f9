"""Faust's worker, as a scorer worker runs it: quiet, and ending with our errors.

What this overrides of faust-streaming 0.15 and mode-streaming 0.7 (``faust/worker.py``,
``mode/worker.py``, ``mode/services.py``):

- ``Worker.spinner``: set to None. Faust's terminal spinner sets the root logger to DEBUG
  when the level is WARN or above (``Worker._setup_spinner_handler``), so every library
  builds a debug record per message (aiokafka logs one per send).
- ``Worker.on_setup_root_logger``: Faust's, then the libraries' per-call lines (httpx under
  the openai SDK: "HTTP Request: POST ...") kept out above debug, whatever mode's
  ``setup_logging`` reset.
- ``Service.start`` and ``Worker.execute_from_commandline``: a start-up failure we can name
  (a ``ScorerError``, or an ``OSError`` that ``start_failure`` names) ends the command as ours
  do (one line, exit 2, through ``stream.cli.main``) instead of as mode's: a logged
  traceback, then exit 1. A failure that is not ours to name keeps its traceback.
"""

from __future__ import annotations

import logging
from typing import Any, NoReturn

import faust

from ...errors import ScorerError

# libraries that log a line per judge call at INFO (httpx under the openai SDK: "HTTP
# Request: POST ...", httpx2 under the openai SDK 3): heard at the worker's debug level only
PER_CALL_LOGGERS = ("httpx", "httpx2", "httpcore", "httpcore2")


def quiet_per_call_loggers(level: int) -> None:
    """Keep a library's line per call out of a worker's log above debug (``level``): at the
    default level they were most of what it logged (a line per judge call)."""
    if not level or level > logging.DEBUG:
        for name in PER_CALL_LOGGERS:
            logging.getLogger(name).setLevel(logging.WARNING)


class MendedWorker(faust.Worker):
    """Faust's worker without its spinner, its per-call log lines, or mode's way of ending
    on a start-up failure of ours."""

    start_error: ScorerError | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.spinner = None

    def on_setup_root_logger(self, logger: logging.Logger, level: int) -> None:
        super().on_setup_root_logger(logger, level)
        quiet_per_call_loggers(level)

    def start_failure(self, exc: OSError) -> ScorerError | None:
        """The error of ours an ``OSError`` of the start is, if it is one (none here)."""
        return None

    async def start(self) -> None:
        try:
            await super().start()
        except ScorerError as exc:
            self.start_error = exc
        except OSError as exc:
            self.start_error = self.start_failure(exc)
            if self.start_error is None:
                raise

    def execute_from_commandline(self) -> NoReturn:
        try:
            super().execute_from_commandline()
        except SystemExit:  # mode stops the worker, then exits; what stopped it is ours
            if self.start_error is not None:
                raise self.start_error from None
            raise
