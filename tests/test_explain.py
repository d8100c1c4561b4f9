"""``scorer explain``: every rule's decision for a trace, offline, from the worker's engine."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import orjson
import pytest
from fixtures import RULES_DIR, as_trace, hub_trace, scorer
from scripted_judge import MockJudge
from typer.testing import CliRunner

from stream.cli import app
from stream.explain import PAIRS, WOULD_JUDGE, explain_trace
from stream.ruleset.loader import load_rules

SHAPES = Path(__file__).parent / "data" / "shapes"
PACKS = ["fretcoach", "mlflow", "critique"]


@pytest.mark.parametrize("name", sorted(p.stem for p in SHAPES.glob("*.json")))
def test_explain_agrees_with_what_the_engine_decides(name: str) -> None:
    ruleset = load_rules(RULES_DIR, PACKS)
    raw = (SHAPES / f"{name}.json").read_bytes()
    trace_id, explained = explain_trace(ruleset, raw, "llm-traces", "gpt-4o-mini")
    pairs = {r.id for r in ruleset.pair_rules()}  # not decided per trace (test below)
    explained = [e for e in explained if e.rule_id not in pairs]
    document = orjson.loads(raw)
    with MockJudge() as judge:
        judge.script("", '{"score": 0.5, "reason": "fine"}')
        s = scorer(judge.base_url, ruleset)
        result = asyncio.run(s.score_trace(as_trace(document), document, "llm-traces"))
    decided = {d.rule_id: d.outcome for d in result.decisions}
    assert trace_id == document["id"]
    assert {e.rule_id for e in explained} == set(decided)
    judged = {s.rule_id for s in result.scores if s.judge_model is not None}
    for e in explained:
        if e.outcome == WOULD_JUDGE:  # a call the worker made (scored, or its answer unusable)
            assert e.rule_id in judged and e.prompt, e
        else:
            assert e.outcome == decided[e.rule_id] and e.rule_id not in judged, e


def test_explain_says_why_a_rule_did_not_fire() -> None:
    ruleset = load_rules(RULES_DIR, ["fretcoach"])
    document = hub_trace()
    document["name"] = "hub-chat-v2"  # a name the seed does not define
    _, explained = explain_trace(ruleset, orjson.dumps(document), None, "gpt-4o-mini")
    by_rule = {e.rule_id: e for e in explained}
    assert by_rule["hub_answer_correctness"].outcome == "filtered"
    assert by_rule["hub_answer_correctness"].detail == (
        "filter.trace_names ['hub-coach-chat']: name is 'hub-chat-v2'"
    )


def test_the_command_prints_decisions_and_prompts_without_a_broker_or_judge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SCORER_PACKS", '["fretcoach"]')
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)
    bad = b'{"project_name": "fretcoach"}'  # no id: the worker dead-letters it
    path = tmp_path / "traces.jsonl"
    path.write_bytes(orjson.dumps(hub_trace()) + b"\n" + bad + b"\n")
    result = CliRunner().invoke(app, ["explain", str(path), "--prompt"])
    assert result.exit_code == 0, result.output
    assert "judge       fretcoach/hub_answer_correctness: would be judged" in result.output
    assert (
        "--- prompt ---\nYou are an impartial AI judge evaluating an assistant's" in result.output
    )
    assert "invalid trace (the worker dead-letters it)" in result.output and "id" in result.output
    assert "no judge is configured" in result.output

    as_json = CliRunner().invoke(app, ["explain", str(path), "--json"])
    (record,) = [json.loads(line) for line in as_json.output.splitlines() if line.startswith("{")]
    assert record["trace_id"] == hub_trace()["id"]
    assert {r["outcome"] for r in record["rules"]} >= {"judge", "filtered"}

    missing = CliRunner().invoke(app, ["explain", str(path), "--trace-id", "nope"])
    assert missing.exit_code == 1 and "no trace found with id 'nope'" in missing.output


def test_explain_says_a_fanned_out_rule_makes_a_call_per_item() -> None:
    ruleset = load_rules(RULES_DIR, ["mlflow"])
    document = hub_trace()
    document["metadata"] = {"retrieval_context": ["Loop the bar.", "Use a click.", "Rest."]}
    _, explained = explain_trace(ruleset, orjson.dumps(document), None, "gpt-4o-mini")
    (relevance,) = [e for e in explained if e.rule_id == "retrieval_relevance"]
    assert relevance.outcome == WOULD_JUDGE
    assert "3 calls, one per item (3 items)" in relevance.detail
    assert relevance.prompt and "<document>Loop the bar.</document>" in relevance.prompt


def test_explain_says_which_side_of_which_pair_a_trace_is_or_why_none() -> None:
    ruleset = load_rules(RULES_DIR, ["critique"])
    trace = {
        "id": "t-b",
        "project_name": "code-assistant",
        "input": {"messages": [{"role": "user", "content": "Reverse a string."}]},
        "output": {"messages": [{"role": "assistant", "content": "s[::-1]"}]},
        "metadata": {"comparison_id": "cmp-7", "variant": "B"},
    }

    def said(document: dict[str, object]) -> tuple[str, str | None]:
        _, explained = explain_trace(ruleset, orjson.dumps(document), None, "gpt-4o-mini")
        (pair,) = [e for e in explained if e.rule_id == "response_comparison"]
        return pair.outcome, pair.detail

    assert said(trace) == (
        PAIRS,
        "pairs as variant B of comparison 'cmp-7': judged once variant A comes, within 600 s",
    )
    assert said({**trace, "metadata": {"variant": "B"}}) == (
        "filtered",
        "not paired: no comparison key at metadata.comparison_id",
    )
    assert said({**trace, "metadata": {"comparison_id": "cmp-7", "variant": "canary"}}) == (
        "filtered",
        "not paired: its variant 'canary' (metadata.variant) is neither A nor B",
    )
