"""Events on the internal thread-events topic, and the coaching-session input event.

Traces are keyed by trace id (or anything), coaching-session events by whatever their
producer chose; the turns of one thread must meet in one partition, in one agent. So the
trace agent and the session agent repartition them onto ``<app id>-thread-events``, keyed by
``<kind>/<thread id>``, the same key the thread table uses (a coaching session's by its session
id: ``placement_key``). Four event types travel there:

- ``turn``: a turn to fold in (``end``: the trace also marked the conversation finished);
- ``end``: a coaching session's end event;
- ``tick``: the wall clock, sent by each worker to the partitions it owns, so idle threads
  close when their partition receives nothing else;
- ``published``: the scores of a close are on the scores topic (its pending copy can go);
- ``progress``: how far each source (topic:partition) a worker reads has been read, in
  event time and in Kafka time (``stream/sources/log.py``), sent by that worker to every partition on
  its timer, so a partition a source rarely feeds learns it too.

``arrival`` is the Kafka timestamp of the source message, not the time the event was
forwarded, so redelivery or a slow judge cannot make a thread look active later than it was.
``spread`` says that the source message was not keyed by the thread id (or that its key is
not known): the thread's other turns may come through any partition of the source topic.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..sources.log import Position, Positions
from .state import ThreadKind
from .turns import Turn

EventType = Literal["turn", "end", "tick", "published", "progress"]


class ThreadEvent(BaseModel):
    type: EventType
    kind: ThreadKind = "conversation"
    thread_id: str = ""
    project_name: str = "default"
    arrival: float = Field(default=0.0, description="Kafka time of the source (tick: its clock)")
    source: str = Field(default="", description="Source topic:partition (event-time progress)")
    spread: bool = Field(
        default=False,
        description="Its source message was not keyed by the thread id (or its key is unknown)",
    )
    event_time: datetime | None = None
    turn: Turn | None = None
    end: bool = False
    end_key: str | None = None
    rules: list[str] = Field(default_factory=list)
    close_seq: int = 0
    positions: dict[str, tuple[float, float]] = Field(
        default_factory=dict, description="progress: source -> (event time, read up to)"
    )
    arrived: dict[str, float] = Field(
        default_factory=dict,
        description="progress: source -> Kafka time of the last message read of it",
    )

    @property
    def key(self) -> bytes:
        return table_key(self.kind, self.thread_id)

    @property
    def placement(self) -> bytes:
        """The key that places it on the thread-events topic (``placement_key``)."""
        return placement_key(self.kind, self.thread_id)

    def to_bytes(self) -> bytes:
        # model_dump_json's bytes, without its decoding to text and our encoding back
        return self.__pydantic_serializer__.to_json(self, exclude_defaults=True)

    @classmethod
    def from_bytes(cls, raw: bytes) -> ThreadEvent:
        return cls.model_validate_json(raw)


def table_key(kind: str, thread_id: str) -> bytes:
    return f"{kind}/{thread_id}".encode()


def placement_key(kind: str, thread_id: str) -> bytes:
    """The record key that places a thread's events on the thread-events topic: a coaching
    session's is its session id, the key its producer is asked to give its events, so that a
    sessions topic with as many partitions holds each session in its thread's partition and
    its events are folded there without the hop (design record 33); any other thread's is its
    table key."""
    return thread_id.encode() if kind == "session" else table_key(kind, thread_id)


def tick(now: float) -> bytes:
    return ThreadEvent(type="tick", arrival=now).to_bytes()


def progress(now: float, positions: dict[str, Position]) -> bytes:
    """How far each source is read (``SourceLog.positions``: with the Kafka time of the last
    message read of each, when it says so)."""
    arrived = positions.arrived if isinstance(positions, Positions) else {}
    return ThreadEvent(
        type="progress", arrival=now, positions=dict(positions), arrived=arrived
    ).to_bytes()


def published(kind: ThreadKind, thread_id: str, close_seq: int) -> ThreadEvent:
    return ThreadEvent(type="published", kind=kind, thread_id=thread_id, close_seq=close_seq)


# a turn's content nested deeper than this is refused: the turn is written as JSON again on
# its way to the thread (orjson stops at 254 levels, pydantic's serialiser sooner)
MAX_CONTENT_DEPTH = 64


def nested_deeper_than(value: Any, levels: int) -> bool:
    """Whether ``value`` holds objects or arrays more than ``levels`` deep (no recursion:
    any depth orjson reads can be asked)."""
    if not isinstance(value, dict | list):
        return False
    stack = [(value, 0)]  # (an object or array, how many objects or arrays hold it)
    while stack:
        item, depth = stack.pop()
        if depth >= levels:
            return True
        inner = item.values() if isinstance(item, dict) else item
        stack.extend((child, depth + 1) for child in inner if isinstance(child, dict | list))
    return False


class SessionEvent(BaseModel):
    """A coaching-session event on the ``coaching-sessions`` topic."""

    model_config = ConfigDict(extra="allow")

    session_id: str = Field(min_length=1)
    type: Literal["turn", "end"]
    seq: int | None = Field(default=None, ge=0)
    timestamp: datetime | None = None
    project_name: str = "default"
    metrics: dict[str, Any] | None = None
    feedback: str | None = None
    user: Any = None
    assistant: Any = None

    @model_validator(mode="after")
    def _turn_fields(self) -> SessionEvent:
        if self.type == "turn":
            if self.seq is None:
                raise ValueError("a turn needs seq (its position in the session)")
            if self.timestamp is None:
                raise ValueError("a turn needs a timestamp")
            if (self.metrics, self.feedback, self.user, self.assistant) == (None,) * 4:
                raise ValueError("a turn needs metrics and feedback, or user/assistant messages")
        for name in ("metrics", "user", "assistant"):
            if nested_deeper_than(getattr(self, name), MAX_CONTENT_DEPTH):
                raise ValueError(f"{name} is nested deeper than {MAX_CONTENT_DEPTH} levels")
        return self


def parse_session(raw: bytes | None) -> SessionEvent:
    """Decode and validate one coaching-session message (``ValueError`` when it is not one)."""
    if raw is None:
        raise ValueError("empty message (no value)")
    document = orjson.loads(raw)
    if not isinstance(document, dict):
        raise ValueError(f"a session event must be a JSON object, got {type(document).__name__}")
    return SessionEvent.model_validate(document)
