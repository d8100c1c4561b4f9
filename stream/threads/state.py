"""Per-thread state: folding turns in, deciding when a thread closes, and what rules see.

Plain functions over plain models; the thread agent keeps one ``ThreadState`` per thread in a
changelog-backed table and calls them. They change the state in place and say whether it
changed, so the agent writes the table (and its changelog) only when something happened.

- Folding is deterministic: turns are kept in (seq, event time, key) order whatever order
  they arrive in, and a duplicate (same key, e.g. the same ``seq`` twice) keeps the copy whose
  canonical JSON sorts first, so redelivery or reordering cannot change the result. A
  duplicate is not activity: it neither reopens a closed thread nor delays a close.
- State is bounded: past ``max_turns`` or ``max_bytes`` the oldest turns are dropped and
  counted, and the thread document (and so the score event) says how many were dropped.
- A thread closes on an explicit end, or after ``gap`` of inactivity measured two ways:
  in wall-clock time since its last new event arrived in Kafka (live: an idle thread closes
  even when its partition receives nothing else), and in event time: the thread's
  watermark (how far the sources of its events have got) has moved ``gap`` past its
  activity mark (its last event time, or its watermark then if that was later). A replay of history therefore closes threads where
  they would have closed live, although the replay itself runs in minutes; and a producer
  whose clock lags cannot make its own threads close at once.
- A thread whose turns may come through any partition of their source topic (traces keyed by
  trace id: a *spread* thread) holds its turns and ends (``HeldEvent``) until no earlier one
  can still come through another partition, and folds them then, so that its turns are
  folded, and its pauses measured, in event-time order.
- A turn after a close reopens the thread; its turns are kept, so the next close judges the
  whole conversation, under a new close sequence (part of the score id).
- A close is kept as pending (with the document the rules judge) until its scores are
  published, so a worker that dies in between scores it again after recovery, identically.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field

from ..models import ThreadInfo
from .document import thread_document
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


# a field of the state is set only when its value changes: each setting goes through
# pydantic's __setattr__, the dearest part of a fold after the JSON
def _touch(state: ThreadState, event_time: datetime, arrival: float, watermark: float) -> None:
    if state.last_event_time is None or event_time > state.last_event_time:
        state.last_event_time = event_time
    if arrival > state.last_arrival:
        state.last_arrival = arrival
    if watermark > state.activity:
        state.activity = watermark


def fold_turn(
    state: ThreadState,
    turn: Turn,
    *,
    arrival: float,
    watermark: float | None = None,
    limits: ThreadLimits,
) -> bool:
    """Fold ``turn`` into ``state`` (in place). False when it was a duplicate that changed nothing.

    ``arrival``: when the turn's source message reached Kafka (epoch s); ``watermark``: the
    thread's event-time watermark after this turn (defaults to ``arrival``).
    """
    existing = next((i for i, t in enumerate(state.turns) if t.key == turn.key), None)
    if existing is not None:
        new, kept = turn.canonical(), state.turns[existing].canonical()
        if new >= kept:
            return False
        state.size += len(new) - len(kept)
        state.turns[existing] = turn
        return True  # the same turn, settled deterministically: not new activity
    position = len(state.turns)
    while position > 0 and state.turns[position - 1].order() > turn.order():
        position -= 1
    state.turns.insert(position, turn)
    state.size += turn.size
    if turn.cut_bytes:
        state.truncated_bytes += turn.cut_bytes
    while len(state.turns) > limits.max_turns or (
        state.size > limits.max_bytes and len(state.turns) > 1
    ):
        dropped = state.turns.pop(0)
        state.size -= dropped.size
        state.dropped_turns += 1
    _touch(state, turn.event_time, arrival, arrival if watermark is None else watermark)
    if not state.is_open:
        state.is_open = True  # a turn after a close reopens the thread
    return True


def hold(state: ThreadState, event: HeldEvent) -> bool:
    """Keep ``event`` until no earlier event can come (in place). False when it is one held
    already and changes nothing: of two copies of a turn, the one whose canonical JSON sorts
    first is kept, as folded turns are."""
    same = next((i for i, h in enumerate(state.held) if h.name == event.name), None)
    if same is None:
        state.held.append(event)
        return True
    kept = state.held[same]
    if event.turn is None or kept.turn is None:
        return False  # the same end again
    if event.turn.canonical() >= kept.turn.canonical():
        return False
    state.held[same] = kept.model_copy(update={"turn": event.turn})
    return True


def next_held(state: ThreadState, horizon: float | None) -> HeldEvent | None:
    """Take the held event to fold next, if no earlier event can come before it (it is not
    past ``horizon``; None: any): the earliest in event time of each source's first held
    event, since a source's events are folded in the order they were read."""
    firsts: dict[str, int] = {}
    for i, event in enumerate(state.held):
        firsts.setdefault(event.source, i)
    due = [i for i in firsts.values() if horizon is None or state.held[i].at <= horizon]
    if not due:
        return None
    return state.held.pop(min(due, key=lambda i: state.held[i].order()))


def mark_end(
    state: ThreadState,
    key: str,
    *,
    event_time: datetime,
    arrival: float,
    watermark: float | None = None,
) -> bool:
    """An explicit end (a session ``end`` event, a trace marking the conversation finished).

    Each end (by ``key``) counts once. An end for a thread that is already closed records
    nothing new to judge, so it does not reopen it.
    """
    if key in state.end_keys:
        return False
    state.end_keys.append(key)
    if state.is_open:
        state.ended = True
        _touch(state, event_time, arrival, arrival if watermark is None else watermark)
    return True


def close_reason(
    state: ThreadState, *, wall_now: float | None, watermark: float | None, gap_s: float
) -> CloseReason | None:
    """Why ``state`` should close now, or None. Closed threads never close again until reopened."""
    if not state.is_open:
        return None
    if state.ended:
        return "end"
    if wall_now is not None and wall_now - state.last_arrival >= gap_s:
        return "inactivity"
    if watermark is not None and watermark - state.activity >= gap_s:
        return "inactivity_event_time"
    return None


def close_thread(
    state: ThreadState,
    reason: CloseReason,
    *,
    closed_at: float,
    document: Callable[[ThreadState], dict[str, Any]] | None = None,
) -> PendingClose:
    """Close ``state`` (in place); the returned pending close carries what the rules judge:
    ``document(state)`` (default ``thread_document``; a pair's is ``pairs.pair_document``)."""
    state.is_open = False
    state.ended = False
    state.closes += 1
    pending = PendingClose(
        close_seq=state.closes,
        reason=reason,
        closed_at=closed_at,
        document=(document or thread_document)(state),
        rules=list(state.rules),
        opened=state.opened,
    )
    state.pending.append(pending)
    return pending


def mark_published(state: ThreadState, close_seq: int) -> bool:
    """The scores of close ``close_seq`` are on the scores topic: forget its pending copy."""
    before = len(state.pending)
    state.pending = [p for p in state.pending if p.close_seq != close_seq]
    state.published = max(state.published, close_seq)
    return len(state.pending) != before
