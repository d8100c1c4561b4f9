"""Where canary rounds go: ``<app id>-canary``, one partition, one record per rule's round
(keyed by rule id), read back by ``scorer agreement`` (design record 47). A topic of its own,
not the score-agreement topic: that one is a user's stream of joined pairs, and a round is
not a pair."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from pydantic import ValidationError

from .compare import CanaryRound


def canary_topic(app_id: str) -> str:
    """The canary topic of a deployment (``SCORER_APP_ID``)."""
    return f"{app_id}-canary"


def rounds_of(
    records: Iterable[bytes], since: datetime | None = None, rule: str | None = None
) -> list[CanaryRound]:
    """The rounds among a canary topic's ``records`` (unreadable ones skipped), since
    ``since``, of ``rule`` if given, oldest first."""
    found = []
    for raw in records:
        try:
            round_ = CanaryRound.model_validate_json(raw)
        except (ValueError, ValidationError):
            continue
        if since is not None and round_.at < since:
            continue
        if rule is None or round_.rule == rule:
            found.append(round_)
    return sorted(found, key=lambda r: r.at)
