"""Golden tests for the tool_quality pack (issue 50, design record 51): three judge rules of
scope ``tool_call``, read from the call documents of real trace shapes (the trace model's
messages, OpenTelemetry spans the real SDK records, OpenAI's completion and LangChain's agent
outputs), rendered into each rule's prompt; yes/no answers to scores; and a trace of two
calls scored through a real local judge server, one score per call per rule.

The expected prompt sections are written out by hand from the trace, not computed through
the engine's path lookup or value rendering.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import orjson
import pytest
from fixtures import RULES_DIR, as_trace, scorer
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from scripted_judge import MockJudge

from stream.engine.prompt import render_prompt, resolve_variables
from stream.errors import MissingVariable
from stream.judge.answers import parse_answer, response_schema
from stream.otlp.decode import decode
from stream.otlp.document import trace_document
from stream.ruleset.loader import NOT_LOADED_BY_DEFAULT, load_rules, pack_selection
from stream.ruleset.location import RulesDirs
from stream.ruleset.schema import LLMJudgeRule
from stream.text.template import placeholders
from stream.tools.calls import tool_calls
from stream.tools.view import brief, call_document

RULE_IDS = ["tool_parameter_accuracy", "tool_result_used", "tool_selection_accuracy"]
VARIABLES = {
    "tool_selection_accuracy": {"request", "conversation", "tools", "tool", "arguments"},
    "tool_parameter_accuracy": {"request", "conversation", "definition", "tool", "arguments"},
    "tool_result_used": {"request", "tool", "arguments", "result", "answer"},
}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Tomorrow's forecast for a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}
SEARCH = {
    "type": "function",
    "function": {
        "name": "search_web",
        "description": "Search the web",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
    },
}
QUESTION = "What's the weather in Paris tomorrow, in Celsius?"


def pack() -> dict[str, LLMJudgeRule]:
    rules = {}
    for rule in load_rules(RULES_DIR, ["tool_quality"]).rules:
        assert isinstance(rule, LLMJudgeRule)
        rules[rule.id] = rule
    return rules


def agent_trace(**changes: Any) -> dict[str, Any]:
    """An agent's trace as an OpenAI-style application logs it: one turn calling two tools,
    their answers, then the final answer (which misreports the forecast)."""
    document = {
        "id": "trace-weather",
        "name": "travel-agent",
        "project_name": "travel",
        "input": {
            "messages": [
                {"role": "system", "content": "You are a travel assistant."},
                {"role": "user", "content": QUESTION},
            ],
            "tools": [WEATHER, SEARCH],
        },
        "output": {
            "messages": [
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "call_w", "type": "function", "function": {
                        "name": "get_weather",
                        "arguments": '{"city": "Paris", "unit": "fahrenheit"}'}},
                    {"id": "call_s", "type": "function", "function": {
                        "name": "search_web", "arguments": '{"query": "Paris weather"}'}},
                ]},
                {"role": "tool", "tool_call_id": "call_w",
                 "content": '{"temp": 64, "unit": "F", "sky": "rain"}'},
                {"role": "tool", "tool_call_id": "call_s",
                 "content": "Rain expected in Paris tomorrow."},
                {"role": "assistant", "content": "Tomorrow in Paris: sunny, 18 °C."},
            ]
        },
    }  # fmt: skip
    document.update(changes)
    return document


def call_documents(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each call's document, by call id, as the engine builds it (``Scorer._plan_calls``)."""
    calls = tool_calls(document)
    briefs = [brief(call) for call in calls]
    view = as_trace(document).view
    return {call.call_id: call_document(call, briefs, view) for call in calls}


def prompt_of(rule_id: str, document: dict[str, Any]) -> str:
    rule = pack()[rule_id]
    return render_prompt(rule, resolve_variables(rule, document))


def section(prompt: str, tag: str) -> str:
    """The text between ``<tag>`` and ``</tag>`` lines."""
    return prompt.split(f"<{tag}>\n", 1)[1].split(f"\n</{tag}>", 1)[0]


# --- the pack ---------------------------------------------------------------------------


def test_the_pack_ships_three_judge_rules_of_tool_call_scope_yes_or_no() -> None:
    rules = pack()
    assert sorted(rules) == RULE_IDS
    for rule in rules.values():
        assert (rule.scope, rule.kind, rule.pack, rule.version) == (
            "tool_call",
            "llm_judge",
            "tool_quality",
            1,
        )
        assert rule.judge.temperature == 0.0 and rule.sampling_rate == 1.0
        assert rule.filter.model_dump(exclude_none=True) == {}  # every call of every trace
        output = rule.output
        assert (output.type, output.choices, output.higher_is_better) == (
            "choice",
            {"yes": 1.0, "no": 0.0},
            True,
        )
        assert response_schema(output) == {
            "type": "object",
            "properties": {
                "reason": {"type": "string"},
                "verdict": {"type": "string", "enum": ["yes", "no"]},
            },
            "required": ["reason", "verdict"],
            "additionalProperties": False,
        }


@pytest.mark.parametrize("rule_id", RULE_IDS)
def test_each_variable_is_mapped_and_used(rule_id: str) -> None:
    rule = pack()[rule_id]
    assert placeholders(rule.prompt) == VARIABLES[rule_id] == set(rule.variables)
    request = rule.variable_specs["request"]
    assert (request.path, request.allow_empty, request.missing) == ("user", False, "skip")


def test_the_default_pack_selection_leaves_the_judges_out() -> None:
    """Shipped judge rules run only when SCORER_PACKS names their pack (design record 39)."""
    chosen, checks_only = pack_selection(RulesDirs.parse([]), None)
    assert chosen is None and "tool_quality" in checks_only
    ruleset = load_rules(RULES_DIR, chosen, checks_only=checks_only)
    assert not [r for r in ruleset.rules if r.pack == "tool_quality"]
    left_out = {d.rule.id: d.by for d in ruleset.disabled if d.rule.pack == "tool_quality"}
    assert left_out == dict.fromkeys(RULE_IDS, NOT_LOADED_BY_DEFAULT)


def test_every_rule_file_names_its_source_and_licence() -> None:
    folder = RULES_DIR / "tool_quality"
    notice = (folder / "NOTICE.txt").read_text(encoding="utf-8")
    assert "Copyright Amazon.com, Inc. or its affiliates." in notice
    assert "Apache License" in notice and "TERMS AND CONDITIONS" in notice
    for rule_id in RULE_IDS:
        text = (folder / f"{rule_id}.yaml").read_text(encoding="utf-8").split("\nid:")[0]
        header = " ".join(line.removeprefix("# ") for line in text.splitlines())
        if rule_id == "tool_result_used":
            assert "own" in header and "Elastic License 2.0" in header
        else:
            assert "strands-agents/evals" in header and "Apache License 2.0" in header
            assert "NOTICE.txt" in header and "Changed by this project" in header


# --- prompts rendered from call documents --------------------------------------------------


def test_the_selection_prompt_shows_the_tools_the_conversation_and_the_call() -> None:
    prompt = prompt_of("tool_selection_accuracy", call_documents(agent_trace())["call_s"])
    offered = [tool["function"] for tool in (WEATHER, SEARCH)]  # name, description, schema
    assert section(prompt, "available_tools") == json.dumps(offered, indent=2)
    assert section(prompt, "conversation") == (
        f"System: You are a travel assistant.\n\nUser: {QUESTION}"
    )
    assert section(prompt, "user_request") == QUESTION
    assert section(prompt, "tool_call") == (
        'Tool: search_web\nArguments: {"query": "Paris weather"}'
    )
    assert "{{" not in prompt


def test_the_parameter_prompt_shows_the_declaration_and_the_parsed_arguments() -> None:
    prompt = prompt_of("tool_parameter_accuracy", call_documents(agent_trace())["call_w"])
    declared = {"name": "get_weather", **{k: WEATHER["function"][k] for k in ("description",)}}
    declared["parameters"] = WEATHER["function"]["parameters"]
    assert section(prompt, "tool_declaration") == json.dumps(declared, indent=2)
    assert section(prompt, "tool_call") == (
        'Tool: get_weather\nArguments:\n{\n  "city": "Paris",\n  "unit": "fahrenheit"\n}'
    )
    assert section(prompt, "user_request") == QUESTION


def test_the_result_prompt_shows_the_result_and_the_final_answer() -> None:
    documents = call_documents(agent_trace())
    weather = prompt_of("tool_result_used", documents["call_w"])
    assert section(weather, "tool_result") == '{\n  "temp": 64,\n  "unit": "F",\n  "sky": "rain"\n}'
    assert section(weather, "answer") == "Tomorrow in Paris: sunny, 18 °C."
    search = prompt_of("tool_result_used", documents["call_s"])
    assert section(search, "tool_result") == "Rain expected in Paris tomorrow."


def test_an_undeclared_tool_renders_an_empty_declaration_and_no_tools_an_empty_list() -> None:
    document = agent_trace()
    del document["input"]["tools"]
    called = call_documents(document)["call_w"]
    parameters = prompt_of("tool_parameter_accuracy", called)
    assert section(parameters, "tool_declaration") == ""
    assert section(prompt_of("tool_selection_accuracy", called), "available_tools") == "[]"


DECLARED = [
    # the request's tools in the other shapes ``stream.tools`` reads, each shown alike
    pytest.param({"type": "function", **WEATHER["function"]}, id="flat"),
    pytest.param(
        {
            "name": "get_weather",
            "description": "Tomorrow's forecast for a city",
            "input_schema": WEATHER["function"]["parameters"],
        },
        id="anthropic",
    ),
]


@pytest.mark.parametrize("declared", DECLARED)
def test_tools_declared_in_the_metadata_in_other_shapes(declared: dict[str, Any]) -> None:
    document = agent_trace(metadata={"tools": [declared]})
    del document["input"]["tools"]
    prompt = prompt_of("tool_selection_accuracy", call_documents(document)["call_w"])
    assert section(prompt, "available_tools") == json.dumps([WEATHER["function"]], indent=2)


def test_a_failed_call_shows_its_error_where_it_has_no_result() -> None:
    called = call_documents(agent_trace())["call_w"]
    called = {**called, "result": None, "error": "TimeoutError"}
    assert section(prompt_of("tool_result_used", called), "tool_result") == "TimeoutError"


# --- what is skipped --------------------------------------------------------------------


def missing(rule_id: str, document: dict[str, Any]) -> str:
    rule = pack()[rule_id]
    with pytest.raises(MissingVariable) as raised:
        resolve_variables(rule, document)
    return str(raised.value)


def test_a_trace_that_ends_calling_tools_has_no_answer_to_judge() -> None:
    document = agent_trace()
    document["output"]["messages"] = document["output"]["messages"][:3]  # no final answer
    called = call_documents(document)["call_w"]
    assert "variable 'answer'" in missing("tool_result_used", called)
    prompt_of("tool_selection_accuracy", called)  # the other two still judge the call
    prompt_of("tool_parameter_accuracy", called)


def test_a_call_whose_arguments_are_not_json_is_left_to_the_check() -> None:
    document = agent_trace()
    document["output"]["messages"][0]["tool_calls"][0]["function"]["arguments"] = "city=Paris"
    called = call_documents(document)["call_w"]
    assert "variable 'arguments': path 'parsed'" in missing("tool_parameter_accuracy", called)
    assert section(prompt_of("tool_selection_accuracy", called), "tool_call") == (
        "Tool: get_weather\nArguments: city=Paris"
    )


def test_a_call_without_a_user_message_is_skipped() -> None:
    document = agent_trace()
    document["input"]["messages"] = document["input"]["messages"][:1]  # the system prompt only
    called = call_documents(document)["call_w"]
    for rule_id in RULE_IDS:
        assert "variable 'request': path 'user'" in missing(rule_id, called)


# --- the answer and the tools read from other real shapes ---------------------------------


def spans_trace() -> dict[str, Any]:
    """An agent traced by the OpenTelemetry SDK as the GenAI conventions say: a chat span that
    declares the tools and calls one, the tool's result sent back, a chat span answering."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "agent"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    question = {"role": "user", "parts": [{"type": "text", "content": QUESTION}]}
    ask = {
        "role": "assistant",
        "parts": [
            {
                "type": "tool_call",
                "id": "call_w",
                "name": "get_weather",
                "arguments": {"city": "Paris", "unit": "celsius"},
            }
        ],
    }
    told = {
        "role": "tool",
        "parts": [
            {"type": "tool_call_response", "id": "call_w", "response": {"temp": 18, "sky": "rain"}}
        ],
    }
    said = {"role": "assistant", "parts": [{"type": "text", "content": "Rain, 18 °C."}]}
    definitions = orjson.dumps([WEATHER["function"]]).decode()
    with tracer.start_as_current_span("invoke_agent travel"):
        for inputs, outputs in (([question], [ask]), ([question, ask, told], [said])):
            with tracer.start_as_current_span("chat gpt-4o-mini") as span:
                span.set_attribute("gen_ai.operation.name", "chat")
                span.set_attribute("gen_ai.tool.definitions", definitions)
                span.set_attribute("gen_ai.input.messages", orjson.dumps(inputs).decode())
                span.set_attribute("gen_ai.output.messages", orjson.dumps(outputs).decode())
    provider.shutdown()
    encoded = encode_spans(exporter.get_finished_spans()).SerializeToString()
    return trace_document(decode(encoded))


def test_a_trace_from_spans_gives_the_answer_and_the_declared_tools() -> None:
    called = call_documents(spans_trace())["call_w"]
    result = prompt_of("tool_result_used", called)
    assert section(result, "answer") == "Rain, 18 °C."
    assert section(result, "tool_result") == '{\n  "temp": 18,\n  "sky": "rain"\n}'
    selection = prompt_of("tool_selection_accuracy", called)
    # the span's gen_ai.tool.definitions, as the instrumentation wrote it
    assert json.loads(section(selection, "available_tools")) == [WEATHER["function"]]
    assert section(selection, "conversation") == f"User: {QUESTION}"


OUTPUTS = [
    pytest.param(
        {"choices": [{"message": {"role": "assistant", "content": "Rain, 18 °C."}}]},
        id="openai-completion",
    ),
    pytest.param({"output": "Rain, 18 °C."}, id="agent-executor"),
    pytest.param({"generations": [[{"text": "Rain, 18 °C."}]]}, id="langchain-llm-run"),
]


@pytest.mark.parametrize("output", OUTPUTS)
def test_the_answer_is_read_from_other_output_shapes(output: dict[str, Any]) -> None:
    """The calls and their answers sit in the input (the model's last request), the final
    answer in the output's own shape."""
    logged = agent_trace()
    history = logged["input"]["messages"] + logged["output"]["messages"][:3]
    document = agent_trace(input={**logged["input"], "messages": history}, output=output)
    called = call_documents(document)["call_s"]
    assert section(prompt_of("tool_result_used", called), "answer") == "Rain, 18 °C."


# --- answers to scores, and a trace scored through a judge server -------------------------


@pytest.mark.parametrize(
    ("answer", "value", "label"),
    [
        ('{"reason": "fits the request", "verdict": "yes"}', 1.0, "yes"),
        ('Thinking first.\n{"reason": "unit contradicts the user", "verdict": "no"}', 0.0, "no"),
    ],
)
def test_golden_answer_to_score(answer: str, value: float, label: str) -> None:
    for rule in pack().values():
        parsed = parse_answer(rule.output, answer)
        assert (parsed.raw_value, parsed.label) == (value, label)


def ask(rule_id: str, tool: str, arguments: str) -> str:
    """Text found only in this rule's prompt for this call: the call section and what follows
    it in this rule's prompt (the parameters' shows the arguments as indented JSON)."""
    lead = {
        "tool_selection_accuracy": "Answer with a JSON object",
        "tool_result_used": "<tool_result>",
    }
    if rule_id == "tool_parameter_accuracy":
        parsed = json.dumps(json.loads(arguments), indent=2)
        return f"Tool: {tool}\nArguments:\n{parsed}\n</tool_call>"
    return f"Tool: {tool}\nArguments: {arguments}\n</tool_call>\n\n{lead[rule_id]}"


VERDICTS = {
    # (call, rule): the scripted verdict
    ("call_w", "tool_selection_accuracy"): "yes",
    ("call_s", "tool_selection_accuracy"): "no",
    ("call_w", "tool_parameter_accuracy"): "no",
    ("call_s", "tool_parameter_accuracy"): "yes",
    ("call_w", "tool_result_used"): "no",
    ("call_s", "tool_result_used"): "yes",
}
CALLS = {
    "call_w": ("get_weather", '{"city": "Paris", "unit": "fahrenheit"}'),
    "call_s": ("search_web", '{"query": "Paris weather"}'),
}


def test_a_trace_of_two_calls_gets_one_score_per_call_per_rule() -> None:
    document = agent_trace()
    with MockJudge() as judge:
        for (call, rule_id), verdict in VERDICTS.items():
            reply = orjson.dumps({"reason": f"{rule_id} on {call}", "verdict": verdict})
            judge.script(ask(rule_id, *CALLS[call]), reply.decode())
        ruleset = load_rules(RULES_DIR, ["tool_quality"])
        result = asyncio.run(
            scorer(judge.base_url, ruleset).score_trace(as_trace(document), document)
        )
        prompts = judge.prompts()
    assert len(prompts) == 6  # one judge call per call per rule
    scores = {(s.target_id, s.rule_id): s for s in result.scores}
    assert len(result.scores) == len(scores) == 6
    assert {key: (s.status, s.label, s.value) for key, s in scores.items()} == {
        key: ("ok", verdict, 1.0 if verdict == "yes" else 0.0) for key, verdict in VERDICTS.items()
    }
    for (call, rule_id), score in scores.items():
        assert score.scope == "tool_call" and score.pack == "tool_quality"
        assert score.reason == f"{rule_id} on {call}"
        assert score.details is not None
        assert (score.details["trace_id"], score.details["tool"]) == (
            "trace-weather",
            CALLS[call][0],
        )
    assert {(d.target_id, d.rule_id, d.outcome) for d in result.decisions} == {
        (call, rule_id, "scored") for call, rule_id in VERDICTS
    }
