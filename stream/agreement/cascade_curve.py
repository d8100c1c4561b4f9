"""The cascade's curve over confidence cuts: what a rule with ``judge.cascade`` would escalate,
and how far what it would publish agrees with its judge, at each cut it could be given
(design record 44). Pure: the report feeds it the joined pairs.

It reads the audit share's pairs (``reference="primary"``, ``variant="cascade"``): on those
targets the rule's judge decided and the first tier's verdict, with its confidence, is the
shadow beside it. The audit is a hashed sample of targets, not of confident verdicts, so at
each cut these pairs say, without bias:

- *escalated*: the share of targets whose confidence is under the cut (the judge would
  decide them), with its Wilson interval;
- *published*: the agreement with the judge of what the cascade would publish, the first
  tier's verdict where its confidence reaches the cut and the judge's elsewhere;
- *accepted*: the agreement with the judge of the first tier's accepted verdicts alone, with
  how many there are.

Agreement is kappa for choice rules and the mean absolute error on the rule's scale for
numeric ones, each with its 95 % interval (``measures``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..ruleset.judge_specs import CASCADE_VARIANT
from .join import Joined
from .measures import Estimate, cohen_kappa, mean_absolute_error, wilson

CUTS = (0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 0.99)
MEASURE_OF = {"choice": "kappa", "numeric": "mae"}


@dataclass(frozen=True, slots=True)
class CutPoint:
    """The cascade at one confidence cut, over the audited targets."""

    cut: float
    escalated: Estimate  # the share under the cut (its count: the audited targets)
    published: Estimate  # what the cascade would publish, against the judge
    accepted: Estimate  # the first tier's verdicts at or over the cut, against the judge


@dataclass(frozen=True, slots=True)
class CascadeCurve:
    """One cascade rule's curve (its first tier's model, and the kind its scores compare as)."""

    rule: str
    criterion: str
    model: str
    kind: str
    points: tuple[CutPoint, ...]

    @property
    def measure(self) -> str:
        return MEASURE_OF[self.kind]

    @property
    def audited(self) -> int:
        return self.points[0].escalated.count if self.points else 0


# the judge's value, the first tier's, its confidence (-1: none read, so never accepted)
Audited = tuple[Any, Any, float]
UNREAD = -1.0


def curve_at(kind: str, audited: list[Audited], cut: float) -> CutPoint:
    """The cascade at ``cut`` over the audited pairs."""
    published = [(judge, first if c >= cut else judge) for judge, first, c in audited]
    accepted = [(judge, first) for judge, first, c in audited if c >= cut]
    under = sum(1 for _, _, c in audited if c < cut)
    return CutPoint(
        cut, wilson(under, len(audited)), agreement(kind, published), agreement(kind, accepted)
    )


def agreement(kind: str, pairs: list[tuple[Any, Any]]) -> Estimate:
    """Kappa of choices, or the mean absolute error of numbers, with its interval."""
    return cohen_kappa(pairs) if kind == "choice" else mean_absolute_error(pairs)


def cascade_curves(pairs: Iterable[Joined], cuts: Iterable[float] = CUTS) -> list[CascadeCurve]:
    """Every cascade rule's curve over ``cuts``, from its audited pairs (give the newest pair
    of each agreement id once). A pair whose first tier gave no confidence (a chat tier whose
    tokens could not be read) is escalated at every cut, as it is when it runs; a first tier
    that never gave one (pairs written before the confidence was carried) has no curve."""
    grouped: defaultdict[tuple[str, str, str, str], list[Audited]] = defaultdict(list)
    for pair in pairs:
        if (
            pair.reference != "primary"
            or pair.variant != CASCADE_VARIANT
            or pair.kind not in MEASURE_OF
        ):
            continue
        key = (pair.rule_id, pair.criterion or "", pair.model or "", pair.kind)
        confidence = pair.judged_confidence if pair.judged_confidence is not None else UNREAD
        grouped[key].append((pair.reference_value, pair.judged_value, confidence))
    grid = sorted(set(cuts))
    return [
        CascadeCurve(*key, tuple(curve_at(key[3], audited, cut) for cut in grid))
        for key, audited in sorted(grouped.items())
        if any(c != UNREAD for _, _, c in audited)
    ]
