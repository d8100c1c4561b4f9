"""An agent's tool calls read out of one trace: from the trace model's messages (OpenAI's chat
shape, Opik's exports), from OpenTelemetry spans the real SDK records and ``stream.otlp`` reads
as a trace, and from both at once."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from fixtures import sample_traces
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode
from strategies import any_json

from stream.otlp.decode import decode
from stream.otlp.document import trace_document
from stream.tools.calls import tool_calls
from stream.tools.model import ToolDefinition

SHAPES = "tests/data/shapes/"
STATS_SCHEMA = {"type": "object", "properties": {"days": {"type": "integer"}}}


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def asks(*calls: tuple[str | None, str, Any], text: str | None = None) -> dict[str, Any]:
    """An assistant message calling tools, OpenAI's shape: (id, name, arguments) each."""
    return {
        "role": "assistant",
        "content": text,
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
            for i, n, a in calls
        ],
    }


def answer(call_id: str | None, content: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "tool", "content": content}
    if call_id is not None:
        message["tool_call_id"] = call_id
    return message


def says(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def trace(*output: dict[str, Any], history: list[Any] | None = None, **fields: Any) -> dict:
    return {
        "id": "t-1",
        "input": {"messages": history or []},
        "output": {"messages": list(output)},
        **fields,
    }


# --- the trace model's messages


def test_an_openai_shaped_trace_gives_its_call_with_the_tool_answer() -> None:
    with open(SHAPES + "openai_tool_calls.json") as file:
        [call] = tool_calls(json.load(file))
    assert (call.trace_id, call.call_id, call.name) == (
        "trace-tool-call-1",
        "call_abc123",
        "get_practice_stats",
    )
    assert (call.arguments, call.parsed, call.parses) == ('{"days": 7}', {"days": 7}, True)
    assert call.result == {"sessions": 4, "minutes": 95, "pitch_accuracy": 0.81}
    assert call.error is None
    assert (call.user, call.assistant, call.turn, call.position) == (
        "How did my practice go this week?",
        None,
        0,
        0,
    )
    assert (call.source, call.declared, call.definition) == ("messages", (), None)


def test_a_call_in_both_the_input_history_and_the_output_is_counted_once() -> None:
    """Opik's exports repeat the whole history in the output; the input holds earlier calls."""
    earlier = [
        user("Week?"),
        asks(("c1", "stats", '{"days": 7}')),
        answer("c1", "4 sessions"),
        says("Four."),
    ]
    now = [
        user("Month?"),
        asks(("c2", "stats", '{"days": 30}')),
        answer("c2", "15 sessions"),
        says("Fifteen."),
    ]
    calls = tool_calls(trace(*earlier, *now, history=[*earlier, user("Month?")]))
    assert [(c.call_id, c.turn, c.position, c.user, c.result) for c in calls] == [
        ("c1", 0, 0, "Week?", "4 sessions"),
        ("c2", 2, 1, "Month?", "15 sessions"),
    ]


def test_the_shipped_samples_give_each_call_once() -> None:
    found = [c for t in sample_traces() for c in tool_calls(t)]
    assert [(c.call_id, c.name, c.parsed) for c in found] == [
        ("call_2", "get_practice_history", {"days": 7}),
        ("call_3", "get_practice_history", {"days": 7}),
        ("call_4", "get_practice_history", {"days": 30}),
    ]
    assert all(isinstance(c.result, dict) and c.error is None for c in found)


def test_calls_in_output_choices_are_read() -> None:
    document = {
        "id": "t-2",
        "input": {"messages": [user("Plan my week")]},
        "output": {
            "choices": [{"index": 0, "message": asks(("c9", "plan", "{}"), text="Planning")}]
        },
    }
    [call] = tool_calls(document)
    assert (call.call_id, call.name, call.user, call.assistant, call.result) == (
        "c9",
        "plan",
        "Plan my week",
        "Planning",
        None,
    )


def test_turns_count_assistant_messages_and_positions_count_calls() -> None:
    calls = tool_calls(
        trace(
            user("Compare my last two weeks"),
            asks(("a", "stats", '{"days": 7}'), ("b", "stats", '{"days": 14}'), text="Looking"),
            answer("b", "8"),
            answer("a", "4"),
            says("Half as much this week."),
            user("And my accuracy?"),
            asks(("c", "accuracy", "{}")),
            answer("c", "0.81"),
        )
    )
    assert [(c.call_id, c.position, c.turn, c.user, c.assistant, c.result) for c in calls] == [
        ("a", 0, 0, "Compare my last two weeks", "Looking", "4"),
        ("b", 1, 0, "Compare my last two weeks", "Looking", "8"),
        ("c", 2, 2, "And my accuracy?", None, "0.81"),
    ]


def test_calls_without_ids_get_the_trace_and_position_and_answers_in_order() -> None:
    calls = tool_calls(
        trace(
            user("hi"),
            asks((None, "first", "{}"), (None, "second", "{}")),
            answer(None, "one"),
            answer(None, "two"),
        )
    )
    assert [(c.call_id, c.name, c.result) for c in calls] == [
        ("t-1:0", "first", "one"),
        ("t-1:1", "second", "two"),
    ]
    assert tool_calls(trace(user("hi"), asks((None, "first", "{}"))))[0].call_id == "t-1:0"


def test_the_legacy_function_call_is_a_call() -> None:
    legacy = {
        "role": "assistant",
        "content": None,
        "function_call": {"name": "stats", "arguments": "{}"},
    }
    [call] = tool_calls(
        trace(user("hi"), legacy, {"role": "function", "name": "stats", "content": "4"})
    )
    assert (call.call_id, call.name, call.parsed, call.result) == ("t-1:0", "stats", {}, "4")


def test_a_trace_without_tool_calls_gives_none() -> None:
    assert tool_calls(trace(user("hi"), says("Hello!"))) == []
    assert tool_calls({"id": "empty"}) == []
    assert [c for t in sample_traces()[:1] for c in tool_calls(t)] == []


# --- errors: exactly these shapes count


@pytest.mark.parametrize(
    ("content", "extra", "error"),
    [
        ('{"error": "rate limited"}', {}, "rate limited"),
        ({"error": {"message": "no such user", "code": 404}}, {}, "no such user"),
        ('{"error": {"code": 500}}', {}, '{"code":500}'),
        ('{"error": true}', {}, "true"),
        (
            {"isError": True, "content": [{"type": "text", "text": "file not found"}]},
            {},
            "file not found",
        ),
        (
            "Error: KeyError('days')\n Please fix your mistakes.",
            {},
            "Error: KeyError('days')\n Please fix your mistakes.",
        ),
        ("  ERROR: timeout", {}, "ERROR: timeout"),
        (
            "An error occurred while running the tool. Please try again. Error: boom",
            {},
            "An error occurred while running the tool. Please try again. Error: boom",
        ),
        (
            "the tool could not reach the server",
            {"status": "error"},
            "the tool could not reach the server",
        ),
        ("", {"is_error": True}, "error"),
        # not errors
        ('{"error": null, "sessions": 4}', {}, None),
        ('{"error": "", "errors": ["x"]}', {}, None),
        ('{"isError": false, "content": []}', {}, None),
        ("The error rate fell to 2%.", {}, None),
        ("errors: 0", {}, None),
        ('["error"]', {}, None),
        ("{not json with error: x", {}, None),
    ],
)
def test_a_result_is_an_error_in_the_documented_shapes(
    content: Any, extra: dict, error: str | None
) -> None:
    [call] = tool_calls(
        trace(user("go"), asks(("c", "fetch", "{}")), {**answer("c", content), **extra})
    )
    assert call.error == error


def test_a_json_result_is_kept_as_json_and_other_text_as_text() -> None:
    calls = tool_calls(
        trace(
            user("go"),
            asks(("a", "x", "{}"), ("b", "x", "{}"), ("c", "x", "{}")),
            answer("a", '{"n": 1}'),
            answer("b", "[1, 2]"),
            answer("c", "42"),
        )
    )
    assert [c.result for c in calls] == [{"n": 1}, [1, 2], "42"]


# --- declared tools


def test_declared_tools_from_the_request_and_the_metadata() -> None:
    document = trace(
        user("go"),
        asks(("c", "get_practice_stats", '{"days": 7}')),
        tools=None,
        metadata={
            "tools": [
                {"name": "plan", "description": "Plan a week", "parameters": '{"type": "object"}'}
            ]
        },
    )
    document["input"]["tools"] = [
        {
            "type": "function",
            "function": {
                "name": "get_practice_stats",
                "description": "Stats",
                "parameters": STATS_SCHEMA,
            },
        },
        {
            "type": "function",
            "function": {"name": "get_practice_stats", "description": "a second of the same name"},
        },
        {"name": "search", "input_schema": {"type": "object"}},  # Anthropic's spelling
        {"type": "function", "function": "not an object"},
        "not a tool",
    ]
    [call] = tool_calls(document)
    assert call.declared == (
        ToolDefinition("get_practice_stats", "Stats", STATS_SCHEMA),
        ToolDefinition("search", None, {"type": "object"}),
        ToolDefinition("plan", "Plan a week", {"type": "object"}),
    )
    assert call.definition == ToolDefinition("get_practice_stats", "Stats", STATS_SCHEMA)


# --- OpenTelemetry spans, recorded by the real SDK and read as a trace by stream.otlp


def spans_trace(build: Callable[[Any], None]) -> dict[str, Any]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "agent"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    build(provider.get_tracer("test"))
    provider.shutdown()
    return trace_document(decode(encode_spans(exporter.get_finished_spans()).SerializeToString()))


def text(role: str, content: str) -> dict[str, Any]:
    return {"role": role, "parts": [{"type": "text", "content": content}]}


ASK = {
    "role": "assistant",
    "parts": [
        {
            "type": "tool_call",
            "id": "call_1",
            "name": "get_weather",
            "arguments": {"city": "Paris"},
        },
        {"type": "tool_call", "id": "call_2", "name": "get_time", "arguments": {"zone": "CET"}},
    ],
}
ANSWERS = {
    "role": "tool",
    "parts": [
        {"type": "tool_call_response", "id": "call_1", "response": {"temp": 57}},
        {"type": "tool_call_response", "id": "call_2", "response": "09:00"},
    ],
}
DEFINITIONS = [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]


def chat(tracer: Any, inputs: list[Any], outputs: list[Any], **attributes: Any) -> None:
    with tracer.start_as_current_span("chat gpt-4o-mini") as span:
        span.set_attribute("gen_ai.operation.name", "chat")
        span.set_attribute("gen_ai.input.messages", orjson.dumps(inputs).decode())
        span.set_attribute("gen_ai.output.messages", orjson.dumps(outputs).decode())
        for key, value in attributes.items():
            span.set_attribute(key, value)


def model_client_only(tracer: Any) -> None:
    """An agent traced only by its model client's instrumentation: no tool spans."""
    with tracer.start_as_current_span("invoke_agent weather"):
        question = text("user", "Weather and time in Paris?")
        chat(
            tracer,
            [question],
            [ASK],
            **{"gen_ai.tool.definitions": orjson.dumps(DEFINITIONS).decode()},
        )
        chat(tracer, [question, ASK, ANSWERS], [text("assistant", "57F at 09:00.")])


def test_an_agent_traced_by_its_model_client_shows_its_calls() -> None:
    document = spans_trace(model_client_only)
    calls = tool_calls(document)
    assert [
        (c.call_id, c.name, c.parsed, c.result, c.turn, c.position, c.source) for c in calls
    ] == [
        ("call_1", "get_weather", {"city": "Paris"}, {"temp": 57}, 0, 0, "messages"),
        ("call_2", "get_time", {"zone": "CET"}, "09:00", 0, 1, "messages"),
    ]
    assert calls[0].arguments == '{"city":"Paris"}'
    assert calls[0].user == "Weather and time in Paris?"
    assert calls[0].trace_id == document["id"]
    assert calls[0].definition == ToolDefinition("get_weather", None, {"type": "object"})


def execute_tool(
    tracer: Any,
    name: str,
    call_id: str | None,
    arguments: str | None,
    result: str | None,
    error: str | None = None,
) -> None:
    with tracer.start_as_current_span(f"execute_tool {name}") as span:
        span.set_attribute("gen_ai.operation.name", "execute_tool")
        span.set_attribute("gen_ai.tool.name", name)
        span.set_attribute("gen_ai.tool.type", "function")
        for key, value in [
            ("gen_ai.tool.call.id", call_id),
            ("gen_ai.tool.call.arguments", arguments),
            ("gen_ai.tool.call.result", result),
            ("error.type", error),
        ]:
            if value is not None:
                span.set_attribute(key, value)
        if error is not None:
            span.set_status(Status(StatusCode.ERROR, error))


def agent_with_tool_spans(tracer: Any) -> None:
    with tracer.start_as_current_span("invoke_agent weather"):
        question = text("user", "Weather and time in Paris?")
        chat(tracer, [question], [ASK])
        # the span saw the tool fail; the message the model got back said nothing of it
        execute_tool(
            tracer, "get_weather", "call_1", '{"city": "Paris"}', None, error="TimeoutError"
        )
        execute_tool(tracer, "get_time", "call_2", '{"zone": "CET"}', '"09:00 CET"')
        chat(tracer, [question, ASK, ANSWERS], [text("assistant", "57F at 09:00.")])
        execute_tool(tracer, "log_answer", None, None, None)  # content capture off


def test_execute_tool_spans_merge_with_the_messages_one_record_per_call() -> None:
    document = spans_trace(agent_with_tool_spans)
    calls = tool_calls(document)
    log_span = next(s for s in document["spans"] if s["name"] == "execute_tool log_answer")
    assert [
        (c.call_id, c.name, c.result, c.error, c.turn, c.position, c.source) for c in calls
    ] == [
        ("call_1", "get_weather", {"temp": 57}, "TimeoutError", 0, 0, "spans"),
        ("call_2", "get_time", "09:00 CET", None, 0, 1, "spans"),
        (log_span["span_id"], "log_answer", None, None, 1, 2, "spans"),
    ]
    # the message's arguments (the model's own text) stay; the span's extras join them
    assert calls[1].arguments == '{"zone":"CET"}'
    assert calls[1].extra["tool_type"] == "function"
    assert calls[2].extra["content_missing"] is True
    assert (calls[2].arguments, calls[2].parses) == ("", False)


def tools_only(tracer: Any) -> None:
    with tracer.start_as_current_span("agent"):
        execute_tool(tracer, "search", "s-1", '{"q": "metronome"}', '{"error": "index offline"}')
        with tracer.start_as_current_span("execute_tool search") as span:
            span.set_attribute("gen_ai.operation.name", "execute_tool")
            span.set_attribute("gen_ai.tool.call.arguments", "not json")
            span.set_status(Status(StatusCode.ERROR, "crashed"))


def test_spans_alone_give_calls_with_span_ids_and_errors() -> None:
    document = spans_trace(tools_only)
    calls = tool_calls(document)
    second = next(
        s
        for s in document["spans"]
        if s["name"] == "execute_tool search" and "gen_ai.tool.call.id" not in s["attributes"]
    )
    assert [(c.call_id, c.name, c.arguments, c.parses, c.error) for c in calls] == [
        ("s-1", "search", '{"q": "metronome"}', True, "index offline"),
        (second["span_id"], "search", "not json", False, "span status error"),
    ]


def openinference_agent(tracer: Any) -> None:
    with tracer.start_as_current_span("agent") as root:
        root.set_attribute("openinference.span.kind", "AGENT")
        with tracer.start_as_current_span("ChatCompletion") as llm:
            llm.set_attribute("openinference.span.kind", "LLM")
            llm.set_attribute("llm.input_messages.0.message.role", "user")
            llm.set_attribute("llm.input_messages.0.message.content", "Tune my guitar to drop D")
            llm.set_attribute("llm.output_messages.0.message.role", "assistant")
            prefix = "llm.output_messages.0.message.tool_calls.0.tool_call."
            llm.set_attribute(prefix + "id", "call_tune")
            llm.set_attribute(prefix + "function.name", "tune")
            llm.set_attribute(prefix + "function.arguments", '{"tuning": "drop D"}')
            schema = {
                "type": "function",
                "function": {"name": "tune", "parameters": {"type": "object"}},
            }
            llm.set_attribute("llm.tools.0.tool.json_schema", json.dumps(schema))
        with tracer.start_as_current_span("tune") as tool:
            tool.set_attribute("openinference.span.kind", "TOOL")
            tool.set_attribute("tool.name", "tune")
            tool.set_attribute("tool.parameters", '{"type": "object"}')
            tool.set_attribute("input.value", '{"tuning": "drop D"}')
            tool.set_attribute("output.value", "Tuned: D A D G B E")
        with tracer.start_as_current_span("metronome") as tool:
            tool.set_attribute("openinference.span.kind", "TOOL")
            tool.set_attribute("tool.name", "metronome")
            tool.set_attribute("input.value", '{"bpm": 60}')
            tool.set_attribute("exception.message", "no audio device")
            tool.set_status(Status(StatusCode.ERROR))


def test_openinference_tool_spans_and_flattened_tool_calls() -> None:
    document = spans_trace(openinference_agent)
    calls = tool_calls(document)
    spans = {s["name"]: s["span_id"] for s in document["spans"]}
    assert [(c.call_id, c.name, c.parsed, c.result, c.error, c.source) for c in calls] == [
        # the TOOL span has no call id: it joins the model's call of the same tool and arguments
        ("call_tune", "tune", {"tuning": "drop D"}, "Tuned: D A D G B E", None, "spans"),
        (spans["metronome"], "metronome", {"bpm": 60}, None, "no audio device", "spans"),
    ]
    assert calls[0].user == "Tune my guitar to drop D"
    assert calls[0].extra == {
        "span_id": spans["tune"],
        "parameters": {"type": "object"},
    }
    assert calls[0].definition == ToolDefinition("tune", None, {"type": "object"})


# --- malformed shapes never raise


@pytest.mark.parametrize(
    "entry",
    [
        {"id": "x", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}},
        {"id": "x", "type": "function", "function": {"name": "f", "arguments": 42}},
        {"id": "x", "type": "function", "function": {"name": "f"}},
        {"id": "x", "type": "function", "function": {"name": "f", "arguments": {1, 2}}},
    ],
)
def test_arguments_that_are_not_text_are_read_as_json_where_they_are(entry: dict) -> None:
    [call] = tool_calls(trace(user("go"), {"role": "assistant", "tool_calls": [entry]}))
    value = entry["function"].get("arguments")
    if value is None:
        assert (call.arguments, call.parsed, call.parses) == ("", None, False)
    elif isinstance(value, set):
        assert (call.parsed, call.parses) == (None, False)
    else:
        assert (call.parsed, call.parses) == (value, True)
        assert orjson.loads(call.arguments) == value


@pytest.mark.parametrize(
    "document",
    [
        trace(user("go"), {"role": "assistant", "tool_calls": [{"id": "x", "type": "function"}]}),
        trace(user("go"), {"role": "assistant", "tool_calls": [{"id": "x", "function": "f"}]}),
        trace(user("go"), {"role": "assistant", "tool_calls": "f()"}),
        trace(user("go"), {"role": "assistant", "tool_calls": [None, 3, ["f"]]}),
        trace(user("go"), {"role": "assistant", "tool_calls": [{"function": {"name": 7}}]}),
        trace(answer("nobody", "orphan result"), answer(None, "orphan")),
        {"id": "t", "input": "text", "output": ["not", "messages"], "spans": "nope"},
        {"id": "t", "input": {"messages": "x", "tools": {"a": 1}}, "metadata": {"tools": "x"}},
        {
            "id": "t",
            "spans": [
                None,
                {"attributes": None},
                {"attributes": {"gen_ai.operation.name": "execute_tool"}},
            ],
        },
        {"id": "t", "spans": [{"attributes": {"gen_ai.tool.definitions": "[not json"}}]},
        {
            "id": "t",
            "spans": [{"attributes": {"gen_ai.input.messages": "{}", "gen_ai.output.messages": 5}}],
        },
    ],
)
def test_malformed_shapes_do_not_raise(document: dict) -> None:
    # nothing here names a tool: a call without a name is no call
    assert tool_calls(document) == []


def test_anything_that_is_not_a_trace_gives_no_calls() -> None:
    assert tool_calls(None) == []  # type: ignore[arg-type]
    assert tool_calls([]) == []  # type: ignore[arg-type]


messages = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "assistant", "tool", None]), "content": any_json},
        optional={
            "tool_calls": any_json
            | st.lists(
                st.fixed_dictionaries(
                    {},
                    optional={
                        "id": any_json,
                        "function": any_json,
                        "name": any_json,
                        "arguments": any_json,
                    },
                ),
                max_size=3,
            ),
            "tool_call_id": any_json,
        },
    ),
    max_size=6,
)


@settings(max_examples=150)  # the malformed cases above are the named ones; this sweeps
@given(history=messages, output=messages, tools=any_json)
def test_any_json_in_the_message_places_reads_without_raising(
    history: list, output: list, tools: Any
) -> None:
    document = {
        "id": "t",
        "input": {"messages": history, "tools": tools},
        "output": {"messages": output},
    }
    calls = tool_calls(document)
    assert [c.position for c in calls] == list(range(len(calls)))
    assert len({c.call_id for c in calls}) == len(calls)


def tool_span(span_id: str, name: str, **attributes: Any) -> dict[str, Any]:
    """A span as a trace keeps it (``Span.as_dict``), with the GenAI execute_tool operation."""
    attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, **attributes}
    return {
        "span_id": span_id,
        "name": f"execute_tool {name}",
        "attributes": attributes,
        "status": None,
    }


def test_spans_without_call_ids_join_message_calls_by_tool_and_arguments() -> None:
    document = trace(
        user("Check twice"),
        asks(("a", "stats", '{"days": 7}'), ("b", "stats", '{"days": 30}'), ("c", "plan", "{}")),
    )
    document["spans"] = [
        tool_span(
            "s1",
            "stats",
            **{"gen_ai.tool.call.arguments": '{"days":30}', "gen_ai.tool.call.result": "15"},
        ),
        tool_span(
            "s2", "stats", **{"gen_ai.tool.call.arguments": '{"days": 7}', "error.type": "Timeout"}
        ),
        tool_span("s3", "plan"),  # no content kept: joins the first unjoined call of its tool
        tool_span("s4", "plan"),  # no call left to join: a call of its own
        # the tool run again for call a (a retry): the last attempt's outcome is the call's
        tool_span(
            "s5", "stats", **{"gen_ai.tool.call.id": "a", "gen_ai.tool.call.result": "again"}
        ),
    ]
    calls = tool_calls(document)
    assert [(c.call_id, c.result, c.error, c.extra.get("span_id"), c.source) for c in calls] == [
        ("a", "again", None, "s5", "spans"),
        ("b", 15, None, "s1", "spans"),
        ("c", None, None, "s3", "spans"),
        ("s4", None, None, "s4", "spans"),
    ]


def test_an_id_the_model_gave_again_to_another_call_is_a_call_of_its_own() -> None:
    """Providers that number call ids per response (``call_0`` in every turn) give one id to
    several calls: each is a call, its id made unique by its order, each answered by its own
    tool message; the same call repeated in an exported history stays one."""
    first = {
        "role": "assistant",
        "tool_calls": [{"id": "call_0", "function": {"name": "a", "arguments": "{}"}}],
    }
    second = {"role": "assistant", "tool_calls": [
        {"id": "call_0", "function": {"name": "b", "arguments": '{"x": 1}'}}]}  # fmt: skip
    document = trace(
        user("go"),
        first,
        {"role": "tool", "tool_call_id": "call_0", "content": "fine"},
        second,
        {"role": "tool", "tool_call_id": "call_0", "content": "Error: boom"},
        first,  # the history repeated: no new call
    )
    calls = tool_calls(document)
    assert [(c.call_id, c.name, c.result, c.error, c.turn) for c in calls] == [
        ("call_0", "a", "fine", None, 0),
        ("call_0#2", "b", "Error: boom", "Error: boom", 1),
    ]


def test_a_retried_tool_span_gives_the_last_attempts_outcome() -> None:
    document = trace(user("go"), asks(("c1", "fetch", "{}")))
    document["spans"] = [
        tool_span("s1", "fetch", **{"gen_ai.tool.call.id": "c1", "error.type": "Timeout"}),
        tool_span("s2", "fetch", **{"gen_ai.tool.call.id": "c1", "gen_ai.tool.call.result": "ok"}),
    ]
    [call] = tool_calls(document)
    assert (call.call_id, call.result, call.error, call.extra["span_id"]) == (
        "c1",
        "ok",
        None,
        "s2",
    )
