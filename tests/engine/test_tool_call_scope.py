"""The ``tool_call`` scope (issue 50, design record 49): every tool call of a trace is a target
of its own. A call rule gets one outcome per call, its score's target is the call's id and
names its trace and tool; its records are keyed by the trace; ``filter.when`` reads the call;
sampling is by call id; a judged call rule asks the judge once per call; a call deferred to a
batch keeps its trace; ``scorer explain`` lists each call's rules."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import yaml
from fixtures import RULES_DIR, as_trace
from prometheus_client import CollectorRegistry
from scripted_judge import MockJudge, Reply
from test_deferred import FakeDeferrer, client_of

from stream.backfill import unscored
from stream.engine.batch_entry import Deferred
from stream.engine.deferred import finish_deferred
from stream.engine.plan import JudgedRule
from stream.engine.records import trace_records
from stream.engine.scorer import Scorer
from stream.explain.records import planned
from stream.metrics import ScorerMetrics
from stream.models import ScoreEvent
from stream.ruleset.loader import load_rules
from stream.ruleset.schema import RuleSet

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


def agent_trace(trace_id: str = "trace-1", **extra: Any) -> dict[str, Any]:
    """An agent's trace in the trace model: one turn calling ``get_weather`` (arguments
    missing the required city; the tool fails) and ``search`` (not declared)."""
    return {
        "id": trace_id,
        "project_name": "agents",
        "input": {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [WEATHER]},
        "output": {
            "messages": [
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "call_1", "type": "function",
                         "function": {"name": "get_weather", "arguments": '{"town": "Paris"}'}},
                        {"id": "call_2", "type": "function",
                         "function": {"name": "search", "arguments": "{}"}},
                    ],
                },
                {"role": "tool", "tool_call_id": "call_1", "content": '{"error": "no city"}'},
                {"role": "tool", "tool_call_id": "call_2", "content": "nothing found"},
                {"role": "assistant", "content": "I could not find the weather."},
            ]
        },
        **extra,
    }  # fmt: skip


def tools_pack() -> RuleSet:
    return load_rules(RULES_DIR, ["tools"])


def scorer_of(ruleset: RuleSet, judge: Any = None) -> Scorer:
    metrics = ScorerMetrics(CollectorRegistry())
    return Scorer(ruleset, judge, default_model="gpt-4o-mini", observer=metrics)


def call_rules(tmp_path: Path, *rules: dict[str, Any]) -> RuleSet:
    pack = tmp_path / "agents"
    pack.mkdir(exist_ok=True)
    for rule in rules:
        (pack / f"{rule['id']}.yaml").write_text(yaml.safe_dump(rule))
    return load_rules(tmp_path, ["agents"])


def judged_rule(**changes: Any) -> dict[str, Any]:
    rule = {
        "id": "right_tool",
        "pack": "agents",
        "version": 1,
        "scope": "tool_call",
        "kind": "llm_judge",
        "variables": {"user": "user", "tool": "name", "arguments": "arguments"},
        "output": {"type": "numeric", "min": 0, "max": 1, "higher_is_better": True},
        "prompt": "User: {{user}}\nTool: {{tool}}\nArguments: {{arguments}}\nRight tool?",
    }
    rule.update(changes)
    return rule


def scores_by_call(scores: list[ScoreEvent]) -> dict[tuple[str, str], ScoreEvent]:
    return {(s.target_id, s.rule_id): s for s in scores}


async def test_every_call_is_scored_by_every_call_rule_and_names_its_trace() -> None:
    document = agent_trace()
    scorer = scorer_of(tools_pack())
    result = await scorer.score_trace(as_trace(document), document)
    scores = scores_by_call(result.scores)
    rules = {r.id for r in tools_pack().for_scope("tool_call")}
    assert set(scores) == {(call, rule) for call in ("call_1", "call_2") for rule in rules}
    for (call, _), score in scores.items():
        assert score.scope == "tool_call" and score.project_name == "agents"
        tool = {"call_1": "get_weather", "call_2": "search"}[call]
        assert score.details is not None
        assert (score.details["trace_id"], score.details["tool"]) == ("trace-1", tool)
    values = {key: s.value for key, s in scores.items()}
    assert values[("call_1", "tool_arguments_valid")] == 0.0  # the city is missing
    assert values[("call_1", "tool_call_succeeded")] == 0.0
    assert values[("call_1", "tool_declared")] == 1.0
    assert values[("call_2", "tool_declared")] == 0.0  # search was not declared
    assert values[("call_2", "tool_call_succeeded")] == 1.0
    # the decisions name each call as their target, in the trace's one decision record (with
    # the pack's trace rule's: tool_trajectory, filtered, the trace expects no trajectory)
    decided = {(d.target_id, d.rule_id) for d in result.decisions}
    assert decided == set(scores) | {("trace-1", "tool_trajectory")}


async def test_score_ids_are_stable_and_differ_by_call_and_by_trace() -> None:
    scorer = scorer_of(tools_pack())
    first, again, other = agent_trace(), agent_trace(), agent_trace("trace-2")
    ids = [
        {s.score_id for s in (await scorer.score_trace(as_trace(d), d)).scores}
        for d in (first, again, other)
    ]
    assert ids[0] == ids[1]  # a redelivered trace: the same ids
    assert len(ids[0]) == 10  # five rules, two calls
    assert not ids[0] & ids[2]  # the same call ids in another trace are other targets


async def test_the_records_are_keyed_by_the_trace() -> None:
    document = agent_trace()
    trace = as_trace(document)
    result = await scorer_of(tools_pack()).score_trace(trace, document)
    records = trace_records(result, trace)
    assert {key for key, _ in records.scores} == {b"trace-1"}
    assert [key for key, _ in records.decisions] == [b"trace-1"]


async def test_a_trace_without_calls_has_no_call_outcomes() -> None:
    document = {"id": "plain", "input": "hi", "output": "hello"}
    result = await scorer_of(tools_pack()).score_trace(as_trace(document), document)
    # the pack's trace rule decides for the trace (no trajectory expected: filtered)
    decided = [(o.decision.target_id, o.decision.rule_id) for o in result.outcomes]
    assert decided == [("plain", "tool_trajectory")]


async def test_filter_when_reads_the_call(tmp_path: Path) -> None:
    rule = {
        "id": "weather_only",
        "pack": "agents",
        "version": 1,
        "scope": "tool_call",
        "kind": "check",
        "check": "arguments_valid",
        "filter": {"when": "name == 'get_weather' && trace.project_name == 'agents'"},
        "variables": {"call": "@"},
        "output": {"type": "numeric", "min": 0, "max": 1, "higher_is_better": True},
    }
    pack = tmp_path / "agents"
    pack.mkdir()
    (pack / "checks.py").write_text((RULES_DIR / "tools" / "checks.py").read_text())
    ruleset = call_rules(tmp_path, rule)
    document = agent_trace()
    result = await scorer_of(ruleset).score_trace(as_trace(document), document)
    assert [(s.target_id, s.value) for s in result.scores] == [("call_1", 0.0)]
    [filtered] = [d for d in result.decisions if d.outcome == "filtered"]
    assert filtered.target_id == "call_2" and "filter.when" in (filtered.detail or "")


async def test_sampling_is_by_trace_and_call(tmp_path: Path) -> None:
    """Half the calls, the same half on every delivery and whatever the calls' order; another
    trace's calls of the same ids are sampled apart (ids repeat across traces)."""
    ruleset = call_rules(tmp_path, judged_rule(sampling_rate=0.5))
    scorer = scorer_of(ruleset)

    def sampled_calls(trace_id: str, calls: list[str]) -> set[str]:
        document = agent_trace(trace_id)
        message = document["output"]["messages"][0]
        message["tool_calls"] = [
            {"id": c, "type": "function", "function": {"name": "search", "arguments": "{}"}}
            for c in calls
        ]
        document["output"]["messages"] = [message]
        plan = scorer.plan(as_trace(document), document)
        out = {
            p.target.id
            for p in plan.parts
            for o in p.outcomes
            if o.decision.outcome == "sampled_out"
        }
        return {part.target.id for part in plan.parts} - out

    calls = [f"call_{n}" for n in range(200)]
    kept = sampled_calls("t-a", calls)
    assert 60 < len(kept) < 140
    assert sampled_calls("t-a", list(reversed(calls))) == kept
    other = sampled_calls("t-b", calls)
    assert 60 < len(other) < 140 and other != kept


async def test_a_judged_call_rule_asks_once_per_call(tmp_path: Path) -> None:
    ruleset = call_rules(tmp_path, judged_rule())
    with MockJudge() as server:
        server.script("Tool: search", Reply('{"score": 0, "reason": "wrong tool"}'))
        server.script("Tool: get_weather", Reply('{"score": 1, "reason": "right tool"}'))
        client = client_of(server)
        try:
            document = agent_trace()
            result = await scorer_of(ruleset, client).score_trace(as_trace(document), document)
        finally:
            await client.close()
        prompts = server.prompts()
    assert len(prompts) == 2
    assert all("Weather in Paris?" in p for p in prompts)
    values = {s.target_id: (s.value, s.reason) for s in result.scores}
    assert values == {"call_1": (1.0, "right tool"), "call_2": (0.0, "wrong tool")}


async def test_a_call_deferred_to_a_batch_keeps_its_trace(tmp_path: Path) -> None:
    batch = {"mode": "batch", "batch": {"max_jobs": 10, "max_wait_s": 60}}
    ruleset = call_rules(tmp_path, judged_rule(judge=batch))
    deferrer = FakeDeferrer()
    with MockJudge() as server:
        server.script("Tool: get_weather", Reply('{"score": 1, "reason": "batch"}'))
        client = client_of(server)
        try:
            scorer = scorer_of(ruleset, client)
            scorer.context.deferrer = deferrer
            document = agent_trace()
            result = await scorer.score_trace(as_trace(document), document)
            assert result.scores == [] and server.requests == []
            deferred = {d.target_id for d in result.decisions if d.outcome == "deferred"}
            assert deferred == {"call_1", "call_2"}
            kept = Deferred.decode(deferrer.kept[0].encode())  # as the table keeps it
            target = kept.plan().target
            assert (target.id, target.trace, target.tool) == ("call_1", "trace-1", "get_weather")
            rule = ruleset.rules[0]
            assert isinstance(rule, JudgedRule)
            outcome = await finish_deferred(scorer.context, kept, rule, client)
        finally:
            await client.close()
    records = kept.records(outcome)
    [(key, score)] = records.scores
    assert key == b"trace-1" and score.target_id == "call_1" and score.value == 1.0
    assert score.details == {"trace_id": "trace-1", "tool": "get_weather"}
    assert [(k, r.trace_id) for k, r in records.decisions] == [(b"trace-1", "trace-1")]


def test_explain_lists_each_calls_rules() -> None:
    document = agent_trace()
    scorer = scorer_of(tools_pack())
    explained = planned(scorer.plan(as_trace(document), document))
    by_call: dict[str, list[str]] = {}
    assert [e.rule_id for e in explained if e.call is None] == ["tool_trajectory"]  # the trace's
    for e in explained:
        if e.call is None:
            continue
        by_call.setdefault(f"{e.call['position']}:{e.call['tool']}", []).append(e.rule_id)
    assert list(by_call) == ["0:get_weather", "1:search"]
    assert all(len(rules) == 5 for rules in by_call.values())
    as_json = [e.as_dict() for e in explained if e.call is not None]
    assert orjson.loads(orjson.dumps(as_json))[0]["call"]["id"] == "call_1"


async def test_a_backfill_leaves_out_the_calls_already_scored() -> None:
    """``scorer backfill`` over a trace whose first call's scores the topic already holds:
    only the second call's are made again."""
    document = agent_trace()
    scorer = scorer_of(tools_pack())
    done = await scorer.score_trace(as_trace(document), document)
    existing = {s.score_id for s in done.scores if s.target_id == "call_1"}
    plan = scorer.plan(as_trace(document), document)
    assert unscored(plan, existing) == 5
    assert [part.target.id for part in plan.parts] == ["call_2"]
    again = await scorer.finish(plan)
    assert {s.target_id for s in again.scores} == {"call_2"} and len(again.scores) == 5


async def test_a_call_from_an_execute_tool_span_names_its_span() -> None:
    """A call an ``execute_tool`` span recorded (the GenAI conventions' attributes, the shape
    ``stream.otlp`` assembles spans into) is scored with the span's id in
    ``details.otel_span_id``, so its evaluation event is parented to that span."""
    span = {
        "span_id": "eee19b7ec3c1b174",
        "name": "execute_tool get_weather",
        "status": "error",
        "attributes": {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "get_weather",
            "gen_ai.tool.call.id": "call_9",
            "gen_ai.tool.call.arguments": '{"city": "Paris"}',
            "error.type": "TimeoutError",
        },
    }
    document = {"id": "5b8efff798038103d269b633813fc60c", "spans": [span]}
    result = await scorer_of(tools_pack()).score_trace(as_trace(document), document)
    scores = scores_by_call(result.scores)
    succeeded = scores[("call_9", "tool_call_succeeded")]
    assert succeeded.value == 0.0
    assert succeeded.details == {
        "otel_span_id": "eee19b7ec3c1b174",
        "trace_id": "5b8efff798038103d269b633813fc60c",
        "tool": "get_weather",
    }


def test_the_call_document_holds_every_declared_tool(tmp_path: Path) -> None:
    """``tools``: every tool the trace declared, with its schema, for a judge to choose among
    (``declared`` holds the names only)."""
    ruleset = call_rules(tmp_path, judged_rule(variables={"tools": {"path": "tools", "format": "json"}},
                                               prompt="Tools: {{tools}}"))  # fmt: skip
    document = agent_trace()
    plan = scorer_of(ruleset, object()).plan(as_trace(document), document)  # planned, not asked
    [first, second] = [part.judge_jobs[0].prompt for part in plan.parts]
    assert first == second
    assert orjson.loads(first.removeprefix("Tools: ")) == [
        {
            "name": "get_weather",
            "description": None,
            "parameters": WEATHER["function"]["parameters"],
        }
    ]


async def test_a_trace_with_more_calls_than_the_bound_scores_the_first_ones_and_says_so() -> None:
    """A long agent run: the first ``max_tool_calls`` calls are scored; every tool-call rule
    says in one decision on the trace how many it made, so its record stays bounded."""
    document = agent_trace()
    message = document["output"]["messages"][0]
    message["tool_calls"] = [
        {"id": f"c{n}", "type": "function", "function": {"name": "search", "arguments": f'{{"n": {n}}}'}}
        for n in range(30)
    ]  # fmt: skip
    document["output"]["messages"] = [message]
    scorer = Scorer(
        tools_pack(),
        None,
        default_model="gpt-4o-mini",
        observer=ScorerMetrics(CollectorRegistry()),
        max_tool_calls=12,
    )
    result = await scorer.score_trace(as_trace(document), document)
    assert {s.target_id for s in result.scores} == {f"c{n}" for n in range(12)}
    said = [d for d in result.decisions if d.target_id == "trace-1" and d.outcome == "skipped"]
    assert len(said) == 5
    assert said[0].detail == (
        "the trace made 30 tool calls: the first 12 are scored (SCORER_TOOL_CALLS_MAX)"
    )
