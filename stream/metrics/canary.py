"""The judge canary's metrics (design record 47), per rule, pack and model: the last round's
items, changed verdicts and mean shift, when it ran, and what the canary's own judge calls
cost. The alert ScorerJudgeDrift and the score-drop alert's annotation read these names.

Only the worker that runs the rounds (the group's leader) exports the gauges: a worker that
stops leading clears them (``clear``), so a series is never two workers' at once."""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge

from .pacing import PREFIX

if TYPE_CHECKING:
    from ..canary.compare import CanaryRound

LABELS = ("rule", "pack", "model")


class CanaryMetrics:
    """The canary's gauges and counters, declared on ``registry``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(f"{PREFIX}_canary_{name}", doc, LABELS, registry=registry)

        def counter(name: str, doc: str) -> Counter:
            return Counter(f"{PREFIX}_canary_{name}", doc, LABELS, registry=registry)

        self.items = gauge(
            "items", "Reference items the rule's judge answered in the last canary round"
        )
        self.changed = gauge(
            "changed",
            "Of those, verdicts that differ from the recorded ones: another label, or a "
            "normalised value more than the canary's tolerance away",
        )
        self.mean_shift = gauge(
            "mean_shift",
            "Mean of the new minus the recorded normalised value over the last round's items, "
            "signed by the rule's direction: above 0 is worse; NaN with no item answered",
        )
        self.failed = gauge(
            "failed", "Reference items the last canary round could not judge (errors, skips)"
        )
        self.last_round = gauge(
            "last_round_timestamp_seconds", "When the last canary round ended (Unix time)"
        )
        self.period = gauge(
            "period_seconds",
            "The rule's canary period (canary.every): ScorerJudgeCanaryStale fires when no "
            "round ended in three of them",
        )
        self.tokens = counter(
            "tokens", "Tokens the canary's judge calls used (the canary's own spend)"
        )
        self.cost = counter(
            "cost_usd", "What the canary's judge calls cost, where the model has a price"
        )
        self._gauges = (
            self.items,
            self.changed,
            self.mean_shift,
            self.failed,
            self.last_round,
            self.period,
        )

    def round(self, found: CanaryRound, cost_usd: float | None) -> None:
        """The gauges of ``found``'s rule and model set from it; its spend counted."""
        labels = (found.rule, found.pack, found.model)
        self.items.labels(*labels).set(found.items)
        self.changed.labels(*labels).set(found.changed)
        shift = found.mean_shift
        self.mean_shift.labels(*labels).set(float("nan") if shift is None else shift)
        self.failed.labels(*labels).set(found.failed)
        self.last_round.labels(*labels).set(found.at.timestamp())
        self.period.labels(*labels).set(found.every_s)
        self.tokens.labels(*labels).inc(found.tokens)
        if cost_usd is not None:
            self.cost.labels(*labels).inc(cost_usd)

    def clear(self) -> None:
        """No gauge left: this worker no longer runs the rounds."""
        for gauge in self._gauges:
            gauge.clear()
