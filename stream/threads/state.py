"""What the thread table holds for one thread, and what a close of it carries: plain models.

The thread agent keeps one ``ThreadState`` per thread in a changelog-backed table; ``fold.py``
folds turns and ends into it and ``close.py`` closes it, both in place.

- State is bounded (``ThreadLimits``): past ``max_turns`` or ``max_bytes`` the oldest turns are
  dropped and counted, and the thread document (and so the score event) says how many were
  dropped.
- A thread whose turns may come through any partition of their source topic (traces keyed by
  trace id: a *spread* thread) holds its turns and ends (``HeldEvent``) until no earlier one
  can still come through another partition.
- A close is kept as pending (``PendingClose``, with the document the rules judge) until its
  scores are published; the processor hands each close on to be scored as a ``ThreadClose``.
- ``IndexEntry`` is what the processor's index needs of a stored thread, read without
  validating its turns.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field

from ..models import ThreadInfo
from .turns import Turn

ThreadKind = Literal["conversation", "session", "pair"]
CloseReason = Literal["end", "inactivity", "inactivity_event_time"]


class ThreadLimits(BaseModel):
    model_config = ConfigDict(frozen=True)

    max_turns: int = Field(default=200, ge=1)
    max_bytes: int = Field(default=256_000, ge=1024)


class PendingClose(BaseModel):
    """A close whose scores are not known to be published yet."""

    close_seq: int
    reason: CloseReason
    closed_at: float = Field(description="Epoch seconds of the clock that closed it")
    document: dict[str, Any]
    rules: list[str] = Field(default_factory=list)
    opened: int = Field(default=0, description="The thread's ``opened`` mark")


@dataclass
class ThreadClose:
    """One close of one thread, as the thread processor hands it to be scored."""

    thread_id: str
    kind: ThreadKind
    project_name: str
    pending: PendingClose
    topic: str | None = None

    @property
    def target(self) -> str:
        """What this close's score ids hash: the thread, when it started, and the close."""
        opened = f"@{self.pending.opened}" if self.pending.opened else ""
        return f"{self.thread_id}{opened}#{self.pending.close_seq}"

    @property
    def info(self) -> ThreadInfo | None:
        """What a thread-scope score says of its close (None for a pair: its scores say
        which traces were compared in their details)."""
        if self.kind == "pair":
            return None
        document = self.pending.document
        return ThreadInfo(
            kind=self.kind,
            close_seq=self.pending.close_seq,
            close_reason=self.pending.reason,
            turn_count=document["turn_count"],
            dropped_turns=document["dropped_turns"],
            truncated_bytes=document.get("truncated_bytes", 0),
        )


class HeldEvent(BaseModel):
    """A turn or an end of a spread thread, read while an earlier turn may still come through
    a partition read less far. Kept, with what folding it needs, until none can."""

    model_config = ConfigDict(frozen=True)

    source: str = Field(description="The source topic:partition it came through")
    at: float = Field(description="Its event time (epoch s), never ahead of its arrival")
    arrival: float = Field(description="Kafka time of its source message")
    floor: float = Field(description="The thread's event time when it arrived")
    event_time: datetime
    turn: Turn | None = None
    end_key: str | None = Field(default=None, description="Set when it ends the thread")
    rules: list[str] = Field(default_factory=list)

    @property
    def name(self) -> str:
        return self.turn.key if self.turn is not None else self.end_key or ""

    def order(self) -> tuple[float, str, str]:
        return (self.at, self.name, self.source)

    @property
    def size(self) -> int:
        return self.turn.size if self.turn is not None else 0


class ThreadState(BaseModel):
    """What the table holds for one thread."""

    thread_id: str
    kind: ThreadKind
    project_name: str = "default"
    partition: int = 0
    turns: list[Turn] = Field(default_factory=list)
    size: int = 0
    dropped_turns: int = 0
    truncated_bytes: int = 0
    closes: int = 0
    published: int = 0
    is_open: bool = True
    ended: bool = False
    end_keys: list[str] = Field(default_factory=list)
    rules: list[str] = Field(
        default_factory=list, description="Conversation rules whose filter matched a trace"
    )
    last_event_time: datetime | None = None
    last_arrival: float = Field(default=0.0, description="Kafka time of the last new event")
    activity: float = Field(
        default=0.0, description="The thread's event-time watermark (epoch s) at its last new event"
    )
    sources: dict[str, float] = Field(
        default_factory=dict,
        description="Source topic:partition of its events, with the latest event time from each",
    )
    pending: list[PendingClose] = Field(default_factory=list)
    spread: bool = Field(
        default=False,
        description="Its turns may come through any partition of their source topic (not keyed "
        "by thread id): it waits for every partition's event time",
    )
    held: list[HeldEvent] = Field(
        default_factory=list,
        description="A spread thread's turns and ends not folded yet, in the order they arrived",
    )
    ignored: list[str] = Field(
        default_factory=list, description="A pair's traces ignored while it waited, and why"
    )
    opened: int = Field(
        default=0,
        description="Kafka time (ms) of the event that started the thread: its closes' score "
        "ids hash it, so a thread forgotten after the retention and started again never "
        "reuses an id (0: a thread from before it was recorded)",
    )

    def to_bytes(self) -> bytes:
        # model_dump_json's bytes, without its decoding to text and our encoding back
        return self.__pydantic_serializer__.to_json(self, exclude_defaults=True)

    @classmethod
    def from_bytes(cls, raw: bytes) -> ThreadState:
        return cls.model_validate_json(raw)


@dataclass(slots=True)
class IndexEntry:
    """What the processor's index needs of a stored thread, read without validating all of
    it (its turns): a rebuild after a recovery reads every thread in the table. Never
    changed once made (not frozen: a frozen dataclass is five times as slow to make, and one
    is made for every thread stored)."""

    kind: ThreadKind
    partition: int
    is_open: bool
    last_arrival: float
    activity: float
    sources: dict[str, float]
    pending: tuple[int, ...]  # the close seqs of its pending closes
    spread: bool = False
    held: tuple[tuple[str, float, float], ...] = ()  # its held events' (source, at, arrival)
    active: bool = False  # it has folded an event (its activity mark means something)

    @classmethod
    def of(cls, state: ThreadState) -> IndexEntry:
        return cls(
            state.kind,
            state.partition,
            state.is_open,
            state.last_arrival,
            state.activity,
            state.sources,
            tuple(p.close_seq for p in state.pending) if state.pending else (),
            state.spread,
            tuple((h.source, h.at, h.arrival) for h in state.held) if state.held else (),
            state.last_event_time is not None,
        )

    @classmethod
    def from_bytes(cls, raw: bytes) -> IndexEntry:
        data = orjson.loads(raw)  # ThreadState.to_bytes leaves defaults out: the same here
        return cls(
            data["kind"],
            data.get("partition", 0),
            data.get("is_open", True),
            data.get("last_arrival", 0.0),
            data.get("activity", 0.0),
            data.get("sources", {}),
            tuple(p["close_seq"] for p in data.get("pending", ())),
            data.get("spread", False),
            tuple((h["source"], h["at"], h["arrival"]) for h in data.get("held", ())),
            data.get("last_event_time") is not None,
        )

    @property
    def waiting(self) -> bool:
        """Open, or holding events that will reopen it."""
        return self.is_open or bool(self.held)

    @property
    def released_from(self) -> float | None:
        """The event time from which one of its held events can be folded (each source's
        first held event goes first), or None."""
        firsts: dict[str, float] = {}
        for source, at, _ in self.held:
            firsts.setdefault(source, at)
        return min(firsts.values(), default=None)

    @property
    def last_held_arrival(self) -> float:
        return max((arrival for _, _, arrival in self.held), default=0.0)


def new_thread(
    thread_id: str, kind: ThreadKind, project_name: str, *, partition: int = 0, opened: int = 0
) -> ThreadState:
    return ThreadState(
        thread_id=thread_id,
        kind=kind,
        project_name=project_name,
        partition=partition,
        opened=opened,
    )
