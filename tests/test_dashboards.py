"""The Grafana dashboards and provisioning: current with their source, well formed, and
reading only metrics the worker exports and recording rules Prometheus computes."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import require_tool
from prometheus_client import REGISTRY

from stream.metrics import ScorerMetrics

GRAFANA = Path(__file__).resolve().parent.parent / "grafana"


def load_generator() -> Any:
    spec = importlib.util.spec_from_file_location("dashboards", GRAFANA / "dashboards.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def dashboards() -> dict[str, dict[str, Any]]:
    return {
        p.name: json.loads(p.read_text()) for p in sorted((GRAFANA / "dashboards").glob("*.json"))
    }


def exprs(dashboard: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in dashboard["panels"] for t in p["targets"]]


def test_the_json_files_are_what_the_generator_writes() -> None:
    built = load_generator().build()
    on_disk = {name: (GRAFANA / "dashboards" / name).read_text() for name in dashboards()}
    assert on_disk == built, "run `python grafana/dashboards.py` and commit the JSON"


def test_three_dashboards_with_unique_uids_cover_quality_judge_and_pipeline() -> None:
    uids = {d["uid"] for d in dashboards().values()}
    assert uids == {"scorer-quality", "scorer-judge", "scorer-pipeline"}


@pytest.mark.parametrize("name", sorted(dashboards()))
def test_panels_are_laid_out_on_the_grid_without_overlap(name: str) -> None:
    panels = dashboards()[name]["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    cells: set[tuple[int, int]] = set()
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        mine = {
            (x, y)
            for x in range(grid["x"], grid["x"] + grid["w"])
            for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not cells & mine, f"{panel['title']} overlaps another panel"
        cells |= mine


@pytest.mark.parametrize("name", sorted(dashboards()))
def test_every_variable_used_is_defined_and_every_panel_uses_the_data_source_variable(
    name: str,
) -> None:
    dashboard = dashboards()[name]
    defined = {v["name"] for v in dashboard["templating"]["list"]}
    used = set(re.findall(r"\$(\w+)", "\n".join(exprs(dashboard)))) - {
        "__rate_interval",
        "__range",
    }
    assert used <= defined, used - defined
    assert "datasource" in defined
    for panel in dashboard["panels"]:
        assert panel["datasource"]["uid"] == "${datasource}"
        assert panel["targets"], panel["title"]


def test_quality_and_pipeline_filter_by_rule_and_pack_and_judge_by_model() -> None:
    boards = dashboards()
    for name in ("quality.json", "pipeline.json"):
        names = {v["name"] for v in boards[name]["templating"]["list"]}
        assert {"pack", "rule"} <= names
    assert "model" in {v["name"] for v in boards["judge.json"]["templating"]["list"]}


SCORE_SERIES = re.compile(
    r"\b(scorer_(?:scores_total|score_value_(?:sum|count)|low_scores_total)"
    r"|scorer:(?:score_mean|scores|score_drop|score_n|score_s1|low_score_share)[a-z0-9_:]*|ALERTS)"
    r"(\{[^}]*\})?"
)


def test_the_quality_dashboard_selects_and_splits_scores_by_project() -> None:
    """Every score series the quality dashboard reads is narrowed by the project variable,
    and every per-rule sum and legend keeps the project apart."""
    quality = dashboards()["quality.json"]
    variable = next(v for v in quality["templating"]["list"] if v["name"] == "project")
    assert variable["definition"] == 'label_values(scorer_scores_total{pack=~"$pack"}, project)'
    selectors = [m for e in exprs(quality) for m in SCORE_SERIES.finditer(e)]
    assert len(selectors) > 15
    for match in selectors:
        assert 'project=~"$project"' in (match.group(2) or ""), match.group(0)
    for panel in quality["panels"]:
        for target in panel["targets"]:
            if not SCORE_SERIES.search(target["expr"]):
                continue  # not a score series (e.g. judge agreement, measured per rule)
            for by in re.findall(r"by \(([^)]*)\)", target["expr"]):
                assert "project" in by, (panel["title"], by)
            if "{{rule}}" in target["legendFormat"]:
                assert "{{project}}" in target["legendFormat"], panel["title"]


def exported_metric_names() -> set[str]:
    ScorerMetrics.default()  # registers every metric
    names = set()
    for collector in list(REGISTRY._collector_to_names):
        for metric in collector.describe() if hasattr(collector, "describe") else []:
            names.add(metric.name)
    return {n for n in names if n.startswith("scorer_")}


def recorded_names() -> set[str]:
    document = yaml.safe_load((GRAFANA / "alerts" / "scorer.rules.yml").read_text())
    return {r["record"] for g in document["groups"] for r in g["rules"] if "record" in r}


def test_queries_read_only_exported_metrics_and_recording_rules() -> None:
    exported = exported_metric_names()
    assert "scorer_score_value" in exported and "scorer_consumer_lag" in exported
    recorded = recorded_names()
    for dashboard in dashboards().values():
        text = "\n".join(exprs(dashboard))
        for name in set(re.findall(r"\bscorer_[a-z_]+", text)):
            base = re.sub(r"_(total|bucket|sum|count)$", "", name)
            assert base in exported or name in exported, (
                f"{dashboard['uid']}: {name} is not exported"
            )
        for name in set(re.findall(r"\bscorer:[a-z0-9_:]+", text)):
            assert name in recorded, f"{dashboard['uid']}: {name} is not a recording rule"


def test_provisioning_points_grafana_at_prometheus_and_the_dashboards() -> None:
    source = yaml.safe_load(
        (GRAFANA / "provisioning" / "datasources" / "prometheus.yml").read_text()
    )
    (datasource,) = source["datasources"]
    assert (datasource["type"], datasource["uid"]) == ("prometheus", "prometheus")
    # the dashboards' data-source variable defaults to it
    for dashboard in dashboards().values():
        variable = next(v for v in dashboard["templating"]["list"] if v["name"] == "datasource")
        assert variable["current"]["value"] == datasource["uid"]
    providers = yaml.safe_load((GRAFANA / "provisioning" / "dashboards" / "scorer.yml").read_text())
    (provider,) = providers["providers"]
    assert provider["type"] == "file"
    assert provider["options"]["path"] == "/var/lib/grafana/dashboards"


def panel_expr(title: str) -> str:
    """The query of the quality dashboard's panel ``title``, every variable at All."""
    quality = dashboards()["quality.json"]
    (target,) = next(p for p in quality["panels"] if p["title"] == title)["targets"]
    return re.sub(r"\$(pack|rule|project)\b", ".*", target["expr"])


def pass_rate_case(expr: str) -> dict[str, Any]:
    """A promtool case: an hour of coaching sessions, one passing and one the judge could not
    assess every minute (the rule counts errors as 0.0, so the metrics count each error once
    per score the rule publishes); a rule that never says how errors count, with 3 passes in
    4 and error scores too; a rule whose every session failed to be judged."""
    passed = 'criterion="passed", project="prod", instance="w1"'
    series = {
        f'scorer_score_value_sum{{rule="coaching_transcript", pack="coaching", {passed}}}': "0+1x60",
        f'scorer_score_value_count{{rule="coaching_transcript", pack="coaching", {passed}}}': "0+1x60",
        f'scorer_errors_counted_value_sum{{rule="coaching_transcript", pack="coaching", {passed}}}': "0x60",
        f'scorer_errors_counted_value_count{{rule="coaching_transcript", pack="coaching", {passed}}}': "0+1x60",
        f'scorer_score_value_sum{{rule="exam", pack="school", {passed}}}': "0+0.75x60",
        f'scorer_score_value_count{{rule="exam", pack="school", {passed}}}': "0+1x60",
        f'scorer_scores_total{{rule="exam", pack="school", {passed}, status="error"}}': "0+1x60",
        f'scorer_score_value_sum{{rule="outage", pack="coaching", {passed}}}': "0x60",
        f'scorer_score_value_count{{rule="outage", pack="coaching", {passed}}}': "0x60",
        f'scorer_errors_counted_value_sum{{rule="outage", pack="coaching", {passed}}}': "0x60",
        f'scorer_errors_counted_value_count{{rule="outage", pack="coaching", {passed}}}': "0+1x60",
    }
    labels = 'criterion="passed", pack="{}", project="prod", rule="{}"'
    return {
        "interval": "1m",
        "input_series": [{"series": s, "values": v} for s, v in series.items()],
        "promql_expr_test": [
            {
                "expr": expr,
                "eval_time": "60m",
                "exp_samples": [
                    {
                        "labels": "{" + labels.format("coaching", "coaching_transcript") + "}",
                        "value": 0.5,
                    },
                    {"labels": "{" + labels.format("school", "exam") + "}", "value": 0.75},
                    {"labels": "{" + labels.format("coaching", "outage") + "}", "value": 0.0},
                ],
            }
        ],
    }


def run_promtool_case(tmp_path: Path, case: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    (tmp_path / "none.rules.yml").write_text("groups: []\n")
    tests = {"rule_files": ["none.rules.yml"], "evaluation_interval": "1m", "tests": [case]}
    (tmp_path / "case.test.yml").write_text(yaml.safe_dump(tests))
    return subprocess.run(
        [require_tool("promtool"), "test", "rules", str(tmp_path / "case.test.yml")],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_pass_rate_counts_errors_as_their_rule_says(tmp_path: Path) -> None:
    """The Pass rate panel: coaching's error scores count 0.0 (1 pass in 2, not 1 in 1), a
    rule that does not say keeps the mean of its ok scores, and a rule whose every target
    failed reads 0, not nothing."""
    expr = panel_expr("Pass rate (1h window)")
    result = run_promtool_case(tmp_path, pass_rate_case(expr))
    assert result.returncode == 0, result.stdout + result.stderr
    # the same case fails when the panel leaves the counted errors out (the test can fail)
    ok_only = expr.replace("scorer_errors_counted_value_", "scorer_not_exported_")
    result = run_promtool_case(tmp_path, pass_rate_case(ok_only))
    assert result.returncode != 0
    assert 'rule="coaching_transcript"' in result.stdout + result.stderr


def test_the_range_panels_use_the_same_mean_as_the_pass_rate() -> None:
    over_range = panel_expr("Pass rate over the range").replace("$__range", "1h")
    assert over_range == panel_expr("Pass rate (1h window)")
    for title in ("Trace rules: mean score over the range", "Mean score per rule (rate window)"):
        assert "scorer_errors_counted_value_count" in panel_expr(title), title


def judge_panel_expr(title: str) -> str:
    """The query of the judge dashboard's panel ``title``, every model, over one hour."""
    judge = dashboards()["judge.json"]
    (target,) = next(p for p in judge["panels"] if p["title"] == title)["targets"]
    return re.sub(r"\$model\b", ".*", target["expr"]).replace("$__range", "1h")


def cost_per_1000_case(expr: str) -> dict[str, Any]:
    """A promtool case: an hour in which the rule "critique" cost $0.125 a minute on two
    models while it scored 5 targets a minute and failed 1.25 (error scores), filtered 10 and
    skipped 5; "cached" scored 3 a minute at no cost; "local" was judged by an unpriced model
    (no cost series); "quiet" filtered every trace."""
    where = 'pack="p", instance="w1"'
    series = {
        f'scorer_rule_judge_cost_usd_total{{rule="critique", {where}, model="big"}}': "0+0.0625x60",
        f'scorer_rule_judge_cost_usd_total{{rule="critique", {where}, model="nano"}}': "0+0.0625x60",
        f'scorer_decisions_total{{rule="critique", {where}, outcome="scored"}}': "0+5x60",
        f'scorer_decisions_total{{rule="critique", {where}, outcome="error"}}': "0+1.25x60",
        f'scorer_decisions_total{{rule="critique", {where}, outcome="filtered"}}': "0+10x60",
        f'scorer_decisions_total{{rule="critique", {where}, outcome="skipped"}}': "0+5x60",
        f'scorer_rule_judge_cost_usd_total{{rule="cached", {where}, model="big"}}': "0x60",
        f'scorer_decisions_total{{rule="cached", {where}, outcome="scored"}}': "0+3x60",
        f'scorer_decisions_total{{rule="local", {where}, outcome="scored"}}': "0+1x60",
        f'scorer_rule_judge_cost_usd_total{{rule="quiet", {where}, model="big"}}': "0x60",
        f'scorer_decisions_total{{rule="quiet", {where}, outcome="filtered"}}': "0+4x60",
    }
    # $0.125 a minute over 6.25 judged targets a minute: $20 per 1,000
    expected = [('{pack="p", rule="critique"}', 20.0), ('{pack="p", rule="cached"}', 0.0)]
    return hour_case(series, [expr], [expected])


def test_cost_per_1000_traces_is_each_rules_cost_over_the_targets_it_judged(
    tmp_path: Path,
) -> None:
    """The judge dashboard's cost per 1,000 traces: a rule's cost on every model over its
    scored and error decisions (not the filtered or skipped ones); a rule judged from the
    verdict cache only costs 0; an unpriced or idle rule shows nothing."""
    expr = judge_panel_expr("Cost per 1,000 traces by rule (range)")
    result = run_promtool_case(tmp_path, cost_per_1000_case(expr))
    assert result.returncode == 0, result.stdout + result.stderr
    # the case fails when every decision is counted (filtered and skipped too): $7.5 over 1275
    every = expr.replace('{outcome=~"scored|error"}', "")
    result = run_promtool_case(tmp_path, cost_per_1000_case(every))
    assert result.returncode != 0
    assert 'rule="critique"' in result.stdout + result.stderr


def cascade_panel_exprs(title: str) -> list[str]:
    """The queries of the judge dashboard's cascade panel ``title``, every pack, rule and
    model, over one hour (its rate window 5 minutes)."""
    judge = dashboards()["judge.json"]
    panel = next(p for p in judge["panels"] if p["title"] == title)
    return [
        re.sub(r"\$(pack|rule|model)\b", ".*", t["expr"])
        .replace("$__range", "1h")
        .replace("$__rate_interval", "5m")
        for t in panel["targets"]
    ]


def cascade_case(exprs: list[str], expected: list[list[tuple[str, float]]]) -> dict[str, Any]:
    """A promtool case: an hour of two cascade rules. "triage" scores 8 targets a minute:
    4 accepted from the first tier, 3 escalated for low confidence and 1 audited; its first
    tier costs $0.0625 a minute (every call, the audit's too) and its judge $0.5; "sure"
    accepts each of its 4 a minute ($0.0625 a minute on the first tier, no judge series)."""
    where = 'pack="p", instance="w1"'
    verdicts = "scorer_cascade_verdicts_total"
    series = {
        f'{verdicts}{{rule="triage", {where}, tier="first", reason="accepted"}}': "0+4x60",
        f'{verdicts}{{rule="triage", {where}, tier="judge", reason="low_confidence"}}': "0+3x60",
        f'{verdicts}{{rule="triage", {where}, tier="judge", reason="audit"}}': "0+1x60",
        f'{verdicts}{{rule="sure", {where}, tier="first", reason="accepted"}}': "0+4x60",
        f'scorer_cascade_cost_usd_total{{rule="triage", {where}, tier="first"}}': "0+0.0625x60",
        f'scorer_cascade_cost_usd_total{{rule="triage", {where}, tier="judge"}}': "0+0.5x60",
        f'scorer_cascade_cost_usd_total{{rule="sure", {where}, tier="first"}}': "0+0.0625x60",
    }
    return hour_case(series, exprs, expected)


def hour_case(
    series: dict[str, str], exprs: list[str], expected: list[list[tuple[str, float]]]
) -> dict[str, Any]:
    """A promtool case: ``series`` sampled each minute, each of ``exprs`` evaluated at the
    hour's end against its ``expected`` samples (labels, value)."""
    return {
        "interval": "1m",
        "input_series": [{"series": s, "values": v} for s, v in series.items()],
        "promql_expr_test": [
            {
                "expr": expr,
                "eval_time": "60m",
                "exp_samples": [{"labels": labels, "value": value} for labels, value in samples],
            }
            for expr, samples in zip(exprs, expected, strict=True)
        ],
    }


def test_the_cascade_escalation_is_the_share_of_targets_the_judge_decided(
    tmp_path: Path,
) -> None:
    """4 of triage's 8 targets a minute went to its judge (3 for low confidence, 1 audited);
    sure, whose every verdict was accepted, reads 0 rather than nothing."""
    exprs = cascade_panel_exprs("Cascade: share of targets the judge decided")
    expected = [
        [('{pack="p", rule="triage"}', 0.5), ('{pack="p", rule="sure"}', 0.0)],
        [
            ('{pack="p", reason="low_confidence", rule="triage"}', 0.375),
            ('{pack="p", reason="audit", rule="triage"}', 0.125),
        ],
    ]
    result = run_promtool_case(tmp_path, cascade_case(exprs, expected))
    assert result.returncode == 0, result.stdout + result.stderr
    # without the zero for a rule its judge never decided, sure reads nothing: caught
    bare = [exprs[0].split("\nor ")[0] + ")" + exprs[0].split(" * 0)", 1)[1], exprs[1]]
    result = run_promtool_case(tmp_path, cascade_case(bare, expected))
    assert result.returncode != 0
    assert 'rule="sure"' in result.stdout + result.stderr


def test_the_cascade_cost_per_1000_targets_divides_each_tier_by_every_verdict(
    tmp_path: Path,
) -> None:
    """triage: $0.0625 a minute on the first tier over 8 targets a minute is $7.8125 per
    1,000, $0.5 on the judge $62.5, $70.3125 in all; sure: $0.0625 over 4 is $15.625, its
    first tier only."""
    exprs = cascade_panel_exprs("Cascade: cost per 1,000 targets by tier (range)")
    expected = [
        [
            ('{pack="p", rule="triage", tier="first"}', 7.8125),
            ('{pack="p", rule="triage", tier="judge"}', 62.5),
            ('{pack="p", rule="sure", tier="first"}', 15.625),
        ],
        [('{pack="p", rule="triage"}', 70.3125), ('{pack="p", rule="sure"}', 15.625)],
    ]
    result = run_promtool_case(tmp_path, cascade_case(exprs, expected))
    assert result.returncode == 0, result.stdout + result.stderr
    # over the judge's own verdicts only, the judge's cost reads $125 per 1,000: caught
    judged = [
        e.replace("scorer_cascade_verdicts_total{", 'scorer_cascade_verdicts_total{tier="judge", ')
        for e in exprs
    ]
    result = run_promtool_case(tmp_path, cascade_case(judged, expected))
    assert result.returncode != 0
    assert 'tier="judge"' in result.stdout + result.stderr


def test_the_cascade_agreement_panel_draws_the_bounds_of_cascade_rules_only(
    tmp_path: Path,
) -> None:
    """The first tier's kappa with the judge (not a shadow's, not the labels'), its pairs,
    and the bound of its rule; a rule with a bound and no cascade draws no bound here."""
    exprs = cascade_panel_exprs(
        "Cascade: first tier's agreement with the judge (1d) and the rule's bound"
    )
    agreement = 'scorer_judge_agreement{rule="%s", criterion="", model="%s", variant="%s", reference="%s", measure="%s", window="1d", instance="w1"}'
    threshold = 'scorer_judge_agreement_threshold{rule="%s", measure="kappa", window="1d", direction="min", instance="w1"}'
    series = {
        agreement % ("c1", "luna", "cascade", "primary", "kappa"): "0.7x60",
        agreement % ("c1", "luna", "cascade", "primary", "count"): "40x60",
        agreement % ("c1", "nano", "nano", "primary", "kappa"): "0.1x60",
        agreement % ("c1", "m", "", "human", "kappa"): "0.2x60",
        agreement % ("r2", "m", "", "human", "kappa"): "0.9x60",
        threshold % "c1": "0.6x60",
        threshold % "r2": "0.5x60",
    }
    expected = [
        [('{measure="kappa", model="luna", rule="c1"}', 0.7)],
        [('{measure="kappa", rule="c1"}', 0.6)],
        [('{model="luna", rule="c1"}', 40.0)],
    ]
    result = run_promtool_case(tmp_path, hour_case(series, exprs, expected))
    assert result.returncode == 0, result.stdout + result.stderr
