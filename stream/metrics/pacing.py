"""The judge's pace per model, and its fleet's (the workers judging with the same provider
account, issue 48), read from its pacers when metrics are collected."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from ..judge.fleet import FleetReading

PREFIX = "scorer"

# One gauge per figure of a model's FleetReading, labelled by model and account (the hash of
# the endpoint and key the fleet shares, never the key): name, help, the figure.
FLEET_LABELS = ("model", "account")
FLEET: tuple[tuple[str, str, Callable[[FleetReading], float]], ...] = (
    (
        f"{PREFIX}_judge_fleet_workers",
        "Workers judging each model with this worker's provider account (the same endpoint "
        "and key, account its hash) whose pace records are fresh, this worker included; 1 "
        "while it paces alone",
        lambda r: r.workers,
    ),
    (
        f"{PREFIX}_judge_fleet_share",
        "This worker's share of the account's limit for each model (0..1): its demand over "
        "the fleet's (calls sent lately and its backlog); 1 while it paces alone",
        lambda r: r.share,
    ),
    (
        f"{PREFIX}_judge_fleet_pace_rps",
        "Judge calls a second the fleet sharing the account lets start for each model: the "
        "workers' paces summed (a worker with no pace of its own adds 0)",
        lambda r: r.pace,
    ),
    (
        f"{PREFIX}_judge_fleet_refused_ratio",
        "Share of the fleet's judge calls over the last minute that the provider refused for "
        "a rate limit (429 rate_limited), every worker sharing the account counted; 0 with no "
        "calls",
        lambda r: r.refused,
    ),
    (
        f"{PREFIX}_judge_fleet_shared",
        "1 while this worker reads the other workers' pace records from the judge-pace topic "
        "and paces at its share of the account; 0 while it cannot and paces alone",
        lambda r: 1.0 if r.shared else 0.0,
    ),
)


class JudgePacing(Collector):
    """Each judge model's pace and announced token limit, and its fleet's figures, read when
    metrics are collected (the pace's ``reason`` label changes with the pacer's state, so one
    series per model; the fleet's, one per model and account)."""

    PACE = f"{PREFIX}_judge_pace_rps"
    TOKEN_LIMIT = f"{PREFIX}_judge_token_limit_per_minute"

    def __init__(self) -> None:
        self.readers: dict[str, tuple[Callable[[], tuple[float, str]], Callable[[], float]]] = {}
        self.fleets: dict[str, Callable[[], FleetReading]] = {}

    def collect(self) -> Iterator[Metric]:
        pace = GaugeMetricFamily(
            self.PACE,
            "Judge calls a second each model's pacer lets start, and why: announced (the "
            "provider's request or token limit), measured (found by 429s at two rates), paused "
            "(a long Retry-After, or every call refused), none (0: no pace of its own)",
            labels=("model", "reason"),
        )
        tokens = GaugeMetricFamily(
            self.TOKEN_LIMIT,
            "The token limit per minute each model's provider announced "
            "(x-ratelimit-limit-tokens); NaN until it does",
            labels=("model",),
        )
        for model, (read_pace, read_tokens) in sorted(self.readers.items()):
            value, reason = read_pace()
            pace.add_metric([model, reason], value)
            tokens.add_metric([model], read_tokens())
        yield pace
        yield tokens
        fleet = [GaugeMetricFamily(name, doc, labels=FLEET_LABELS) for name, doc, _ in FLEET]
        for model, read in sorted(self.fleets.items()):
            reading = read()
            for family, (_, _, figure) in zip(fleet, FLEET, strict=True):
                family.add_metric([model, reading.account], figure(reading))
        yield from fleet

    def describe(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(self.PACE, "", labels=("model", "reason"))
        yield GaugeMetricFamily(self.TOKEN_LIMIT, "", labels=("model",))
        for name, _, _ in FLEET:
            yield GaugeMetricFamily(name, "", labels=FLEET_LABELS)
