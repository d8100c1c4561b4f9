"""Every Prometheus metric the worker exports, built in one place with one prefix.

Labels come from a small closed set (rule, pack, criterion, scope, model, status, outcome,
topic, reason, kind, type); never trace, thread or score ids. The Grafana dashboards and the
Prometheus rules in ``grafana/`` are written against these names.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, Counter, Gauge, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

PREFIX = "scorer"

TRACES_CONSUMED = Counter(
    f"{PREFIX}_traces_consumed", "Trace messages consumed (valid or not)", ["topic"]
)
DECISIONS = Counter(
    f"{PREFIX}_decisions",
    "Rule decisions per trace: filtered, sampled_out, skipped, scored, error",
    ["rule", "pack", "outcome"],
)
# ``criterion``: which score of a rubric rule ("" for one-score rules); a closed set, declared
# in the rule files.
SCORES = Counter(
    f"{PREFIX}_scores",
    "Score events published, by status",
    ["rule", "pack", "criterion", "status"],
)
SCORE_VALUE = Histogram(
    f"{PREFIX}_score_value",
    "Normalised score value (0..1) of ok scores",
    ["rule", "pack", "criterion"],
    buckets=[round(i / 10, 1) for i in range(1, 11)],
)
LOW_SCORES = Counter(
    f"{PREFIX}_low_scores",
    "Ok scores on the bad side of their scale: below the middle, or above it for rules where "
    "lower is better",
    ["rule", "pack", "criterion"],
)
RULE_DIRECTION = Gauge(
    f"{PREFIX}_rule_direction",
    "Each loaded rule: 1 when a higher score is better, -1 when lower is better",
    ["rule", "pack", "scope"],
)
JUDGE_CALLS = Counter(f"{PREFIX}_judge_calls", "Judge calls by outcome", ["model", "outcome"])
JUDGE_RETRIES = Counter(
    f"{PREFIX}_judge_retries", "Judge call retries by reason", ["model", "reason"]
)
JUDGE_LATENCY = Histogram(
    f"{PREFIX}_judge_latency_seconds",
    "Latency of judge calls (each attempt) by outcome",
    ["model", "outcome"],
    buckets=[0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60],
)
JUDGE_TOKENS = Counter(
    f"{PREFIX}_judge_tokens",
    "Judge tokens used, by kind (prompt, completion) and the call's outcome",
    ["model", "kind", "outcome"],
)
JUDGE_COST = Counter(
    f"{PREFIX}_judge_cost_usd",
    "Estimated judge cost in US dollars, from the token counts and SCORER_JUDGE_PRICES "
    "(models without a price are not counted)",
    ["model", "outcome"],
)
DLQ_MESSAGES = Counter(
    f"{PREFIX}_dlq_messages", "Messages sent to the dead-letter topic", ["topic", "reason"]
)
SCORING_OVERHEAD = Histogram(
    f"{PREFIX}_scoring_overhead_seconds",
    "Engine time per trace beyond the judge call: parse, filter, look up, check, render, "
    "parse the answer, build events",
    buckets=[0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1],
)
PUBLISH_LATENCY = Histogram(
    f"{PREFIX}_publish_latency_seconds",
    "From handing a trace's scores to the producer to the broker acknowledging all of them",
    buckets=[0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5],
)
IN_FLIGHT = Gauge(
    f"{PREFIX}_traces_in_flight", "Traces received and not yet acknowledged (scoring or publishing)"
)
CONSUMER_LAG = Gauge(
    f"{PREFIX}_consumer_lag",
    "Messages not yet committed in this worker's partitions of each input topic "
    "(high watermark - committed offset)",
    ["topic"],
)
THREADS_OPEN = Gauge(
    f"{PREFIX}_threads_open",
    "Open threads (conversations and sessions) in this worker's partitions",
)
THREAD_PENDING_CLOSES = Gauge(
    f"{PREFIX}_thread_pending_closes", "Thread closes whose scores are not yet published"
)
THREAD_EVENTS = Counter(
    f"{PREFIX}_thread_events", "Events applied to thread state, by type", ["type"]
)
THREAD_CLOSES = Counter(
    f"{PREFIX}_thread_closes",
    "Thread closes by kind and reason (end, inactivity, inactivity_event_time)",
    ["kind", "reason"],
)
THREAD_TURNS_AT_CLOSE = Histogram(
    f"{PREFIX}_thread_turns_at_close",
    "Turns a thread holds when it closes",
    ["kind"],
    buckets=[0, 1, 2, 5, 10, 20, 50, 100, 200, 500],
)
THREAD_CLOSE_DELAY = Histogram(
    f"{PREFIX}_thread_close_delay_seconds",
    "How long after its inactivity deadline (last arrival + gap) an idle thread closed",
    buckets=[0.25, 0.5, 1, 1.5, 2, 3, 4, 5, 7.5, 10, 30, 60, 300],
)
WORKER_INFO = Gauge(f"{PREFIX}_worker_info", "Worker build and rule set", ["version", "ruleset"])


# Label children resolved once: ``labels()`` on every trace is measurable on the hot path.
@lru_cache(maxsize=4096)
def decisions(rule: str, pack: str, outcome: str) -> Any:
    return DECISIONS.labels(rule=rule, pack=pack, outcome=outcome)


@lru_cache(maxsize=4096)
def scores(rule: str, pack: str, criterion: str, status: str) -> Any:
    return SCORES.labels(rule=rule, pack=pack, criterion=criterion, status=status)


@lru_cache(maxsize=4096)
def score_values(rule: str, pack: str, criterion: str) -> Any:
    return SCORE_VALUE.labels(rule=rule, pack=pack, criterion=criterion)


@lru_cache(maxsize=4096)
def low_scores(rule: str, pack: str, criterion: str) -> Any:
    return LOW_SCORES.labels(rule=rule, pack=pack, criterion=criterion)


def is_low(value: float, higher_is_better: bool) -> bool:
    """A normalised score on the bad side of the middle of its scale (the middle is neither)."""
    return value < 0.5 if higher_is_better else value > 0.5


@lru_cache(maxsize=64)
def thread_events(kind: str) -> Any:
    return THREAD_EVENTS.labels(type=kind)


@lru_cache(maxsize=64)
def thread_closes(kind: str, reason: str) -> Any:
    return THREAD_CLOSES.labels(kind=kind, reason=reason)


@lru_cache(maxsize=256)
def traces_consumed(topic: str) -> Any:
    return TRACES_CONSUMED.labels(topic=topic)


def sample_value(text: str, name: str, **labels: str) -> float:
    """The first sample called ``name`` whose labels include ``labels``, read from a /metrics
    page (0.0 when there is none): for tests and benchmarks that watch a worker."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and labels.items() <= sample.labels.items():
                return float(sample.value)
    return 0.0


def exposition() -> tuple[bytes, str]:
    """The /metrics body and its content type (aiohttp wants the charset apart)."""
    return generate_latest(), CONTENT_TYPE_LATEST.split(";")[0]
