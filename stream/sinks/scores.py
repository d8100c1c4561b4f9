"""Which scores a sink posts, under what name and with what value: the part both platforms
share. Pure: no HTTP, no Kafka.

Only ``ok`` scores are posted. A ``skipped`` or ``error`` score has no value (``value`` is
null on the scores topic) and neither platform can hold a score without one honestly: it would
show as a 0. They stay on the scores topic, on the metrics and in Grafana, and each sink counts
them as not sent. A later ``ok`` score of the same rule and target has the same ``score_id``
and is posted when it comes. Design record 17 says why.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import orjson

from ..models import ScoreEvent

ValueMode = Literal["normalised", "raw"]


@dataclass(frozen=True, slots=True)
class Unsent:
    """Why a score is not posted: ``kind`` is a closed set (``status``: not ok; ``target``:
    the platform has no such thing to attach it to), ``reason`` says it to a reader."""

    kind: Literal["status", "target"]
    reason: str


def read_score(raw: bytes | None) -> ScoreEvent:
    """One message of the scores topic as a ``ScoreEvent``; raises ``ValueError`` (pydantic's
    ``ValidationError`` and orjson's decode error are ones) when it is not one."""
    if raw is None:
        raise ValueError("empty message (no value)")
    return ScoreEvent.model_validate(orjson.loads(raw))


def unsent_status(score: ScoreEvent) -> Unsent | None:
    """A score that is not ``ok`` is not posted (it has no value)."""
    if score.status == "ok" and score.value is not None and score.raw_value is not None:
        return None
    why = f": {score.status_reason}" if score.status_reason else ""
    return Unsent("status", f"{score.status} score{why}")


def score_name(score: ScoreEvent) -> str:
    """The score's name on the platform: the rule id, for a rubric's several scores the
    criterion after a dot (``code_review.correctness``), and for a shadow judge's the variant
    after an ``@`` (``code_review@mini``): shown beside the rule's own, never in its place."""
    return score.full_name


def posted_value(score: ScoreEvent, mode: ValueMode) -> float:
    """The number posted: the normalised 0..1 value or the raw one on the rule's own scale
    (an ``ok`` score has both)."""
    value = score.value if mode == "normalised" else score.raw_value
    assert value is not None and math.isfinite(value), "an ok score has a finite value"
    return value


def scale_text(score: ScoreEvent) -> str:
    """``4 on 1..5`` (the raw value on its scale), for a reason or a comment."""
    return f"{score.raw_value:g} on {score.scale.min:g}..{score.scale.max:g}"
