"""The records of the internal agreement-events topic (design records 26 and 36): a label,
a judged score, or a clock tick, each a one-byte marker and the payload; a score goes there
without its bulky fields."""

from __future__ import annotations

from ..models import ScoreEvent

LABEL, SCORE, TICK = b"L", b"S", b"T"  # the internal events: a label, a score, a clock tick


def judged(score: ScoreEvent) -> bool:
    """A score a judge gave, with a value: what a label or another judge can agree with."""
    return score.status == "ok" and score.raw_value is not None and score.judge_model is not None


def slim(score: ScoreEvent) -> bytes:
    """The score without what the join never reads (its reason, details, usage)."""
    return score.model_copy(update={"reason": None, "details": None, "usage": None}).to_bytes()
