"""The Prometheus rules in grafana/alerts: valid, and each alert fires on its failure and stays
quiet on noise (promtool's unit tests in scorer.rules.test.yml)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
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


def failing_cases(tmp_path: Path, old: str, new: str, case: str = "The drop test") -> str:
    """promtool's output on the unit-test case whose comment names ``case`` (one case: the
    whole file takes half a minute) with ``old`` replaced by ``new`` in the rules (the
    replacement must change them); asserts that the tests fail."""
    rules = RULES.read_text()
    assert old in rules
    (tmp_path / "scorer.rules.yml").write_text(rules.replace(old, new))
    text = RULE_TESTS.read_text()
    header = text[: text.index("tests:\n") + len("tests:\n")]
    start = text.index(f"  # --- {case}")
    end = text.find("\n  # --- ", start + 1)
    (tmp_path / "scorer.rules.test.yml").write_text(header + text[start : end if end > 0 else None])
    result = promtool("test", "rules", str(tmp_path / "scorer.rules.test.yml"))
    assert result.returncode != 0
    return result.stdout + result.stderr


@pytest.mark.slow  # a mutation: promtool on its case, ~10 s (make test-slow)
def test_a_weakened_bound_on_chance_is_caught_by_the_unit_tests(tmp_path: Path) -> None:
    """The unit tests can fail: with the drop test's z bound at 1 instead of 5, wobble's dip
    (z 2.8, chance for 60 scores of its spread) pages, and promtool says so."""
    out = failing_cases(tmp_path, "5 + 4 * clamp_min", "1 + 4 * clamp_min", "Score drops")
    assert 'rule="wobble"' in out


@pytest.mark.slow  # a mutation: promtool on its case, ~10 s (make test-slow)
def test_a_drop_test_without_min_drop_is_caught(tmp_path: Path) -> None:
    """Without the min_drop gate, steady's sure but small dip (0.02 on 1,000 scores a minute)
    pages."""
    out = failing_cases(
        tmp_path,
        "max by (rule, pack) (scorer_rule_alert_min_drop)",
        "0 * max by (rule, pack) (scorer_rule_alert_min_drop)",
    )
    assert 'rule="steady"' in out


@pytest.mark.slow  # a mutation: promtool on its case, ~10 s (make test-slow)
def test_a_drop_test_without_the_skew_term_is_caught(tmp_path: Path) -> None:
    """Without the skew term, a baseline that never moved pages on the first few low scores
    (quality, three minutes into its drop, before the 15-minute window is sure of it)."""
    out = failing_cases(tmp_path, "5 + 4 * clamp_min", "5 + 0 * clamp_min", "Score drops")
    assert 'rule="quality"' in out


@pytest.mark.slow  # a mutation: promtool on its case, ~10 s (make test-slow)
def test_score_rules_that_sum_over_projects_miss_one_projects_drop(tmp_path: Path) -> None:
    """The per-project case can fail: with the score recording rules summed over projects,
    shop's drop is drowned in bank's steady traffic and its alerts do not fire."""
    output = failing_cases(
        tmp_path,
        "sum by (rule, pack, criterion, project)",
        "sum by (rule, pack, criterion)",
        "One project drops",
    )
    assert 'project="shop", rule="answer"' in output
