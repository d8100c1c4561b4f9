"""A comparison pair's rules, over the thread state it is kept in (``state.py``).

A pair is a thread of kind ``pair``, keyed by comparison key, whose turns are its traces
(``Turn.member``: which side, which variant, the trace's document). These decide which traces
it takes and what comparison rules read when it closes.
"""

from __future__ import annotations

from typing import Any, Literal

from .state import ThreadState
from .turns import Turn

MAX_IGNORED = 10  # a pair's ignored traces listed (in its decision records)


Admission = Literal["joins", "ignored", "duplicate"]


def admit_member(state: ThreadState, turn: Turn) -> Admission:
    """Whether a trace joins its pair. A pair is judged at most once, on the first trace of
    each variant to reach it: a later trace of a variant it has, or any new trace once the
    pair closed (judged, or alone when its window ended), is ignored. The same trace again is
    a ``duplicate``, for ``fold_turn`` to settle."""
    assert turn.member is not None
    if any(t.key == turn.key for t in state.turns):
        return "duplicate"
    if state.closes or any(t.member and t.member.slot == turn.member.slot for t in state.turns):
        return "ignored"
    return "joins"


def ignore_member(state: ThreadState, turn: Turn) -> bool:
    """Note an ignored trace on a waiting pair (its decision records list it); False when
    nothing was noted (the pair is decided, the trace is noted already, or enough are)."""
    if not state.is_open or turn.key in state.ignored or len(state.ignored) >= MAX_IGNORED:
        return False
    state.ignored.append(turn.key)
    return True


def pair_complete(state: ThreadState) -> bool:
    return {t.member.slot for t in state.turns if t.member is not None} == {"a", "b"}


def pair_document(state: ThreadState) -> dict[str, Any]:
    """What comparison rules' variable paths are evaluated against: ``a`` and ``b``, the
    documents of the pair's two traces (one is absent when its partner did not come),
    ``variants``, each variant's trace id, and ``ignored``, the ids of traces ignored while
    the pair waited (a variant it already had)."""
    document: dict[str, Any] = {
        "comparison_id": state.thread_id,
        "kind": state.kind,
        "project_name": state.project_name,
        "close_seq": state.closes,
        "variants": {},
        "ignored": list(state.ignored),
        "turn_count": len(state.turns),
        "dropped_turns": state.dropped_turns,
        "truncated_bytes": state.truncated_bytes,
    }
    for turn in state.turns:
        if turn.member is not None:
            document["variants"][turn.member.variant] = turn.key
            document[turn.member.slot] = turn.member.document
    return document
