"""Rules switched off one at a time: ``enabled: false`` in a rule file, or the deployment's
``SCORER_DISABLED_RULES``; validated all the same, never run, and the digest says so."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import orjson
import pytest
import yaml
from fixtures import RULES_DIR, as_trace, hub_trace, scorer
from typer.testing import CliRunner

from stream.cli import app
from stream.errors import ConfigError, RuleFileError
from stream.explain import DISABLED, explain_trace
from stream.ruleset.loader import check_rules, deployment_rules, load_rules
from stream.settings import Settings
from stream.threads.router import ThreadRouter

RULE = "hub_answer_correctness"
THREAD_RULE = "hub_user_frustration_score"


@pytest.fixture
def rules_copy(tmp_path: Path) -> Path:
    target = tmp_path / "rules"
    shutil.copytree(RULES_DIR, target, ignore=shutil.ignore_patterns("__pycache__"))
    return target


def edit(rules_dir: Path, rule_id: str, **changes: object) -> None:
    path = rules_dir / "fretcoach" / f"{rule_id}.yaml"
    data = yaml.safe_load(path.read_text())
    data.update(changes)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


@pytest.fixture
def deployment(monkeypatch: pytest.MonkeyPatch, rules_copy: Path) -> Path:
    """A deployment of the fretcoach pack from a copy of the rules (the shipped packs left out:
    the copy's packs have their names)."""
    monkeypatch.setenv("SCORER_RULES_DIR", f"{rules_copy}{os.pathsep}no-shipped-packs")
    monkeypatch.setenv("SCORER_PACKS", '["fretcoach"]')
    monkeypatch.delenv("SCORER_DISABLED_RULES", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    return rules_copy


def test_a_rule_with_enabled_false_is_validated_but_not_run(rules_copy: Path) -> None:
    edit(rules_copy, RULE, enabled=False)
    ruleset = load_rules(rules_copy, ["fretcoach"])
    assert RULE not in {r.id for r in ruleset.rules}
    assert [(d.rule.id, d.by) for d in ruleset.disabled] == [(RULE, "enabled: false")]
    assert RULE in ruleset.ids
    document = hub_trace()
    result = asyncio.run(scorer(None, ruleset).score_trace(as_trace(document), document))
    decided = {d.rule_id for d in result.decisions}
    assert RULE not in decided and "hub_response_clarity" in decided


def test_a_disabled_rule_file_with_a_mistake_is_still_an_error(rules_copy: Path) -> None:
    edit(rules_copy, RULE, enabled=False, temprature=0.2)
    _, errors = check_rules(rules_copy, ["fretcoach"])
    assert [p for e in errors for p in e.problems] == [
        "field temprature: Extra inputs are not permitted"
    ]
    edit(rules_copy, RULE, enabled="sometimes")
    _, errors = check_rules(rules_copy, ["fretcoach"])
    assert any(
        "field enabled: Input should be a valid boolean" in p for e in errors for p in e.problems
    )


def test_the_setting_switches_rules_off_where_the_deployment_rule_set_is_built(
    deployment: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shipped = deployment_rules(Settings())
    monkeypatch.setenv("SCORER_DISABLED_RULES", f'["{RULE}", "{THREAD_RULE}"]')
    ruleset = deployment_rules(Settings())
    assert {r.id for r in shipped.rules} - {r.id for r in ruleset.rules} == {RULE, THREAD_RULE}
    assert {(d.rule.id, d.by) for d in ruleset.disabled} == {
        (RULE, "SCORER_DISABLED_RULES"),
        (THREAD_RULE, "SCORER_DISABLED_RULES"),
    }
    # the thread router no longer routes turns for the switched-off conversation rule
    document = hub_trace()
    document["thread_id"] = "conv-1"
    event = ThreadRouter(ruleset).from_trace(as_trace(document), document, "llm-traces", 1.0)
    assert event is not None and event.rules == ["hub_conversational_coherence"]


def test_an_unknown_id_in_the_setting_is_a_clear_error(
    deployment: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SCORER_DISABLED_RULES", '["hub_answer_corectness", "no_such_rule"]')
    with pytest.raises(ConfigError) as caught:
        deployment_rules(Settings())
    assert str(caught.value) == (
        "SCORER_DISABLED_RULES names rules that are not loaded: ['hub_answer_corectness', "
        "'no_such_rule'] ('hub_answer_corectness': did you mean 'hub_answer_correctness'?); "
        "the packs loaded are ['fretcoach']"
    )
    # a rule of a pack this deployment does not load is not loaded either
    monkeypatch.setenv("SCORER_DISABLED_RULES", '["response_comparison"]')
    with pytest.raises(ConfigError, match=r"not loaded: \['response_comparison'\]"):
        deployment_rules(Settings())


def test_switching_every_rule_off_is_an_error(
    deployment: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    every = [p.stem for p in (deployment / "fretcoach").glob("*.yaml")]
    monkeypatch.setenv("SCORER_DISABLED_RULES", orjson.dumps(every).decode())
    with pytest.raises(RuleFileError, match="every rule is switched off"):
        deployment_rules(Settings())


def test_the_digest_follows_the_rules_that_run(
    deployment: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shipped = deployment_rules(Settings()).digest
    monkeypatch.setenv("SCORER_DISABLED_RULES", f'["{RULE}"]')
    by_setting = deployment_rules(Settings()).digest
    assert by_setting != shipped
    monkeypatch.setenv("SCORER_DISABLED_RULES", '["hub_response_clarity"]')
    assert deployment_rules(Settings()).digest not in {shipped, by_setting}
    # the same rules running, whatever switched the rule off: the same digest
    monkeypatch.delenv("SCORER_DISABLED_RULES")
    edit(deployment, RULE, enabled=False)
    assert deployment_rules(Settings()).digest == by_setting
    edit(deployment, RULE, enabled=True)
    assert deployment_rules(Settings()).digest != by_setting  # the file's bytes changed


def test_a_disabled_rule_does_not_constrain_the_thread_specs_of_the_others(
    rules_copy: Path,
) -> None:
    path = rules_copy / "fretcoach" / f"{THREAD_RULE}.yaml"
    data = yaml.safe_load(path.read_text())
    data["thread"]["user"] = "input.question"  # folds turns otherwise than its pack's other
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    _, errors = check_rules(rules_copy, ["fretcoach"])
    assert any("differ from rule" in p for e in errors for p in e.problems)
    ruleset, errors = check_rules(rules_copy, ["fretcoach"], disabled=[THREAD_RULE])
    assert errors == [] and THREAD_RULE in {d.rule.id for d in ruleset.disabled}
    data["enabled"] = False
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    ruleset, errors = check_rules(rules_copy, ["fretcoach"])
    assert errors == []
    spec = ruleset.thread_spec("conversation")
    assert spec is not None and spec.user == "input.messages[-1].content"


def test_explain_shows_a_switched_off_rule_as_disabled(rules_copy: Path) -> None:
    edit(rules_copy, "hub_response_clarity", enabled=False)
    ruleset = load_rules(rules_copy, ["fretcoach"], disabled=[RULE, THREAD_RULE])
    _, explained = explain_trace(ruleset, orjson.dumps(hub_trace()), None, "gpt-4o-mini")
    by_rule = {e.rule_id: e for e in explained}
    assert (by_rule[RULE].outcome, by_rule[RULE].detail) == (
        DISABLED,
        "switched off by SCORER_DISABLED_RULES",
    )
    assert by_rule["hub_response_clarity"].detail == "switched off by enabled: false"
    assert THREAD_RULE not in by_rule  # thread rules are not explained per trace, on or off
    assert by_rule["hub_actionability"].outcome == "judge"


def test_the_explain_command_lists_a_disabled_rule(
    deployment: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SCORER_DISABLED_RULES", f'["{RULE}"]')
    path = tmp_path / "trace.json"
    path.write_bytes(orjson.dumps(hub_trace()))
    result = CliRunner().invoke(app, ["explain", str(path)], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert f"disabled    fretcoach/{RULE}: switched off by SCORER_DISABLED_RULES" in result.output


def test_rules_check_validates_and_lists_switched_off_rules(
    deployment: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    edit(deployment, "hub_response_clarity", enabled=False)
    monkeypatch.setenv("SCORER_DISABLED_RULES", f'["{RULE}"]')
    result = CliRunner().invoke(app, ["rules", "check"], terminal_width=300)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert (
        "ok  fretcoach/hub_answer_correctness v1 (trace, judge) switched off "
        "(SCORER_DISABLED_RULES)" in lines
    )
    assert (
        "ok  fretcoach/hub_response_clarity v1 (trace, judge) switched off (enabled: false)"
        in lines
    )
    assert "ok  fretcoach/hub_actionability v1 (trace, judge)" in lines
    assert any("rules ok (2 switched off), 0 files with errors" in line for line in lines)

    monkeypatch.setenv("SCORER_DISABLED_RULES", '["hub_answer_corectness"]')
    result = CliRunner().invoke(app, ["rules", "check"], terminal_width=300)
    assert result.exit_code == 1
    assert (
        "error SCORER_DISABLED_RULES names rules that are not loaded: ['hub_answer_corectness']"
        in result.output
    )
    # a folder named on the command line is checked as its files say
    result = CliRunner().invoke(app, ["rules", "check", str(deployment)], terminal_width=300)
    assert result.exit_code == 0, result.output
    assert "SCORER_DISABLED_RULES" not in result.output
    assert "rules ok (1 switched off), 0 files with errors" in result.output
