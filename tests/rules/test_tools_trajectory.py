"""The tools pack's trajectory rule (``tool_trajectory``) through the engine: the expected
trajectory from the trace's metadata or its reference, the mode from the expected value or the
rule's param, a trace with no expectation filtered (no score), an expectation that cannot be
read skipped with what is wrong, and no reason quoting an argument."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import yaml
from fixtures import RULES_DIR, as_trace
from prometheus_client import CollectorRegistry

from stream.engine.scorer import Scorer
from stream.metrics import ScorerMetrics
from stream.models import ScoreEvent
from stream.references import ReferenceStore, with_reference
from stream.ruleset.loader import load_rules
from stream.ruleset.schema import RuleSet

SECRET = "4111-1111-SECRET"
RULE = "tool_trajectory"


def agent_trace(trace_id: str = "t-agent", **extra: Any) -> dict[str, Any]:
    """An agent that looked an order up, then refunded it: two calls in two turns."""

    def assistant(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        function = {"name": name, "arguments": orjson.dumps(arguments).decode()}
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": call_id, "type": "function", "function": function}],
        }

    return {
        "id": trace_id,
        "project_name": "support",
        "input": {"messages": [{"role": "user", "content": "Refund order 42 to my card"}]},
        "output": {"messages": [
            assistant("c1", "lookup_order", {"order": 42}),
            {"role": "tool", "tool_call_id": "c1", "content": '{"status": "paid"}'},
            assistant("c2", "refund", {"order": 42, "card": SECRET}),
            {"role": "tool", "tool_call_id": "c2", "content": '{"ok": true}'},
            {"role": "assistant", "content": "Refunded."},
        ]},
        **extra,
    }  # fmt: skip


def scorer_of(ruleset: RuleSet) -> Scorer:
    return Scorer(ruleset, None, default_model="m", observer=ScorerMetrics(CollectorRegistry()))


async def trajectory(document: dict[str, Any], ruleset: RuleSet | None = None) -> tuple[str, Any]:
    """The rule's decision outcome for ``document``, and its score (filtered or skipped: why)."""
    result = await scorer_of(ruleset or load_rules(RULES_DIR, ["tools"])).score_trace(
        as_trace(document), document
    )
    [decision] = [d for d in result.decisions if d.rule_id == RULE]
    scores: list[ScoreEvent] = [s for s in result.scores if s.rule_id == RULE]
    assert len(scores) <= 1
    assert decision.target_id == document["id"]
    if decision.outcome in ("filtered", "skipped"):  # a skipped score says why in its decision
        return decision.outcome, decision.detail
    return decision.outcome, scores[0]


async def test_a_trace_expecting_no_trajectory_is_filtered_not_scored() -> None:
    outcome, detail = await trajectory(agent_trace())
    assert outcome == "filtered" and "filter.when" in detail


async def test_the_metadata_trajectory_is_compared_in_order_by_default() -> None:
    expected = ["lookup_order", {"name": "refund", "arguments": {"order": 42.0}}]
    outcome, score = await trajectory(agent_trace(metadata={"expected_tool_calls": expected}))
    assert outcome == "scored"
    assert (score.value, score.label, score.status) == (1.0, "pass", "ok")
    assert score.reason.startswith("in_order: ")

    backwards = ["refund", "lookup_order"]
    _, score = await trajectory(agent_trace(metadata={"expected_tool_calls": backwards}))
    assert (score.value, score.label) == (0.0, "fail")
    assert score.reason == (
        "in_order: step 1 (lookup_order) was not called in order: not after position 1, only "
        "before (first at position 0)"
    )


async def test_the_expected_value_names_its_own_mode() -> None:
    expected = {"calls": ["refund", "lookup_order"], "match": "any_order"}
    _, score = await trajectory(agent_trace(metadata={"expected_tool_calls": expected}))
    assert score.value == 1.0 and score.reason.startswith("any_order: ")
    only_lookup = {"calls": ["lookup_order"], "match": "subset"}
    _, score = await trajectory(agent_trace(metadata={"expected_tool_calls": only_lookup}))
    assert score.value == 0.0
    assert "the call at position 1 (refund) is not among the expected tools" in score.reason


async def test_an_empty_list_expects_no_call_where_the_mode_can_say_so() -> None:
    none_at_all = {"calls": [], "match": "exact"}
    _, score = await trajectory(agent_trace(metadata={"expected_tool_calls": none_at_all}))
    assert score.value == 0.0  # kept by not_null: `||` would have passed it over
    quiet = {"id": "t-quiet", "input": "hi", "output": "hello"}
    _, score = await trajectory({**quiet, "metadata": {"expected_tool_calls": none_at_all}})
    assert score.value == 1.0
    outcome, detail = await trajectory(agent_trace(metadata={"expected_tool_calls": []}))
    assert outcome == "skipped" and "in_order accepts any calls" in detail


async def test_an_expectation_that_cannot_be_read_is_skipped_naming_the_flaw() -> None:
    bad = [{"name": "refund", "arguments": {"card": SECRET}}, {"tool": "lookup_order"}]
    outcome, detail = await trajectory(agent_trace(metadata={"expected_tool_calls": bad}))
    assert outcome == "skipped"
    assert "the expected trajectory cannot be read: step 1: unknown key 'tool'" in detail
    assert SECRET not in detail


async def test_no_reason_quotes_an_argument() -> None:
    expected = {"calls": [{"name": "refund", "arguments": {"card": "another card"}}],
                "match": "exact"}  # fmt: skip
    _, score = await trajectory(agent_trace(metadata={"expected_tool_calls": expected}))
    assert score.value == 0.0
    assert SECRET not in score.reason and "another card" not in score.reason


async def test_the_reference_s_trajectory_is_read_where_the_metadata_has_none() -> None:
    store = ReferenceStore(1 << 20)
    store.apply(b"ref-refund", orjson.dumps({"tool_calls": ["lookup_order", "refund"]}))
    store.apply(b"t-own-id", orjson.dumps({"tool_calls": {"calls": ["refund"], "match": "exact"}}))

    def joined(document: dict[str, Any]) -> dict[str, Any]:
        return with_reference(as_trace(document), document, store)[1]

    named = agent_trace(metadata={"reference_id": "ref-refund"})
    _, score = await trajectory(joined(named))
    assert score.value == 1.0
    _, score = await trajectory(joined(agent_trace("t-own-id")))  # its own id looked up
    assert score.value == 0.0 and score.reason.startswith("exact: ")
    # the metadata's expectation wins over the reference's
    both = agent_trace(metadata={"reference_id": "ref-refund", "expected_tool_calls": ["x"]})
    _, score = await trajectory(joined(both))
    assert score.value == 0.0 and "step 0 (x) was never called" in score.reason
    outcome, _ = await trajectory(joined(agent_trace(metadata={"reference_id": "ref-none"})))
    assert outcome == "filtered"


async def test_the_rule_s_param_is_the_mode_where_the_expected_value_names_none(
    tmp_path: Path,
) -> None:
    pack = tmp_path / "mine"
    pack.mkdir()
    (pack / "trajectory.py").write_text((RULES_DIR / "tools" / "trajectory.py").read_text())
    rule = yaml.safe_load((RULES_DIR / "tools" / f"{RULE}.yaml").read_text())
    (pack / f"{RULE}.yaml").write_text(
        yaml.safe_dump({**rule, "pack": "mine", "params": {"match": "exact"}})
    )
    exact = load_rules(tmp_path, ["mine"])
    document = agent_trace(metadata={"expected_tool_calls": ["refund"]})
    _, score = await trajectory(document, exact)
    assert score.value == 0.0 and score.reason.startswith("exact: ")
    _, score = await trajectory(document)  # the shipped rule: in order
    assert score.value == 1.0
