"""What a canary round found: each item's new verdict against the recorded one, and the
round's summary (``CanaryRound``: the event published on the canary topic, and what the
gauges show).

A verdict *changed* when its label differs from the recorded label (both given), or its
normalised value is more than the canary's tolerance from the recorded value. The *mean
shift* is the mean, over the items judged, of the new normalised value minus the recorded
one, signed by the rule's direction so that above 0 is worse (as the score-drop alerts read
a drop): for a rule where higher is better, a fall is a positive shift."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from ..models import TokenUsage
from ..ruleset.canary import RecordedVerdict

# a value this close to the tolerance is within it (floating point: 0.8 - 0.75 > 0.05)
EPSILON = 1e-9


@dataclass(frozen=True, slots=True)
class Rejudged:
    """One item judged (again): its new verdict (``status`` ok), or why there is none;
    ``recorded``: the verdict it is compared with (None while a file of items is made)."""

    item_id: str
    recorded: RecordedVerdict | None
    status: str
    value: float | None = None
    raw_value: float | None = None
    label: str | None = None
    answered_by: str | None = None  # the model the answer says it came from
    reason: str | None = None  # why it is not ok
    usage: TokenUsage | None = None  # what its judge call used


def changed(recorded: RecordedVerdict, value: float, label: str | None, tolerance: float) -> bool:
    """Whether a new verdict differs from the recorded one: another label, or a normalised
    value more than ``tolerance`` away."""
    if recorded.label is not None and label is not None and recorded.label != label:
        return True
    return abs(value - recorded.value) > tolerance + EPSILON


class ItemChange(BaseModel):
    """One item whose verdict changed, as the round's event lists it."""

    id: str
    recorded: float
    now: float
    recorded_label: str | None = None
    label: str | None = None


class CanaryRound(BaseModel):
    """One rule's canary round: ``items`` judged (ok), how many ``changed``, the mean shift
    (above 0: worse; None with no item judged), the items that could not be judged
    (``failed``), the models the answers came from, and when."""

    kind: Literal["canary_round"] = "canary_round"
    rule: str
    pack: str
    model: str
    items: int
    changed: int
    mean_shift: float | None
    failed: int = 0
    tolerance: float
    every_s: float
    at: datetime
    answered_by: list[str] = Field(default_factory=list)
    changes: list[ItemChange] = Field(default_factory=list)
    tokens: int = 0

    @property
    def changed_share(self) -> float | None:
        return self.changed / self.items if self.items else None


def summarise(
    rule: str,
    pack: str,
    model: str,
    rejudged: Sequence[Rejudged],
    *,
    higher_is_better: bool,
    tolerance: float,
    every_s: float,
    at: datetime,
) -> CanaryRound:
    """The round of ``rejudged``: counts, the signed mean shift, the changed items."""
    judged = [r for r in rejudged if r.status == "ok" and r.value is not None]
    assert all(r.recorded is not None for r in rejudged), "an item without a recorded verdict"
    sign = -1.0 if higher_is_better else 1.0
    shifts, changes = [], []
    for r in judged:
        assert r.value is not None and r.recorded is not None
        shifts.append(sign * (r.value - r.recorded.value))
        if changed(r.recorded, r.value, r.label, tolerance):
            changes.append(
                ItemChange(
                    id=r.item_id,
                    recorded=r.recorded.value,
                    now=r.value,
                    recorded_label=r.recorded.label,
                    label=r.label,
                )
            )
    return CanaryRound(
        rule=rule,
        pack=pack,
        model=model,
        items=len(judged),
        changed=len(changes),
        mean_shift=sum(shifts) / len(shifts) if shifts else None,
        failed=len(rejudged) - len(judged),
        tolerance=tolerance,
        every_s=every_s,
        at=at,
        answered_by=sorted({r.answered_by for r in judged if r.answered_by}),
        changes=changes,
        tokens=sum(r.usage.total_tokens for r in rejudged if r.usage is not None),
    )
