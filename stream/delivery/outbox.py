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
        sends: list[Send] = [
            (self.scores, key, score.to_bytes(), None) for key, score in records.scores
        ]
        sends.extend(
            (self.decisions, key, record.to_bytes(), None) for key, record in records.decisions
        )
        if self.agreement_events is not None:
            events = self.agreement_events
            scores = (score for _, score in records.scores if judged(score))
            ordered = sorted(scores, key=lambda s: s.variant is not None)
            sends.extend((events, join_target(s).encode(), SCORE + slim(s), None) for s in ordered)
        return sends
