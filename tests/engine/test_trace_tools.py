"""The tools a trace-based judge reads a trace with: answers as JSON text, errors it can read."""

from __future__ import annotations

import orjson

from stream.engine.trace_tools import DEFINITIONS, TraceTools

TRACE = {
    "id": "t-1",
    "name": "agent-run",
    "project_name": "coach",
    "start_time": "2026-11-22T10:00:00Z",
    "end_time": "2026-11-22T10:00:03Z",
    "input": {"messages": [{"role": "user", "content": "Why do I rush?"}]},
    "output": {"messages": [{"role": "assistant", "content": "Use a click."}]},
}


def call(tools: TraceTools, name: str, **arguments: object) -> dict:
    return orjson.loads(tools.call(name, orjson.dumps(arguments).decode()))


def test_a_trace_without_spans_is_one_span_of_its_input_and_output() -> None:
    tools = TraceTools(TRACE)
    (span,) = call(tools, "list_spans")["spans"]
    assert (span["span_id"], span["name"], span["duration_ms"]) == ("t-1", "agent-run", 3000.0)
    assert "Why do I rush?" in span["inputs"] and "Use a click." in span["outputs"]
    assert call(tools, "get_trace_info")["status"] == "ok"


def test_bad_calls_answer_with_an_error_the_judge_can_read() -> None:
    tools = TraceTools(TRACE)
    assert "no tool named 'rm'" in call(tools, "rm")["error"]
    assert "bad arguments for get_span" in call(tools, "get_span", nope=1)["error"]
    assert "bad arguments" in orjson.loads(tools.call("list_spans", "[1]"))["error"]
    assert "not a regular expression" in call(tools, "search_trace_regex", pattern="(")["error"]


def test_search_finds_text_anywhere_case_insensitively() -> None:
    found = call(TraceTools(TRACE), "search_trace_regex", pattern="CLICK")["matches"]
    assert {(m["where"], m["field"]) for m in found} == {("trace", "output"), ("t-1", "span")}
    assert all(m["match"] == "click" for m in found)


def test_a_long_answer_is_cut_and_says_how_to_read_the_rest() -> None:
    spans = [{"span_id": f"s{n}", "attributes": {"input.value": "x" * 900}} for n in range(50)]
    text = TraceTools({**TRACE, "spans": spans}, max_chars=5000).call("list_spans", "{}")
    assert len(text) < 5100 and text.endswith("characters cut: ask get_span for one span]")


def test_the_definitions_are_openai_function_tools() -> None:
    names = [d["function"]["name"] for d in DEFINITIONS]
    assert names == ["get_trace_info", "list_spans", "search_trace_regex", "get_span"]
    assert all(d["type"] == "function" and "parameters" in d["function"] for d in DEFINITIONS)


def test_spans_from_opentelemetry_input_are_read_as_they_are_stored() -> None:
    from datetime import UTC, datetime

    from stream.otlp.document import trace_document
    from stream.otlp.spans import Span

    start = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)
    messages = '[{"role": "user", "parts": [{"type": "text", "content": "Why do I rush?"}]}]'
    spans = [
        Span("ab" * 16, "r1", None, "hub-coach-chat", start, start, {}, {"service.name": "x"}),
        Span("ab" * 16, "c1", "r1", "chat", start, start, {"gen_ai.input.messages": messages}),
    ]
    tools = TraceTools(trace_document(spans))
    listed = {s["span_id"]: s for s in call(tools, "list_spans")["spans"]}
    assert {k: s["parent_span_id"] for k, s in listed.items()} == {"r1": None, "c1": "r1"}
    assert "Why do I rush?" in listed["c1"]["inputs"]
    assert call(tools, "get_span", span_id="c1")["name"] == "chat"
