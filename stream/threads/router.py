"""How traces and coaching-session events become thread events, as the rule set asks.

Traces are keyed by trace id (or anything), coaching-session events by whatever their
producer chose; the turns of one thread must meet in one partition. The router builds the
event that the trace and session agents send to the thread-events topic, keyed by
``<kind>/<thread id>``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from ..models import Trace
from ..ruleset.paths import compile_path
from ..ruleset.schema import RuleSet
from .events import SessionEvent, ThreadEvent
from .state import Turn

# a turn's text past this is cut in the middle (SCORER_TURN_MAX_BYTES): one turn can neither
# fill its thread's byte cap nor make a message the producer may not send
DEFAULT_TURN_MAX_BYTES = 64_000


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _messages(user: Any, assistant: Any) -> list[dict[str, Any]]:
    pair = (("user", user), ("assistant", assistant))
    return [{"role": role, "content": content} for role, content in pair if content is not None]


class ThreadRouter:
    """Turns traces and session events into thread events, as the rule set asks."""

    def __init__(self, ruleset: RuleSet, turn_max_bytes: int = DEFAULT_TURN_MAX_BYTES) -> None:
        self.turn_max_bytes = turn_max_bytes
        self.conversation_rules = ruleset.thread_rules("conversation")
        self.session_rules = ruleset.thread_rules("session")
        spec = ruleset.thread_spec("conversation")
        self._user = compile_path(spec.user) if spec and spec.user else None
        self._assistant = compile_path(spec.assistant) if spec and spec.assistant else None
        self._end = compile_path(spec.end) if spec and spec.end else None

    @property
    def wants_conversations(self) -> bool:
        return bool(self.conversation_rules)

    def from_trace(
        self, trace: Trace, document: Any, topic: str | None, arrival: float, source: str = ""
    ) -> ThreadEvent | None:
        """The turn a trace adds to its conversation, or None (no thread id, or no rule wants it)."""
        if trace.thread_id is None or not self.conversation_rules:
            return None
        rules = [r.id for r in self.conversation_rules if r.filter.matches(trace, topic)]
        if not rules:
            return None
        user = self._user.search(document) if self._user else None
        assistant = self._assistant.search(document) if self._assistant else None
        moment = trace.start_time or trace.end_time or datetime.fromtimestamp(arrival, UTC)
        turn = Turn(key=trace.id, event_time=_aware(moment), messages=_messages(user, assistant))
        return ThreadEvent(
            type="turn",
            kind="conversation",
            thread_id=trace.thread_id,
            project_name=trace.project_name,
            arrival=arrival,
            source=source,
            turn=turn.capped(self.turn_max_bytes),
            end=bool(self._end and self._end.search(document)),
            rules=rules,
        )

    def from_session(self, event: SessionEvent, arrival: float, source: str = "") -> ThreadEvent:
        moment = _aware(event.timestamp or datetime.fromtimestamp(arrival, UTC))
        common: dict[str, Any] = {
            "kind": "session",
            "thread_id": event.session_id,
            "project_name": event.project_name,
            "arrival": arrival,
            "source": source,
        }
        if event.type == "end":
            end_key = f"end-{event.seq}" if event.seq is not None else f"end-{moment.isoformat()}"
            return ThreadEvent(type="end", event_time=moment, end_key=end_key, **common)
        turn = Turn(
            key=f"seq-{event.seq}",
            seq=event.seq,
            event_time=moment,
            messages=_messages(event.user, event.assistant),
            metrics=event.metrics,
            feedback=event.feedback,
        )
        return ThreadEvent(type="turn", turn=turn.capped(self.turn_max_bytes), **common)
