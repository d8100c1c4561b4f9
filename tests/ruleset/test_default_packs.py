"""The packs a worker loads when SCORER_PACKS is unset: every pack of your folders, the shipped
``conversation`` pack whole, and of the other shipped packs only their deterministic checks;
the judge rules left out are listed as not loaded, with how to load them (design record 39).
``all`` loads every pack; a list, exactly those packs, whole."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest
from fixtures import ROOT, RULES_DIR
from typer.testing import CliRunner

from stream.cli import app
from stream.engine.scorer import Scorer
from stream.explain import DISABLED, ExplainedTrace, FileOptions, explain_file
from stream.live_rules import LiveRules
from stream.observer import Observer
from stream.redact.policy import SHIPPED
from stream.ruleset.filters import PackFilter
from stream.ruleset.loader import (
    NOT_LOADED_BY_DEFAULT,
    deployment_rules,
    load_rules,
    pack_selection,
)
from stream.ruleset.location import RulesDirs
from stream.settings import Settings
from stream.threads.router import ThreadRouter

SUPPORT = ROOT / "examples" / "rules" / "support"
EVERY_SHIPPED = load_rules(RULES_DIR)
CHECKS = {r.id for r in EVERY_SHIPPED.rules if r.kind == "check"}
CONVERSATION = {r.id for r in EVERY_SHIPPED.rules if r.pack == "conversation"}


@pytest.fixture(autouse=True)
def no_deployment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SCORER_RULES_DIR", "SCORER_PACKS", "SCORER_DISABLED_RULES"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def mine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "mine"
    shutil.copytree(SUPPORT, folder / "support", ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setenv("SCORER_RULES_DIR", str(folder))
    return folder


def test_unset_a_newcomer_gets_the_conversation_pack_and_the_checks(mine: Path) -> None:
    ruleset = deployment_rules(Settings())
    assert {r.id for r in ruleset.rules} == CONVERSATION | CHECKS | {"reply_length"}
    assert CHECKS and all(
        r.engine.startswith("check:") for r in EVERY_SHIPPED.rules if r.id in CHECKS
    )
    # no MLflow rule, no rubric, no comparison runs: each is listed as not loaded
    left_out = {d.rule.id: d.by for d in ruleset.disabled}
    assert left_out == {
        r.id: NOT_LOADED_BY_DEFAULT
        for r in EVERY_SHIPPED.rules
        if r.id not in CONVERSATION | CHECKS
    }
    assert "mlflow" not in ruleset.packs and "safety" in left_out
    assert NOT_LOADED_BY_DEFAULT.startswith("the default pack selection (")
    assert "SCORER_PACKS='[\"all\"]'" in NOT_LOADED_BY_DEFAULT


def test_unset_with_no_folder_of_yours_the_same_from_the_shipped_packs() -> None:
    ruleset = deployment_rules(Settings())
    assert {r.id for r in ruleset.rules} == CONVERSATION | CHECKS
    assert pack_selection(RulesDirs.parse([]), None) == (
        None,
        sorted({r.pack for r in EVERY_SHIPPED.rules} - {"conversation"}),
    )


@pytest.mark.parametrize("packs", ["all", '["all"]'])
def test_all_loads_every_pack_whole(
    packs: str, mine: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SCORER_PACKS", packs)
    ruleset = deployment_rules(Settings())
    assert {r.id for r in ruleset.rules} == {r.id for r in EVERY_SHIPPED.rules} | {"reply_length"}
    assert ruleset.disabled == []


def test_a_list_loads_exactly_those_packs_whole(
    mine: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SCORER_PACKS", '["fretcoach"]')
    ruleset = deployment_rules(Settings())
    assert ruleset.packs == ["fretcoach"]
    assert {r.id for r in ruleset.rules} == {
        r.id for r in load_rules(RULES_DIR, ["fretcoach"]).rules
    }
    assert ruleset.disabled == []


def test_a_shipped_judge_rule_switched_off_by_the_setting_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SCORER_DISABLED_RULES", '["safety", "conversation_coherence"]')
    ruleset = deployment_rules(Settings())  # not an unknown id: the rule is loaded, not run
    left_out = {d.rule.id: d.by for d in ruleset.disabled}
    assert left_out["safety"] == left_out["conversation_coherence"] == "SCORER_DISABLED_RULES"


def test_the_demo_s_own_packs_are_loaded_whole() -> None:
    ruleset = deployment_rules(Settings(), ["fretcoach", "critique"])
    assert ruleset.packs == ["critique", "fretcoach"] and ruleset.disabled == []


def test_rules_check_lists_what_is_not_loaded_and_how_to_load_it() -> None:
    result = CliRunner().invoke(app, ["rules", "check"], terminal_width=300)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert "ok  mlflow/safety v1 (trace, judge) not loaded by default (SCORER_PACKS)" in lines
    assert "ok  critique/pleasantries v1 (trace, check:pleasantry_count)" in lines
    assert "ok  conversation/conversation_coherence v1 (thread, judge)" in lines
    judged = len(EVERY_SHIPPED.rules) - len(CONVERSATION | CHECKS)
    assert (
        f"{judged} judge rules of the shipped packs are not loaded by default: "
        'SCORER_PACKS=\'["all"]\' loads every pack, \'["conversation", "mlflow"]\' those two'
    ) in lines
    assert f"{len(EVERY_SHIPPED.rules)} rules ok, 0 files with errors" in lines


def test_rules_check_marks_the_packs_a_list_leaves_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCORER_PACKS", '["critique"]')
    result = CliRunner().invoke(app, ["rules", "check"], terminal_width=300)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert "ok  critique/response_critique v2 (trace, rubric:issue_table)" in lines
    assert (
        "ok  mlflow/safety v1 (trace, judge) not loaded (SCORER_PACKS does not list its pack)"
        in lines
    )
    outside = sum(1 for r in EVERY_SHIPPED.rules if r.pack != "critique")
    assert f"{outside} rules of packs SCORER_PACKS does not list are not loaded" in lines


def test_explain_shows_a_judge_rule_left_out_as_not_running() -> None:
    trace = {
        "id": "t1",
        "input": {"messages": [{"role": "user", "content": "hi"}]},
        "output": {"messages": [{"role": "assistant", "content": "hello"}]},
    }
    (record, *_) = explain_file(
        deployment_rules(Settings()), [orjson.dumps(trace)], FileOptions(default_model="m")
    )
    assert isinstance(record, ExplainedTrace)
    outcomes = {e.rule_id: (e.outcome, e.detail) for e in record.rules}
    assert outcomes["safety"] == (DISABLED, f"switched off by {NOT_LOADED_BY_DEFAULT}")
    assert outcomes["pleasantries"][0] != DISABLED


@dataclass
class Config:
    rules_dir: RulesDirs
    packs: list[str] | None = None
    pack_filters: dict[str, PackFilter] = field(default_factory=dict)
    disabled_rules: list[str] = field(default_factory=list)
    thread_inactivity_gap_s: float = 900.0

    def redaction_problems(self, rules: Any) -> list[str]:
        return SHIPPED.problems(rules)  # as Settings says them, redaction not required


def test_a_pack_added_to_any_folder_is_reloaded(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    shutil.copytree(SUPPORT, first / "support", ignore=shutil.ignore_patterns("__pycache__"))
    second.mkdir()
    config = Config(RulesDirs.parse([str(first), str(second)]))
    ruleset = deployment_rules(config)
    live = LiveRules(
        config,
        ruleset,
        Scorer(ruleset, None, default_model="m"),
        ThreadRouter(ruleset),
        Observer(),
        lambda _: None,
    )
    assert not live.check()
    extra = second / "extra"
    extra.mkdir()
    text = (first / "support" / "reply_length.yaml").read_text()
    text = text.replace("id: reply_length", "id: reply_length_extra")
    (extra / "reply_length_extra.yaml").write_text(text.replace("pack: support", "pack: extra"))
    shutil.copy(first / "support" / "checks.py", extra / "checks.py")
    assert live.check()
    assert "reply_length_extra" in live.ruleset.ids
