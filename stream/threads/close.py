"""When a thread closes, and what its close keeps until its scores are published.

- A thread closes on an explicit end, or after ``gap`` of inactivity measured two ways:
  in wall-clock time since its last new event arrived in Kafka (live: an idle thread closes
  even when its partition receives nothing else), and in event time: the thread's
  watermark (how far the sources of its events have got) has moved ``gap`` past its
  activity mark (its last event time, or its watermark then if that was later). A replay of
  history therefore closes threads where they would have closed live, although the replay
  itself runs in minutes; and a producer whose clock lags cannot make its own threads close
  at once.
- A closed thread is reopened by its next turn (``fold.py``), and closed again under a new
  close sequence (part of the score id).
- A close is kept as pending (with the document the rules judge) until its scores are
  published, so a worker that dies in between scores it again after recovery, identically.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .document import thread_document
from .state import CloseReason, PendingClose, ThreadState


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
