"""Folding turns and ends into a thread's state (``state.ThreadState``).

Plain functions: they change the state in place and say whether it changed, so the agent
writes the table (and its changelog) only when something happened.

- Folding is deterministic: turns are kept in (seq, event time, key) order whatever order
  they arrive in, and a duplicate (same key, e.g. the same ``seq`` twice) keeps the copy whose
  canonical JSON sorts first, so redelivery or reordering cannot change the result. A
  duplicate is not activity: it neither reopens a closed thread nor delays a close.
- State is bounded: past ``max_turns`` or ``max_bytes`` the oldest turns are dropped and
  counted.
- Each turn or end moves the thread's activity marks, which its close is measured from
  (``close.py``): its last event time, the Kafka time it arrived, and its event-time watermark.
- A spread thread holds its turns and ends (``hold``) until no earlier one can still come
  through another partition, and folds them then (``next_held``), so that its turns are
  folded, and its pauses measured, in event-time order.
- A turn after a close reopens the thread; its turns are kept, so the next close judges the
  whole conversation.
"""

from __future__ import annotations

from datetime import datetime

from .state import HeldEvent, ThreadLimits, ThreadState
from .turns import Turn


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
