"""Per-thread state: folding turns in, deciding when a thread closes, and what rules see.

Pure functions over plain models; the thread agent (a Faust table per partition) calls them.

- Folding is deterministic: turns are kept in (seq, event time, key) order whatever order
  they arrive in, and a duplicate (same key, e.g. the same ``seq`` twice) keeps the copy whose
  canonical JSON sorts first, so redelivery or reordering cannot change the result.
- State is bounded: past ``max_turns`` or ``max_bytes`` the oldest turns are dropped and
  counted, and the thread document says how many were dropped.
- A thread closes on an explicit end, or after ``gap`` of inactivity measured two ways: in
  wall-clock time since its last event arrived (live: an idle thread closes even when its
  partition receives nothing else), and in event time against the partition's watermark
  (the latest event time seen), so a replay of history closes threads where they would have
  closed live, although the replay itself runs in minutes.
- A turn after a close reopens the thread; its turns are kept, so the next close judges the
  whole conversation, under a new close sequence (part of the score id).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field

ThreadKind = Literal["conversation", "session"]
CloseReason = Literal["end", "inactivity", "inactivity_event_time"]


class Turn(BaseModel):
    """One step of a thread: a trace's user/assistant exchange or a coaching-session turn."""

    model_config = ConfigDict(frozen=True)

    key: str = Field(description="Dedupe key: the trace id, or seq-<n> for a session turn")
    seq: int | None = None
    event_time: datetime
    messages: list[dict[str, Any]] = Field(default_factory=list)
    metrics: dict[str, Any] | None = None
    feedback: str | None = None

    def canonical(self) -> bytes:
        return orjson.dumps(self.model_dump(mode="json"), option=orjson.OPT_SORT_KEYS)

    @property
    def size(self) -> int:
        return len(self.canonical())

    def order(self) -> tuple[int, datetime, str]:
        return (self.seq if self.seq is not None else -1, self.event_time, self.key)


class ThreadLimits(BaseModel):
    model_config = ConfigDict(frozen=True)

    max_turns: int = Field(default=200, ge=1)
    max_bytes: int = Field(default=256_000, ge=1024)


class ThreadState(BaseModel):
    """What the table holds for one thread."""

    thread_id: str
    kind: ThreadKind
    project_name: str = "default"
    turns: list[Turn] = Field(default_factory=list)
    size: int = 0
    dropped_turns: int = 0
    closes: int = 0
    is_open: bool = True
    ended: bool = False
    last_event_time: datetime | None = None
    last_seen_wall: float = 0.0  # epoch seconds: survives a restart, unlike a monotonic clock


def new_thread(thread_id: str, kind: ThreadKind, project_name: str) -> ThreadState:
    return ThreadState(thread_id=thread_id, kind=kind, project_name=project_name)


def _touch(state: ThreadState, event_time: datetime, wall_now: float) -> None:
    if state.last_event_time is None or event_time > state.last_event_time:
        state.last_event_time = event_time
    state.last_seen_wall = max(state.last_seen_wall, wall_now)
    if not state.is_open:
        state.is_open = True  # a turn after a close reopens the thread


def fold_turn(
    state: ThreadState, turn: Turn, *, wall_now: float, limits: ThreadLimits
) -> ThreadState:
    """``state`` with ``turn`` folded in (a new object; the input is not changed)."""
    state = state.model_copy(deep=True)
    existing = next((i for i, t in enumerate(state.turns) if t.key == turn.key), None)
    if existing is not None:
        kept = state.turns[existing]
        if turn.canonical() < kept.canonical():
            state.size += turn.size - kept.size
            state.turns[existing] = turn
    else:
        position = len(state.turns)
        while position > 0 and state.turns[position - 1].order() > turn.order():
            position -= 1
        state.turns.insert(position, turn)
        state.size += turn.size
    while len(state.turns) > limits.max_turns or (
        state.size > limits.max_bytes and len(state.turns) > 1
    ):
        dropped = state.turns.pop(0)
        state.size -= dropped.size
        state.dropped_turns += 1
    _touch(state, turn.event_time, wall_now)
    return state


def mark_end(state: ThreadState, *, event_time: datetime, wall_now: float) -> ThreadState:
    """An explicit end (a session ``end`` event, a trace marking the conversation finished)."""
    state = state.model_copy(deep=True)
    _touch(state, event_time, wall_now)
    state.ended = True
    return state


def close_reason(
    state: ThreadState, *, wall_now: float, watermark: datetime | None, gap_s: float
) -> CloseReason | None:
    """Why ``state`` should close now, or None. Closed threads never close again until reopened."""
    if not state.is_open:
        return None
    if state.ended:
        return "end"
    if wall_now - state.last_seen_wall >= gap_s:
        return "inactivity"
    if (
        watermark is not None
        and state.last_event_time is not None
        and (watermark - state.last_event_time).total_seconds() >= gap_s
    ):
        return "inactivity_event_time"
    return None


def close(state: ThreadState) -> ThreadState:
    """The closed state; its ``closes`` is the close sequence the scores of this close carry."""
    state = state.model_copy(deep=True)
    state.is_open = False
    state.ended = False
    state.closes += 1
    return state


def thread_document(state: ThreadState) -> dict[str, Any]:
    """What thread rules' variable paths are evaluated against at a close.

    ``messages`` is the conversation in order, as Opik hands it to thread rules (a list of
    user/assistant messages); ``turns`` are the chronological turns (metrics, feedback).
    """
    return {
        "thread_id": state.thread_id,
        "kind": state.kind,
        "project_name": state.project_name,
        "close_seq": state.closes,
        "messages": [m for t in state.turns for m in t.messages],
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
        "dropped_turns": state.dropped_turns,
    }
