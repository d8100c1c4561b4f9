"""Judge agreement over sliding windows: the joins of the last hour, day and week, measured
per rule, judged model, variant and reference (design record 26).

Each joined pair (``join.Joined``: a human label or the primary judge's score as the
reference, a judge's score as the judged side) counts in every window that holds its join
time; a pair joined again (the same ``agreement_id``: a label corrected, a redelivery)
replaces the first. Measures are on the rule's own scale (``measures.measure``): kappa and
accuracy for choice rules, mean absolute error and Spearman's rho for numeric ones, each with
its count. Pure: the measuring agent feeds it and exports what it says.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from .measures import Estimate, measure

WINDOWS: dict[str, float] = {"1h": 3600.0, "1d": 86_400.0, "7d": 7 * 86_400.0}
KEPT_S = max(WINDOWS.values())


class Pair(Protocol):
    """What a joined pair says (``join.Joined``)."""

    @property
    def agreement_id(self) -> str: ...
    @property
    def rule_id(self) -> str: ...
    @property
    def criterion(self) -> str | None: ...
    @property
    def model(self) -> str | None: ...
    @property
    def variant(self) -> str | None: ...
    @property
    def reference(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def reference_value(self) -> Any: ...
    @property
    def judged_value(self) -> Any: ...
    @property
    def joined_at(self) -> datetime: ...


@dataclass(frozen=True, slots=True)
class Series:
    """Whose agreement: a rule's judged side (its model, and its shadow variant or "" for the
    primary) against a reference ("human" labels, or the "primary" judge), for one score of
    the rule (a rubric's criterion, or "" for its one score) and one kind of comparison
    ("choice" or "numeric": a rubric's YES/NO criteria and its numeric aggregate apart)."""

    rule: str
    criterion: str
    model: str
    variant: str
    reference: str
    kind: str


@dataclass(frozen=True, slots=True)
class _Kept:
    series: Series
    pair: tuple[Any, Any]
    at: float  # seconds since the epoch


class AgreementWindows:
    """The joined pairs of the last ``KEPT_S`` seconds, by agreement id."""

    def __init__(self) -> None:
        self._pairs: dict[str, _Kept] = {}

    def __len__(self) -> int:
        return len(self._pairs)

    def add(self, joined: Pair) -> None:
        """Count ``joined`` (replacing an earlier pair with its agreement id)."""
        series = Series(
            joined.rule_id,
            joined.criterion or "",
            joined.model or "",
            joined.variant or "",
            joined.reference,
            joined.kind,
        )
        pair = (joined.reference_value, joined.judged_value)
        self._pairs[joined.agreement_id] = _Kept(series, pair, joined.joined_at.timestamp())

    def forget(self, agreement_id: str) -> None:
        self._pairs.pop(agreement_id, None)

    def expired(self, now: float) -> list[str]:
        """The agreement ids older than every window (to drop from where they are kept)."""
        return [key for key, kept in self._pairs.items() if now - kept.at > KEPT_S]

    def measures(self, now: float) -> dict[tuple[Series, str], dict[str, Estimate]]:
        """Every series' measures in each window it has pairs in."""
        grouped: defaultdict[tuple[Series, str], list[tuple[Any, Any]]] = defaultdict(list)
        for kept in self._pairs.values():
            age = now - kept.at
            for window, span in WINDOWS.items():
                if age <= span:
                    grouped[(kept.series, window)].append(kept.pair)
        return {key: measure(key[0].kind, pairs) for key, pairs in grouped.items()}
