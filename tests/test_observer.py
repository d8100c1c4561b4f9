"""The observer callbacks: no-ops on the base class, metric updates on ScorerMetrics."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from stream.metrics import ScorerMetrics
from stream.models import Scale, ScoreEvent, Status, TokenUsage
from stream.observer import Observer


@pytest.fixture
def metrics() -> ScorerMetrics:
    return ScorerMetrics(CollectorRegistry())


def value(metrics: ScorerMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(f"scorer_{name}", labels)


def score(status: Status, v: float | None, higher_is_better: bool = True) -> ScoreEvent:
    return ScoreEvent(
        score_id="s",
        rule_id="r",
        pack="p",
        rule_version=1,
        scope="trace",
        criterion=None,
        target_id="t",
        project_name="proj",
        value=v,
        raw_value=v,
        scale=Scale(min=0, max=1),
        higher_is_better=higher_is_better,
        status=status,
    )


def test_base_observer_callbacks_do_nothing_and_metrics_implement_them_all() -> None:
    observer = Observer()  # callable without a registry: pure code needs none
    observer.on_score_published(score("ok", 0.1))
    observer.on_judge_call("m", "ok", 1.0, TokenUsage(prompt_tokens=1), 0.5)
    observer.on_rules_loaded("v", "d", [("r", "p", "trace", 1)])
    callbacks = {name for name in vars(Observer) if name.startswith(("on_", "watch_"))}
    # 29, + on_judge_prompt_cache and on_rule_cost (issue 28: provider prompt caching, cost per
    # rule), + the verdict cache's on_judge_cache and watch_judge_cache (issue 28, item 1)
    # + batch judging's on_batch_job, on_batch and on_batch_pending (issue 28, item 2)
    # + on_pair_preference (issue 29, item 5: A/B win rates)
    # + on_agreement_joined, on_agreement_measured, on_agreement_thresholds (issue 29, item 2)
    # + on_trace_batch (issue 30, item 1: traces scored together)
    # + on_agreement_looked_back (issue 43: the join reads scores back), watch_memory (the
    # budget, RocksDB's cache), watch_held (what a worker's tables, indexes and caches hold)
    # + on_cascade, on_cascade_cost (issue 46: which tier of a cascade decided, its cost)
    # + on_redacted (issue 47: values masked in the judge's copy, by kind)
    # + watch_judge_fleet (issue 48: the workers sharing the judge's account, on /metrics)
    # + on_canary_round, on_canary_stopped (issue 49, item 2: the judge canary's gauges)
    # + on_alert_bounds (issue 49, item 1: each rule's alert.min_drop)
    # + on_pair_order (issue 51: pairs judged in both orders; implemented by the families)
    # + on_scores_published (issue 52: a batch's scores counted at once)
    assert len(callbacks) == 53
    # every one implemented, by ScorerMetrics itself or the families it is built on
    assert {
        name for name in callbacks if getattr(ScorerMetrics, name) is getattr(Observer, name)
    } == set()


def test_scores_count_by_status_and_low_scores_by_direction(metrics: ScorerMetrics) -> None:
    for published in (
        score("ok", 0.2),
        score("ok", 0.9),
        score("ok", 0.8, False),
        score("error", None),
    ):
        metrics.on_score_published(published)
    labels = {"rule": "r", "pack": "p", "criterion": "", "project": "proj"}
    assert value(metrics, "scores_total", **labels, status="ok") == 3
    assert value(metrics, "scores_total", **labels, status="error") == 1
    assert value(metrics, "low_scores_total", **labels) == 2  # 0.2 up, and 0.8 down
    assert value(metrics, "score_value_count", **labels) == 3
    assert value(metrics, "score_value_sum", **labels) == pytest.approx(1.9)


def test_an_ok_score_that_is_not_low_still_opens_the_low_series(metrics: ScorerMetrics) -> None:
    metrics.on_score_published(score("ok", 0.5))
    labels = {"rule": "r", "pack": "p", "criterion": "", "project": "proj"}
    assert value(metrics, "low_scores_total", **labels) == 0.0


def test_judge_calls_count_tokens_and_cost_only_when_given(metrics: ScorerMetrics) -> None:
    metrics.on_judge_call("m", "timeout", 2.0)
    metrics.on_judge_call("m", "ok", 0.5, TokenUsage(prompt_tokens=100, completion_tokens=20), 0.01)
    metrics.on_judge_retry("m", "rate_limited")
    assert value(metrics, "judge_calls_total", model="m", outcome="timeout") == 1
    assert value(metrics, "judge_latency_seconds_count", model="m", outcome="ok") == 1
    assert value(metrics, "judge_tokens_total", model="m", kind="prompt", outcome="ok") == 100
    assert value(metrics, "judge_tokens_total", model="m", kind="completion", outcome="ok") == 20
    assert value(metrics, "judge_tokens_total", model="m", kind="prompt", outcome="timeout") is None
    assert value(metrics, "judge_cost_usd_total", model="m", outcome="ok") == 0.01
    assert value(metrics, "judge_cost_usd_total", model="m", outcome="timeout") is None
    assert value(metrics, "judge_retries_total", model="m", reason="rate_limited") == 1


def test_rules_loaded_replaces_worker_info_and_directions(metrics: ScorerMetrics) -> None:
    metrics.on_rules_loaded("1.0", "aaa", [("r1", "p", "trace", 1), ("r2", "p", "thread", -1)])
    metrics.on_rules_loaded("1.1", "bbb", [("r2", "p", "thread", 1)])
    assert value(metrics, "worker_info", version="1.0", ruleset="aaa") is None
    assert value(metrics, "worker_info", version="1.1", ruleset="bbb") == 1
    assert value(metrics, "rule_direction", rule="r1", pack="p", scope="trace") is None
    assert value(metrics, "rule_direction", rule="r2", pack="p", scope="thread") == 1


def test_input_thread_and_delivery_callbacks(metrics: ScorerMetrics) -> None:
    metrics.on_trace_consumed("traces")
    metrics.on_trace_consumed("traces")
    metrics.on_dead_letter("traces", "invalid_json")
    metrics.on_decision("r", "p", "filtered")
    metrics.on_consumer_lag("traces", 7)
    metrics.on_consumer_lag("traces", 3)
    metrics.on_thread_event("turn")
    metrics.on_thread_close("session", "end", 4)
    metrics.on_thread_close_delay(1.2)
    metrics.on_scoring_overhead(0.001)
    metrics.on_publish_latency(0.02)
    metrics.watch_in_flight(lambda: 5.0)
    metrics.watch_threads(lambda: 2.0, lambda: 1.0)
    assert value(metrics, "traces_consumed_total", topic="traces") == 2
    assert value(metrics, "dlq_messages_total", topic="traces", reason="invalid_json") == 1
    assert value(metrics, "decisions_total", rule="r", pack="p", outcome="filtered") == 1
    assert value(metrics, "consumer_lag", topic="traces") == 3
    assert value(metrics, "thread_events_total", type="turn") == 1
    assert value(metrics, "thread_closes_total", kind="session", reason="end") == 1
    assert value(metrics, "thread_turns_at_close_sum", kind="session") == 4
    assert value(metrics, "thread_close_delay_seconds_count") == 1
    assert value(metrics, "scoring_overhead_seconds_count") == 1
    assert value(metrics, "publish_latency_seconds_sum") == 0.02
    assert value(metrics, "traces_in_flight") == 5
    assert (value(metrics, "threads_open"), value(metrics, "thread_pending_closes")) == (2, 1)


def test_offset_gaps_and_held_commits_are_counted(metrics: ScorerMetrics) -> None:
    metrics.on_offset_gap("traces", "detected")
    metrics.on_offset_gap("traces", "filled")
    metrics.on_offset_gap("traces", "detected")
    metrics.on_commit_held("producer_not_drained")
    assert value(metrics, "offset_gaps_total", topic="traces", outcome="detected") == 2
    assert value(metrics, "offset_gaps_total", topic="traces", outcome="filled") == 1
    assert value(metrics, "commits_held_total", reason="producer_not_drained") == 1
    metrics.on_membership_unconfirmed("left")
    assert value(metrics, "membership_unconfirmed_total", outcome="left") == 1


def test_spans_and_assembled_traces_are_counted(metrics: ScorerMetrics) -> None:
    metrics.on_otlp_spans("kept", 3)
    metrics.on_otlp_spans("late", 1)
    metrics.on_otlp_trace("missing")
    metrics.watch_otlp(lambda: 7, lambda: 2.5)
    assert value(metrics, "otlp_spans_total", outcome="kept") == 3
    assert value(metrics, "otlp_spans_total", outcome="late") == 1
    assert value(metrics, "otlp_traces_assembled_total", root="missing") == 1
    assert value(metrics, "otlp_traces_gathering") == 7
    assert value(metrics, "otlp_clock_lag_seconds") == 2.5


def test_traces_of_pairs_are_counted(metrics: ScorerMetrics) -> None:
    metrics.on_pair_trace("paired")
    metrics.on_pair_trace("paired")
    metrics.on_pair_trace("ignored")
    assert value(metrics, "pair_traces_total", outcome="paired") == 2
    assert value(metrics, "pair_traces_total", outcome="ignored") == 1
    assert value(metrics, "pair_traces_total", outcome="unknown_variant") is None


def test_ok_scores_add_their_count_and_powers_for_the_drop_test(metrics: ScorerMetrics) -> None:
    for v in (0.5, 1.0, 0.2):
        metrics.on_score_published(score("ok", v))
    metrics.on_score_published(score("error", None))
    labels = {"rule": "r", "pack": "p", "criterion": "", "project": "proj"}
    assert value(metrics, "score_value_count", **labels) == 3
    moments = [value(metrics, "score_moments_total", **labels, power=str(k)) for k in range(4)]
    assert moments == pytest.approx([3, 1.7, 1.29, 1.133])
