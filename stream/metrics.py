"""Every Prometheus metric the worker exports, built in one place with one prefix.

``ScorerMetrics`` is the observer the worker hands to its engine, judge, thread and delivery
code: each callback updates the metrics it concerns. Its registry can be injected (like
Faust's ``PrometheusMonitor``); the worker uses ``ScorerMetrics.default()``, on
prometheus_client's global registry, which its /metrics page serves.

Labels come from a small closed set (rule, pack, criterion, scope, model, status, outcome,
topic, reason, kind, type); never trace, thread or score ids. The Grafana dashboards and the
Prometheus rules in ``grafana/`` are written against these names.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import TypeVar

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.parser import text_string_to_metric_families

from .models import ScoreEvent, TokenUsage
from .observer import Observer

PREFIX = "scorer"

M = TypeVar("M", bound=MetricWrapperBase)


class ScorerMetrics(Observer):
    """The worker's metrics on ``registry``, updated through the observer callbacks."""

    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self.registry = registry

        def counter(name: str, doc: str, labels: tuple[str, ...] = ()) -> Counter:
            return Counter(f"{PREFIX}_{name}", doc, labels, registry=registry)

        def gauge(name: str, doc: str, labels: tuple[str, ...] = ()) -> Gauge:
            return Gauge(f"{PREFIX}_{name}", doc, labels, registry=registry)

        def histogram(
            name: str, doc: str, buckets: list[float], labels: tuple[str, ...] = ()
        ) -> Histogram:
            return Histogram(f"{PREFIX}_{name}", doc, labels, buckets=buckets, registry=registry)

        self.traces_consumed = counter(
            "traces_consumed", "Trace messages consumed (valid or not)", ("topic",)
        )
        self.decisions = counter(
            "decisions",
            "Rule decisions per trace: filtered, sampled_out, skipped, scored, error",
            ("rule", "pack", "outcome"),
        )
        # ``criterion``: which score of a rubric rule ("" for one-score rules); a closed set,
        # declared in the rule files.
        self.scores = counter(
            "scores", "Score events published, by status", ("rule", "pack", "criterion", "status")
        )
        self.score_value = histogram(
            "score_value",
            "Normalised score value (0..1) of ok scores",
            [round(i / 10, 1) for i in range(1, 11)],
            ("rule", "pack", "criterion"),
        )
        self.low_scores = counter(
            "low_scores",
            "Ok scores on the bad side of their scale: below the middle, or above it for rules "
            "where lower is better",
            ("rule", "pack", "criterion"),
        )
        self.rule_direction = gauge(
            "rule_direction",
            "Each loaded rule: 1 when a higher score is better, -1 when lower is better",
            ("rule", "pack", "scope"),
        )
        self.rule_silent = gauge(
            "rule_silent",
            "1 while a trace rule's filter has matched none of the last SCORER_SILENT_AFTER_"
            "TRACES traces (the worker's log names what came instead), else 0",
            ("rule", "pack"),
        )
        self.judge_calls = counter("judge_calls", "Judge calls by outcome", ("model", "outcome"))
        self.judge_retries = counter(
            "judge_retries", "Judge call retries by reason", ("model", "reason")
        )
        self.judge_latency = histogram(
            "judge_latency_seconds",
            "Latency of judge calls (each attempt) by outcome",
            [0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60],
            ("model", "outcome"),
        )
        self.judge_tokens = counter(
            "judge_tokens",
            "Judge tokens used, by kind (prompt, completion) and the call's outcome",
            ("model", "kind", "outcome"),
        )
        self.judge_cost = counter(
            "judge_cost_usd",
            "Estimated judge cost in US dollars, from the token counts and SCORER_JUDGE_PRICES "
            "(models without a price are not counted)",
            ("model", "outcome"),
        )
        self.judge_available = gauge(
            "judge_available",
            "1 while the judge answers, 0 while it is unavailable (calls held, traces unacked)",
        )
        self.judge_unavailable_seconds = gauge(
            "judge_unavailable_seconds",
            "Seconds the judge has been unavailable since the worker started (it only grows)",
        )
        self.budget_used = gauge(
            "judge_budget_used_ratio",
            "Share of each spend budget (SCORER_JUDGE_BUDGETS) used in its current window; "
            "at 1 its rules publish skipped scores (budget exhausted) until the window resets",
            ("rule", "model", "window"),
        )
        self.dlq_messages = counter(
            "dlq_messages", "Messages sent to the dead-letter topic", ("topic", "reason")
        )
        self.scoring_overhead = histogram(
            "scoring_overhead_seconds",
            "Engine time per trace beyond the judge call: parse, filter, look up, check, render, "
            "parse the answer, build events",
            [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1],
        )
        self.publish_latency = histogram(
            "publish_latency_seconds",
            "From handing a trace's scores to the producer to the broker acknowledging all of them",
            [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5],
        )
        self.in_flight = gauge(
            "traces_in_flight", "Traces received and not yet acknowledged (scoring or publishing)"
        )
        self.consumer_lag = gauge(
            "consumer_lag",
            "Messages not yet committed in this worker's partitions of each input topic "
            "(high watermark - committed offset)",
            ("topic",),
        )
        self.offset_gaps = counter(
            "offset_gaps",
            "Offsets missing from a fetch of a source or internal topic: detected (fetched "
            "again), filled (the refetch returned them), persistent (still missing after the "
            "patience, delivered past and logged with the offsets)",
            ("topic", "outcome"),
        )
        self.commits_held = counter(
            "commits_held",
            "Offset commits put off until the producer has delivered everything "
            "(producer_not_drained), or refused because a changelog write failed "
            "(changelog_write_failed: the worker stops)",
            ("reason",),
        )
        self.membership_unconfirmed = counter(
            "membership_unconfirmed",
            "Records that came while the worker's group membership was unconfirmed (its "
            "lease lapsed in a long pause): confirmed (processed once the coordinator "
            "answered), left (the partition was revoked: left to its next owner)",
            ("outcome",),
        )
        self.threads_open = gauge(
            "threads_open", "Open threads (conversations and sessions) in this worker's partitions"
        )
        self.thread_pending_closes = gauge(
            "thread_pending_closes", "Thread closes whose scores are not yet published"
        )
        self.thread_events = counter(
            "thread_events", "Events applied to thread state, by type", ("type",)
        )
        self.thread_closes = counter(
            "thread_closes",
            "Thread closes by kind and reason (end, inactivity, inactivity_event_time)",
            ("kind", "reason"),
        )
        self.thread_turns_at_close = histogram(
            "thread_turns_at_close",
            "Turns a thread holds when it closes",
            [0, 1, 2, 5, 10, 20, 50, 100, 200, 500],
            ("kind",),
        )
        self.thread_close_delay = histogram(
            "thread_close_delay_seconds",
            "How long after its inactivity deadline (last arrival + gap) an idle thread closed",
            [0.25, 0.5, 1, 1.5, 2, 3, 4, 5, 7.5, 10, 30, 60, 300],
        )
        self.pair_traces = counter(
            "pair_traces",
            "Traces of comparison pairs, by outcome (paired: one side of its pair; ignored: "
            "its pair had its variant already, or was decided)",
            ("outcome",),
        )
        self.otlp_spans = counter(
            "otlp_spans",
            "OpenTelemetry spans read, by outcome (kept, duplicate, late, dropped)",
            ("outcome",),
        )
        self.otlp_traces = counter(
            "otlp_traces_assembled",
            "Traces assembled from OpenTelemetry spans, by root span (ended, missing)",
            ("root",),
        )
        self.otlp_gathering = gauge(
            "otlp_traces_gathering",
            "Traces being gathered from spans in this worker's partitions (with the markers "
            "of those assembled lately)",
        )
        self.otlp_clock_lag = gauge(
            "otlp_clock_lag_seconds",
            "How far the span assembly clock is behind the wall clock: the Kafka time the "
            "least read spans partition is read up to (a backlog holds traces back)",
        )
        self.worker_info = gauge("worker_info", "Worker build and rule set", ("version", "ruleset"))
        # Label children resolved once: ``labels()`` on every trace shows on the hot path.
        self._children: dict[tuple[int | str, ...], MetricWrapperBase] = {}
        # the per-trace callbacks keep their own caches, keyed by the labels alone
        self._decision_children: dict[tuple[str, str, str], Counter] = {}
        self._consumed_children: dict[str, Counter] = {}
        self._score_children: dict[
            tuple[str, str, str], tuple[dict[str, Counter], Histogram, Counter]
        ] = {}

    @classmethod
    def default(cls) -> ScorerMetrics:
        """The process's metrics on prometheus_client's global registry (built once)."""
        return _default()

    def _child(self, metric: M, *labels: str) -> M:
        key: tuple[int | str, ...] = (id(metric), *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child  # type: ignore[return-value]  # the same metric type, by its key

    def exposition(self) -> tuple[bytes, str]:
        """The /metrics body and its content type (aiohttp wants the charset apart)."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST.split(";")[0]

    # -- input and delivery ----------------------------------------------------------

    def on_trace_consumed(self, topic: str) -> None:
        try:
            child = self._consumed_children[topic]
        except KeyError:
            child = self._consumed_children[topic] = self.traces_consumed.labels(topic)
        child.inc()

    def on_dead_letter(self, topic: str, reason: str) -> None:
        self._child(self.dlq_messages, topic, reason).inc()

    def on_scoring_overhead(self, seconds: float) -> None:
        self.scoring_overhead.observe(seconds)

    def on_publish_latency(self, seconds: float) -> None:
        self.publish_latency.observe(seconds)

    def on_score_published(self, score: ScoreEvent) -> None:
        # every score: the three series of one (rule, pack, criterion) resolved together
        labels = (score.rule_id, score.pack, score.criterion or "")
        try:
            by_status, value, low = self._score_children[labels]
        except KeyError:
            by_status = {}
            value, low = self.score_value.labels(*labels), self.low_scores.labels(*labels)
            self._score_children[labels] = (by_status, value, low)
        try:
            counted = by_status[score.status]
        except KeyError:
            counted = by_status[score.status] = self.scores.labels(*labels, score.status)
        counted.inc()
        if score.status == "ok" and score.value is not None:
            value.observe(score.value)
            # the low-score series exists from a rule's first ok score, so its share reads 0,
            # not nothing, until a low score comes
            low.inc(1 if is_low(score.value, score.higher_is_better) else 0)

    def on_offset_gap(self, topic: str, outcome: str) -> None:
        self._child(self.offset_gaps, topic, outcome).inc()

    def on_commit_held(self, reason: str) -> None:
        self._child(self.commits_held, reason).inc()

    def on_membership_unconfirmed(self, outcome: str) -> None:
        self._child(self.membership_unconfirmed, outcome).inc()

    def on_consumer_lag(self, topic: str, lag: int) -> None:
        self._child(self.consumer_lag, topic).set(lag)

    def watch_in_flight(self, read: Callable[[], float]) -> None:
        self.in_flight.set_function(read)

    # -- engine ----------------------------------------------------------------------

    def on_decision(self, rule: str, pack: str, outcome: str) -> None:
        key = (rule, pack, outcome)
        try:
            child = self._decision_children[key]
        except KeyError:
            child = self._decision_children[key] = self.decisions.labels(*key)
        child.inc()

    def on_rules_loaded(
        self, version: str, digest: str, directions: list[tuple[str, str, str, int]]
    ) -> None:
        self.worker_info.clear()
        self.worker_info.labels(version=version, ruleset=digest).set(1)
        self.rule_direction.clear()
        self.rule_silent.clear()
        for rule, pack, scope, direction in directions:
            self.rule_direction.labels(rule=rule, pack=pack, scope=scope).set(direction)
            if scope == "trace":
                self.rule_silent.labels(rule=rule, pack=pack).set(0)

    def on_rule_silent(self, rule: str, pack: str, silent: bool) -> None:
        self.rule_silent.labels(rule=rule, pack=pack).set(1 if silent else 0)

    # -- judge -----------------------------------------------------------------------

    def on_judge_call(
        self,
        model: str,
        outcome: str,
        seconds: float | None,
        usage: TokenUsage | None = None,
        cost_usd: float | None = None,
    ) -> None:
        self._child(self.judge_calls, model, outcome).inc()
        if seconds is not None:
            self._child(self.judge_latency, model, outcome).observe(seconds)
        if usage is not None:
            self._child(self.judge_tokens, model, "prompt", outcome).inc(usage.prompt_tokens)
            self._child(self.judge_tokens, model, "completion", outcome).inc(
                usage.completion_tokens
            )
        if cost_usd is not None:
            self._child(self.judge_cost, model, outcome).inc(cost_usd)

    def on_judge_retry(self, model: str, reason: str) -> None:
        self._child(self.judge_retries, model, reason).inc()

    def watch_budget(self, rule: str, model: str, window: str, used: Callable[[], float]) -> None:
        self.budget_used.labels(rule=rule, model=model, window=window).set_function(used)

    def watch_judge(
        self, available: Callable[[], float], unavailable_seconds: Callable[[], float]
    ) -> None:
        self.judge_available.set_function(available)
        self.judge_unavailable_seconds.set_function(unavailable_seconds)

    # -- threads ---------------------------------------------------------------------

    def on_thread_event(self, event_type: str) -> None:
        self._child(self.thread_events, event_type).inc()

    def on_thread_close(self, kind: str, reason: str, turns: int) -> None:
        self._child(self.thread_closes, kind, reason).inc()
        self._child(self.thread_turns_at_close, kind).observe(turns)

    def on_thread_close_delay(self, seconds: float) -> None:
        self.thread_close_delay.observe(seconds)

    def on_pair_trace(self, outcome: str) -> None:
        self._child(self.pair_traces, outcome).inc()

    def watch_threads(
        self, open_threads: Callable[[], float], pending: Callable[[], float]
    ) -> None:
        self.threads_open.set_function(open_threads)
        self.thread_pending_closes.set_function(pending)

    # -- OpenTelemetry input ---------------------------------------------------------

    def on_otlp_spans(self, outcome: str, count: int) -> None:
        self._child(self.otlp_spans, outcome).inc(count)

    def on_otlp_trace(self, root: str) -> None:
        self._child(self.otlp_traces, root).inc()

    def watch_otlp(self, gathering: Callable[[], float], clock_lag: Callable[[], float]) -> None:
        self.otlp_gathering.set_function(gathering)
        self.otlp_clock_lag.set_function(clock_lag)


@cache
def _default() -> ScorerMetrics:
    return ScorerMetrics(REGISTRY)


def is_low(value: float, higher_is_better: bool) -> bool:
    """A normalised score on the bad side of the middle of its scale (the middle is neither)."""
    return value < 0.5 if higher_is_better else value > 0.5


def sample_value(text: str, name: str, **labels: str) -> float:
    """The first sample called ``name`` whose labels include ``labels``, read from a /metrics
    page (0.0 when there is none): for tests and benchmarks that watch a worker."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and labels.items() <= sample.labels.items():
                return float(sample.value)
    return 0.0
