"""The Grafana dashboards, written as data: `python grafana/dashboards.py` writes
grafana/dashboards/*.json (the files Grafana's provisioning loads; a test checks they are
current).

Three dashboards: quality (scores against their baseline, low scores, thread rules, each
split by project, and a row of tool calls by tool: ``tool_panels.py``), judge health
(latency, errors, retries, tokens, cost, cascade rules: ``judge_dashboard.py``) and pipeline
health (throughput, lag, DLQ, decisions, threads), built of the panels of ``panels.py``. Every query reads the metrics of stream/metrics/ or the
recording rules of grafana/alerts/scorer.rules.yml; an integration test runs each one against
a real Prometheus that scraped a working worker.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # its modules beside it, run as a script or loaded by path
    sys.path.append(str(HERE))

from drop_panels import drop_panels  # noqa: E402
from judge_dashboard import judge  # noqa: E402
from panels import (  # noqa: E402
    PER_RULE,
    RULES,
    SCORES,
    SHARE,
    Panel,
    Query,
    bars,
    graph,
    quantile,
    render,
    stat,
)
from tool_panels import tool_panels  # noqa: E402

OUT = HERE / "dashboards"
PAIR = "{{pack}}/{{rule}} {{variant_b}} over {{variant_a}} ({{project}})"  # a variant pair


def per_rule(*, window: str = "$__rate_interval", scope: str = "", selector: str = SCORES) -> str:
    """Mean normalised score per rule (and criterion) and project over ``window``, an error
    score counted as its rule's ``output.errors_count_as`` says (scorer_errors_counted_value:
    seed 004's "ERROR counts as 0.0"); a rule that does not say: the mean of its ok scores."""
    by = "sum by (pack, rule, criterion, project)"

    def added(part: str) -> str:  # ok scores, plus the error scores counted (none: + 0)
        ok = f"{by} (increase(scorer_score_value_{part}{{{selector}}}[{window}]))"
        counted = f"{by} (increase(scorer_errors_counted_value_{part}{{{selector}}}[{window}]))"
        return f"{ok}\n+ ({counted}\nor {ok} * 0)"

    mean = f"({added('sum')})\n/ (({added('count')}) > 0)"
    if scope:
        return f'({mean})\nand on (pack, rule) scorer:rule_direction{{scope="{scope}"}}'
    return mean


def rule_results(title: str, scope: str) -> Panel:
    """Bars of each rule's mean score over the dashboard's range, for one scope."""
    query = Query(per_rule(window="$__range", scope=scope), PER_RULE, instant=True)
    return bars(title, query, **SHARE, height=10)


# a rule's pass/fail score, 1 pass and 0 fail (the coaching rubric's weighted_categories)
PASSED = f'{SCORES}, criterion="passed"'
COUNTED_ERRORS = (
    "A target the judge could not score publishes an error score; a rule whose "
    "output.errors_count_as says so counts it as that value (the coaching rubric: 0.0, seed "
    "004's 'API failures are not passes'), other rules leave error scores out."
)


def quality() -> tuple[dict[str, Any], list[Panel]]:
    bad = [(None, "green"), (0.1, "orange"), (0.25, "red")]
    return {
        "uid": "scorer-quality",
        "title": "LLM scorer: quality",
        "description": "Scores per rule and project against their own one-day baseline, low "
        "scores, thread-rule results. Scores are normalised to 0..1. Projects not kept by "
        "SCORER_METRIC_PROJECTS read 'other'.",
    }, [
        stat(
            "Scores per minute",
            f"sum(rate(scorer_scores_total{{{SCORES}}}[$__rate_interval])) * 60",
            description="Score events published (ok, skipped and error) by the selected rules.",
        ),
        stat(
            "Mean score (range)",
            f"sum(increase(scorer_score_value_sum{{{SCORES}}}[$__range]))\n"
            f"/ sum(increase(scorer_score_value_count{{{SCORES}}}[$__range]))",
            **SHARE,
            description="Normalised 0..1; for lower-is-better rules (frustration) lower is good.",
        ),
        stat(
            "Low scores (30m)",
            f"sum(increase(scorer_low_scores_total{{{SCORES}}}[30m]))\n"
            f"/ sum(increase(scorer_score_value_count{{{SCORES}}}[30m]))",
            unit="percentunit",
            thresholds=bad,
            description="Share of ok scores on the bad side of their scale.",
        ),
        stat(
            "Error scores (range)",
            f'sum(increase(scorer_scores_total{{{SCORES}, status="error"}}[$__range]))\n'
            f"/ sum(increase(scorer_scores_total{{{SCORES}}}[$__range]))",
            unit="percentunit",
            thresholds=bad,
            description="Scores the judge could not give after every retry.",
        ),
        stat(
            "Rules worse than baseline",
            f"count(scorer:score_drop_alarm{{{SCORES}}}) or vector(0)",
            thresholds=[(None, "green"), (1, "red")],
            description="Rules (and rubric criteria) per project whose drop test pages now: a "
            "window's mean is worse than the baseline beyond chance, by a drop that may matter "
            "(alert.min_drop). Design record 48.",
        ),
        stat(
            "Firing quality alerts",
            'count(ALERTS{alertstate="firing", project=~"$project", '
            'alertname=~"ScorerRuleScoreDrop|ScorerLowScoreShareRising"}) or vector(0)',
            thresholds=[(None, "green"), (1, "red")],
            description="The score alerts fire per rule, criterion and project.",
        ),
        *drop_panels(),
        graph(
            "Share of low scores (30m) against its 1-day baseline (dashed)",
            Query(f"scorer:low_score_share:30m{{{SCORES}}}", PER_RULE),
            Query(
                f"scorer:low_score_share:1d{{{SCORES}}}",
                PER_RULE + " baseline",
            ),
            **SHARE,
            dashed=".* baseline$",
        ),
        graph(
            "Comparisons: mean preference (+2 response A much better .. -2 B much better)",
            Query(
                # the preference is published normalised (0.5 = equivalent): back to -2..+2
                "4 * (\n"
                f"sum by (pack, rule, project) (increase(scorer_score_value_sum"
                f'{{{SCORES}, criterion="preference"}}[$__rate_interval]))\n'
                f"/ (sum by (pack, rule, project) (increase(scorer_score_value_count"
                f'{{{SCORES}, criterion="preference"}}[$__rate_interval])) > 0)\n) - 2',
                "{{pack}}/{{rule}} ({{project}})",
            ),
            min=-2,
            max=2,
            thresholds=[(None, "blue"), (0, "green")],
            threshold_line=True,
            description="Pairs of traces answering one request (comparison key), judged side "
            "by side: above 0 the first variant (A) is preferred, below 0 the second (B, e.g. "
            "a canary). Not alerted on: it is news about the variants, not a drop in quality.",
        ),
        graph(
            "Win rate of B over A (1d) with its 95 % interval (dashed)",
            Query(f"scorer:pair_win_rate_b:1d{{{SCORES}}}", PAIR),
            Query(f"scorer:pair_win_rate_b_low:1d{{{SCORES}}}", PAIR + " low"),
            Query(f"scorer:pair_win_rate_b_high:1d{{{SCORES}}}", PAIR + " high"),
            **SHARE,
            thresholds=[(None, "blue"), (0.5, "green")],
            threshold_line=True,
            dashed=".* (low|high)$",
            description="Share of the last day's comparisons B (e.g. a canary) won, a tie half "
            "a win, per rule, project and variant pair, its Wilson 95 % interval dashed: above "
            "0.5 B is preferred, below A, across it too few pairs yet (1h: ...:1h). Under "
            "comparison.order alternate a judge's position habit pulls it towards 0.5; scorer "
            "agreement gives the order-balanced rate (design record 52).",
        ),
        graph(
            "Judges' position preference (1d) with its 95 % interval (dashed)",
            *(
                Query(
                    f'scorer:pair_{name}{end}:1d{{rule=~"$rule"}}',
                    f"{{{{rule}}}} ({{{{model}}}}) {said}{tail}",
                )
                for name, said in (
                    ("order_flip_rate", "flipped"),
                    ("first_slot_share", "first slot"),
                )
                for end, tail in (("", ""), ("_low", " low"), ("_high", " high"))
            ),
            **SHARE,
            thresholds=[(None, "green"), (0.5, "orange")],
            dashed=".* (low|high)$",
            description="From the comparisons judged in both orders (comparison.order: both, "
            "and each rule's audit share): the share of pairs whose preference flipped with "
            "the order (the judge followed the position, not the responses), and the first "
            "slot's share of their verdicts (0.5: no preference for a position), per rule and "
            "judge model, with Wilson 95 % intervals. A first-slot interval above 0.5 is a "
            "judge that prefers Response A: comparison.order alternate keeps it from favouring "
            "a variant, both keeps it out of the win rate (design record 52).",
        ),
        graph(
            "Judge agreement with human labels (1d)",
            Query(
                'max by (rule, model, measure) (scorer_judge_agreement{rule=~"$rule", '
                'reference="human", variant="", criterion="", window="1d", measure!="count"})',
                "{{rule}} ({{model}}) {{measure}}",
            ),
            Query(
                'max by (rule, measure) (scorer_judge_agreement_threshold{rule=~"$rule", '
                'window="1d"})',
                "{{rule}} {{measure}} bound",
            ),
            Query(
                'max by (rule, model) (scorer_judge_agreement{rule=~"$rule", '
                'reference="human", variant="", criterion="", window="1d", measure="count"})',
                "{{rule}} ({{model}}) labels",
            ),
            dashed=".* bound$",
            description="How far each rule's judge agrees with the human labels joined with "
            "its scores over the last day, on the rule's own scale: kappa and accuracy for "
            "choice rules, mean absolute error and Spearman's rho for numeric ones, and how "
            "many labelled targets they rest on; dashed: the rule's agreement: bound "
            "(ScorerJudgeAgreementLow fires past it once min_labels are in). Shadow judges and "
            "the intervals: scorer agreement.",
        ),
        rule_results("Trace rules: mean score over the range", "trace"),
        rule_results(
            "Thread rules (conversations and sessions): mean score over the range", "thread"
        ),
        graph(
            "Scores per minute by project and status",
            Query(
                f"sum by (project, status) (rate(scorer_scores_total{{{SCORES}}}"
                "[$__rate_interval])) * 60",
                "{{project}} {{status}}",
            ),
            stack=True,
            description="Projects not kept by SCORER_METRIC_PROJECTS (or past the first "
            "SCORER_METRIC_PROJECT_LIMIT when it is unset) are counted under 'other'.",
        ),
        graph(
            "Mean score per rule (rate window)",
            Query(per_rule(), PER_RULE),
            **SHARE,
            description="Scores as they come in, without the 30-minute smoothing. "
            + COUNTED_ERRORS,
        ),
        bars(
            "Pass rate over the range",
            Query(per_rule(window="$__range", selector=PASSED), PER_RULE, instant=True),
            **SHARE,
            height=10,
            description="Share of targets passed, for rules that publish a pass/fail score "
            "(criterion passed). " + COUNTED_ERRORS,
        ),
        graph(
            "Pass rate (1h window)",
            Query(per_rule(window="1h", selector=PASSED), PER_RULE),
            **SHARE,
            height=10,
            description="Share of targets passed in the hour before each point (criterion "
            "passed). " + COUNTED_ERRORS,
        ),
        *tool_panels(),
    ]


def pipeline() -> tuple[dict[str, Any], list[Panel]]:
    return {
        "uid": "scorer-pipeline",
        "title": "LLM scorer: pipeline health",
        "description": "Throughput, consumer lag, dead letters, rule decisions, threads.",
    }, [
        stat("Traces in per second", "sum(rate(scorer_traces_consumed_total[$__rate_interval]))"),
        stat("Scores out per second", "sum(rate(scorer_scores_total[$__rate_interval]))"),
        stat(
            "Consumer lag",
            "sum(scorer_consumer_lag)",
            thresholds=[(None, "green"), (100, "orange"), (1000, "red")],
            description="Messages not yet committed, over every worker and input topic. The "
            "internal thread-events topic idles at about one tick per partition.",
        ),
        stat(
            "Dead-lettered (range)",
            "sum(increase(scorer_dlq_messages_total[$__range])) or vector(0)",
            thresholds=[(None, "green"), (1, "orange")],
        ),
        stat("Workers", "count(scorer_worker_info == 1)"),
        stat(
            "Rule sets running",
            "count(count by (ruleset) (scorer_worker_info == 1))",
            thresholds=[(None, "green"), (2, "orange")],
            description="More than one: workers run different rule files (a rollout in "
            "progress, or a forgotten worker).",
        ),
        graph(
            "Throughput: traces in, scores out (per second)",
            Query(
                "sum by (topic) (rate(scorer_traces_consumed_total[$__rate_interval]))",
                "traces from {{topic}}",
            ),
            Query("sum(rate(scorer_scores_total[$__rate_interval]))", "scores out"),
        ),
        graph(
            "Consumer lag by topic",
            Query("sum by (topic) (scorer_consumer_lag)", "{{topic}}"),
            thresholds=[(None, "green"), (100, "red")],
            threshold_line=True,
            description="The ScorerConsumerLagGrowing alert fires when a topic is above the "
            "red line and still growing for 10 minutes.",
        ),
        graph(
            "Rule decisions per second by outcome",
            Query(
                f"sum by (outcome) (rate(scorer_decisions_total{{{RULES}}}[$__rate_interval]))",
                "{{outcome}}",
            ),
            stack=True,
            description="scored, skipped (a mapped field is missing), filtered (the rule does "
            "not apply), sampled_out, error.",
        ),
        graph(
            "Skipped, filtered and sampled out, by rule",
            Query(
                "sum by (pack, rule, outcome) (rate(scorer_decisions_total"
                f'{{{RULES}, outcome=~"skipped|filtered|sampled_out"}}[$__rate_interval]))',
                "{{pack}}/{{rule}} {{outcome}}",
            ),
        ),
        graph(
            "Dead-lettered messages by reason",
            Query(
                "sum by (topic, reason) (increase(scorer_dlq_messages_total[$__rate_interval]))",
                "{{topic}} {{reason}}",
            ),
            stack=True,
        ),
        graph(
            "Traces in flight and open threads",
            Query("sum(scorer_traces_in_flight)", "traces in flight"),
            Query("sum(scorer_threads_open)", "open threads"),
            Query("sum(scorer_thread_pending_closes)", "closes waiting to publish"),
        ),
        graph(
            "Thread closes per minute by reason",
            Query(
                "sum by (kind, reason) (rate(scorer_thread_closes_total[$__rate_interval])) * 60",
                "{{kind}} {{reason}}",
            ),
            stack=True,
        ),
        graph(
            "OpenTelemetry: traces assembled and spans read (per minute)",
            Query(
                "sum by (root) (rate(scorer_otlp_traces_assembled_total[$__rate_interval])) * 60",
                "traces, root {{root}}",
            ),
            Query(
                "sum by (outcome) (rate(scorer_otlp_spans_total[$__rate_interval])) * 60",
                "spans {{outcome}}",
            ),
            Query("sum(scorer_otlp_traces_gathering)", "traces being gathered"),
            description="Spans from the Collector, gathered per trace until its root span "
            "has ended (root ended) or the longest wait has passed (root missing). Late spans "
            "came after their trace was scored; dropped ones were past a trace's bounds.",
        ),
        graph(
            "Engine time and publish latency (p99)",
            quantile(0.99, "scorer_scoring_overhead_seconds", ""),
            quantile(0.99, "scorer_publish_latency_seconds", ""),
            unit="s",
            description="Engine time per trace beyond the judge call, its wait for its batch "
            "included (up to SCORER_TRACE_BATCH_WAIT_MS while traces arrive fast, and behind the "
            "batch before it); publish latency: from handing a trace's messages to the producer "
            "until the broker has them all (SCORER_PRODUCER_LINGER_MS included).",
        ),
    ]


DASHBOARDS = {"quality": quality, "judge": judge, "pipeline": pipeline}


def build() -> dict[str, str]:
    """File name -> JSON text of every dashboard."""
    return {
        f"{name}.json": json.dumps(render(*make()), indent=2) + "\n"
        for name, make in DASHBOARDS.items()
    }


def main() -> None:
    OUT.mkdir(exist_ok=True)
    for name, text in build().items():
        (OUT / name).write_text(text)
        print(f"wrote {OUT / name}")


if __name__ == "__main__":
    main()
