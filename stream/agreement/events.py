"""The records of the internal agreement-events topic (design records 26 and 36): a label,
a judged score, or a clock tick, each a one-byte marker and the payload; a score goes there
without its bulky fields. And the scores topic's records as ``scorer agreement`` reads them."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from pydantic import ValidationError

from ..models import ScoreEvent

LABEL, SCORE, TICK = b"L", b"S", b"T"  # the internal events: a label, a score, a clock tick


def judged(score: ScoreEvent) -> bool:
    """A score a judge gave, with a value: what a label or another judge can agree with."""
    return score.status == "ok" and score.raw_value is not None and score.judge_model is not None


def join_target(score: ScoreEvent) -> str:
    """What the join holds a score under: its target id; a tool call's, qualified by its trace
    (``<trace id>/<call id>``: a call id is unique within its trace only), as a label of it
    names it."""
    trace = (score.details or {}).get("trace_id") if score.scope == "tool_call" else None
    return f"{trace}/{score.target_id}" if isinstance(trace, str) else score.target_id


def slim(score: ScoreEvent) -> bytes:
    """The score without what the join never reads (its reason, usage, and its details but
    for the judge's confidence in the verdict, ``details.decision.confidence``, which a
    cascade's curve over confidence cuts needs)."""
    decision = (score.details or {}).get("decision")
    confidence = decision.get("confidence") if isinstance(decision, dict) else None
    details = {"decision": {"confidence": confidence}} if confidence is not None else None
    update = {"reason": None, "details": details, "usage": None, "target_id": join_target(score)}
    return score.model_copy(update=update).to_bytes()


def newest_scores(records: Iterable[bytes], since: datetime | None) -> dict[str, ScoreEvent]:
    """The scores topic's ``records`` created since ``since``, the newest of each score id (a
    redelivered score counts once); unreadable records are skipped (the workers write it)."""
    newest: dict[str, ScoreEvent] = {}
    for raw in records:
        try:
            score = ScoreEvent.model_validate_json(raw)
        except (ValueError, ValidationError):
            continue
        if since is None or score.created_at >= since:
            newest[score.score_id] = score
    return newest
