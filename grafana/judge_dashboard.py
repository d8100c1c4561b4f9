"""The judge-health dashboard: latency, failures, retries, pace, the fleet's row (the workers
sharing the provider account: their pace, shares and refusals), tokens, estimated cost,
batches, and the cascade rules' row (escalation, cost per 1,000 targets by tier, the first
tier's agreement with the judge). Written by ``dashboards.py``."""

from __future__ import annotations

from typing import Any

from panels import MODELS, RULES, SHARE, Panel, Query, bars, graph, quantile, stat


def judge() -> tuple[dict[str, Any], list[Panel]]:
    calls = f"scorer_judge_calls_total{{{MODELS}}}"
    return {
        "uid": "scorer-judge",
        "title": "LLM scorer: judge health",
        "description": "The judge endpoint: latency, failures, retries, tokens, estimated cost.",
    }, [
        stat("Judge calls per minute", f"sum(rate({calls}[$__rate_interval])) * 60"),
        stat(
            "Failed calls (10m)",
            f'(sum(increase(scorer_judge_calls_total{{{MODELS}, outcome!="ok"}}[10m])) '
            f"or vector(0))\n/ sum(increase({calls}[10m]))",
            unit="percentunit",
            thresholds=[(None, "green"), (0.05, "orange"), (0.2, "red")],
        ),
        stat(
            "p95 latency",
            f'histogram_quantile(0.95, sum by (le) (rate(scorer_judge_latency_seconds_bucket{{{MODELS}, outcome="ok"}}[$__rate_interval])))',
            unit="s",
        ),
        stat(
            "Tokens (range)",
            f"sum(increase(scorer_judge_tokens_total{{{MODELS}}}[$__range]))",
        ),
        stat(
            "Estimated cost (range)",
            f"sum(increase(scorer_judge_cost_usd_total{{{MODELS}}}[$__range]))",
            unit="currencyUSD",
            decimals=2,
            description="From token counts and SCORER_JUDGE_PRICES; models without a price "
            "(local ones) are not counted.",
        ),
        stat(
            "Retries per minute",
            f"(sum(rate(scorer_judge_retries_total{{{MODELS}}}[$__rate_interval])) or vector(0)) * 60",
        ),
        graph(
            "Latency of answered calls",
            quantile(0.5, "scorer_judge_latency_seconds", ", model", f'{MODELS}, outcome="ok"'),
            quantile(0.95, "scorer_judge_latency_seconds", ", model", f'{MODELS}, outcome="ok"'),
            quantile(0.99, "scorer_judge_latency_seconds", ", model", f'{MODELS}, outcome="ok"'),
            unit="s",
        ),
        graph(
            "Calls per minute by outcome",
            Query(
                f"sum by (model, outcome) (rate({calls}[$__rate_interval])) * 60",
                "{{model}} {{outcome}}",
            ),
            stack=True,
        ),
        graph(
            "Share of failed calls (10m)",
            Query(f"scorer:judge_error_ratio:10m{{{MODELS}}}", "{{model}}"),
            **SHARE,
            thresholds=[(None, "green"), (0.2, "red")],
            threshold_line=True,
            description="Timeouts, 429s, 5xx and unusable answers, retries included; the "
            "ScorerJudgeErrorRate alert fires above the red line.",
        ),
        graph(
            "Retries per minute by reason",
            Query(
                f"sum by (model, reason) (rate(scorer_judge_retries_total{{{MODELS}}}"
                "[$__rate_interval])) * 60",
                "{{model}} {{reason}}",
            ),
            stack=True,
        ),
        graph(
            "Pace in use (calls a second) and why",
            Query(
                f"max by (model, reason) (scorer_judge_pace_rps{{{MODELS}}})",
                "{{model}} {{reason}}",
            ),
            description="What each model's pacer lets start: announced (the provider's request "
            "or token limit), measured (found by comparing the share of 429s at two rates), "
            "paused (a long Retry-After, or every call refused: one probe at a time), none (0: no "
            "pace of its own, calls start as answers come).",
        ),
        graph(
            "Share of calls answered 429",
            Query(
                f'(sum by (model) (rate(scorer_judge_calls_total{{{MODELS}, outcome="rate_limited"}}'
                "[$__rate_interval]))"
                f" or sum by (model) (rate({calls}[$__rate_interval])) * 0)"
                f" / sum by (model) (rate({calls}[$__rate_interval]))",
                "{{model}}",
            ),
            **SHARE,
            description="Refusals for rate (429 rate_limited) among every attempt; the pacer "
            "aims to keep it under 2 %.",
        ),
        *fleet(),
        graph(
            "Tokens per minute against the announced limit",
            Query(
                f"sum by (model) (rate(scorer_judge_tokens_total{{{MODELS}}}[$__rate_interval])) * 60",
                "{{model}} used",
            ),
            Query(
                f"max by (model) (scorer_judge_token_limit_per_minute{{{MODELS}}})",
                "{{model}} limit",
            ),
            description="Tokens the judge used a minute, and the limit its provider announced "
            "(x-ratelimit-limit-tokens; none shown when it does not announce one).",
        ),
        graph(
            "Tokens per minute",
            Query(
                f"sum by (model, kind) (rate(scorer_judge_tokens_total{{{MODELS}}}"
                "[$__rate_interval])) * 60",
                "{{model}} {{kind}}",
            ),
            stack=True,
        ),
        graph(
            "Estimated cost per hour",
            Query(
                f"sum by (model) (rate(scorer_judge_cost_usd_total{{{MODELS}}}"
                "[$__rate_interval])) * 3600",
                "{{model}}",
            ),
            unit="currencyUSD",
        ),
        bars(
            "Cost per 1,000 traces by rule (range)",
            Query(COST_PER_1000, "{{pack}}/{{rule}}", instant=True),
            unit="currencyUSD",
            decimals=2,
            description="Estimated judge dollars per 1,000 targets each rule scored over the "
            "range (traces; for a thread or pair rule, its closes): every call of the rule's "
            "scores (retries and unusable answers too) over its scored and error decisions. "
            "Verdict cache hits count as scored and cost nothing; filtered, sampled-out and "
            "skipped targets are not counted. Models without a price are left out.",
        ),
        graph(
            "Saved by the provider's prompt cache",
            Query(
                f"sum by (model) (rate(scorer_judge_prompt_cached_tokens_total{{{MODELS}}}"
                "[$__rate_interval])) * 60",
                "{{model}} cached tokens a minute",
            ),
            Query(
                f"sum by (model) (rate(scorer_judge_prompt_cache_saved_usd_total{{{MODELS}}}"
                "[$__rate_interval])) * 3600",
                "{{model}} USD saved an hour",
            ),
            description="Prompt tokens the provider served from its own prompt cache "
            "(usage.prompt_tokens_details.cached_tokens) and the dollars that saved: those "
            "tokens at the input price less at the cached-input price (SCORER_JUDGE_PRICES).",
        ),
        graph(
            "Judge jobs waiting for a batch",
            Query("sum(scorer_batch_jobs_pending)", "jobs pending"),
            Query("max(scorer_batch_oldest_job_seconds) / 3600", "oldest, hours"),
            description="Judge jobs of batch rules (judge.mode: batch, a spent defer budget) "
            "kept in the batch-jobs table until their batch completes, and how long the "
            "oldest has waited; their traces are committed already. ScorerBatchJobsStuck "
            "fires past 50 hours.",
        ),
        graph(
            "Batches and batch jobs",
            Query(
                "sum by (status) (increase(scorer_batches_total[$__rate_interval]))",
                "batches {{status}}",
            ),
            Query(
                "sum by (event) (increase(scorer_batch_jobs_total[$__rate_interval]))",
                "jobs {{event}}",
            ),
            description="Batches submitted and how they ended (completed, failed, expired, "
            "cancelled; a failed or expired batch's jobs are asked online or become error "
            "scores), and judge jobs deferred to batches and finished from them.",
        ),
        *cascade(),
    ]


def fleet() -> list[Panel]:
    """The fleet's row (SCORER_JUDGE_PACE_SHARE): the workers judging with one provider
    account share its limits through the judge-pace topic; each says what it reads of them."""
    return [
        graph(
            "Fleet: pace by model and each worker's (calls a second)",
            Query(
                f"max by (model) (scorer_judge_fleet_pace_rps{{{MODELS}}}\n"
                f"and on (instance, model, account) scorer_judge_fleet_shared{{{MODELS}}} == 1)",
                "{{model}} fleet",
            ),
            Query(
                f"max by (model, instance) (scorer_judge_pace_rps{{{MODELS}}})",
                "{{model}} on {{instance}}",
            ),
            new_row=True,
            dashed=".* on .*",
            description="The calls a second the workers sharing the account let start together "
            "(their paces summed, as the workers reading the judge-pace topic see it), and "
            "dashed, each worker's own pace: its share of the account's limit, announced or "
            "measured. A worker pacing alone is not in the fleet's line, only in its own.",
        ),
        graph(
            "Fleet: each worker's share of the account's limit",
            Query(
                f"max by (model, instance) (scorer_judge_fleet_share{{{MODELS}}})",
                "{{model}} on {{instance}}",
            ),
            **SHARE,
            description="Each worker's share: its demand (calls sent lately, and its backlog) "
            "over the fleet's, so an idle worker holds little a busy one needs; 1 for a worker "
            "alone. The shares of one model add up to about 1.",
        ),
        graph(
            "Fleet: workers sharing the account",
            Query(
                f"max by (model) (scorer_judge_fleet_workers{{{MODELS}}})",
                "{{model}} sharing",
            ),
            Query(
                f"sum by (model) (1 - scorer_judge_fleet_shared{{{MODELS}}})",
                "{{model}} pacing alone",
            ),
            dashed=".* pacing alone$",
            description="Workers whose pace records for the model are fresh on the judge-pace "
            "topic, this one included; dashed, workers that cannot read the topic and pace as "
            "if alone (ScorerJudgePacingAlone fires after 10 minutes).",
        ),
        graph(
            "Fleet: share of calls refused 429",
            Query(f"scorer:judge_refused_ratio:10m{{{MODELS}}}", "{{model}} fleet (10m)"),
            Query(
                f"max by (model) (scorer_judge_fleet_refused_ratio{{{MODELS}}})",
                "{{model}} as the workers read it (1m)",
            ),
            unit="percentunit",
            min=0,
            thresholds=[(None, "green"), (0.02, "red")],
            threshold_line=True,
            dashed=".* read it .*",
            description="The fleet's calls refused for rate (429 rate_limited) over all "
            "calls, every worker summed over 10 minutes: ScorerJudgeFleetRefused fires above "
            "the red line (2 %) for 10 minutes; dashed, the last minute's as the workers' pace "
            "records say it.",
        ),
    ]


def cascade() -> list[Panel]:
    """The cascade rules' row (judge.cascade): how much goes to the judge, what a target
    costs per tier, and how far the first tier agrees with the judge on the audit share."""
    return [
        graph(
            "Cascade: share of targets the judge decided",
            Query(ESCALATED, "{{pack}}/{{rule}}"),
            Query(ESCALATED_BY_REASON, "{{pack}}/{{rule}} {{reason}}"),
            **SHARE,
            width=8,
            new_row=True,
            dashed=".* (low_confidence|first_failed|audit|no_confidence)$",
            description="Per cascade rule, the share of its targets its own judge decided "
            "(scorer_cascade_verdicts_total, tier judge), the rest being the first tier's "
            "accepted verdicts; dashed, by reason: low_confidence (under "
            "accept.min_confidence: what raising or lowering it moves), audit (the audit_rate "
            "share, judged whatever the first tier says), first_failed, no_confidence.",
        ),
        bars(
            "Cascade: cost per 1,000 targets by tier (range)",
            Query(CASCADE_COST_PER_1000, "{{pack}}/{{rule}} {{tier}}", instant=True),
            Query(CASCADE_TOTAL_PER_1000, "{{pack}}/{{rule}} both tiers", instant=True),
            unit="currencyUSD",
            decimals=2,
            width=8,
            description="Estimated dollars per 1,000 targets a cascade rule scored over the "
            "range (scorer_cascade_cost_usd_total over its verdicts, every tier's): first, "
            "every first-tier call (the audit's too); judge, the rule's own judge's calls. "
            "Models without a price are left out.",
        ),
        graph(
            "Cascade: first tier's agreement with the judge (1d) and the rule's bound",
            Query(
                f"max by (rule, model, measure) (scorer_judge_agreement{{{CASCADE_PAIRS}, "
                'window="1d", measure!="count"})',
                "{{rule}} ({{model}}) {{measure}}",
            ),
            Query(
                'max by (rule, measure) (scorer_judge_agreement_threshold{rule=~"$rule", '
                'window="1d"})\nand on (rule) '
                f'max by (rule) (scorer_judge_agreement{{{CASCADE_PAIRS}, window="1d"}})',
                "{{rule}} {{measure}} bound",
            ),
            Query(
                f"max by (rule, model) (scorer_judge_agreement{{{CASCADE_PAIRS}, "
                'window="1d", measure="count"})',
                "{{rule}} ({{model}}) pairs",
            ),
            width=8,
            dashed=".* bound$",
            description="The first tier against the rule's judge on the audited targets of "
            "the last day (the shadow cascade against the primary), at every confidence: "
            "kappa and accuracy for choice rules, MAE and Spearman's rho for numeric ones, "
            "and how many pairs; dashed, the rule's agreement: bound "
            "(ScorerCascadeAgreementLow fires past it once min_labels pairs are in). The "
            "agreement at each confidence cut: scorer agreement --rule R.",
        ),
    ]


# a rule's judge cost over the range per 1,000 targets it scored (a target judged: scored,
# or an error score; the decisions count one per target, whatever its scores)
COST_PER_1000 = (
    f"1000 * sum by (pack, rule) (increase(scorer_rule_judge_cost_usd_total{{{MODELS}}}"
    "[$__range]))\n/ (sum by (pack, rule) (increase(scorer_decisions_total"
    '{outcome=~"scored|error"}[$__range])) > 0)'
)

# a cascade rule's verdicts (one per target it scored), and the share its judge decided; a
# rule whose every verdict was accepted reads 0, not nothing
VERDICTS = f"scorer_cascade_verdicts_total{{{RULES}}}"
ALL_VERDICTS = f"sum by (pack, rule) (rate({VERDICTS}[$__rate_interval]))"
JUDGED = f'scorer_cascade_verdicts_total{{{RULES}, tier="judge"}}'
ESCALATED = (
    f"(sum by (pack, rule) (rate({JUDGED}[$__rate_interval]))\nor {ALL_VERDICTS} * 0)"
    f"\n/ ({ALL_VERDICTS} > 0)"
)
ESCALATED_BY_REASON = (
    f"sum by (pack, rule, reason) (rate({JUDGED}[$__rate_interval]))"
    f"\n/ on (pack, rule) group_left ()\n({ALL_VERDICTS} > 0)"
)
# a cascade rule's cost over the range per 1,000 of its verdicts, per tier and in all
CASCADE_TARGETS = f"(sum by (pack, rule) (increase({VERDICTS}[$__range])) > 0)"
CASCADE_COST = f"scorer_cascade_cost_usd_total{{{RULES}}}"
CASCADE_COST_PER_1000 = (
    f"1000 * sum by (pack, rule, tier) (increase({CASCADE_COST}[$__range]))"
    f"\n/ on (pack, rule) group_left ()\n{CASCADE_TARGETS}"
)
CASCADE_TOTAL_PER_1000 = (
    f"1000 * sum by (pack, rule) (increase({CASCADE_COST}[$__range]))\n/ {CASCADE_TARGETS}"
)
# the first tier (the shadow "cascade") against the rule's own judge
CASCADE_PAIRS = 'rule=~"$rule", reference="primary", variant="cascade", criterion=""'
