"""What a scored target publishes, turned into its messages in one place: its score events
and decision records (``engine.records``) on the user's topics and, where the agreement join
is on, each judged score on the internal agreement-events topic, in the same at-least-once
set as the score itself. The trace and thread agents and the batch queue publish through it.

A judged score goes to the join from where it is published rather than being read back from
the scores topic: a deterministic check's score, most of them, costs the join nothing."""

from __future__ import annotations

from dataclasses import dataclass

from faust.types import TopicT

from ..agreement.events import SCORE, join_target, judged, slim
from ..engine.records import Records
from ..models import ScoreEvent
from .publisher import Send


@dataclass(frozen=True)
class Outbox:
    """The topics a scored target's records go to (``agreement_events`` None: the join is
    off)."""

    scores: TopicT
    decisions: TopicT
    agreement_events: TopicT | None = None

    def sends(self, records: Records) -> list[Send]:
        """The messages that publish ``records``: score events, then decision records, then
        the judged scores for the join (a shadow's after its primary's: the join pairs it
        with the primary just read)."""
        to_scores, to_decisions = self.scores, self.decisions
        sends: list[Send] = [
            (to_scores, key, score.to_bytes(), None) for key, score in records.scores
        ]
        sends += [(to_decisions, key, record.to_bytes(), None) for key, record in records.decisions]
        if self.agreement_events is not None:
            events = self.agreement_events
            ordered = [score for _, score in records.scores if judged(score)]
            if ordered:  # a deterministic check's score is not judged: most have none
                ordered.sort(key=_shadow)  # stable: each kind in the order scored
                sends += [(events, join_target(s).encode(), SCORE + slim(s), None) for s in ordered]
        return sends


def _shadow(score: ScoreEvent) -> bool:
    return score.variant is not None
