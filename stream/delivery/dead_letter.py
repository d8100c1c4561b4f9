"""The dead-letter topic: what could not be used or scored, with its bytes and the error.

One builder for every case: a message that is not a valid event, a message an engine bug met,
and a thread close an engine bug met. The original bytes stay as they were, so a replay can
score them once fixed; headers say where they came from and what went wrong.
"""

from __future__ import annotations

import logging

import orjson
from faust.types import Message, TopicT
from pydantic import ValidationError

from ..observer import Observer
from .publisher import Send

log = logging.getLogger(__name__)

MAX_ERROR_BYTES = 4000
# a dead letter must be sendable: the producer takes requests up to 1 MB (Faust's
# producer_max_request_size); a larger original keeps its first bytes, and headers say so
MAX_VALUE_BYTES = 900_000


def describe_invalid(exc: Exception, what: str = "trace event") -> tuple[str, str]:
    """(reason label from a closed set, human-readable error) for a message we cannot use."""
    if isinstance(exc, orjson.JSONDecodeError):
        return "invalid_json", f"not valid JSON: {exc}"
    if isinstance(exc, ValidationError):
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(message)'}: {e['msg'].removeprefix('Value error, ')}"
            for e in exc.errors()
        )
        return "invalid_event", f"not a valid {what}: {problems}"
    return "invalid_event", f"not a valid {what}: {exc}"


class DeadLetters:
    """Builds dead-letter messages for ``dlq`` and reports each one."""

    def __init__(self, dlq: TopicT, observer: Observer | None = None) -> None:
        self.dlq = dlq
        self.observer = observer or Observer()

    def invalid(self, message: Message, exc: Exception, what: str = "trace event") -> list[Send]:
        """``message`` is not a valid ``what``: not JSON, or not the event's schema."""
        reason, error = describe_invalid(exc, what)
        return self._message(message, reason, error)

    def engine_failure(
        self, message: Message, exc: Exception, doing: str = "scoring"
    ) -> list[Send]:
        """A bug met this message while ``doing`` it. Dead-letter it with the error rather than
        leave it unacked: an unacked message would hold back every later commit of its
        partition, and fail again after each restart."""
        log.error(
            "%s failed for %s[%s]@%s",
            doing,
            message.topic,
            message.partition,
            message.offset,
            exc_info=exc,
        )
        error = f"{doing} failed: {type(exc).__name__}: {exc}"
        return self._message(message, "engine_error", error)

    def kept(
        self,
        key: str,
        value: bytes,
        source_topic: str,
        doing: str,
        exc: Exception,
        where: dict[str, str] | None = None,
    ) -> list[Send]:
        """A bug met something the worker built itself (a thread close, a trace assembled
        from spans) while ``doing`` it: keep it (``value``), with the error."""
        error = f"{doing} failed: {type(exc).__name__}: {exc}"
        return self._send(key.encode(), value, source_topic, "engine_error", error, where or {})

    def _message(self, message: Message, reason: str, error: str) -> list[Send]:
        where = {
            "scorer.source.partition": str(message.partition),
            "scorer.source.offset": str(message.offset),
        }
        log.warning(
            "dead-lettered %s[%s]@%s: %s", message.topic, message.partition, message.offset, error
        )
        return self._send(message.key, message.value or b"", message.topic, reason, error, where)

    def _send(
        self,
        key: bytes | None,
        value: bytes,
        source_topic: str,
        reason: str,
        error: str,
        where: dict[str, str],
    ) -> list[Send]:
        if len(value) > MAX_VALUE_BYTES:
            error += (
                f" (the message is {len(value)} bytes, more than a dead letter may carry: "
                f"its first {MAX_VALUE_BYTES} are kept)"
            )
            where = {**where, "scorer.value.bytes": str(len(value)), "scorer.value.cut": "true"}
            value = value[:MAX_VALUE_BYTES]
        headers = {
            "scorer.error": error.encode()[:MAX_ERROR_BYTES],
            "scorer.error.reason": reason.encode(),
            "scorer.source.topic": source_topic.encode(),
        }
        headers.update((name, text.encode()) for name, text in where.items())
        self.observer.on_dead_letter(source_topic, reason)
        return [(self.dlq, key, value, headers)]
