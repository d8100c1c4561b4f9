"""Grafana-managed alert rules, for users who alert from Grafana rather than Prometheus:
`python grafana/alerting.py` writes grafana/provisioning/alerting/scorer-rules.yaml (a test
checks it is current). Where they are sent is hand-written beside it, in
provisioning/alerting/contact-points.yaml: a webhook contact point and the notification policy.

The format is Grafana's alerting file provisioning, apiVersion 1, as Grafana 11.2 (the compose
image) reads it: a rule group of rules whose ``data`` is a Prometheus query (A), a reduce
expression (B) and a threshold expression (C, the condition). Sources read: Grafana's
"Use configuration files to provision alerting resources" (grafana.com/docs/grafana/v11.1 and
v11.3/alerting/set-up/provision-alerting-resources/file-provisioning/) and the types that parse
the file, pkg/services/provisioning/alerting/rules_types.go (AlertRuleGroupV1, AlertRuleV1,
QueryV1) in grafana/grafana.

The rules mirror Prometheus alerts of grafana/alerts/scorer.rules.yml and keep no logic of
their own where Prometheus already has it: the score drop and the judge canary read the series
the recording rules produce while their alert holds (scorer:score_drop_alarm,
scorer:judge_drift); the judge error rate reads the recorded ratio, with the alert's bounds. A
rule's ``for`` and severity are taken from the Prometheus alert it mirrors, when the rule file
has it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
PROVISIONING = HERE / "provisioning"
OUT = PROVISIONING / "alerting" / "scorer-rules.yaml"
PROMETHEUS_RULES = HERE / "alerts" / "scorer.rules.yml"
DATASOURCES = PROVISIONING / "datasources" / "prometheus.yml"
FOLDER = "LLM trace scorer"  # the dashboards' folder (provisioning/dashboards/scorer.yml)
GROUP = "scorer"
INTERVAL = "1m"  # Prometheus's evaluation_interval (grafana/prometheus.yml)
WINDOW_S = 600  # the query's relative time range: ten minutes back, instant at its end
HEADER = """\
# Grafana-managed alert rules for the LLM trace scorer, written by grafana/alerting.py:
# edit that file and run `python grafana/alerting.py`, not this one. Where the alerts go:
# contact-points.yaml beside it. Grafana 11.2's alerting file provisioning, apiVersion 1.
"""


@dataclass(frozen=True)
class GrafanaAlert:
    """One Grafana-managed rule: fires per series of ``query`` whose last value is
    ``above`` the threshold, for ``for_`` (unless the mirrored Prometheus alert says)."""

    uid: str
    title: str
    mirrors: str  # the Prometheus alert of scorer.rules.yml it stands for
    query: str
    above: float
    summary: str
    description: str
    for_: str = "10m"
    severity: str = "warning"


ALERTS = (
    GrafanaAlert(
        uid="scorer-rule-score-drop",
        title="Rule scores dropped below their baseline",
        mirrors="ScorerRuleScoreDrop",
        # a series per rule, criterion and project exists while the drop test pages: its
        # statistics (min_drop, the bound on chance, the quiet low-volume rules) live there
        query="count by (rule, pack, criterion, project) (scorer:score_drop_alarm)",
        above=0,
        summary=(
            "{{ $labels.pack }}/{{ $labels.rule }} {{ $labels.criterion }} scores in project "
            "{{ $labels.project }} are worse than their baseline"
        ),
        description=(
            "The drop test of the Prometheus rules pages for this rule, criterion and project: "
            "the recent window is worse than the baseline by more than the rule's smallest drop "
            "that matters and by more than chance allows. See the runbook: ScorerRuleScoreDrop."
        ),
    ),
    GrafanaAlert(
        uid="scorer-judge-error-rate",
        title="Judge calls fail",
        mirrors="ScorerJudgeErrorRate",
        # the ratio of failed judge calls, on models called at least 20 times in 10 minutes
        query="scorer:judge_error_ratio:10m and on (model) scorer:judge_calls:10m >= 20",
        above=0.2,
        summary="Judge {{ $labels.model }}: {{ humanizePercentage $values.B.Value }} of calls fail",
        description=(
            "Timeouts, 429s, 5xx or unusable answers over the last 10 minutes. Calls are retried "
            "with backoff; if the retries run out, error scores are published. See the runbook: "
            "ScorerJudgeErrorRate."
        ),
    ),
    GrafanaAlert(
        uid="scorer-judge-drift",
        title="The judge drifts on a rule's canary",
        mirrors="ScorerJudgeDrift",
        # a series per rule and model exists while the judge canary's verdicts moved beyond
        # the bound (scorer_canary_changed of scorer_canary_items, scorer_canary_mean_shift)
        query="count by (rule, pack, model) (scorer:judge_drift)",
        above=0,
        summary=(
            "The judge {{ $labels.model }} drifts on the canary of "
            "{{ $labels.pack }}/{{ $labels.rule }}"
        ),
        description=(
            "Re-judged with the cache bypassed, the rule's reference items got other verdicts "
            "than the ones recorded: the judge itself moved (a provider updating the model behind "
            "its name), so score changes may not be the application's. See the runbook: "
            "ScorerJudgeDrift."
        ),
        for_="0s",  # one canary round is the evidence; the next round confirms or clears it
    ),
)


def datasource_uid() -> str:
    """The uid of the provisioned Prometheus data source: the rules' queries name it."""
    document = yaml.safe_load(DATASOURCES.read_text())
    (source,) = [s for s in document["datasources"] if s["type"] == "prometheus"]
    return str(source["uid"])


def prometheus_alerts() -> dict[str, dict[str, Any]]:
    """Alert name -> rule, for every alert of the Prometheus rule file."""
    document = yaml.safe_load(PROMETHEUS_RULES.read_text())
    return {r["alert"]: r for g in document["groups"] for r in g["rules"] if "alert" in r}


def expression(ref: str, model: dict[str, Any]) -> dict[str, Any]:
    """A server-side expression (reduce, threshold) over the queries before it."""
    return {
        "refId": ref,
        "relativeTimeRange": {"from": WINDOW_S, "to": 0},
        "datasourceUid": "__expr__",
        "model": {"refId": ref, "datasource": {"type": "__expr__", "uid": "__expr__"}, **model},
    }


def rule(alert: GrafanaAlert, source_uid: str, mirrored: dict[str, Any] | None) -> dict[str, Any]:
    """One rule in the provisioning format: A the query, B its last value, C the condition."""
    query = {
        "refId": "A",
        "relativeTimeRange": {"from": WINDOW_S, "to": 0},
        "datasourceUid": source_uid,
        "model": {
            "refId": "A",
            "datasource": {"type": "prometheus", "uid": source_uid},
            "expr": alert.query,
            "instant": True,
            "range": False,
            "intervalMs": 60000,
            "maxDataPoints": 43200,
        },
    }
    reduce = expression(
        "B",
        {"type": "reduce", "expression": "A", "reducer": "last", "settings": {"mode": "dropNN"}},
    )
    threshold = expression(
        "C",
        {
            "type": "threshold",
            "expression": "B",
            "conditions": [{"evaluator": {"type": "gt", "params": [alert.above]}}],
        },
    )
    for_ = str(mirrored.get("for", "0s")) if mirrored else alert.for_
    severity = str(mirrored["labels"]["severity"]) if mirrored else alert.severity
    return {
        "uid": alert.uid,
        "title": alert.title,
        "condition": "C",
        "data": [query, reduce, threshold],
        # no series: nothing pages (the score series of a quiet rule, a model not called)
        "noDataState": "OK",
        "execErrState": "Error",
        "for": for_,
        "annotations": {
            "summary": alert.summary,
            "description": alert.description,
            "prometheus_alert": alert.mirrors,
        },
        "labels": {"severity": severity},
        "isPaused": False,
    }


def build() -> str:
    """The provisioning file's text."""
    source_uid = datasource_uid()
    mirrored = prometheus_alerts()
    document = {
        "apiVersion": 1,
        "groups": [
            {
                "orgId": 1,
                "name": GROUP,
                "folder": FOLDER,
                "interval": INTERVAL,
                "rules": [rule(a, source_uid, mirrored.get(a.mirrors)) for a in ALERTS],
            }
        ],
    }
    return HEADER + yaml.safe_dump(document, sort_keys=False, width=100)


def main() -> None:
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(build())
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
