"""Every metric the worker exports, declared in one place with one prefix: names, help
texts, labels and buckets (as Faust's ``FaustMetrics`` declares what its
``PrometheusMonitor`` updates)."""

from __future__ import annotations

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram, Summary

from .canary import CanaryMetrics
from .pacing import PREFIX, JudgePacing
from .pair_order import PairOrderMetrics
from .tools import ToolCallMetrics


class MetricFamilies:
    """The worker's metrics, declared on ``registry``; ``ScorerMetrics`` updates them."""

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
            "Rule decisions per trace: filtered, sampled_out, skipped, scored, error, deferred (to a batch)",
            ("rule", "pack", "outcome"),
        )
        self.comparison_contradictions = counter(
            "comparison_contradictions",
            "Comparison preferences that favour the response whose overall rating is strictly "
            "worse (seed 001: the ranking must align with the ratings); flagged on the "
            "preference score, its value kept",
            ("rule", "pack"),
        )
        # ``variant_a``/``variant_b``: the rule file's ``pair.variants`` (traffic with any
        # other variant is not paired), ``project`` bounded as on the score metrics
        self.pair_preferences = counter(
            "pair_preferences",
            "Comparison preferences published ok (a rule's own, not a shadow's), by the side "
            "preferred: a, b, tie (the ranking's 0) or inconsistent (judged in both orders, the "
            "preference flipped with the order: left out of the win rate); B's win rate counts "
            "a tie as half a win",
            ("rule", "pack", "project", "variant_a", "variant_b", "preferred"),
        )
        # ``criterion``: which score of a rubric rule ("" for one-score rules); a closed set,
        # declared in the rule files. ``project``: the score's project, bounded (the kept
        # projects' names, "other" for the rest: metrics/projects.py).
        self.scores = counter(
            "scores",
            "Score events published, by status and project (unkept projects: other)",
            ("rule", "pack", "criterion", "project", "status"),
        )
        self.score_value = histogram(
            "score_value",
            "Normalised score value (0..1) of ok scores, by project (unkept projects: other)",
            [round(i / 10, 1) for i in range(1, 11)],
            ("rule", "pack", "criterion", "project"),
        )
        # the same values' count and sums of their powers, from one place, so that a baseline's
        # mean, spread and skew never mix a worker that exports one with one that does not
        # (design record 48: the score-drop test)
        self.score_moments = counter(
            "score_moments",
            "Sums of the powers 0 to 3 of the normalised values of ok scores (power 0: their "
            "count): the mean, spread and skew the score-drop test reads; by project",
            ("rule", "pack", "criterion", "project", "power"),
        )
        self.low_scores = counter(
            "low_scores",
            "Ok scores on the bad side of their scale: below the middle, or above it for rules "
            "where lower is better; by project (unkept projects: other)",
            ("rule", "pack", "criterion", "project"),
        )
        self.errors_counted = Summary(
            f"{PREFIX}_errors_counted_value",
            "Error scores of rules whose output.errors_count_as counts them in aggregates: "
            "_count one per score the rule would have published (criterion), _sum the "
            "normalised values they count as; a pass rate adds both to scorer_score_value's",
            ("rule", "pack", "criterion", "project"),
            registry=registry,
        )
        self.shadow_scores = counter(
            "shadow_scores",
            "Score events of shadow judges (a rule's shadow variants), by status: kept out of "
            "the score metrics above and the alerts that read them",
            ("rule", "pack", "variant", "status"),
        )
        self.cascade_verdicts = counter(
            "cascade_verdicts",
            "A cascade rule's verdicts by the tier that decided (first: the cheap tier; "
            "judge: the rule's own) and why (accepted, low_confidence, no_confidence, "
            "first_failed, audit)",
            ("rule", "pack", "tier", "reason"),
        )
        self.redacted = counter(
            "redacted_values",
            "Values masked in the judge's copy of a rule's prompt (judge.redact), by kind",
            ("rule", "pack", "kind"),
        )
        self.cascade_cost = counter(
            "cascade_cost_usd",
            "Estimated cost of a cascade rule's judge calls by tier (first: every first-tier "
            "call, the audit's included; judge: the rule's own judge), in USD",
            ("rule", "pack", "tier"),
        )
        self.prompt_cuts = counter(
            "prompt_cuts",
            "Judged rules whose prompt was over its cap (judge.max_prompt_tokens or "
            "SCORER_JUDGE_MAX_PROMPT_TOKENS) and was cut in the middle to fit, per target",
            ("rule", "pack"),
        )
        self.rule_direction = gauge(
            "rule_direction",
            "Each loaded rule: 1 when a higher score is better, -1 when lower is better",
            ("rule", "pack", "scope"),
        )
        self.rule_alert_min_drop = gauge(
            "rule_alert_min_drop",
            "Each loaded rule: the smallest drop of its mean score that pages (alert.min_drop, "
            "on the normalised 0..1 scale)",
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
        self.judge_prompt_cached_tokens = counter(
            "judge_prompt_cached_tokens",
            "Prompt tokens the provider served from its own prompt cache (usage."
            "prompt_tokens_details.cached_tokens), priced at the model's cached-input rate",
            ("model",),
        )
        self.judge_prompt_cache_saved = counter(
            "judge_prompt_cache_saved_usd",
            "Estimated US dollars the provider's prompt cache saved: its cached tokens at the "
            "input price less at the cached-input price (SCORER_JUDGE_PRICES)",
            ("model",),
        )
        self.rule_judge_cost = counter(
            "rule_judge_cost_usd",
            "Estimated judge cost in US dollars per rule and the model that judged it "
            "(every call of its scores, unusable answers too; models without a price are not "
            "counted)",
            ("rule", "pack", "model"),
        )
        self.judge_available = gauge(
            "judge_available",
            "1 while the judge answers, 0 while it is unavailable (calls held, traces unacked)",
        )
        self.judge_unavailable_seconds = gauge(
            "judge_unavailable_seconds",
            "Seconds the judge has been unavailable since the worker started (it only grows)",
        )
        self.judge_cache_lookups = counter(
            "judge_cache_lookups",
            "Judge calls looked up in the verdict cache: hit (no call made) or miss",
            ("rule", "pack", "model", "outcome"),
        )
        self.judge_cache_saved_tokens = counter(
            "judge_cache_saved_tokens",
            "Tokens the cached verdicts had used, not spent again on a hit, by kind "
            "(prompt, completion)",
            ("rule", "pack", "model", "kind"),
        )
        self.judge_cache_saved_cost = counter(
            "judge_cache_saved_cost_usd",
            "Estimated US dollars a hit did not spend (the cached verdict's usage at "
            "SCORER_JUDGE_PRICES; models without a price are not counted)",
            ("rule", "pack", "model"),
        )
        self.judge_cache_entries = gauge(
            "judge_cache_entries", "Verdicts the worker's verdict cache holds"
        )
        self.judge_cache_bytes = gauge(
            "judge_cache_bytes", "Estimated bytes of the verdicts the worker's cache holds"
        )
        self.batch_jobs = counter(
            "batch_jobs",
            "Judge jobs of batch rules (judge.mode: batch, or a spent defer budget): deferred "
            "(kept pending for a batch) and finished (scored from the batch's answers)",
            ("rule", "pack", "event"),
        )
        self.batches = counter(
            "batches",
            "Batches this worker submitted (submitted) and saw finish, by status (completed, "
            "failed, expired, cancelled)",
            ("status",),
        )
        self.batch_jobs_pending = gauge(
            "batch_jobs_pending",
            "Judge jobs waiting for a batch in the partitions this worker owns",
        )
        self.batch_oldest_job = gauge(
            "batch_oldest_job_seconds",
            "How long the oldest judge job waiting for a batch in this worker's partitions has "
            "waited (0: none)",
        )
        self.agreement_pairs = counter(
            "agreement_pairs",
            "Pairs joined for judge agreement: a human label (reference human) or the "
            "primary judge's score (reference primary) with a judge's score",
            ("rule", "reference"),
        )
        self.agreement_lookback_records = counter(
            "agreement_lookback_records",
            "Internal agreement events read back for labels that came after their scores",
        )
        self.held_entries = gauge(
            "held_entries", "Entries a worker's table, index or cache holds", ("structure",)
        )
        self.held_bytes = gauge(
            "held_bytes", "Bytes a worker's table, index or cache holds", ("structure",)
        )
        self.memory_budget = gauge("memory_budget_bytes", "The worker's budget (SCORER_MEMORY_MB)")
        self.judge_agreement = gauge(
            "judge_agreement",
            "How far a rule's judge agrees with its reference over a window, on the rule's "
            "own scale: kappa and accuracy (choice rules), mae and spearman (numeric ones), "
            "and the count of pairs; reference human (labels) or primary (for a shadow "
            "variant); exported by the one worker that measures",
            ("rule", "criterion", "model", "variant", "reference", "measure", "window"),
        )
        self.judge_agreement_threshold = gauge(
            "judge_agreement_threshold",
            "A rule's agreement bound (its agreement: field): the measure must stay at or above "
            "it (direction min: kappa, accuracy, spearman) or at or below (max: mae)",
            ("rule", "measure", "window", "direction"),
        )
        self.judge_agreement_min_labels = gauge(
            "judge_agreement_min_labels",
            "Labelled targets a rule's agreement bound needs in its window before it holds",
            ("rule", "window"),
        )
        self.judge_pacing = JudgePacing()
        registry.register(self.judge_pacing)
        self.canary = CanaryMetrics(registry)  # the judge canary's (design record 47)
        self.tool_calls = ToolCallMetrics(registry)  # tool-call scores by tool (issue 50)
        self.pair_order = PairOrderMetrics(registry)  # the judge's position (issue 51)
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
        self.trace_batch = histogram(
            "trace_batch_size",
            "Traces taken from the stream and scored together (SCORER_TRACE_BATCH_MAX, _WAIT_MS)",
            [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024],
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
        self.rules_reloads = counter(
            "rules_reloads",
            "Rule files looked at again while running (changed on disk, or SIGHUP), by outcome: "
            "reloaded, invalid (the running set stays), needs_restart (the running set stays)",
            ("outcome",),
        )

    def on_pair_order(
        self, rule: str, pack: str, model: str, slots: list[str], flipped: bool
    ) -> None:
        """A pair judged in both orders (the observer hook, counted here)."""
        self.pair_order.judged(rule, pack, model, slots, flipped)
