"""The observer callbacks on the worker's metrics: ``ScorerMetrics``, the observer the worker
hands to its engine, judge, thread and delivery code, each callback updating the metrics it
concerns (declared in ``families.py``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from functools import cache
from typing import TYPE_CHECKING, Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    generate_latest,
)

from ..agreement.preferences import PREFERRED_SIDES
from ..models import TokenUsage
from .projects import ProjectLabels
from .scores import ScoreCallbacks

if TYPE_CHECKING:
    from ..canary.compare import CanaryRound
    from ..judge.fleet import FleetReading


class ScorerMetrics(ScoreCallbacks):
    """The worker's metrics on ``registry``, updated through the observer callbacks."""

    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        super().__init__(registry)
        # the per-trace callbacks keep their own caches, keyed by the labels alone
        self._decision_children: dict[tuple[str, str, str], Counter] = {}
        self._consumed_children: dict[str, Counter] = {}
        # the score metrics' project label, bounded (automatic until the worker configures it)
        self.projects = ProjectLabels()

    @classmethod
    def default(cls) -> ScorerMetrics:
        """The process's metrics on prometheus_client's global registry (built once)."""
        return _default()

    def label_projects(self, projects: ProjectLabels) -> None:
        """Which projects the score metrics label by name (``SCORER_METRIC_PROJECTS``)."""
        self.projects = projects

    def exposition(self) -> tuple[bytes, str]:
        """The /metrics body and its content type (aiohttp wants the charset apart)."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST.split(";")[0]

    # -- input and delivery ----------------------------------------------------------

    def on_trace_consumed(self, topic: str, count: int = 1) -> None:
        try:
            child = self._consumed_children[topic]
        except KeyError:
            child = self._consumed_children[topic] = self.traces_consumed.labels(topic)
        child.inc(count)

    def on_dead_letter(self, topic: str, reason: str) -> None:
        self._child(self.dlq_messages, topic, reason).inc()

    def on_scoring_overhead(self, seconds: float) -> None:
        self.scoring_overhead.observe(seconds)

    def on_publish_latency(self, seconds: float) -> None:
        self.publish_latency.observe(seconds)

    def on_trace_batch(self, size: int) -> None:
        self.trace_batch.observe(size)

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

    def on_comparison_contradiction(self, rule: str, pack: str) -> None:
        self._child(self.comparison_contradictions, rule, pack).inc()

    def on_pair_preference(
        self, rule: str, pack: str, project: str, variant_a: str, variant_b: str, preferred: str
    ) -> None:
        labels = (rule, pack, project, variant_a, variant_b)
        self._child(self.pair_preferences, *labels, preferred).inc()
        # the pair's other outcomes from 0: a win rate's increase() sees the first of each
        for other in PREFERRED_SIDES:
            self._child(self.pair_preferences, *labels, other)

    def on_prompt_cut(self, rule: str, pack: str) -> None:
        self._child(self.prompt_cuts, rule, pack).inc()

    def on_cascade(self, rule: str, pack: str, tier: str, reason: str) -> None:
        self.cascade_verdicts.labels(rule=rule, pack=pack, tier=tier, reason=reason).inc()

    def on_cascade_cost(self, rule: str, pack: str, tier: str, usd: float) -> None:
        self.cascade_cost.labels(rule=rule, pack=pack, tier=tier).inc(usd)

    def on_redacted(self, rule: str, pack: str, counts: dict[str, int]) -> None:
        for kind, n in counts.items():
            self.redacted.labels(rule=rule, pack=pack, kind=kind).inc(n)

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

    def on_rules_reload(self, outcome: str, projects: Iterable[str] = ()) -> None:
        self.rules_reloads.labels(outcome).inc()
        if outcome == "reloaded":
            self.projects.name(projects)

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

    def on_judge_prompt_cache(
        self, model: str, cached_tokens: int, saved_usd: float | None
    ) -> None:
        self._child(self.judge_prompt_cached_tokens, model).inc(cached_tokens)
        if saved_usd is not None:
            self._child(self.judge_prompt_cache_saved, model).inc(saved_usd)

    def on_rule_cost(self, rule: str, pack: str, model: str, usd: float) -> None:
        self.rule_judge_cost.labels(rule=rule, pack=pack, model=model).inc(usd)

    def on_canary_round(self, found: CanaryRound, cost_usd: float | None) -> None:
        self.canary.round(found, cost_usd)

    def on_canary_stopped(self) -> None:
        self.canary.clear()

    def on_judge_cache(
        self,
        rule: str,
        pack: str,
        model: str,
        outcome: str,
        saved: TokenUsage | None = None,
        saved_usd: float | None = None,
    ) -> None:
        self._child(self.judge_cache_lookups, rule, pack, model, outcome).inc()
        if saved is not None:
            tokens = self.judge_cache_saved_tokens
            self._child(tokens, rule, pack, model, "prompt").inc(saved.prompt_tokens)
            self._child(tokens, rule, pack, model, "completion").inc(saved.completion_tokens)
        if saved_usd is not None:
            self._child(self.judge_cache_saved_cost, rule, pack, model).inc(saved_usd)

    def watch_judge_cache(self, entries: Callable[[], float], size: Callable[[], float]) -> None:
        self.judge_cache_entries.set_function(entries)
        self.judge_cache_bytes.set_function(size)

    def on_batch_job(self, rule: str, pack: str, event: str) -> None:
        self._child(self.batch_jobs, rule, pack, event).inc()

    def on_batch(self, status: str) -> None:
        self._child(self.batches, status).inc()

    def on_batch_pending(self, jobs: int, oldest_s: float) -> None:
        self.batch_jobs_pending.set(jobs)
        self.batch_oldest_job.set(oldest_s)

    def on_agreement_joined(self, rule: str, reference: str) -> None:
        self._child(self.agreement_pairs, rule, reference).inc()

    def on_agreement_looked_back(self, runs: int, records: int, found: int) -> None:
        self.agreement_lookback_records.inc(records)

    def watch_held(
        self, structure: str, entries: Callable[[], float], size: Callable[[], float] | None
    ) -> None:
        self.held_entries.labels(structure=structure).set_function(entries)
        if size is not None:
            self.held_bytes.labels(structure=structure).set_function(size)

    def watch_memory(
        self, budget_bytes: int, rocksdb: Callable[[], Mapping[str, int]] | None
    ) -> None:
        self.memory_budget.set(budget_bytes)
        if rocksdb is not None:
            for kind in ("usage", "write_buffers", "data_blocks", "index_filter_blocks"):
                child = self.held_bytes.labels(structure=f"rocksdb_{kind}")
                child.set_function(lambda kind=kind: rocksdb().get(kind, 0))  # type: ignore[misc]

    def on_agreement_thresholds(
        self, thresholds: list[tuple[str, str, str, str, float, int]]
    ) -> None:
        self.judge_agreement_threshold.clear()
        self.judge_agreement_min_labels.clear()
        for rule, measure, window, direction, threshold, min_labels in thresholds:
            labels = {"rule": rule, "measure": measure, "window": window, "direction": direction}
            self.judge_agreement_threshold.labels(**labels).set(threshold)
            self.judge_agreement_min_labels.labels(rule=rule, window=window).set(min_labels)

    def on_alert_bounds(self, min_drops: list[tuple[str, str, str, float]]) -> None:
        self.rule_alert_min_drop.clear()
        for rule, pack, scope, min_drop in min_drops:
            self.rule_alert_min_drop.labels(rule=rule, pack=pack, scope=scope).set(min_drop)

    def on_agreement_measured(self, measures: Mapping[Any, Mapping[str, Any]]) -> None:
        self.judge_agreement.clear()  # a series no longer measured (here) disappears
        for (series, window), estimates in measures.items():
            for name, estimate in estimates.items():
                if estimate.value is None:
                    continue  # undefined (a constant side, too few pairs): no sample
                self.judge_agreement.labels(
                    rule=series.rule,
                    criterion=series.criterion,
                    model=series.model,
                    variant=series.variant,
                    reference=series.reference,
                    measure=name,
                    window=window,
                ).set(estimate.value)

    def watch_budget(self, rule: str, model: str, window: str, used: Callable[[], float]) -> None:
        self.budget_used.labels(rule=rule, model=model, window=window).set_function(used)

    def watch_judge(
        self, available: Callable[[], float], unavailable_seconds: Callable[[], float]
    ) -> None:
        self.judge_available.set_function(available)
        self.judge_unavailable_seconds.set_function(unavailable_seconds)

    def watch_judge_pacing(
        self, model: str, pace: Callable[[], tuple[float, str]], token_limit: Callable[[], float]
    ) -> None:
        self.judge_pacing.readers[model] = (pace, token_limit)
        # from 0, so that the quota and rate-limit alerts' increase() counts a model's first
        # refusals
        for outcome in ("quota_exhausted", "rate_limited"):
            self._child(self.judge_calls, model, outcome)

    def watch_judge_fleet(self, model: str, read: Callable[[], FleetReading]) -> None:
        self.judge_pacing.fleets[model] = read

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
