"""``scorer canary record``: a rule's inputs judged once by the configured judge and written
as canary items, which the rule then loads as its canary and a round finds unchanged."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import orjson
import pytest
import yaml
from scripted_judge import MockJudge
from typer.testing import CliRunner

from stream.canary import Rejudged, judge_items
from stream.cli import app
from stream.errors import ConfigError
from stream.judge.decision_client import judge_client
from stream.ruleset.loader import load_rules
from stream.ruleset.schema import LLMJudgeRule
from stream.settings import Settings

RULE = {
    "id": "answer_quality",
    "pack": "demo",
    "version": 1,
    "scope": "trace",
    "kind": "llm_judge",
    "variables": {"question": "input.question"},
    "output": {"type": "numeric", "min": 1, "max": 5, "integer": True},
    "prompt": "Rate the answer to {{question}} from 1 to 5.",
}


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> MockJudge:
    for name in list(os.environ):
        if name.upper().startswith(("SCORER_", "OPENAI_")):
            monkeypatch.delenv(name)
    pack = tmp_path / "rules" / "demo"
    pack.mkdir(parents=True)
    (pack / "answer_quality.yaml").write_text(yaml.safe_dump(RULE))
    monkeypatch.setenv("SCORER_RULES_DIR", str(tmp_path / "rules"))
    monkeypatch.setenv("SCORER_JUDGE_MODEL", "judge-m")
    with MockJudge() as judge:
        judge.script("Q-one", '{"score": 4, "reason": "scripted"}')
        judge.script("Q-two", '{"score": 2, "reason": "scripted"}')
        monkeypatch.setenv("OPENAI_BASE_URL", judge.base_url)
        yield judge


def traces(tmp_path: Path) -> Path:
    lines = [
        {"id": "t-1", "project_name": "p", "input": {"question": "Q-one"}},
        {"id": "t-2", "project_name": "p", "input": {"question": "Q-two"}},
        {"id": "t-3", "project_name": "p", "input": {"other": "no question"}},
    ]
    path = tmp_path / "traces.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(line) for line in lines))
    return path


def test_recorded_items_load_as_the_rules_canary_and_a_round_finds_them_unchanged(
    env: MockJudge, tmp_path: Path
) -> None:
    out = tmp_path / "rules" / "demo" / "canary.jsonl"
    result = CliRunner().invoke(
        app, ["canary", "record", "answer_quality", str(traces(tmp_path)), "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert "wrote 2 items" in result.output and "t-3: skipped" in result.output
    written = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert [(i["id"], i["recorded"]["raw_value"], i["recorded"]["value"]) for i in written] == [
        ("t-1", 4.0, 0.75),
        ("t-2", 2.0, 0.25),
    ]
    assert written[0]["input"]["input"] == {"question": "Q-one"}
    assert {i["recorded"]["model"] for i in written} == {"judge-m"}

    rule_file = tmp_path / "rules" / "demo" / "answer_quality.yaml"
    rule_file.write_text(yaml.safe_dump({**RULE, "canary": {"items": "canary.jsonl"}}))
    (rule,) = load_rules(tmp_path / "rules").rules
    assert isinstance(rule, LLMJudgeRule) and rule.canary is not None
    spec = rule.canary

    async def round_() -> list[Rejudged]:
        client = judge_client(Settings().judge_config())
        try:
            return await judge_items(
                rule, spec.reference, client, default_model="judge-m", max_prompt_tokens=8000
            )
        finally:
            await client.close()

    again = asyncio.run(round_())
    assert [(r.item_id, r.value) for r in again] == [("t-1", 0.75), ("t-2", 0.25)]

    refused = CliRunner().invoke(
        app, ["canary", "record", "answer_quality", str(traces(tmp_path)), "--out", str(out)]
    )
    assert isinstance(refused.exception, ConfigError) and "--force" in str(refused.exception)
    unknown = CliRunner().invoke(
        app,
        [
            "canary",
            "record",
            "answer_qualty",
            str(traces(tmp_path)),
            "-o",
            str(tmp_path / "x.jsonl"),
        ],
    )
    assert isinstance(unknown.exception, ConfigError) and "names no rule" in str(unknown.exception)
