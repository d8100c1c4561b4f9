"""The tool-call score metrics (issue 50): the scores of ``scope: tool_call`` rules counted by
the tool's name, the name bounded as projects are (the first ``SCORER_METRIC_TOOL_LIMIT``
names, the rest ``other``), beside the score metrics, which count the same scores unchanged."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from fixtures import RULES_DIR, as_trace, score_event, settings
from prometheus_client import CollectorRegistry

from stream.engine.scorer import Scorer
from stream.metrics import OTHER, ScorerMetrics, ToolLabels, sample_value
from stream.metrics.tools import DEFAULT_TOOL_LIMIT
from stream.models import ScoreEvent
from stream.ruleset.loader import load_rules

CALLS = "scorer_tool_call_scores_total"
VALUES = "scorer_tool_call_score_value"
LOW = "scorer_tool_call_low_scores_total"


def page(metrics: ScorerMetrics) -> str:
    return metrics.exposition()[0].decode()


def call_score(tool: Any, value: float = 1.0, **changes: Any) -> ScoreEvent:
    """A pass/fail check's score of one call of ``tool`` (``details.tool``, as the engine
    names a call's tool)."""
    fields: dict[str, Any] = {
        "rule_id": "tool_declared",
        "pack": "tools",
        "scope": "tool_call",
        "target_id": f"call-{tool}-{value}",
        "project_name": "agents",
        "value": value,
        "raw_value": value,
        "details": {"trace_id": "trace-1", "tool": tool},
        **changes,
    }
    return score_event(**fields)


# -- the label ---------------------------------------------------------------------------


def test_the_first_names_are_kept_and_every_later_one_is_other(
    caplog: pytest.LogCaptureFixture,
) -> None:
    labels = ToolLabels(limit=2)
    with caplog.at_level(logging.WARNING, logger="stream.metrics.tools"):
        seen = [labels.label(t) for t in ("search", "get_weather", "book", "search", "pay")]
    assert seen == ["search", "get_weather", OTHER, "search", OTHER]
    assert labels.kept == {"search", "get_weather"}  # a folded name is not remembered
    (warning,) = caplog.records  # once, naming the setting
    assert "SCORER_METRIC_TOOL_LIMIT" in warning.getMessage() and "'book'" in warning.getMessage()


def test_a_limit_of_0_labels_every_tool_other_and_a_negative_one_is_refused() -> None:
    assert ToolLabels(limit=0).label("search") == OTHER
    with pytest.raises(ValueError, match="0 or more"):
        ToolLabels(limit=-1)


def test_the_setting_and_its_default(monkeypatch: pytest.MonkeyPatch) -> None:
    assert settings().metric_tool_limit == DEFAULT_TOOL_LIMIT == 20
    monkeypatch.setenv("SCORER_METRIC_TOOL_LIMIT", "3")
    assert settings().metric_tool_limit == 3
    monkeypatch.setenv("SCORER_METRIC_TOOL_LIMIT", "-1")
    with pytest.raises(ValueError, match="metric_tool_limit"):
        settings()


# -- the families ------------------------------------------------------------------------


def test_scores_are_counted_by_tool_rule_and_status_and_failures_as_low() -> None:
    metrics = ScorerMetrics(CollectorRegistry())
    for score in (
        call_score("search", 1.0),
        call_score("search", 0.0),
        call_score("get_weather", 1.0),
        call_score("get_weather", 1.0, rule_id="tool_call_succeeded"),
        call_score("get_weather", None, status="skipped", raw_value=None),
        call_score("get_weather", None, status="error", raw_value=None),
    ):
        metrics.on_score_published(score)
    text = page(metrics)
    declared = {"rule": "tool_declared", "pack": "tools"}
    assert sample_value(text, CALLS, **declared, tool="search", status="ok") == 2
    assert sample_value(text, f"{VALUES}_count", **declared, tool="search") == 2
    assert sample_value(text, f"{VALUES}_sum", **declared, tool="search") == 1
    assert sample_value(text, LOW, **declared, tool="search") == 1
    # a tool that never failed the check has its low series, at 0: its failure share reads 0
    assert f'{LOW}{{pack="tools",rule="tool_declared",tool="get_weather"}} 0.0' in text
    for status in ("ok", "skipped", "error"):
        assert sample_value(text, CALLS, **declared, tool="get_weather", status=status) == 1
    assert sample_value(text, f"{VALUES}_count", **declared, tool="get_weather") == 1
    succeeded = {"rule": "tool_call_succeeded", "pack": "tools", "tool": "get_weather"}
    assert sample_value(text, f"{VALUES}_sum", **succeeded) == 1


def test_the_score_metrics_count_the_same_scores_as_before() -> None:
    """The families the alerts read keep their labels (no tool) and count tool-call scores."""
    metrics = ScorerMetrics(CollectorRegistry())
    metrics.on_score_published(call_score("search", 0.0))
    text = page(metrics)
    where = {"rule": "tool_declared", "pack": "tools", "criterion": "", "project": "agents"}
    assert sample_value(text, "scorer_scores_total", **where, status="ok") == 1
    assert sample_value(text, "scorer_low_scores_total", **where) == 1
    assert 'scorer_scores_total{criterion="",pack="tools",project="agents"' in text
    assert "tool=" not in "\n".join(
        line for line in text.splitlines() if line.startswith("scorer_scores_total")
    )


def test_trace_scores_shadow_scores_and_a_call_without_a_tool() -> None:
    metrics = ScorerMetrics(CollectorRegistry())
    metrics.on_score_published(score_event(rule_id="answer_quality"))  # a trace's: not here
    metrics.on_score_published(call_score("search", variant="cheap"))  # a shadow judge's
    metrics.on_score_published(call_score(None))  # no tool named: other
    text = page(metrics)
    assert sample_value(text, CALLS, rule="answer_quality") == 0
    assert sample_value(text, CALLS, tool="search") == 0
    assert sample_value(text, CALLS, rule="tool_declared", tool=OTHER, status="ok") == 1
    assert metrics.tool_calls.tools.kept == frozenset()  # "other" takes no name's place


def test_past_the_limit_new_tools_share_the_other_series() -> None:
    metrics = ScorerMetrics(CollectorRegistry())
    metrics.tool_calls.label_tools(ToolLabels(limit=2))
    for tool in ("a", "b", "c", "d", "a"):
        metrics.on_score_published(call_score(tool, 0.0))
    text = page(metrics)
    counts = {t: sample_value(text, CALLS, tool=t, status="ok") for t in ("a", "b", OTHER)}
    assert counts == {"a": 2, "b": 1, OTHER: 2}
    assert sample_value(text, CALLS, tool="c") == 0


async def test_a_traces_calls_scored_by_the_tools_pack_are_counted_by_tool() -> None:
    """The engine's tool-call scores as delivery hands them to the metrics (one
    ``on_score_published`` per score, ``delivery/ordered.py``)."""
    document = {
        "id": "trace-1",
        "project_name": "agents",
        "input": {
            "messages": [{"role": "user", "content": "Weather in Paris?"}],
            "tools": [{"type": "function", "function": {"name": "get_weather"}}],
        },
        "output": {
            "messages": [
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "call_1", "type": "function",
                     "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
                    {"id": "call_2", "type": "function",
                     "function": {"name": "search", "arguments": "{}"}},
                ]},
                {"role": "tool", "tool_call_id": "call_1", "content": '{"error": "down"}'},
                {"role": "tool", "tool_call_id": "call_2", "content": "nothing found"},
                {"role": "assistant", "content": "I could not find the weather."},
            ]
        },
    }  # fmt: skip
    metrics = ScorerMetrics(CollectorRegistry())
    ruleset = load_rules(RULES_DIR, ["tools"])
    scorer = Scorer(ruleset, None, default_model="gpt-4o-mini", observer=metrics)
    result = await scorer.score_trace(as_trace(document), document)
    for score in result.scores:
        metrics.on_score_published(score)
    text = page(metrics)
    tools_rules = {r.id for r in ruleset.for_scope("tool_call")}
    assert len(tools_rules) >= 5 and tools_rules == {
        s.rule_id for s in result.scores if s.scope == "tool_call"
    }
    for rule in tools_rules:
        for tool in ("get_weather", "search"):
            assert sample_value(text, f"{VALUES}_count", rule=rule, tool=tool) == 1, (rule, tool)
    # which tool fails which check
    failing = {
        (rule, tool)
        for rule in tools_rules
        for tool in ("get_weather", "search")
        if sample_value(text, LOW, rule=rule, tool=tool) == 1
    }
    assert failing == {("tool_call_succeeded", "get_weather"), ("tool_declared", "search")}


def test_a_name_no_tool_has_is_other_and_takes_no_place() -> None:
    """A model can call a tool that does not exist, by any name: a name that does not look
    like a tool's (too long, spaces, a sentence) is ``other`` and leaves the places to the
    real tools."""
    labels = ToolLabels(2)
    made_up = ["look up the weather for me", "x" * 65, "get_weather\nDROP"]
    assert [labels.label(name) for name in made_up] == [OTHER, OTHER, OTHER]
    assert labels.label("mcp.files/read_file") == "mcp.files/read_file"
    assert labels.label("get_weather") == "get_weather"
    assert labels.kept == {"mcp.files/read_file", "get_weather"}
