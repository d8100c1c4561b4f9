"""``filter.when``: a JMESPath expression over the whole trace (contains, regular expressions,
comparisons on metadata, latency, cost, error), checked at load time, harmless at run time."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from fixtures import RULES_DIR, as_trace, hub_trace, scorer

from stream.errors import RuleFileError
from stream.explain import explain_trace
from stream.models import Trace
from stream.ruleset.filters import RuleFilter
from stream.ruleset.loader import check_rules, load_rule_file, load_rules
from stream.threads.router import ThreadRouter

TRACE = Trace.model_validate(
    {
        "id": "t-1",
        "project_name": "support",
        "name": "chat-v2",
        "thread_id": "conv-9",
        "start_time": "2025-03-01T10:00:00Z",
        "end_time": "2025-03-01T10:00:04.500Z",
        "input": {"messages": [{"role": "user", "content": "My ORDER never came"}]},
        "output": {"messages": [{"role": "assistant", "content": "Sorry about that."}]},
        "metadata": {"model": "gpt-4o", "cost": 0.012, "retries": 0, "env": "prod-eu"},
        "tags": ["prod", "support"],
        "usage": {"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150},
        "total_estimated_cost": 0.0031,  # Opik's field, kept as sent
        "feedback_scores": [{"name": "thumbs", "value": 0}],
    }
)


@pytest.mark.parametrize(
    ("when", "expected"),
    [
        ("contains(name, 'chat')", True),
        ("contains(name, 'voice')", False),
        ("contains(tags, 'prod') && !contains(tags, 'canary')", True),
        ("contains(input.messages[-1].content, 'ORDER')", True),
        ("metadata.cost > `0.01`", True),
        ("metadata.cost > `0.05`", False),
        ("metadata.model == 'gpt-4o' && usage.total_tokens >= `150`", True),
        ("latency_s > `4`", True),  # computed: end_time - start_time = 4.5 s
        ("latency_s > `5`", False),
        ("cost < `0.005`", True),  # computed: Opik's total_estimated_cost
        ("error", False),  # computed: no error_info, no span in error
        ("matches(metadata.env, '^prod-(eu|us)$')", True),
        ("matches(input.messages[-1].content, '(?i)order')", True),
        ("matches(input.messages[-1].content, 'order')", False),  # case-sensitive by default
        ("matches(metadata.region, 'eu')", False),  # a missing field does not match
        ("start_time >= '2025-03-01' && start_time < '2025-03-02'", True),  # ISO text compares
        ("feedback_scores[?name == 'thumbs'].value | [0] == `0`", True),  # unknown fields kept
        ("metadata.retries", True),  # JMESPath's truth: 0 is true
        ("metadata.flags", False),  # null is false
        ("tags[?starts_with(@, 'canary')]", False),  # an empty list is false
        ("thread_id == 'conv-9' && project_name == 'support'", True),
    ],
)
def test_when_is_true_when_the_expression_is_truthy(when: str, expected: bool) -> None:
    assert RuleFilter(when=when).matches(TRACE) is expected


def test_the_computed_fields() -> None:
    view = TRACE.view
    assert (view["latency_s"], view["cost"], view["error"]) == (4.5, 0.0031, False)
    opik_errored = Trace.model_validate(
        {"id": "e", "duration": 1250.0, "error_info": {"exception_type": "TimeoutError"}}
    )
    assert (opik_errored.view["latency_s"], opik_errored.view["error"]) == (1.25, True)
    span_errored = Trace.model_validate(
        {
            "id": "s",
            "spans": [{"span_id": "a", "status": "ok"}, {"span_id": "b", "status": "error"}],
        }
    )
    assert span_errored.view["error"] is True
    assert span_errored.view["latency_s"] is None and span_errored.view["cost"] is None
    naive_end = Trace.model_validate(
        {"id": "n", "start_time": "2025-03-01T10:00:00Z", "end_time": "2025-03-01T10:00:02"}
    )
    assert naive_end.view["latency_s"] == 2.0  # a time without a zone is taken as UTC
    own = Trace.model_validate({"id": "o", "cost": "high", "error": "none", "latency_s": 9})
    assert (own.view["cost"], own.view["error"], own.view["latency_s"]) == ("high", "none", 9)


def test_the_view_is_built_once_and_only_for_a_when() -> None:
    trace = Trace.model_validate(hub_trace())
    assert RuleFilter(trace_names=["other"], when="error").mismatch(trace) is not None
    assert "view" not in trace.__dict__  # an earlier condition failed: no view was built
    assert RuleFilter(when="!error").matches(trace)
    view = trace.__dict__["view"]
    assert RuleFilter(when="contains(name, 'hub')").matches(trace)
    assert trace.view is view


@pytest.mark.parametrize(
    ("when", "why"),
    [
        ("contains(name, 'voice')", "filter.when \"contains(name, 'voice')\": it is false"),
        ("metadata.missing", "filter.when 'metadata.missing': it is null"),
        ("tags[?@ == 'x']", "filter.when \"tags[?@ == 'x']\": it is []"),
        (
            "metadata.latency_ms > `500`",
            "filter.when 'metadata.latency_ms > `500`': it is null (<, <=, > and >= are null "
            "when a side is missing, or not a number or a string)",
        ),
        (
            # a string compared with a number: an error in jmespath, not a crash here
            "metadata.env > `3`",
            "filter.when 'metadata.env > `3`': cannot be evaluated on this trace: '>' not "
            "supported between instances of 'str' and 'int' (<, <=, > and >= compare two "
            "numbers or two strings)",
        ),
        (
            "contains(metadata.cost, '0')",
            "filter.when \"contains(metadata.cost, '0')\": cannot be evaluated on this trace: "
            "In function contains(), invalid type for value: 0.012, expected one of: "
            "['array', 'string'], received: \"number\"",
        ),
        (
            "matches(name, metadata.model)",  # a pattern from the trace itself
            "filter.when 'matches(name, metadata.model)': it is false",
        ),
        (
            "matches(name, input.messages[0].role)",
            "filter.when 'matches(name, input.messages[0].role)': it is false",
        ),
    ],
)
def test_a_mismatch_names_the_expression_and_its_result(when: str, why: str) -> None:
    assert RuleFilter(when=when).mismatch(TRACE) == why


def test_a_pattern_from_the_trace_that_is_no_regex_does_not_match() -> None:
    trace = Trace(id="t", name="chat", metadata={"pattern": "(unclosed"})
    why = RuleFilter(when="matches(name, metadata.pattern)").mismatch(trace)
    assert why == (
        "filter.when 'matches(name, metadata.pattern)': cannot be evaluated on this trace: "
        "matches(): '(unclosed' is not a regular expression: missing ), unterminated "
        "subpattern at position 0"
    )


def test_a_long_value_is_cut_in_the_reason() -> None:
    trace = Trace(id="t", metadata={"big": {"text": "x" * 5000}})
    why = RuleFilter(when="contains(metadata.big, 'y')").mismatch(trace)
    assert why is not None
    assert why.startswith(
        "filter.when \"contains(metadata.big, 'y')\": cannot be evaluated on this trace: In "
        "function contains(), invalid type for value: {'text': 'xxx"
    )
    assert why.endswith("...") and len(why) < 250


def test_a_string_searched_for_a_number_does_not_match() -> None:
    why = RuleFilter(when="contains(name, `1`)").mismatch(Trace(id="t", name="v1"))
    assert why == (
        "filter.when 'contains(name, `1`)': cannot be evaluated on this trace: 'in <string>' "
        "requires string as left operand, not int"
    )


@pytest.fixture
def rules_copy(tmp_path: Path) -> Path:
    target = tmp_path / "rules"
    shutil.copytree(RULES_DIR, target, ignore=shutil.ignore_patterns("__pycache__"))
    return target


def set_filter(rules_dir: Path, pack: str, rule_id: str, **conditions: Any) -> Path:
    path = rules_dir / pack / f"{rule_id}.yaml"
    data = yaml.safe_load(path.read_text())
    data["filter"] = {**(data.get("filter") or {}), **conditions}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.parametrize(
    ("when", "problem"),
    [
        ("metadata.cost >", "field filter.when: not a JMESPath expression: incomplete expression"),
        (
            "metadata.cost > 0.5",
            "field filter.when: not a JMESPath expression: unexpected 0 at column 16 (a number "
            "is written in backticks: `0.5`)",
        ),
        (
            'name == "hub-coach-chat"',
            'field filter.when: "hub-coach-chat" is a field name in JMESPath; a string is '
            "written 'hub-coach-chat' (single quotes)",
        ),
        ("regex(name, 'a')", "field filter.when: unknown function regex() (known: abs, avg,"),
        ("matches(name)", "field filter.when: matches() takes 2 arguments, given 1"),
        (
            "matches(name, '[a-')",
            "field filter.when: matches(): '[a-' is not a regular expression: unterminated "
            "character set at position 0",
        ),
        ("", "field filter.when: String should have at least 1 character"),
    ],
)
def test_a_bad_expression_is_a_rule_file_error_naming_the_field(
    rules_copy: Path, when: str, problem: str
) -> None:
    path = set_filter(rules_copy, "fretcoach", "hub_answer_correctness", when=when)
    with pytest.raises(RuleFileError) as caught:
        load_rule_file(path)
    assert caught.value.path == str(path)
    assert any(p.startswith(problem) for p in caught.value.problems), caught.value.problems


def test_a_session_rule_cannot_filter_with_when(rules_copy: Path) -> None:
    set_filter(rules_copy, "coaching", "coaching_question_endings", when="error")
    _, errors = check_rules(rules_copy, ["coaching"])
    assert [p for e in errors for p in e.problems] == [
        "field (file): filter.when is for rules over traces: a session rule filters on the "
        "session's project and topic only"
    ]


def test_a_type_error_at_run_time_filters_the_rule_and_the_worker_goes_on(
    rules_copy: Path,
) -> None:
    set_filter(
        rules_copy, "fretcoach", "hub_answer_correctness", when="metadata.latency_ms > `500`"
    )
    set_filter(rules_copy, "fretcoach", "hub_actionability", when="contains(metadata.user, 'a')")
    ruleset = load_rules(rules_copy, ["fretcoach"])
    document = hub_trace()
    document["metadata"] = {"latency_ms": "slow", "user": 42}
    result = asyncio.run(scorer(None, ruleset).score_trace(as_trace(document), document))
    decided = {d.rule_id: d for d in result.decisions}
    correctness, actionability = decided["hub_answer_correctness"], decided["hub_actionability"]
    assert correctness.outcome == actionability.outcome == "filtered"
    assert correctness.detail is not None and correctness.detail.startswith(
        "filter.when 'metadata.latency_ms > `500`': cannot be evaluated on this trace: '>' not "
        "supported between instances of 'str' and 'int'"
    )
    assert actionability.detail is not None and actionability.detail.startswith(
        "filter.when \"contains(metadata.user, 'a')\": cannot be evaluated on this trace: In "
        "function contains(), invalid type for value: 42"
    )
    # the other rules decided as usual (skipped: no judge configured)
    assert decided["hub_response_clarity"].outcome == "skipped"


def test_explain_names_the_expression_that_failed(rules_copy: Path) -> None:
    set_filter(rules_copy, "fretcoach", "hub_answer_correctness", when="metadata.latency_s > `2`")
    ruleset = load_rules(rules_copy, ["fretcoach"])
    document = hub_trace()
    document["metadata"] = {"latency_s": 1.5}
    _, explained = explain_trace(ruleset, orjson.dumps(document), None, "gpt-4o-mini")
    by_rule = {e.rule_id: e for e in explained}
    assert by_rule["hub_answer_correctness"].outcome == "filtered"
    assert by_rule["hub_answer_correctness"].detail == (
        "filter.when 'metadata.latency_s > `2`': it is false"
    )
    document["metadata"] = {"latency_s": 3}
    _, explained = explain_trace(ruleset, orjson.dumps(document), None, "gpt-4o-mini")
    assert {e.rule_id: e.outcome for e in explained}["hub_answer_correctness"] == "judge"


def test_a_conversation_rule_judges_threads_whose_traces_match_its_when(
    rules_copy: Path,
) -> None:
    set_filter(
        rules_copy,
        "fretcoach",
        "hub_user_frustration_score",
        when="matches(input.messages[-1].content, '(?i)why|again|still')",
    )
    router = ThreadRouter(load_rules(rules_copy, ["fretcoach"]))
    document = hub_trace()
    document["thread_id"] = "conv-1"
    document["input"]["messages"][-1]["content"] = "Why is my timing still off?"
    event = router.from_trace(as_trace(document), document, "llm-traces", 1.0)
    assert event is not None and "hub_user_frustration_score" in event.rules
    document["input"]["messages"][-1]["content"] = "Thanks, that helps."
    event = router.from_trace(as_trace(document), document, "llm-traces", 1.0)
    assert event is not None and "hub_user_frustration_score" not in event.rules
    assert "hub_conversational_coherence" in event.rules  # its own filter, unchanged
