"""Live rule reloads, without a broker: what is swapped in, what is refused and why."""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from fixtures import RULES_DIR

from stream.engine.scorer import Scorer
from stream.live_rules import LiveRules, rules_fingerprint
from stream.models import Trace
from stream.observer import Observer
from stream.redact.policy import SHIPPED, unmasked_problems
from stream.ruleset.filters import PackFilter
from stream.ruleset.loader import deployment_rules
from stream.threads.router import ThreadRouter

SUPPORT = Path(__file__).resolve().parent.parent / "examples" / "rules" / "support"


@dataclass
class Config:
    rules_dir: Path
    packs: list[str] | None = None
    pack_filters: dict[str, PackFilter] = field(default_factory=dict)
    disabled_rules: list[str] = field(default_factory=list)
    thread_inactivity_gap_s: float = 900.0
    redact_required: bool = False  # SCORER_REDACT_REQUIRED, for an external judge

    def redaction_problems(self, rules: Any) -> list[str]:
        """As ``Settings.redaction_problems`` says them, for a judge at api.openai.com."""
        listed = list(rules)
        problems = SHIPPED.problems(listed)
        if self.redact_required:
            problems += unmasked_problems(listed, {"api.openai.com"}, [])
        return problems


class Recorder(Observer):
    def __init__(self) -> None:
        self.loaded: list[str] = []
        self.reloads: list[tuple[str, list[str]]] = []

    def on_rules_loaded(self, version: str, digest: str, directions: Any) -> None:
        self.loaded.append(digest)

    def on_rules_reload(self, outcome: str, projects: Any = ()) -> None:
        self.reloads.append((outcome, sorted(projects)))


def live(rules: Path) -> tuple[LiveRules, Scorer, ThreadRouter, Recorder]:
    config = Config(rules)
    ruleset = deployment_rules(config)
    scorer = Scorer(ruleset, None, default_model="m")
    router = ThreadRouter(ruleset)
    recorder = Recorder()
    return (
        LiveRules(config, ruleset, scorer, router, recorder, lambda _: None),
        scorer,
        router,
        recorder,
    )


@pytest.fixture
def rules(tmp_path: Path) -> Path:
    shutil.copytree(SUPPORT, tmp_path / "support", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def add_strict_rule(rules: Path) -> None:
    text = (rules / "support" / "reply_length.yaml").read_text()
    text = text.replace("id: reply_length", "id: reply_length_strict")
    text = text.replace("projects: [support-bot]", "projects: [support-bot, helpdesk]")
    (rules / "support" / "reply_length_strict.yaml").write_text(text)


def trace() -> Trace:
    return Trace.model_validate(
        {
            "id": "t1",
            "project_name": "support-bot",
            "output": {"messages": [{"role": "assistant", "content": "on its way"}]},
        }
    )


def test_nothing_changed_nothing_reloaded(rules: Path) -> None:
    watcher, _, _, recorder = live(rules)
    assert watcher.check() is False
    assert recorder.reloads == []


def test_a_new_rule_file_is_scored_from_the_next_trace(rules: Path) -> None:
    watcher, scorer, _, recorder = live(rules)
    before = watcher.ruleset.digest
    add_strict_rule(rules)
    assert watcher.check() is True
    assert [r.id for r in scorer.trace_rules] == ["reply_length", "reply_length_strict"]
    plan = scorer.plan(trace(), trace().model_dump(mode="json"))
    assert {o.score.rule_id: o.score.status for o in plan.outcomes if o.score} == {
        "reply_length": "ok",
        "reply_length_strict": "ok",
    }
    assert recorder.loaded == [watcher.ruleset.digest] and watcher.ruleset.digest != before
    # the reloaded rules' projects are named to the metrics (kept as labels)
    assert recorder.reloads == [("reloaded", ["helpdesk", "support-bot"])]
    assert watcher.check() is False  # looked at once


def test_a_bad_file_keeps_the_running_set_and_says_where(
    rules: Path, caplog: pytest.LogCaptureFixture
) -> None:
    watcher, scorer, _, recorder = live(rules)
    running = watcher.ruleset
    (rules / "support" / "broken.yaml").write_text("id: broken\npack: support\nscope: trace\n")
    with caplog.at_level(logging.ERROR):
        assert watcher.check() is False
    assert watcher.ruleset is running and scorer.ruleset is running
    assert "broken.yaml" in caplog.text and "field" in caplog.text
    assert f"the running rule set {running.digest} stays" in caplog.text
    assert recorder.reloads == [("invalid", [])]


def test_rules_that_need_an_agent_the_worker_lacks_need_a_restart(
    rules: Path, caplog: pytest.LogCaptureFixture
) -> None:
    watcher, scorer, _, recorder = live(rules)  # trace rules only: no thread agent
    running = watcher.ruleset
    shutil.copy(RULES_DIR / "fretcoach" / "hub_conversational_coherence.yaml", rules / "support")
    text = (rules / "support" / "hub_conversational_coherence.yaml").read_text()
    (rules / "support" / "hub_conversational_coherence.yaml").write_text(
        text.replace("pack: fretcoach", "pack: support")
    )
    with caplog.at_level(logging.ERROR):
        assert watcher.reload("SIGHUP") is False
    assert "restart the worker" in caplog.text and "thread agent" in caplog.text
    assert scorer.ruleset is running
    assert recorder.reloads == [("needs_restart", [])]


def test_the_fingerprint_follows_every_file_but_pythons_caches(rules: Path) -> None:
    first = rules_fingerprint(rules)
    (rules / "support" / "__pycache__").mkdir(exist_ok=True)
    (rules / "support" / "__pycache__" / "checks.cpython-311.pyc").write_bytes(b"x")
    assert rules_fingerprint(rules) == first
    (rules / "support" / "checks.py").write_text(
        (rules / "support" / "checks.py").read_text() + "\n"
    )
    assert rules_fingerprint(rules) != first
    assert rules_fingerprint(rules / "gone") == "missing"


RAW_RULE = """\
id: leak_check
pack: support
version: 1
scope: trace
kind: llm_judge
description: "Does the reply leak personal data?"
judge: {redact: false}
variables:
  reply: output.messages[-1].content
output: {type: choice, choices: {"yes": 0.0, "no": 1.0}}
prompt: "Does this reply leak personal data? {{reply}}"
"""


def test_a_reload_leaving_text_unmasked_where_redaction_is_required_is_refused(
    rules: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """SCORER_REDACT_REQUIRED holds on a live reload as at start: the running set stays."""
    watcher, scorer, _, recorder = live(rules)
    watcher.settings.redact_required = True  # type: ignore[attr-defined]
    running = watcher.ruleset
    (rules / "support" / "leak_check.yaml").write_text(RAW_RULE)
    with caplog.at_level(logging.ERROR):
        assert watcher.check() is False
    assert scorer.ruleset is running and recorder.reloads == [("invalid", [])]
    assert "rule leak_check: judge.redact leaves" in caplog.text
    watcher.settings.redact_required = False  # type: ignore[attr-defined]
    assert watcher.reload("SIGHUP") is True  # not required: it runs
