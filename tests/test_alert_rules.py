"""The Prometheus rules in grafana/alerts: valid, and each alert fires on its failure and stays
quiet on noise (promtool's unit tests in scorer.rules.test.yml)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml
from conftest import require_tool

ALERTS = Path(__file__).resolve().parent.parent / "grafana" / "alerts"
RULES = ALERTS / "scorer.rules.yml"
RULE_TESTS = ALERTS / "scorer.rules.test.yml"


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [require_tool("promtool"), *args], capture_output=True, text=True, timeout=120
    )


def test_promtool_checks_the_rules() -> None:
    result = promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_promtool_unit_tests_pass() -> None:
    result = promtool("test", "rules", str(RULE_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_firing_case_and_a_quiet_case() -> None:
    rules = yaml.safe_load(RULES.read_text())
    alerts = {r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r}
    fired: set[str] = set()
    quiet: set[str] = set()
    for case in yaml.safe_load(RULE_TESTS.read_text())["tests"]:
        for check in case.get("alert_rule_test", []):
            (fired if check.get("exp_alerts") else quiet).add(check["alertname"])
    assert alerts == fired, f"alerts without a case that fires: {alerts - fired}"
    assert alerts == quiet, f"alerts without a case that stays quiet: {alerts - quiet}"


def test_a_weakened_threshold_is_caught_by_the_unit_tests(tmp_path: Path) -> None:
    """The unit tests can fail: with the score-drop threshold at 0.05, the small dip that
    must stay quiet fires, and promtool says so."""
    (tmp_path / "scorer.rules.yml").write_text(
        RULES.read_text().replace(
            "scorer:score_drop:30m_vs_1d > 0.15", "scorer:score_drop:30m_vs_1d > 0.05"
        )
    )
    (tmp_path / "scorer.rules.test.yml").write_text(RULE_TESTS.read_text())
    result = promtool("test", "rules", str(tmp_path / "scorer.rules.test.yml"))
    assert result.returncode != 0
    assert 'rule="wobble"' in result.stdout + result.stderr


def test_score_rules_that_sum_over_projects_miss_one_projects_drop(tmp_path: Path) -> None:
    """The per-project case can fail: with the score recording rules summed over projects,
    shop's drop is drowned in bank's steady traffic and its alerts do not fire."""
    rules = RULES.read_text()
    assert "sum by (rule, pack, criterion, project)" in rules
    (tmp_path / "scorer.rules.yml").write_text(
        rules.replace("sum by (rule, pack, criterion, project)", "sum by (rule, pack, criterion)")
    )
    (tmp_path / "scorer.rules.test.yml").write_text(RULE_TESTS.read_text())
    result = promtool("test", "rules", str(tmp_path / "scorer.rules.test.yml"))
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert 'project="shop", rule="answer"' in output
