"""What a worker says of its rules at start (``stream/rules_summary.py``)."""

from __future__ import annotations

from pathlib import Path

import yaml
from fixtures import RULES_DIR

from stream.rules_summary import per_target, summary
from stream.ruleset.loader import load_rules
from stream.ruleset.schema import LLMJudgeRule


def test_a_fan_out_counts_its_bound_and_a_close_its_kind() -> None:
    ruleset = load_rules(RULES_DIR, ["mlflow", "conversation"])
    found = per_target(ruleset)
    fan_outs = [r for r in ruleset.rules if isinstance(r, LLMJudgeRule) and r.fan_out is not None]
    judged_trace_rules = [r for r in ruleset.rules if r.scope == "trace"]
    bound = sum(r.fan_out.max_items for r in fan_outs if r.fan_out is not None)
    assert found.trace_calls == len(judged_trace_rules) - len(fan_outs) + bound
    assert found.close_calls == {"conversation": 3}
    assert found.tool_rules == 1  # instructions_trace reads the trace by tools
    assert found.trace_template_tokens > 1000


def test_the_start_says_the_packs_the_cost_and_what_is_left_out() -> None:
    ruleset = load_rules(RULES_DIR, ["conversation", "fretcoach"], ["hub_actionability"])
    lines = summary(ruleset)
    assert lines[0].startswith("packs loaded: conversation (3 judge rules, 0 checks), fretcoach (")
    assert "5 a conversation close" in lines[1] and "1 a session close" in lines[1]
    assert "at most 7 a trace" in lines[1] and "scorer estimate FILE" in lines[1]
    assert any("fretcoach/hub_actionability" in line for line in lines[2:])
    assert len(lines) <= 4  # a few lines, never one a rule


def test_a_judged_tool_call_rule_is_counted_per_call_not_per_trace(tmp_path: Path) -> None:

    pack = tmp_path / "agents"
    pack.mkdir()
    rule = {
        "id": "right_tool", "pack": "agents", "version": 1, "scope": "tool_call",
        "kind": "llm_judge", "variables": {"tool": "name"},
        "output": {"type": "numeric", "min": 0, "max": 1, "higher_is_better": True},
        "prompt": "Was {{tool}} the right tool?",
    }  # fmt: skip
    (pack / "right_tool.yaml").write_text(yaml.safe_dump(rule))
    found = per_target(load_rules(tmp_path, ["agents"]))
    assert (found.trace_calls, found.call_calls, found.close_calls) == (0, 1, {})
    assert "1 a tool call (~" in found.line()
