"""The judge's pace per model, read from its pacers when metrics are collected."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

PREFIX = "scorer"


class JudgePacing(Collector):
    """Each judge model's pace and announced token limit, read when metrics are collected
    (the pace's ``reason`` label changes with the pacer's state, so one series per model)."""

    PACE = f"{PREFIX}_judge_pace_rps"
    TOKEN_LIMIT = f"{PREFIX}_judge_token_limit_per_minute"

    def __init__(self) -> None:
        self.readers: dict[str, tuple[Callable[[], tuple[float, str]], Callable[[], float]]] = {}

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

    def describe(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(self.PACE, "", labels=("model", "reason"))
        yield GaugeMetricFamily(self.TOKEN_LIMIT, "", labels=("model",))
