"""Grafana-managed alerts (grafana/provisioning/alerting/): the rules file is what
grafana/alerting.py writes, every field is one Grafana's alerting file provisioning accepts,
every query parses with promtool and answers what its Prometheus alert would, the data source
is the provisioned one, and the contact point and the policy name each other.

The fields accepted: Grafana 11.2 (the compose image), apiVersion 1, read from Grafana's
"Use configuration files to provision alerting resources" (v11.1 and v11.3 of
grafana.com/docs/grafana/.../alerting/set-up/provision-alerting-resources/file-provisioning/)
and from the types that parse the files in grafana/grafana,
pkg/services/provisioning/alerting/: rules_types.go (AlertRuleGroupV1, AlertRuleV1, QueryV1,
less the fields added after 11.2: record, keepFiringFor, missing_series_evals_to_resolve),
contact_point_types.go (ContactPointV1, ReceiverV1) and notification_policy_types.go (a route
of Alertmanager's, with Grafana's object_matchers)."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from conftest import require_tool

GRAFANA = Path(__file__).resolve().parent.parent / "grafana"
ALERTING = GRAFANA / "provisioning" / "alerting"

GROUP_FIELDS = {"orgId", "name", "folder", "interval", "rules"}
RULE_FIELDS = {
    "uid",
    "title",
    "condition",
    "data",
    "dashboardUid",
    "panelId",
    "noDataState",
    "execErrState",
    "for",
    "annotations",
    "labels",
    "isPaused",
    "notification_settings",
}
RULE_REQUIRED = {"uid", "title", "condition", "data", "for"}
QUERY_FIELDS = {"refId", "queryType", "relativeTimeRange", "datasourceUid", "model"}
NO_DATA_STATES = {"NoData", "Alerting", "OK"}
ERROR_STATES = {"Error", "Alerting", "OK"}
CONTACT_POINT_FIELDS = {"orgId", "name", "receivers"}
RECEIVER_FIELDS = {"uid", "type", "settings", "disableResolveMessage"}
ROUTE_FIELDS = {
    "receiver",
    "group_by",
    "matchers",
    "object_matchers",
    "mute_time_intervals",
    "continue",
    "group_wait",
    "group_interval",
    "repeat_interval",
    "routes",
}
REDUCERS = {"last", "mean", "min", "max", "sum", "count"}
EVALUATORS = {"gt", "lt", "within_range", "outside_range"}


def load_generator() -> Any:
    spec = importlib.util.spec_from_file_location("alerting", GRAFANA / "alerting.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def provisioned() -> dict[str, Any]:
    """Every alerting provisioning file merged: groups, contactPoints, policies."""
    merged: dict[str, Any] = {}
    for path in sorted(ALERTING.glob("*.yaml")):
        document = yaml.safe_load(path.read_text())
        assert document["apiVersion"] == 1, path.name
        for key, value in document.items():
            if key != "apiVersion":
                merged.setdefault(key, []).extend(value)
    return merged


def rules() -> list[dict[str, Any]]:
    return [rule for group in provisioned()["groups"] for rule in group["rules"]]


def datasource_uid() -> str:
    document = yaml.safe_load((GRAFANA / "provisioning/datasources/prometheus.yml").read_text())
    (source,) = document["datasources"]
    return str(source["uid"])


def prometheus_alerts() -> dict[str, dict[str, Any]]:
    document = yaml.safe_load((GRAFANA / "alerts" / "scorer.rules.yml").read_text())
    return {r["alert"]: r for g in document["groups"] for r in g["rules"] if "alert" in r}


def test_the_rules_file_is_what_the_generator_writes() -> None:
    on_disk = (ALERTING / "scorer-rules.yaml").read_text()
    assert on_disk == load_generator().build(), "run `python grafana/alerting.py` and commit it"


def test_every_field_is_one_grafana_provisioning_accepts() -> None:
    document = provisioned()
    assert set(document) == {"groups", "contactPoints", "policies"}
    (group,) = document["groups"]
    assert set(group) <= GROUP_FIELDS and {"name", "folder", "interval", "rules"} <= set(group)
    assert re.fullmatch(r"\d+[smh]", group["interval"])
    uids = [rule["uid"] for rule in group["rules"]]
    assert len(set(uids)) == len(uids) and all(len(uid) <= 40 for uid in uids)
    for rule in group["rules"]:
        assert set(rule) <= RULE_FIELDS, set(rule) - RULE_FIELDS
        assert set(rule) >= RULE_REQUIRED
        assert rule["noDataState"] in NO_DATA_STATES and rule["execErrState"] in ERROR_STATES
        assert re.fullmatch(r"\d+[smh]", rule["for"])
        assert all(isinstance(v, str) for v in {**rule["labels"], **rule["annotations"]}.values())
        refs = [query["refId"] for query in rule["data"]]
        assert rule["condition"] in refs and len(set(refs)) == len(refs)
        for query in rule["data"]:
            assert set(query) <= QUERY_FIELDS, set(query) - QUERY_FIELDS
            assert query["model"]["refId"] == query["refId"]
            assert set(query["relativeTimeRange"]) == {"from", "to"}
    for point in document["contactPoints"]:
        assert set(point) <= CONTACT_POINT_FIELDS
        for receiver in point["receivers"]:
            assert set(receiver) <= RECEIVER_FIELDS
            assert receiver["uid"].strip() and receiver["type"] == "webhook"
            assert receiver["settings"]["url"].startswith(("http://", "https://"))
    (policy,) = document["policies"]
    routes = [policy]
    while routes:
        route = routes.pop()
        assert set(route) - {"orgId"} <= ROUTE_FIELDS, set(route) - ROUTE_FIELDS
        routes.extend(route.get("routes", []))


def test_each_rule_is_a_prometheus_query_reduced_to_its_last_value_and_a_threshold() -> None:
    uid = datasource_uid()
    for rule in rules():
        query, reduce, threshold = rule["data"]
        assert query["datasourceUid"] == uid  # the provisioned data source, by its fixed uid
        assert query["model"]["datasource"] == {"type": "prometheus", "uid": uid}
        assert query["model"]["instant"] is True
        assert reduce["datasourceUid"] == threshold["datasourceUid"] == "__expr__"
        assert reduce["model"]["type"] == "reduce" and reduce["model"]["expression"] == "A"
        assert reduce["model"]["reducer"] in REDUCERS
        assert threshold["model"]["type"] == "threshold"
        assert threshold["model"]["expression"] == reduce["refId"]
        assert rule["condition"] == threshold["refId"]
        (condition,) = threshold["model"]["conditions"]
        assert condition["evaluator"]["type"] in EVALUATORS
        assert all(isinstance(p, int | float) for p in condition["evaluator"]["params"])


def test_the_contact_point_and_the_policy_name_each_other() -> None:
    document = provisioned()
    names = {point["name"] for point in document["contactPoints"]}
    (policy,) = document["policies"]
    used, routes = set(), [policy]
    while routes:
        route = routes.pop()
        used.add(route["receiver"])
        routes.extend(route.get("routes", []))
    assert used == names  # every receiver exists, every contact point is used
    assert {"alertname", "rule", "pack", "project"} <= set(policy["group_by"])


def test_every_query_parses_with_promtool(tmp_path: Path) -> None:
    records = [
        {"record": f"grafana:check_{i}", "expr": rule["data"][0]["model"]["expr"]}
        for i, rule in enumerate(rules())
    ]
    (tmp_path / "queries.yml").write_text(
        yaml.safe_dump({"groups": [{"name": "grafana", "rules": records}]})
    )
    result = subprocess.run(
        [require_tool("promtool"), "check", "rules", str(tmp_path / "queries.yml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_queries_answer_as_their_prometheus_alerts_would(tmp_path: Path) -> None:
    """promtool: the judge query returns a model's error ratio only on 20 calls or more (as
    ScorerJudgeErrorRate), the canary and score-drop queries one series per rule (and model,
    or criterion and project) while the recorded drift or alarm holds, whatever its value."""
    by_uid = {rule["uid"]: rule["data"][0]["model"]["expr"] for rule in rules()}
    records = [
        {"record": f"grafana:{uid.replace('-', '_')}", "expr": e} for uid, e in by_uid.items()
    ]
    (tmp_path / "queries.yml").write_text(
        yaml.safe_dump({"groups": [{"name": "grafana", "rules": records}]})
    )
    # the recorded judge series as scorer.rules.yml computes them, written out as input
    series = [
        # model a: 30 calls in 10 minutes, 9 failed; model b: 10 calls, all failed
        ('scorer:judge_calls:10m{model="a"}', "30x20"),
        ('scorer:judge_error_ratio:10m{model="a"}', "0.3x20"),
        ('scorer:judge_calls:10m{model="b"}', "10x20"),
        ('scorer:judge_error_ratio:10m{model="b"}', "1x20"),
        # the judge canary drifts on rule r (its changed share), not on rule s (absent)
        ('scorer:judge_drift{rule="r",pack="p",model="a"}', "0.15x20"),
        # the drop test's alarm, for one rule's criterion in one project
        ('scorer:score_drop_alarm{rule="r",pack="p",criterion="c",project="web"}', "1x20"),
    ]
    case = {
        "rule_files": ["queries.yml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [{"series": s, "values": v} for s, v in series],
                "promql_expr_test": [
                    {
                        "expr": "grafana:scorer_judge_error_rate",
                        "eval_time": "10m",
                        "exp_samples": [
                            {"labels": 'grafana:scorer_judge_error_rate{model="a"}', "value": 0.3}
                        ],
                    },
                    {
                        "expr": "grafana:scorer_judge_drift",
                        "eval_time": "10m",
                        "exp_samples": [
                            {
                                "labels": 'grafana:scorer_judge_drift{model="a",pack="p",rule="r"}',
                                "value": 1,
                            }
                        ],
                    },
                    {
                        "expr": "grafana:scorer_rule_score_drop",
                        "eval_time": "10m",
                        "exp_samples": [
                            {
                                "labels": 'grafana:scorer_rule_score_drop{criterion="c",pack="p",project="web",rule="r"}',
                                "value": 1,
                            }
                        ],
                    },
                ],
            }
        ],
    }
    (tmp_path / "case.test.yml").write_text(yaml.safe_dump(case))
    result = subprocess.run(
        [require_tool("promtool"), "test", "rules", str(tmp_path / "case.test.yml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    # and the thresholds: 0.3 pages (over 0.2); a drift or alarm present pages (over 0)
    above = {
        rule["uid"]: rule["data"][2]["model"]["conditions"][0]["evaluator"]["params"][0]
        for rule in rules()
    }
    assert above == {
        "scorer-rule-score-drop": 0,
        "scorer-judge-error-rate": 0.2,
        "scorer-judge-drift": 0,
    }


def test_the_queries_read_series_the_prometheus_rules_record() -> None:
    """A recorded series a Grafana query reads is recorded by scorer.rules.yml: renamed there,
    the Grafana rule would read nothing and never fire."""
    document = yaml.safe_load((GRAFANA / "alerts" / "scorer.rules.yml").read_text())
    recorded = {r["record"] for g in document["groups"] for r in g["rules"] if "record" in r}
    for rule in rules():
        expr = rule["data"][0]["model"]["expr"]
        read = set(re.findall(r"\bscorer:[a-z0-9_:]+", expr))
        assert read, expr
        assert read <= recorded, f"{rule['uid']} reads {read - recorded}: not recorded"


def test_the_judge_rule_keeps_the_prometheus_alerts_bounds() -> None:
    """The Grafana rule's threshold, minimum calls, `for` and severity are those of
    ScorerJudgeErrorRate in scorer.rules.yml; the other mirrors take `for` and severity from
    their Prometheus alert whenever the rule file has it."""
    alerts = prometheus_alerts()
    errors = alerts["ScorerJudgeErrorRate"]
    by_uid = {rule["uid"]: rule for rule in rules()}
    grafana = by_uid["scorer-judge-error-rate"]
    bound = re.search(r"scorer:judge_error_ratio:10m > ([\d.]+)", errors["expr"])
    calls = re.search(r"scorer:judge_calls:10m >= (\d+)", errors["expr"])
    assert bound and calls, errors["expr"]
    threshold = grafana["data"][2]["model"]["conditions"][0]["evaluator"]["params"][0]
    assert threshold == float(bound.group(1))
    assert f"scorer:judge_calls:10m >= {calls.group(1)}" in grafana["data"][0]["model"]["expr"]
    for rule in rules():
        mirrored = alerts.get(rule["annotations"]["prometheus_alert"])
        if mirrored is not None:
            assert rule["for"] == mirrored.get("for", "0s"), rule["uid"]
            assert rule["labels"]["severity"] == mirrored["labels"]["severity"], rule["uid"]
