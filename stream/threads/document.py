"""What thread rules read at a close: the thread document."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from .turns import Turn


class Thread(Protocol):
    """What the document is made of (``state.ThreadState`` is one)."""

    @property
    def thread_id(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def project_name(self) -> str: ...
    @property
    def closes(self) -> int: ...
    @property
    def turns(self) -> Sequence[Turn]: ...
    @property
    def dropped_turns(self) -> int: ...
    @property
    def truncated_bytes(self) -> int: ...


def thread_document(state: Thread) -> dict[str, Any]:
    """What thread rules' variable paths are evaluated against at a close.

    ``messages`` is the conversation in order, as Opik hands it to thread rules (a list of
    user/assistant messages); ``turns`` are the chronological turns (metrics, feedback);
    ``exchange_count`` the user messages the assistant answered (however many events carried
    them), ``turn_count`` the turn events.
    """
    messages = [m for t in state.turns for m in t.messages]
    return {
        "thread_id": state.thread_id,
        "kind": state.kind,
        "project_name": state.project_name,
        "close_seq": state.closes,
        "messages": messages,
        "turns": [
            {
                key: value
                for key, value in (
                    ("seq", t.seq),
                    ("timestamp", t.event_time.isoformat()),
                    ("metrics", t.metrics),
                    ("feedback", t.feedback),
                )
                if value is not None
            }
            for t in state.turns
            if t.metrics is not None or t.feedback is not None
        ],
        "turn_count": len(state.turns),
        "exchange_count": exchanges(messages),
        "dropped_turns": state.dropped_turns,
        "truncated_bytes": state.truncated_bytes,
    }


def exchanges(messages: list[dict[str, Any]]) -> int:
    """Exchanges in a conversation: user messages answered by the assistant (a run of user
    messages answered once is one exchange; system and tool messages do not count)."""
    count, asked = 0, False
    for message in messages:
        role = message.get("role")
        if role == "user":
            asked = True
        elif role == "assistant" and asked:
            count, asked = count + 1, False
    return count
